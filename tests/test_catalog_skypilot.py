"""SkyPilot catalog CSV import (columns by header name, GpuInfo literal, empty prices) and `costctl gpus`."""

from __future__ import annotations

import json
import shutil
from datetime import date
from decimal import Decimal
from pathlib import Path

import pytest

from costctl.catalog.prices import imported_prices_path, load_imported_prices
from costctl.catalog.skypilot import parse_gpu_info, parse_skypilot_csv
from costctl.cli.main import main
from costctl.errors import ConfigError

DATA = Path(__file__).parent / "data"
SEEN = date(2026, 7, 1)


@pytest.fixture
def env(tmp_path, monkeypatch):
    """Isolated data dir and cwd, wide terminal for rich tables."""
    monkeypatch.setenv("COSTCTL_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("COLUMNS", "250")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _by_key(entries):
    return {(e.gpu, e.billing): e for e in entries}


def test_aws_layout_with_gpuinfo_before_price():
    """AWS order: ...,GpuInfo,Price,SpotPrice,Region,AvailabilityZone."""
    rows = parse_skypilot_csv((DATA / "skypilot_aws_vms.csv").read_text(), provider="aws", seen=SEEN, source="aws")
    got = _by_key(rows)
    # per GPU-hour: p4de.24xlarge 40.96 $/h over 8 GPUs
    assert got[("A100-80GB", "on-demand")].price_per_gpu_hour == Decimal("5.12")
    assert got[("A100-80GB", "spot")].price_per_gpu_hour == Decimal("1.536")
    # cheapest region wins; eu-west-1 row has an empty SpotPrice (not offered) and is dearer
    assert got[("T4", "on-demand")].price_per_gpu_hour == Decimal("0.526")
    assert got[("T4", "spot")].price_per_gpu_hour == Decimal("0.2104")
    # V100 row has an empty SpotPrice: on-demand only
    assert ("V100-16GB", "on-demand") in got and ("V100-16GB", "spot") not in got
    # A10G is not in the catalog: kept under its own name, flagged
    assert got[("A10G", "on-demand")].known is False
    # the CPU-only m5.xlarge row is skipped
    assert all(e.gpu_raw for e in rows)
    assert all(e.currency == "USD" and e.seen == SEEN and e.provider == "aws" for e in rows)


def test_runpod_layout_with_reordered_columns_and_empty_spot_prices():
    """RunPod order: ...,Price,Region,GpuInfo,SpotPrice; SpotPrice empty or 0; GpuInfo memory in GiB."""
    rows = parse_skypilot_csv((DATA / "skypilot_runpod_vms.csv").read_text(), provider="runpod", seen=SEEN,
                              source="runpod")
    got = _by_key(rows)
    assert got[("RTX 4090", "on-demand")].price_per_gpu_hour == Decimal("0.65")  # 2 x 4090 at 1.30
    assert ("RTX 4090", "spot") not in got  # empty SpotPrice
    # GpuInfo names the card "A100 PCIe" with 80 (GiB): the PCIe 80 GB row
    assert got[("A100-80GB-PCIe", "on-demand")].price_per_gpu_hour == Decimal("1.64")
    assert ("A100-80GB-PCIe", "spot") not in got  # SpotPrice 0 = not offered
    assert got[("L40S", "spot")].price_per_gpu_hour == Decimal("0.79")


def test_gpuinfo_literal_parsing():
    assert parse_gpu_info("{'Gpus': [{'Name': 'A100', 'MemoryInfo': {'SizeInMiB': 81920}}]}") == ("A100", 80.0)
    assert parse_gpu_info("{'Gpus': [{'Name': 'RTX 4090', 'MemoryInfo': {'SizeInMiB': 24}}]}") == ("RTX 4090", 24.0)
    assert parse_gpu_info("{'TotalGpuMemoryInMiB': 48}") == (None, None)
    assert parse_gpu_info("") == (None, None)
    assert parse_gpu_info("tpu-v4-8") == (None, None)
    assert parse_gpu_info("{'Gpus': [__import__('os')]}") == (None, None)  # literal_eval, never eval


def test_not_a_skypilot_csv_is_one_clear_error():
    with pytest.raises(ConfigError, match="missing column.*AcceleratorCount"):
        parse_skypilot_csv("InstanceType,AcceleratorName,Price\nx,T4,1\n", provider="x", seen=SEEN, source="f")
    with pytest.raises(ConfigError, match="no row with an accelerator"):
        parse_skypilot_csv("AcceleratorName,AcceleratorCount,Price\n,,0.1\n", provider="x", seen=SEEN, source="f")


def test_cli_import_persists_and_reimport_replaces(env, capsys):
    cloud = env / ".sky" / "catalogs" / "v7" / "aws"  # SkyPilot's layout names the cloud
    cloud.mkdir(parents=True)
    shutil.copy(DATA / "skypilot_aws_vms.csv", cloud / "vms.csv")
    assert main(["gpus", "--import", str(cloud / "vms.csv"), "--seen", "2026-07-01"]) == 0
    err = capsys.readouterr().err
    assert "imported 7 price(s) for aws" in err and "A10G" in err
    path = imported_prices_path()
    assert path.is_file() and path.parent == env / "data"
    assert len(load_imported_prices()) == 7

    # a second provider adds to the file; re-importing the first replaces its rows
    assert main(["gpus", "--import", str(DATA / "skypilot_runpod_vms.csv"), "--provider", "runpod"]) == 0
    assert main(["gpus", "--import", str(cloud / "vms.csv"), "--seen", "2026-07-02"]) == 0
    rows = load_imported_prices()
    assert sum(r.provider == "aws" for r in rows) == 7 and sum(r.provider == "runpod" for r in rows) == 4
    assert {r.seen for r in rows if r.provider == "aws"} == {date(2026, 7, 2)}
    capsys.readouterr()

    # the imported prices show in `costctl gpus`
    assert main(["gpus", "--provider", "aws", "--format", "json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    names = {(r["gpu"]["name"], r["price"]["billing"]) for r in listed}
    assert ("A100-80GB", "spot") in names and ("A10G", "on-demand") in names
    a10g = next(r for r in listed if r["gpu"]["name"] == "A10G")
    assert a10g["gpu"]["known"] is False


def test_cli_import_needs_a_provider_for_other_file_names(env, capsys):
    (env / "Downloads").mkdir()
    shutil.copy(DATA / "skypilot_aws_vms.csv", env / "Downloads" / "vms.csv")
    assert main(["gpus", "--import", str(env / "Downloads" / "vms.csv")]) == 2  # "downloads" is no provider
    assert "--provider" in capsys.readouterr().err
    assert main(["gpus", "--import", str(DATA / "skypilot_aws_vms.csv")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("costctl: ") and "--provider" in err and "Traceback" not in err
    assert not imported_prices_path().exists()


def test_cli_import_of_a_missing_or_bad_file_fails_cleanly(env, capsys):
    assert main(["gpus", "--import", str(env / "nope.csv"), "--provider", "aws"]) == 2
    assert "cannot read" in capsys.readouterr().err
    bad = env / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    assert main(["gpus", "--import", str(bad), "--provider", "aws"]) == 2
    assert "not a SkyPilot catalog CSV" in capsys.readouterr().err
    assert main(["gpus", "--import", str(DATA / "skypilot_aws_vms.csv"), "--provider", "aws", "--seen", "July"]) == 2
    assert "--seen" in capsys.readouterr().err


def test_cli_gpus_table_filters_and_sorts(env, capsys):
    assert main(["gpus", "--min-memory", "80", "--sort", "memory"]) == 0
    out = capsys.readouterr().out
    assert "H200" in out and "A100-80GB" in out
    assert "RTX 4090" not in out and "T4 " not in out
    assert out.index("H200") < out.index("H20 ") < out.index("A100-80GB")  # 141 > 96 > 80 GiB

    assert main(["gpus", "--sort", "price", "--billing", "spot", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    priced = [Decimal(r["price"]["price_per_gpu_hour"]) for r in rows if r["price"]]
    assert priced == sorted(priced) and len(priced) >= 2
    assert all(r["price"]["billing"] == "spot" for r in rows if r["price"])

    assert main(["gpus", "--sort", "value", "--provider", "runpod", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    per_tflops = [Decimal(r["price"]["price_per_gpu_hour"]) / Decimal(str(
        r["gpu"]["bf16_tensor_tflops_dense"] or r["gpu"]["fp16_tensor_tflops_dense"])) for r in rows]
    assert per_tflops == sorted(per_tflops) and {r["price"]["provider"] for r in rows} == {"runpod"}


def test_cli_gpus_unknown_provider(env, capsys):
    assert main(["gpus", "--provider", "nosuchcloud"]) == 2
    err = capsys.readouterr().err
    assert "nosuchcloud" in err and "runpod" in err


def test_cli_gpus_ranks_currencies_separately_without_a_rate(env, capsys):
    (env / "costctl.toml").write_text("""
[[catalog.prices]]
provider = "autodl"
gpu = "RTX 4090"
price_per_gpu_hour = "1.98"
currency = "CNY"
seen = 2026-07-01
""")
    assert main(["gpus", "--sort", "price", "--billing", "on-demand"]) == 0
    captured = capsys.readouterr()
    assert "ranked separately" in captured.err and "CN¥1.98" in captured.out
    assert main(["gpus", "--sort", "price", "--billing", "on-demand", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    cny = [r for r in rows if r["price"] and r["price"]["currency"] == "CNY"]
    assert cny and all(r["rank_currency"] == "CNY" for r in cny)

    (env / "costctl.toml").write_text((env / "costctl.toml").read_text() + """
[[catalog.exchange_rates]]
base = "USD"
quote = "CNY"
rate = "7.10"
as_of = 2026-07-01
""")
    assert main(["gpus", "--sort", "price", "--billing", "on-demand", "--currency", "USD"]) == 0
    assert "converting at 1 USD = 7.10 CNY (as of 2026-07-01)" in capsys.readouterr().err
    assert main(["gpus", "--sort", "price", "--billing", "on-demand", "--currency", "USD", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["rank_currency"] for r in rows if r["price"]} == {"USD"}
    order = [(r["price"]["provider"], r["gpu"]["name"]) for r in rows if r["price"]]
    # 1.98 CNY = 0.279 USD: after RunPod's community RTX 3090 (0.22 USD), before its L4 (0.44 USD)
    assert order.index(("runpod", "RTX 3090")) < order.index(("autodl", "RTX 4090")) < order.index(("runpod", "L4"))
