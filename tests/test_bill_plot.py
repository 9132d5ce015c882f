"""`costctl bill --plot FILE.png`: cumulative spend per instance (one panel per currency) with
stops and advice marked, and a run's utilization. The PNG is opened and checked for its size
(panels x 3 in by 11 in at 100 dpi) and for content: not blank, the stop drawn in red, the
utilization line where the samples put it. Errors are one line before anything is printed."""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta
from decimal import Decimal

import pytest

from costctl.cli.main import main
from costctl.ledger import Ledger
from costctl.records import GpuReading, SignalStatus, TelemetrySample
from helpers import costctl_env
from test_bill_story import RATE, at, build

image = pytest.importorskip("matplotlib.image")
np = pytest.importorskip("numpy")


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COSTCTL_DATA_DIR", str(tmp_path / "data"))
    for name in ("COSTCTL_DATABASE_URL", "COSTCTL_WATCH__TIMEZONE", "COSTCTL_BILL__SAVED_HORIZON"):
        monkeypatch.delenv(name, raising=False)


def with_samples(url: str) -> dict[str, str]:
    """The story ledger, plus GPU samples for its confirmed run: 90 % busy until 01:20, then idle."""
    runs = build(url)
    with Ledger.open(url) as ledger:
        samples = [TelemetrySample(time=at(0, m), gpus=(GpuReading(0, utilization=90.0 if m < 80 else 0.0,
                                                                   memory_used_bytes=2**30, memory_total_bytes=2**34),),
                                   gpu_status=SignalStatus.OK, cpu_percent=50.0 if m < 80 else 1.0,
                                   cpu_status=SignalStatus.OK) for m in range(0, 120)]
        ledger.record_samples(runs["confirmed"], samples)
    return runs


def pixels(path) -> np.ndarray:
    data = image.imread(str(path))
    assert data.dtype == np.float32 and data.shape[2] in (3, 4)
    return data[:, :, :3]


def test_the_plot_is_a_png_of_the_expected_size_with_spend_stops_and_utilization(db_url, tmp_path, capsys):
    runs = with_samples(db_url)
    png = tmp_path / "spend.png"
    assert main(["bill", "--plot", str(png), "--run", runs["confirmed"][:8], "--db", db_url]) == 0
    out = capsys.readouterr()
    assert f"plot written to {png}" in out.err and "TOTAL" in out.out  # the bill is printed as well
    rgb = pixels(png)
    assert rgb.shape[:2] == (2 * 300, 1100)  # one currency (USD) and the run: two panels
    white = (rgb > 0.97).all(axis=2)
    coloured = rgb.max(axis=2) - rgb.min(axis=2) > 0.3
    assert white.mean() < 0.97 and coloured.sum() > 2000  # axes, labels and coloured lines: not blank
    red = (rgb[:, :, 0] > 0.7) & (rgb[:, :, 1] < 0.35) & (rgb[:, :, 2] < 0.35)
    assert red.sum() > 100  # the confirmed stops, tab:red
    # the utilization panel (the lower half) holds the GPU line at 90 % then 0 %: tab:blue pixels
    lower = rgb[300:]
    blue = (lower[:, :, 2] > 0.55) & (lower[:, :, 0] < 0.3)
    assert blue.sum() > 200


def test_two_currencies_are_two_panels_and_the_newest_run_is_drawn_by_default(db_url, tmp_path, capsys):
    with_samples(db_url)
    with Ledger.open(db_url) as ledger:
        pk = ledger.ensure_instance("autodl", "cny", gpu="RTX 4090", gpu_count=1, billing="on-demand",
                                    price_per_hour=Decimal("1.98"), currency="CNY")
        run = ledger.start_run(pk, started_at=at(30), command=None, log_path=None, host=None)
        ledger.accrue(run, at(31), Decimal("1.98"), "CNY")
    png = tmp_path / "two.png"
    assert main(["bill", "--plot", str(png), "--format", "json", "--db", db_url]) == 0
    rgb = pixels(png)
    assert rgb.shape[:2] == (3 * 300, 1100)  # USD, CNY, and the newest run (without samples: a note)
    assert (rgb.max(axis=2) - rgb.min(axis=2) > 0.3).sum() > 2000


@pytest.mark.parametrize("args, message", [
    (["--plot", "spend.jpg"], "--plot spend.jpg: expected a file name ending in .png"),
    (["--plot", "missing/spend.png"], "--plot missing/spend.png: the folder missing does not exist"),
    (["--run", "abc"], "--run goes with --plot"),
    (["--plot", "s.png", "--run", "zz"], "--run 'zz': expected a run id or its first characters"),
    (["--plot", "s.png", "--run", "ffffffff"], "--run 'ffffffff': no run in the ledger starts with it"),
])
def test_bad_plot_options_are_one_line_and_print_nothing(db_url, tmp_path, capsys, args, message):
    build(db_url)
    assert main(["bill", *args, "--db", db_url]) == 2
    out = capsys.readouterr()
    assert out.err.startswith(f"costctl: {message}") and out.err.count("\n") == 1
    assert out.out == ""  # refused before the bill is printed
    assert not list(tmp_path.glob("*.png"))


def test_without_matplotlib_the_bill_is_refused_in_one_line(db_url, tmp_path):
    build(db_url)
    code = ("import sys; sys.modules['matplotlib'] = None\n"
            "from costctl.cli.main import main\n"
            "sys.exit(main(sys.argv[1:]))")
    proc = subprocess.run([sys.executable, "-c", code, "bill", "--plot", str(tmp_path / "x.png"), "--db", db_url],
                          env=costctl_env(tmp_path / "data"), cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        "costctl: --plot needs matplotlib, which is not installed: pip install 'costctl[plot]'"]
    assert not (tmp_path / "x.png").exists()


def test_the_spend_series_add_up_to_the_bill(db_url):
    """The plotted curves end at each instance's spend in the window (the same sums as the bill)."""
    from costctl.ledger import queries
    from costctl.ledger.timeline import plot_data

    build(db_url)
    with Ledger.open(db_url) as ledger, ledger.session() as s:
        data = plot_data(s, at(1), at(30), max_points=7)
        rows = {r.instance_id: r.spend for r in queries.bill_by_instance(s, at(1), at(30))}
    ends = {series.label.split(":")[1].split(" ")[0]: series.amounts[-1] for series in data.spend}
    assert ends == rows and all(len(series.times) <= 2 * 7 for series in data.spend)
    assert all(a <= b for series in data.spend for a, b in zip(series.amounts, series.amounts[1:]))
    stops = [m for m in data.marks if m.action == "stop"]
    assert {(m.policy, m.dry_run, m.stop_state) for m in stops} == {
        ("idle", False, "confirmed"), ("idle", True, None), ("budget", False, "confirmed")}
    assert data.run is not None and data.run.started_at == at(22)  # the newest run of the window
    assert RATE == Decimal("3.6") and timedelta(0) < data.run.ended_at - data.run.started_at
