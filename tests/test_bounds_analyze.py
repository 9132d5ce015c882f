"""Issue 17, part 1 (`costctl analyze`'s options): `--price 1e400` and durations of 1e400 crashed
(internal error, exit 70). Every number an option takes has a range: a value outside is one line
naming the option, the value and the range, exit status 2; the ends of each range are taken."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from costctl.cli.main import main


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COSTCTL_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def gpu_log(tmp_path: Path) -> str:
    """Ten minutes of one GPU at 1 s, busy then idle (an nvidia-smi query CSV)."""
    rows = ["timestamp, index, utilization.gpu [%], memory.used [MiB], memory.total [MiB]"]
    for s in range(600):
        rows.append(f"2026/01/01 00:{s // 60:02d}:{s % 60:02d}.000, 0, {90 if s < 120 else 0} %, 1000 MiB, 24564 MiB")
    path = tmp_path / "gpu.csv"
    path.write_text("\n".join(rows) + "\n")
    return str(path)


@pytest.fixture
def train_log(tmp_path: Path) -> str:
    path = tmp_path / "trainer_state.json"
    path.write_text(json.dumps({"log_history": [{"step": s, "epoch": s / 100, "loss": 1 / (1 + s)}
                                                for s in range(1, 2001, 50)]}))
    return str(path)


def _run(capsys, *args: str) -> tuple[int, str]:
    code = main(["analyze", *args])
    out, err = capsys.readouterr()
    assert "internal error" not in err and "Traceback" not in err
    return code, err


@pytest.mark.parametrize("price", ["1e400", "1e26", "9" * 80, "1e-400", "-1", "nan", "inf", "0"])
def test_analyze_price_1e400_is_a_one_line_error(capsys, gpu_log, price):
    code, err = _run(capsys, "--gpu-log", gpu_log, "--price", price, "--currency", "USD")
    assert code == 2
    (line,) = err.splitlines()
    assert line.startswith("costctl: --price '") and line.endswith(
        "expected a price per instance-hour above 0 and up to 1000000000, such as 2.5")


@pytest.mark.parametrize("price", ["1000000000", "0.0000000001"])
def test_analyze_takes_the_ends_of_the_price_range(capsys, gpu_log, price):
    code, err = _run(capsys, "--gpu-log", gpu_log, "--price", price, "--format", "json")
    assert code == 0, err


@pytest.mark.parametrize("option", ["--min-stretch", "--sample-interval", "--time-window"])
@pytest.mark.parametrize("value", ["1e400", "9999999999h", "1e308", "inf"])
def test_analyze_duration_1e400_is_a_one_line_error(capsys, gpu_log, option, value):
    code, err = _run(capsys, "--gpu-log", gpu_log, "--price", "1", option, value)
    assert code == 2
    (line,) = err.splitlines()
    assert f"'{value}': expected a duration from 1s to 8760h (a year)" in line


@pytest.mark.parametrize("option", ["--min-stretch", "--sample-interval", "--time-window"])
def test_analyze_takes_the_longest_duration(capsys, gpu_log, option):
    code, err = _run(capsys, "--gpu-log", gpu_log, "--price", "1", option, "8760h", "--compare")
    assert code == 0, err


@pytest.mark.parametrize("value", ["1e400", "nan", "-inf", "0", "600000"])
def test_analyze_sky_idle_minutes_out_of_range_is_one_line(capsys, gpu_log, value):
    code, err = _run(capsys, "--gpu-log", gpu_log, "--price", "1", "--compare", "--sky-idle-minutes", value)
    assert code == 2
    assert "expected a number of minutes above 0 and up to 525600 (a year)" in err


@pytest.mark.parametrize("value", ["1e400", "nan", "0", "-1", "2000000"])
def test_analyze_step_rate_out_of_range_is_one_line(capsys, train_log, value):
    code, err = _run(capsys, "--train-log", train_log, "--start-time", "2026-01-01", "--step-rate", value)
    assert code == 2
    assert "expected a number of steps (or epochs) per second above 0 and up to 1000000" in err


def test_analyze_placement_past_year_9999_is_one_line(capsys, train_log):
    code, err = _run(capsys, "--train-log", train_log, "--start-time", "9999-12-31", "--step-rate", "0.001")
    assert code == 2
    assert err.startswith("costctl: --start-time 9999-12-31T00:00:00+00:00 with --step-rate 0.001 places step ")
    assert "outside the years 1 to 9999" in err
    code, err = _run(capsys, "--train-log", train_log, "--start-time", "2026-01-01", "--step-rate", "1e-300")
    assert code == 2 and "outside the years 1 to 9999" in err
