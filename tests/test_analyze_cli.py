"""``costctl analyze`` end to end: the real CLI on real logs."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime
from decimal import Decimal
from pathlib import Path

import pytest

from costctl.cli.main import main
from costctl.money import cost_of

from helpers import costctl_env
from replay_support import corpus_file


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key in [k for k in __import__("os").environ if k.startswith("COSTCTL_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("COSTCTL_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)  # no stray ./costctl.toml


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["analyze", *args])
    out, err = capsys.readouterr()
    return code, out, err


def _json(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    code, out, err = _run(capsys, *args, "--format", "json")
    assert code == 0, err
    return json.loads(out)


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_forgotten_instance_json(capsys: pytest.CaptureFixture[str]) -> None:
    d = _json(capsys, "--gpu-log", str(corpus_file("gpu_query_forgotten_idle.csv")), "--price", "2.5", "--currency", "CNY")
    final = d["idle_stretches"][-1]
    assert final["start"] == "2026-02-02T02:33:37.502000Z" and final["final"]
    [stop] = [x for x in d["decisions"] if x["action"] == "stop"]
    assert stop["policy"] == "idle"
    minutes_in = (_time(stop["time"]) - _time(final["start"])).total_seconds() / 60
    assert 30 <= minutes_in < 30.3
    saving = cost_of(Decimal("2.5"), _time(d["end"]) - _time(stop["time"]))
    assert Decimal(stop["saving"]["exact"]) == saving
    assert stop["saving"] == {"amount": str(saving.quantize(Decimal("0.01"))), "exact": str(saving), "currency": "CNY"}
    assert stop["saving"]["amount"] == "12.23"
    pause = d["idle_stretches"][0]
    assert pause["start"].startswith("2026-02-02T01:39:22") and pause["work_followed"] and pause["stopped_at"] is None
    assert d["oracle"]["stop"] == final["start"] and d["oracle"]["saving"]["amount"] == "13.48"
    assert d["signals_used"] == ["gpu utilization (1 GPU)"]


def test_forgotten_instance_table(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "--gpu-log", str(corpus_file("gpu_query_forgotten_idle.csv")),
                          "--price", "2.5", "--currency", "CNY")
    assert code == 0, err
    rows = [ln for ln in out.splitlines() if ln.startswith("│")]
    assert any("02:33:37.502" in r and "5h23m31s" in r and "end of log" in r and "stop 03:03:37.575" in r
               and "CN¥13.48" in r for r in rows)  # the final stretch, its spend, and the stop ~30 min into it
    assert any("01:39:22.203" in r and "work resumed" in r and "not stopped" in r for r in rows)  # the pause
    assert any("idle" in r and "stop" in r and "CN¥12.23" in r for r in rows)  # the decision and its saving
    text = " ".join(out.split())
    assert "saving CN¥13.48" in text  # the oracle (money as format_money writes it in English)
    assert "signals absent (take no part): cpu (not recorded)" in text


def test_two_gpu_compare(capsys: pytest.CaptureFixture[str]) -> None:
    args = ("--gpu-log", str(corpus_file("gpu_query_2gpu_a6000.csv")), "--price", "2.5", "--currency", "CNY",
            "--compare", "--time-window", "5m")
    d = _json(capsys, *args)
    assert d["idle_stretches"] == [] and d["decisions"] == []  # machine busy: costctl never stops
    assert d["gpu_idle_stretches"]["1"][0]["final"] and d["gpu_idle_stretches"]["0"] == []
    dstack = next(c for c in d["compare"] if c["variant"] == "minimum-window")
    assert dstack["name"] == "dstack-utilization-policy"
    assert dstack["stop"] is not None and dstack["gpu"] == 1 and dstack["work_after"]
    example = next(c for c in d["compare"] if c["variant"] == "documented-example")
    assert example["stop"] is None  # 1h window, 8-minute log: dstack takes no decision
    assert example["settings"] == ("dstack utilization_policy (min_gpu_utilization=10, time_window=1h, "
                                   "dstack's documented example)")
    code, out, _ = _run(capsys, *args)
    text = " ".join(out.split())
    assert "GPU 1 idle to the end, but the machine is busy under costctl's rule" in text
    rows = [ln for ln in out.splitlines() if ln.startswith("│")]
    assert any("costctl idle" in r and "never" in r for r in rows)
    assert any("dstack-utilization-policy" in r and "12:27:30.601" in r and "cuts the run" in r for r in rows)
    # the output says which settings each peer was replayed with
    assert ("dstack-utilization-policy (documented-example) replays dstack utilization_policy "
            "(min_gpu_utilization=10, time_window=1h, dstack's documented example)") in text
    assert ("dstack-utilization-policy (minimum-window) replays dstack utilization_policy "
            "(min_gpu_utilization=10, time_window=5m, dstack's 5-minute minimum window") in text
    assert ("skypilot-autostop (default) replays SkyPilot autostop (sky autostop -i 5: no running job "
            "and no SSH session for 5 min, SkyPilot's default)") in text


def test_compare_replays_dstack_with_its_settings_whatever_the_idle_window(capsys: pytest.CaptureFixture[str]) -> None:
    log = str(corpus_file("gpu_query_forgotten_idle.csv"))
    a = _json(capsys, "--gpu-log", log, "--price", "2.5", "--compare", "--time-window", "10m")
    b = _json(capsys, "--gpu-log", log, "--price", "2.5", "--compare", "--time-window", "off")
    pick = lambda d: [(c["variant"], c["stop"]) for c in d["compare"]]  # noqa: E731
    assert pick(a) == pick(b)
    assert [c["variant"] for c in a["compare"]] == ["default", "documented-example", "minimum-window"]


def test_config_file_is_used(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('[instance]\nprice_per_hour = "2.5"\ncurrency = "CNY"\n[policies.idle]\ntime_window = "20m"\n')
    d = _json(capsys, "--gpu-log", str(corpus_file("gpu_query_forgotten_idle.csv")), "--config", str(cfg))
    stops = [x for x in d["decisions"] if x["action"] == "stop"]
    assert len(stops) == 2 and stops[0]["work_after"] and stops[1]["after_stop"]
    assert d["price_per_hour"]["currency"] == "CNY"


def test_catalog_price(capsys: pytest.CaptureFixture[str]) -> None:
    d = _json(capsys, "--gpu-log", str(corpus_file("gpu_query_2gpu_a6000.csv")), "--gpu", "RTX 4090", "--provider", "runpod")
    price = Decimal(d["price_per_hour"]["exact"])
    assert d["price_per_hour"]["currency"] == "USD" and price > 0
    assert any("per GPU-hour x 2 GPU(s)" in n for n in d["notes"])  # two GPUs in the log


def test_train_log_placed_in_time(capsys: pytest.CaptureFixture[str]) -> None:
    d = _json(capsys, "--gpu-log", str(corpus_file("gpu_nvsmi_table_slurm_l40s.log")),
              "--train-log", str(corpus_file("hf_stdout_slurm_bert_sst2.log")),
              "--start-time", "2024-10-29T19:01:00", "--step-rate", "0.016", "--time-window", "5m")
    assert d["train_log"]["placed_on_time_axis"] == "start+rate" and d["train_log"]["train_points"] == 47
    assert "training progress (on the time axis)" in d["signals_used"]


def test_train_log_alone(capsys: pytest.CaptureFixture[str]) -> None:
    d = _json(capsys, "--train-log", str(corpus_file("nanogpt_nan_termux.log")))
    div = [x for x in d["decisions"] if x["policy"] == "divergence"]
    assert div and div[0]["at"] == "step 425" and div[0]["time"] is None


def test_plot_written(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    png = tmp_path / "out.png"
    code, _, err = _run(capsys, "--gpu-log", str(corpus_file("gpu_query_forgotten_idle.csv")), "--price", "2.5",
                        "--plot", str(png))
    assert code == 0, err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_plot_without_matplotlib_is_one_line(tmp_path: Path) -> None:
    code = ("import sys; sys.modules['matplotlib'] = None\n"
            "from costctl.cli.main import main\n"
            "sys.exit(main(sys.argv[1:]))")
    proc = subprocess.run(
        [sys.executable, "-c", code, "analyze", "--gpu-log", str(corpus_file("gpu_query_forgotten_idle.csv")),
         "--plot", str(tmp_path / "x.png")],
        env=costctl_env(tmp_path / "data"), cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "costctl: --plot needs matplotlib, which is not installed: pip install 'costctl[plot]'"]
    assert not (tmp_path / "x.png").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "nothing to analyze"),
        (("--price", "abc"), "--price"),
        (("--price", "-1"), "above 0 and up to 1000000000"),
        (("--price", "2", "--gpu", "RTX 4090", "--provider", "runpod"), "not both"),
        (("--gpu", "RTX 4090"), "go together"),
        (("--gpu", "L4", "--provider", "autodl"), "no on-demand price for 'L4' at 'autodl'"),  # AutoDL rents no L4
        (("--currency", "yuan", "--price", "2"), "ISO 4217"),
        (("--start-time", "yesterday"), "--start-time"),
        (("--min-stretch", "soon"), "--min-stretch"),
        (("--time-window", "0"), "time_window"),
    ],
)
def test_bad_input_is_one_line(capsys: pytest.CaptureFixture[str], args: tuple[str, ...], message: str) -> None:
    gpu = () if not args else ("--gpu-log", str(corpus_file("gpu_query_repeated_header.csv")))
    code, out, err = _run(capsys, *gpu, *args)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("costctl: ") and message in lines[0], err
    assert "Traceback" not in err and out == ""


def test_an_autodl_card_is_priced_from_the_table_in_cny(capsys: pytest.CaptureFixture[str]) -> None:
    from costctl.catalog.prices import shipped_prices

    (row,) = [e for e in shipped_prices() if (e.provider, e.gpu, e.billing) == ("autodl", "RTX 4090", "on-demand")]
    d = _json(capsys, "--gpu-log", str(corpus_file("gpu_query_forgotten_idle.csv")), "--gpu", "RTX 4090",
              "--provider", "autodl")
    [stop] = [x for x in d["decisions"] if x["action"] == "stop"]
    assert stop["saving"]["currency"] == "CNY"
    saving = cost_of(row.price_per_gpu_hour, _time(d["end"]) - _time(stop["time"]))
    assert Decimal(stop["saving"]["exact"]) == saving
    assert any("catalog: autodl RTX 4090 on-demand" in n for n in d["notes"])


def test_wrong_kind_of_file_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = _run(capsys, "--gpu-log", str(corpus_file("keras_csvlogger_brats.csv")))
    assert code == 2 and "looks like a training log (keras-csv)" in err and len(err.strip().splitlines()) == 1
    code, _, err = _run(capsys, "--train-log", str(corpus_file("gpu_query_forgotten_idle.csv")))
    assert code == 2 and "--gpu-log" in err
    code, _, err = _run(capsys, "--gpu-log", str(tmp_path / "missing.csv"))
    assert code == 2 and "no such file" in err


def test_step_rate_usage_errors_come_before_any_log_is_read(tmp_path, monkeypatch, capsys):
    """--step-rate without --start-time is refused before the (possibly huge) log is read."""
    from costctl.replay import readers

    log = tmp_path / "train.log"
    log.write_text("step 1 loss: 1.0\n")

    def never(*args, **kwargs):
        raise AssertionError("the log was read before the usage error")

    monkeypatch.setattr(readers, "read_train_log", never)
    for args, says in ((["--step-rate", "20"], "--start-time and --step-rate go together"),
                       (["--step-rate", "0", "--start-time", "2026-01-01T00:00:00Z"], "--step-rate 0")):
        code = main(["analyze", "--train-log", str(log), *args])
        err = capsys.readouterr().err
        assert code == 2 and says in err, err


@pytest.mark.parametrize("content", [b"", b"hello\nworld\n", b"\x00\xff\xfe binary \x00\n"])
def test_a_training_log_with_no_loss_is_said_not_analyzed(content: bytes, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """A --train-log holding no loss is not reported as a clean analysis ('Decisions: none'):
    alone it is a one-line error (exit 2, nothing analyzed); beside a GPU log, a note."""
    log = tmp_path / "train.log"
    log.write_bytes(content)
    assert main(["analyze", "--train-log", str(log)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no loss was found in" in err and "--loss-regex" in err
    assert main(["analyze", "--train-log", str(log), "--gpu-log", str(corpus_file("gpu_query_forgotten_idle.csv")),
                 "--format", "json"]) == 0
    notes = json.loads(capsys.readouterr().out)["notes"]
    assert any("no loss was found in" in n for n in notes)


def test_a_deeply_nested_json_log_is_a_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "trainer_state.json"
    log.write_text('{"log_history": [' + '{"a":' * 100_000 + "1" + "}" * 100_000 + "]}")
    assert main(["analyze", "--train-log", str(log)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nests deeper than costctl can read" in err and "Traceback" not in err


def test_a_csv_cell_over_the_csv_modules_limit_is_read_with_every_row(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """A 10 MB cell (the csv module's default field limit is 131,072 characters) neither
    crashes analyze nor drops the rows after it, in the metrics reader shared with the watch."""
    rows = ["epoch,step,train_loss,note"] + [f"{i},{i * 10},{1 / (i + 1):.4f},x" for i in range(11)]
    rows[5] = '4,40,0.2,"' + "y" * 10_000_000 + '"'
    log = tmp_path / "metrics.csv"
    log.write_text("\n".join(rows) + "\n")
    assert main(["analyze", "--train-log", str(log), "--format", "json"]) == 0
    d = json.loads(capsys.readouterr().out)
    series = d["train_log"]["series"]
    train = next(s for s in series if s["kind"] == "train")
    assert train["count"] == 11 and train["last"] == round(1 / 11, 4) and d["train_log"]["train_points"] == 11
