"""Issue 17, the second fresh tester's findings (trial 2b): each a named regression test.

1. Malformed provider fields (a price of "abc"/null/[]/{}, a status "weird", a gpu_count of
   "x"/2**64/-1/1.5, a null currency, a started_at of "garbage", a state file nested 100,000
   deep) crashed ``watch`` and ``instances`` with an internal error: every field is now checked
   at the boundary (providers._normalize's field helpers and ``Instance.__post_init__``) and a
   bad one is one ProviderResponseError line naming the provider, the field and the value.
2. Huge numbers in job output (a 400-digit loss, ``1e400``) read as ``+inf`` and tripped the
   divergence policy: a numeric literal past the float range is now no number (skipped); the
   words ``inf``/``nan`` stay the divergence signal.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from costctl.cli.main import main
from costctl.numbers import as_float
from costctl.progress import lines
from costctl.progress.lines import LineParser, parse_value
from costctl_providers._normalize import MAX_GPU_COUNT
from costctl_providers.errors import ProviderResponseError

T0 = 1_767_225_600.0


def _sim_state(data_dir: Path) -> Path:
    assert main(["instances"]) == 0  # creates the simulated local instance
    path = data_dir / "sim" / "state.json"
    assert path.is_file()
    return path


@pytest.fixture()
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("COSTCTL_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "data"


BAD_SIM_FIELDS = [
    ("price_per_hour", "abc"), ("price_per_hour", None), ("price_per_hour", []), ("price_per_hour", {}),
    ("status", "weird"), ("status", None), ("status", 5),
    ("gpu_count", "x"), ("gpu_count", None), ("gpu_count", 2**64), ("gpu_count", -1), ("gpu_count", 1.5),
    ("currency", None), ("started_at", "garbage"),
]


@pytest.mark.parametrize(("field", "value"), BAD_SIM_FIELDS, ids=[f"{f}={v!r}" for f, v in BAD_SIM_FIELDS])
def test_malformed_sim_field_is_one_line_naming_provider_field_and_value(
        field: str, value: object, data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _sim_state(data_dir)
    state = json.loads(path.read_text())
    state["instances"]["sim-local"][field] = value
    path.write_text(json.dumps(state))
    capsys.readouterr()
    assert main(["instances"]) == 1
    err = capsys.readouterr().err
    assert "internal error" not in err and "Traceback" not in err
    assert f"sim: the provider reported an unusable {field} " in err
    line = next(x for x in err.splitlines() if "unusable" in x)
    assert len(line) < 300


@pytest.mark.parametrize(("field", "value"), [("price_per_hour", "abc"), ("gpu_count", 2**64), ("status", "weird")])
def test_watch_with_a_malformed_sim_field_says_one_line_and_never_crashes(field: str, value: object, tmp_path: Path) -> None:
    """The tester's rc=70 (internal error; gpu_count 2**64 overflowed SQLite): now the watch reads
    the provider as unreadable (the same refusal as a corrupt state file) and stores nothing bad."""
    import subprocess

    from helpers import costctl_cmd, costctl_env

    env = costctl_env(tmp_path / "data")
    first = subprocess.run(costctl_cmd("watch", "--on-exit", "leave", "--", sys.executable, "-c", "pass"),
                           env=env, capture_output=True, timeout=120)
    assert first.returncode == 0, first.stderr[-1000:]
    path = tmp_path / "data" / "sim" / "state.json"
    state = json.loads(path.read_text())
    state["instances"]["sim-local"][field] = value
    path.write_text(json.dumps(state))
    proc = subprocess.run(costctl_cmd("watch", "--on-exit", "leave", "--", sys.executable, "-c", "pass"),
                          env=env, capture_output=True, timeout=120)
    err = proc.stderr.decode()
    assert proc.returncode not in (0, 70) and "internal error" not in err and "Traceback" not in err, err
    assert f"unusable {field}" in " ".join(err.split())


def test_sim_state_file_nested_past_the_parser_limit_is_corrupt_not_a_crash(
        data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _sim_state(data_dir)
    path.write_text("[" * 100_000)
    capsys.readouterr()
    assert main(["instances"]) == 1
    err = capsys.readouterr().err
    assert "internal error" not in err and "is corrupt" in err


def test_instance_record_refuses_a_gpu_count_no_integer_column_holds() -> None:
    from costctl_providers.base import BillingMode, Instance, Status

    with pytest.raises(ProviderResponseError, match=r"vastai: .*gpu_count 18446744073709551616; expected a whole number from 0 to 1024"):
        Instance(provider="vastai", id="1", gpu=None, gpu_raw=None, gpu_count=2**64, billing=BillingMode.ON_DEMAND,
                 price_per_hour=None, currency="USD", status=Status.RUNNING)
    with pytest.raises(ProviderResponseError, match="currency"):
        Instance(provider="runpod", id="1", gpu=None, gpu_raw=None, gpu_count=1, billing=BillingMode.ON_DEMAND,
                 price_per_hour=None, currency=None, status=Status.RUNNING)  # type: ignore[arg-type]
    ok = Instance(provider="sim", id="1", gpu=None, gpu_raw=None, gpu_count=MAX_GPU_COUNT,
                  billing=BillingMode.ON_DEMAND, price_per_hour=None, currency="USD", status=Status.RUNNING)
    assert ok.gpu_count == MAX_GPU_COUNT


def test_vastai_http_answer_with_a_huge_gpu_count_is_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Through a real HTTP fake: Vast.ai reporting num_gpus 2**64 (which overflowed SQLite)."""
    from tests.fakes.vastai import API_KEY, FakeVast

    with FakeVast() as fake:
        fake.add(312, num_gpus=2**64)
        cfg = tmp_path / "costctl.toml"
        cfg.write_text(f'[instance]\nprovider = "vastai"\n[providers.vastai]\nbase_url = "{fake.url}"\n')
        monkeypatch.setenv("VAST_API_KEY", API_KEY)
        assert main(["instances", "-c", str(cfg)]) == 1
        err = capsys.readouterr().err
        assert "internal error" not in err
        assert "vastai: the provider reported an unusable num_gpus 18446744073709551616" in err


# -- 2. huge numbers in job output are no numbers -----------------------------------------------

HUGE = "9" * 400


@pytest.mark.parametrize("engine", ["python", "native"])
@pytest.mark.parametrize("line", [
    f"loss: {HUGE}", "loss: 1e400", f"step 2 loss: {'9' * 5000}",
    f"{{'loss': {HUGE}, 'grad_norm': 1.5, 'learning_rate': 2e-05, 'epoch': 1.0}}",
    "{'loss': 1e400, 'grad_norm': 1.5, 'learning_rate': 2e-05, 'epoch': 1.0}",
    f"1/2 [=] - 1s - loss: {HUGE}", "iter 2: loss 1e400, time 5.0ms, mfu 1.00%",
])
def test_huge_loss_in_job_output_is_skipped_not_a_divergence(line: str, engine: str) -> None:
    if engine == "native" and not (lines._scan is not None):
        pytest.skip("the C scanner is not built")
    parser = LineParser(engine=engine)
    points = parser.feed(line + "\n", T0) + parser.flush(T0)
    assert all(math.isfinite(p.value) for p in points), points
    assert not [p for p in points if p.name.lower().endswith("loss") and p.value > 1e300]


@pytest.mark.parametrize("engine", ["python", "native"])
def test_literal_inf_and_nan_stay_the_divergence_signal(engine: str) -> None:
    if engine == "native" and not (lines._scan is not None):
        pytest.skip("the C scanner is not built")
    parser = LineParser(engine=engine)
    points = parser.feed("loss: inf\nloss: nan\nloss: -Infinity\n", T0) + parser.flush(T0)
    values = [p.value for p in points]
    assert len(values) == 3 and math.isinf(values[0]) and math.isnan(values[1]) and values[2] == -math.inf


def test_parse_value_and_as_float_refuse_overflowing_literals_only() -> None:
    assert parse_value(HUGE) is None and parse_value("1e400") is None and parse_value("-1E999") is None
    assert parse_value("inf") == math.inf and math.isnan(parse_value("NaN"))  # type: ignore[arg-type]
    assert as_float(HUGE) is None and as_float(int(HUGE)) is None and as_float("1e400") is None
    assert as_float("Infinity") == math.inf and as_float("2.5") == 2.5 and as_float(10**300) == 1e300


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_metrics_file_with_huge_loss_and_grad_norm_is_no_divergence(tmp_path: Path, suffix: str) -> None:
    from costctl.progress.metrics_file import read_metrics_file

    path = tmp_path / f"metrics{suffix}"
    if suffix == ".jsonl":
        path.write_text("".join(json.dumps({"step": s, "loss": 2.0}) + "\n" for s in (1, 3))
                        + f'{{"step": 2, "loss": {HUGE}, "grad_norm": {"9" * 5000}}}\n{{"step": 4, "loss": 1e400}}\n')
    else:
        path.write_text(f"step,loss\n1,2.0\n2,{HUGE}\n3,{'9' * 5000}\n4,1e400\n5,1.5\n")
    points = read_metrics_file(path)
    assert points and all(math.isfinite(p.value) for p in points), points
    assert {p.value for p in points if p.name == "loss"} <= {2.0, 1.5}


def test_literal_infinity_in_a_metrics_file_stays_a_reading(tmp_path: Path) -> None:
    from costctl.progress.metrics_file import read_metrics_file

    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1, "loss": Infinity}\n')
    assert [p.value for p in read_metrics_file(path)] == [math.inf]


@pytest.mark.parametrize("engine", ["python", "native"])
def test_an_epoch_past_a_million_is_no_epoch(engine: str, tmp_path: Path) -> None:
    if engine == "native" and lines._scan is None:
        pytest.skip("the C scanner is not built")
    parser = LineParser(engine=engine)
    text = f"Epoch {2**64}/20\nloss: 0.5\n{{'loss': 0.4, 'epoch': {2**64}}}\nEpoch 3/20\nloss: 0.3\n"
    points = parser.feed(text, T0) + parser.flush(T0)
    assert [(p.value, p.epoch) for p in points] == [(0.5, None), (0.4, None), (0.3, 3.0)]
    from costctl.progress.metrics_file import read_metrics_file

    path = tmp_path / "metrics.jsonl"
    path.write_text(f'{{"step": 1, "loss": 0.5, "epoch": {2**64}}}\n{{"step": 2, "loss": 0.4, "epoch": 2.5}}\n')
    assert [(p.step, p.epoch) for p in read_metrics_file(path)] == [(1, None), (2, 2.5)]


# -- 3. readers: a 10 MB SkyPilot field, a 5,000-digit model config number -----------------------

SKY_HEADER = "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,SpotPrice,Region,GpuInfo\n"


def test_skypilot_csv_with_a_10_mb_field_skips_that_row_counted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    vms = tmp_path / "vms.csv"
    vms.write_text(SKY_HEADER + "p3.2xlarge,V100,1,8,61,3.06,0.92,us-east-1,\n"
                   + "p4d,A100," + "1" * 10_000_000 + ",96,1152,32.77,,us-east-1,\n")
    assert main(["gpus", "--offline", "--provider", "aws", "--import", str(vms)]) == 0
    err = capsys.readouterr().err
    assert "internal error" not in err and "field larger" not in err
    assert "skipped 1 row(s) with a cell over 4096 characters" in " ".join(err.split())
    assert "imported 2 price(s) for aws" in " ".join(err.split())


def test_model_config_with_a_5000_digit_hidden_size_is_one_line_naming_key_and_range(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "config.json"
    for hidden in ("9" * 5000, "76800000"):
        cfg.write_text('{"num_hidden_layers": 12, "hidden_size": ' + hidden + ', "num_attention_heads": 12, "vocab_size": 50257}')
        assert main(["recommend", "--offline", "--config-json", str(cfg)]) == 2
        err = capsys.readouterr().err
        assert "internal error" not in err and len(err.strip().splitlines()) == 1
        assert "hidden_size" in err and "expected a whole number from 1 to 1048576" in err


# -- 4. recommend's batch size: bounded options, divisors in O(sqrt(n)) ----------------------------

def test_recommend_batch_size_is_bounded_and_a_huge_batch_is_answered(capsys: pytest.CaptureFixture[str]) -> None:
    from costctl.catalog.recommend import _proper_divisors

    assert _proper_divisors(12) == [1, 2, 3, 4, 6] and _proper_divisors(1) == []
    assert len(_proper_divisors(2**31)) == 31  # 46,341 trial divisions, not 2**31 estimates
    assert main(["recommend", "--offline", "-m", "gpt2", "-b", "2147483648"]) == 2
    assert "16777216" in capsys.readouterr().err
    assert main(["recommend", "--offline", "-m", "gpt2", "-b", "16777216", "--format", "json"]) == 0
    assert "ranked" in capsys.readouterr().out


# -- 5. nvidia-smi CSV: 300,000 rows at one timestamp --------------------------------------------

SMI_ONE_TIME_ROW = "2024/01/01 00:00:00.000, 0 %, 1000 MiB\n"


def test_rows_at_one_timestamp_make_samples_of_at_most_64_gpus() -> None:
    from costctl.replay.gpu_smi_csv import MAX_GPUS_PER_SAMPLE, parse_smi_lines

    samples, skipped = parse_smi_lines(["timestamp, utilization.gpu [%], memory.used [MiB]\n"] + [SMI_ONE_TIME_ROW] * 200)
    sizes = [len(s.gpus) for s in samples]
    assert skipped == 0
    assert MAX_GPUS_PER_SAMPLE == 64 and sizes == [64, 64, 64, 8]


def test_analyze_300k_rows_at_one_timestamp_finishes_with_bounded_output(tmp_path: Path) -> None:
    """The tester's log ran past 180 s and 1.5 GB and printed 45,709 lines for 10,000 rows (one
    sample of 300,000 GPUs). A generous timeout, no wall-clock assertion."""
    import subprocess

    from helpers import costctl_cmd, costctl_env

    gpu = tmp_path / "big.csv"
    gpu.write_text("timestamp, utilization.gpu [%], memory.used [MiB]\n" + SMI_ONE_TIME_ROW * 300_000)
    proc = subprocess.run([*costctl_cmd(), "analyze", "--price", "2", "--gpu-log", str(gpu), "--compare"],
                          env=costctl_env(tmp_path / "data"), capture_output=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert b"internal error" not in proc.stderr
    assert len(proc.stdout.splitlines()) < 1000
