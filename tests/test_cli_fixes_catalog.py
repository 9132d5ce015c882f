"""Trial fixes for `costctl gpus` and `costctl recommend`: bad numbers are one line, a currency
that cannot be ranked in is an error, tables are readable piped and at 80 columns, and memory
is labelled as the vendor's nominal GiB everywhere."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

import costctl.cli.common as common
from costctl.catalog.gpus import GIB, get_gpu
from costctl.catalog.recommend import usable_bytes
from costctl.cli.main import main


@pytest.fixture(autouse=True)
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("COSTCTL_DATA_DIR", str(tmp_path / "data"))
    for name in ("COSTCTL_DATABASE_URL",):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("COLUMNS", "80")  # a narrow default: piped output must still be full width
    monkeypatch.chdir(tmp_path)
    return tmp_path


from test_cli_instances import run  # noqa: E402 - main(argv) with captured output


def one_line_error(err: str) -> bool:
    return err.startswith("costctl: ") and err.count("\n") == 1 and "internal error" not in err


# --------------------------------------------------------------------------- bad numbers


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0", "-5", "1e3"])
def test_recommend_params_must_be_a_finite_count(capsys, value):
    code, out, err = run(capsys, "recommend", "--params", value)
    assert code == 2 and out == ""
    assert one_line_error(err) and "--params" in err


@pytest.mark.parametrize("option", ["--reference-hours", "--mfu", "--headroom"])
def test_recommend_float_options_refuse_nan(capsys, option):
    extra = ["--reference-gpu", "A100-80GB"] if option == "--reference-hours" else []
    code, _, err = run(capsys, "recommend", "--model", "gpt2", option, "nan", *extra)
    assert code == 2 and one_line_error(err) and f"{option} nan" in err


# --------------------------------------------------------------------------- currencies


@pytest.mark.parametrize("currency", ["EUR", "XYZ"])
def test_recommend_currency_without_prices_or_rate_is_an_error(capsys, currency):
    code, out, err = run(capsys, "recommend", "--model", "gpt2", "--currency", currency)
    assert code == 2 and out == "" and one_line_error(err)
    assert f"--currency {currency}" in err and "[[catalog.exchange_rates]]" in err


def test_gpus_currency_without_prices_or_rate_is_an_error(capsys):
    code, out, err = run(capsys, "gpus", "--sort", "price", "--currency", "EUR")
    assert code == 2 and out == "" and one_line_error(err) and "[[catalog.exchange_rates]]" in err
    # sorted by memory nothing is ranked, but --currency still says what prices are shown in
    code, out, err = run(capsys, "gpus", "--currency", "EUR")
    assert code == 2 and one_line_error(err) and "[[catalog.exchange_rates]]" in err
    code, _, err = run(capsys, "gpus", "--sort", "price", "--currency", "dollars")
    assert code == 2 and "3-letter" in err


def test_configured_currency_without_a_rate_is_a_config_error(env, capsys):
    (env / "costctl.toml").write_text('[catalog]\ncurrency = "EUR"\n')
    code, _, err = run(capsys, "recommend", "--model", "gpt2")
    assert code == 2 and one_line_error(err) and "[catalog] currency EUR" in err


def test_currency_with_its_own_prices_ranks_them_first(env, capsys):
    (env / "costctl.toml").write_text(
        '[[catalog.prices]]\nprovider = "autodl"\ngpu = "RTX 4090"\nprice_per_gpu_hour = "1.50"\n'
        'currency = "CNY"\nseen = 2026-07-01\n'
    )
    code, out, err = run(capsys, "recommend", "--model", "gpt2", "--currency", "CNY", "--format", "json")
    assert code == 0, err
    fits = json.loads(out)["fits"]
    assert fits[0]["currency"] == "CNY" and {o["currency"] for o in fits[0]["ranked"]} == {"CNY"}
    costs = [float(o["cost_per_hour"]) for o in fits[0]["ranked"]]
    assert costs == sorted(costs)  # no --tokens: ranked by price per hour
    # the configured price replaced the shipped AutoDL row of the same card and billing mode
    (rtx,) = [o for o in fits[0]["ranked"] if o["gpu"] == "RTX 4090"]
    assert rtx["price_per_gpu_hour"] == "1.50" and rtx["price_source"] == "config"
    code, out, err = run(capsys, "gpus", "--sort", "price", "--currency", "CNY", "--format", "json")
    assert code == 0, err
    assert json.loads(out)[0]["rank_currency"] == "CNY"


def test_currency_with_a_rate_converts(env, capsys):
    (env / "costctl.toml").write_text(
        '[[catalog.exchange_rates]]\nbase = "USD"\nquote = "CNY"\nrate = "7.10"\nas_of = 2026-07-01\n'
    )
    code, out, err = run(capsys, "recommend", "--model", "gpt2", "--currency", "CNY", "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["fits"][0]["currency"] == "CNY"
    assert any("1 USD = 7.10 CNY" in n for n in doc["notes"])


# --------------------------------------------------------------------------- table width


def test_gpus_piped_is_full_width_at_80_columns(capsys):
    code, out, _ = run(capsys, "gpus")
    assert code == 0 and "…" not in out
    h200 = next(line for line in out.splitlines() if line.startswith("H200") or "│ H200 " in line)
    for cell in ("141", "4,800", "989.5", "9.0", "700"):
        assert cell in h200
    a100 = next(line for line in out.splitlines() if "A100-80GB-PCIe" in line and "on-demand community" in line)
    for cell in ("runpod", "$1.59", "2026-"):
        assert cell in a100
    assert max(len(line) for line in out.splitlines()) > 80


def test_recommend_piped_is_full_width_at_80_columns(capsys):
    code, out, _ = run(capsys, "recommend", "--model", "gpt2", "--tokens", "1e9", "--billing", "any")
    assert code == 0 and "…" not in out
    row = next(line for line in out.splitlines() if "A100-80GB-PCIe" in line and "$" in line)
    assert "bf16" in row and "runpod" in row


@pytest.fixture
def terminal(monkeypatch):
    """stdout as an 80-column terminal."""
    console = Console(file=io.StringIO(), force_terminal=True, width=80, color_system=None,
                      highlight=False, markup=False)
    monkeypatch.setattr(common, "out_console", console)
    return console


@pytest.mark.parametrize("argv", [
    ["gpus"],
    ["gpus", "--sort", "price"],
    ["recommend", "--model", "gpt2", "--tokens", "1e9", "--billing", "any"],
    ["recommend", "--params", "7e9"],
])
def test_on_an_80_column_terminal_columns_are_hidden_not_ellipsized(terminal, capsys, argv):
    assert main(argv) == 0
    out = terminal.file.getvalue()
    err = capsys.readouterr().err
    assert "…" not in out
    assert max(len(line) for line in out.splitlines()) <= 80
    if argv[0] == "gpus":
        assert "Price/GPU-h" in out and "A100-80GB-PCIe" in out and "Mem GiB" in out
        assert "hidden to fit 80 columns" in err and "Seen" in err
    elif "--tokens" in argv:
        assert "Price/GPU-h" in out and "Job cost" in out and "A100-80GB-PCIe" in out


def test_print_table_helper_is_shared():
    """instances, bill and gpus/recommend print through one helper (no private copies)."""
    import costctl.cli.gpus as gpus
    import costctl.cli.instances as instances
    import costctl.report as report

    assert gpus.print_table is instances.print_table is report.print_table is common.print_table


# --------------------------------------------------------------------------- memory units


def test_memory_is_the_vendors_nominal_gib_everywhere(capsys):
    code, out, _ = run(capsys, "gpus", "--help")
    assert code == 0
    help_text = " ".join(out.split())
    assert "GiB, nominal" in help_text and "(GB)" not in help_text
    code, out, _ = run(capsys, "gpus", "--min-memory", "48", "--format", "json")
    rows = json.loads(out)
    assert rows and all(r["gpu"]["memory_gb"] >= 48 for r in rows)
    l40s = get_gpu("L40S")
    assert l40s.memory_bytes == 48 * GIB  # nominal: more than NVML's 46068 MiB total
    assert usable_bytes(l40s, 0.10) < 46068 * 2**20  # the default headroom stays inside what NVML reports
    code, out, _ = run(capsys, "recommend", "--model", "gpt2", "--format", "json")
    notes = json.loads(out)["notes"]
    assert any("usable memory = the vendor's nominal GiB x (1 - headroom 0.1)" in n for n in notes)
    code, out, _ = run(capsys, "recommend", "--model", "gpt2")
    assert "usable memory = the vendor's nominal GiB" in out
