"""The Ledger API on a real SQLite file and a real PostgreSQL server."""

from __future__ import annotations

import math
import threading
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy import select

from costctl.errors import LedgerError
from costctl.ledger import Ledger
from costctl.ledger.schema import Charge, DecisionRow, Instance, Progress, Run, Sample
from costctl.records import Decision, GpuReading, ProgressPoint, SignalStatus, TelemetrySample

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=timezone.utc)
RATE = Decimal("0.45")


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def new_instance(ledger: Ledger, iid: str = "i-1", **kw) -> int:
    args = dict(gpu="RTX 4090", gpu_count=1, billing="on-demand", price_per_hour=RATE, currency="USD")
    args.update(kw)
    return ledger.ensure_instance("sim", iid, **args)


def new_run(ledger: Ledger, pk: int, start: float = 0) -> str:
    return ledger.start_run(pk, started_at=at(start), command=["python", "train.py"], log_path=None, host="h1")


def charges(ledger: Ledger, **where) -> list[Charge]:
    with ledger.session() as s:
        stmt = select(Charge).order_by(Charge.start_at, Charge.id)
        for key, value in where.items():
            stmt = stmt.where(getattr(Charge, key) == value)
        return list(s.scalars(stmt))


def assert_no_overlap(rows: list[Charge]) -> None:
    intervals = sorted((c.start_at, c.end_at) for c in rows)
    for (_, end), (start, _) in zip(intervals, intervals[1:]):
        assert start >= end, f"overlapping charges: {intervals}"


def test_ensure_instance_is_idempotent_and_takes_latest_facts(ledger):
    pk = new_instance(ledger)
    assert new_instance(ledger) == pk
    assert new_instance(ledger, price_per_hour=Decimal("0.60"), region="us-east") == pk
    other = new_instance(ledger, iid="i-2")
    assert other != pk
    with ledger.session() as s:
        inst = s.get(Instance, pk)
        assert inst.price_per_hour == Decimal("0.60") and inst.region == "us-east"
        assert inst.created_at.tzinfo is not None


def test_money_and_times_round_trip_exactly(ledger):
    price = Decimal("19.990000000000000000001")
    pk = new_instance(ledger, price_per_hour=price, currency="cny")
    shanghai = datetime(2026, 3, 1, 20, 0, 0, 123456, tzinfo=ZoneInfo("Asia/Shanghai"))
    run = ledger.start_run(pk, started_at=shanghai, command=None, log_path="/tmp/x.log", host=None)
    with ledger.session() as s:
        inst = s.get(Instance, pk)
        assert inst.price_per_hour == price and str(inst.price_per_hour) == "19.990000000000000000001"
        assert inst.currency == "CNY"
        row = s.get(Run, run)
        assert row.started_at == shanghai
        assert row.started_at.tzinfo == timezone.utc and row.started_at.hour == 12
        assert row.started_at.microsecond == 123456
        assert row.command is None and row.status == "running"


def test_naive_times_and_float_money_are_refused(ledger):
    pk = new_instance(ledger)
    with pytest.raises(ValueError):
        ledger.start_run(pk, started_at=datetime(2026, 1, 1), command=None, log_path=None, host=None)
    run = new_run(ledger, pk)
    with pytest.raises(TypeError):
        ledger.accrue(run, at(10), 0.45, "USD")  # type: ignore[arg-type]
    assert charges(ledger) == []


def test_samples_one_row_per_gpu_plus_cpu(ledger):
    run = new_run(ledger, new_instance(ledger))
    sample = TelemetrySample(
        time=at(5),
        gpus=(
            GpuReading(0, utilization=97.0, memory_used_bytes=7650 * 2**20, memory_total_bytes=24 * 2**30, power_w=310.5),
            GpuReading(1, error="NVML_ERROR_GPU_IS_LOST"),
        ),
        gpu_status=SignalStatus.OK,
        cpu_percent=143.0,
        cpu_status=SignalStatus.OK,
        source="nvml",
    )
    cpu_only = TelemetrySample(time=at(10), cpu_percent=None, cpu_status=SignalStatus.UNKNOWN, source="cpu")
    ledger.record_samples(run, [sample, cpu_only])
    with ledger.session() as s:
        rows = list(s.scalars(select(Sample).order_by(Sample.time, Sample.id)))
    assert [(r.time, r.gpu_index, r.status) for r in rows] == [
        (at(5), 0, "ok"),
        (at(5), 1, "error"),
        (at(5), None, "ok"),
        (at(10), None, "unknown"),
    ]
    gpu0, gpu1, cpu, cpu2 = rows
    assert gpu0.memory_used_bytes == 7650 * 2**20 and gpu0.memory_total_bytes == 24 * 2**30
    assert gpu0.utilization == 97.0 and gpu0.power_w == 310.5 and gpu0.source == "nvml"
    assert gpu1.utilization is None and gpu1.error == "NVML_ERROR_GPU_IS_LOST"
    assert cpu.utilization == 143.0 and cpu2.utilization is None


def test_progress_keeps_nan_and_inf(ledger):
    run = new_run(ledger, new_instance(ledger))
    values = [2.5, math.nan, math.inf, -math.inf, 0.1234567890123456789, -0.0]
    points = [ProgressPoint(time=at(i), value=v, step=i, epoch=i / 2, total=100) for i, v in enumerate(values)]
    points.append(ProgressPoint(time=None, value=0.3, kind="eval", name="eval_loss"))
    ledger.record_progress(run, points)
    with ledger.session() as s:
        rows = list(s.scalars(select(Progress).order_by(Progress.id)))
    got = [r.value for r in rows]
    assert got[0] == 2.5 and math.isnan(got[1]) and got[2] == math.inf and got[3] == -math.inf
    assert got[4] == 0.1234567890123456789 and got[6] == 0.3
    assert [r.step for r in rows[:6]] == list(range(6)) and rows[3].epoch == 1.5
    assert rows[6].time is None and rows[6].kind == "eval" and rows[6].name == "eval_loss"
    assert rows[0].time == at(0)


def test_decision_with_evidence(ledger):
    run = new_run(ledger, new_instance(ledger))
    decision = Decision(
        time=at(60),
        policy="budget",
        action="stop",
        reason="spend 10.01 USD reached the total cap 10 USD",
        evidence={"spend": Decimal("10.01"), "cap": "10", "window": [at(0), at(60)]},
        key="budget:total",
    )
    first = ledger.record_decision(run, decision, outcome="stopped", dry_run=True)
    second = ledger.record_decision(run, decision)
    assert second != first
    with ledger.session() as s:
        row = s.get(DecisionRow, first)
    assert row.evidence == {"spend": "10.01", "cap": "10", "window": [str(at(0)), str(at(60))]}
    assert (row.policy, row.action, row.outcome, row.dry_run, row.key) == ("budget", "stop", "stopped", True, "budget:total")
    assert row.time == at(60)


def test_accrue_extends_one_row_and_returns_new_amount(ledger):
    run = new_run(ledger, new_instance(ledger))
    assert ledger.accrue(run, at(60), RATE, "USD") == RATE * 60 / 3600
    assert ledger.accrue(run, at(90), RATE, "USD") == RATE * 30 / 3600
    assert ledger.accrue(run, at(90), RATE, "USD") == 0  # nothing new
    assert ledger.accrue(run, at(30), RATE, "USD") == 0  # the past is never re-charged
    rows = charges(ledger)
    assert [(c.start_at, c.end_at, c.rate_per_hour) for c in rows] == [(at(0), at(90), RATE)]
    # A new rate (spot price moved) opens a new row.
    assert ledger.accrue(run, at(100), Decimal("0.50"), "USD") == Decimal("0.50") * 10 / 3600
    rows = charges(ledger)
    assert [(c.start_at, c.end_at, c.rate_per_hour) for c in rows] == [
        (at(0), at(90), RATE),
        (at(90), at(100), Decimal("0.50")),
    ]
    assert ledger.spend(run_id=run) == {"USD": RATE * 90 / 3600 + Decimal("0.50") * 10 / 3600}
    with ledger.session() as s:
        assert s.get(Run, run).last_seen_at == at(100)


def test_money_is_exact_over_many_accruals(ledger):
    rate = Decimal("0.10")
    run = new_run(ledger, new_instance(ledger, price_per_hour=rate))
    total = sum((ledger.accrue(run, at(i * 36), rate, "USD") for i in range(1, 101)), Decimal(0))
    # 100 * 36 s = 1 h at 0.10/h: exactly 0.10, with no float drift anywhere.
    assert total == Decimal("0.10")
    assert ledger.spend() == {"USD": Decimal("0.1")}
    assert len(charges(ledger)) == 1


def test_new_run_on_same_instance_never_charges_a_second_twice(ledger):
    pk = new_instance(ledger)
    first = new_run(ledger, pk, start=0)
    ledger.accrue(first, at(100), RATE, "USD")
    # A second watch on the same instance whose run started before the first one's last charge.
    second = new_run(ledger, pk, start=50)
    assert ledger.accrue(second, at(80), RATE, "USD") == 0
    assert ledger.accrue(second, at(160), RATE, "USD") == RATE * 60 / 3600
    rows = charges(ledger)
    assert_no_overlap(rows)
    assert [(c.run_id, c.start_at, c.end_at) for c in rows] == [(first, at(0), at(100)), (second, at(100), at(160))]
    # Another instance is charged independently.
    other = new_run(ledger, new_instance(ledger, iid="i-2"), start=50)
    assert ledger.accrue(other, at(80), RATE, "USD") == RATE * 30 / 3600


def test_gap_between_accruals_is_charged_by_time_not_ticks(ledger):
    run = new_run(ledger, new_instance(ledger))
    ledger.accrue(run, at(5), RATE, "USD")
    # Ticks at 10..55 were skipped (slow scheduler): the next accrual still covers them.
    assert ledger.accrue(run, at(60), RATE, "USD") == RATE * 55 / 3600
    assert ledger.spend() == {"USD": RATE * 60 / 3600}


def test_spend_per_currency_and_window(ledger):
    usd = new_run(ledger, new_instance(ledger, iid="vast-1"))
    cny_pk = new_instance(ledger, iid="autodl-1", price_per_hour=Decimal("2.18"), currency="CNY")
    cny = new_run(ledger, cny_pk)
    ledger.accrue(usd, at(3600), RATE, "USD")
    ledger.accrue(cny, at(1800), Decimal("2.18"), "CNY")
    assert ledger.spend() == {"CNY": Decimal("1.09"), "USD": RATE}
    assert ledger.spend(instance_pk=cny_pk) == {"CNY": Decimal("1.09")}
    assert ledger.spend(run_id=usd, since=at(900), until=at(2700)) == {"USD": RATE / 2}
    assert ledger.spend(since=at(1800)) == {"USD": RATE / 2}
    assert ledger.spend(until=at(0)) == {}


def test_finish_run(ledger):
    run = new_run(ledger, new_instance(ledger))
    ledger.accrue(run, at(30), RATE, "USD")
    ledger.finish_run(run, ended_at=at(30), exit_code=3, status="failed")
    with ledger.session() as s:
        row = s.get(Run, run)
    assert (row.ended_at, row.exit_code, row.status, row.last_seen_at) == (at(30), 3, "failed", at(30))


def test_unknown_run_and_instance_are_one_line_errors(ledger):
    with pytest.raises(LedgerError, match="no run 'nope'"):
        ledger.accrue("nope", at(1), RATE, "USD")
    with pytest.raises(LedgerError, match="no instance"):
        ledger.start_run(424242, started_at=at(0), command=None, log_path=None, host=None)


def test_concurrent_accruals_on_one_instance_never_overlap(db_url):
    setup = Ledger.open(db_url)
    pk = new_instance(setup)
    runs = [new_run(setup, pk), new_run(setup, pk)]
    setup.close()
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(runs))

    def worker(run_id: str) -> None:
        ledger = Ledger.open(db_url)  # its own engine: a separate connection, as two watches
        try:
            barrier.wait()
            for i in range(1, 61):
                ledger.accrue(run_id, at(i), RATE, "USD")
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            ledger.close()

    threads = [threading.Thread(target=worker, args=(r,)) for r in runs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    with Ledger.open(db_url) as ledger:
        rows = charges(ledger)
        assert_no_overlap(rows)
        assert sum(((c.end_at - c.start_at) for c in rows), timedelta()) == timedelta(seconds=60)
        assert ledger.spend() == {"USD": RATE * 60 / 3600}


def test_open_sqlite_creates_directory_and_uses_wal(tmp_path):
    path = tmp_path / "a" / "b" / "costctl.db"
    with Ledger.open(f"sqlite:///{path}") as ledger:
        assert path.is_file()
        with ledger.engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() >= 1000
            assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 1  # NORMAL: WAL's, no fsync per commit
        assert ledger.revision() is not None


@pytest.mark.parametrize(
    "url, message, code",
    [
        ("not a url", "is not valid", 2),  # configuration errors: exit status 2
        ("nosuchdb://x/y", "unknown database kind", 2),
        ("postgresql+psycopg://postgres@127.0.0.1:1/x", "cannot open the database", 1),
    ],
)
def test_open_errors_are_one_line(url, message, code):
    with pytest.raises(LedgerError) as info:
        Ledger.open(url)
    text = info.value.message
    assert message in text and "\n" not in text
    assert info.value.exit_code == code


def test_open_unwritable_path_is_one_line(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(LedgerError) as info:
        Ledger.open(f"sqlite:///{blocker / 'costctl.db'}")
    assert "a file is in the way" in info.value.message and "\n" not in info.value.message


def test_password_is_redacted_in_errors():
    with pytest.raises(LedgerError) as info:
        Ledger.open("postgresql+psycopg://alice:s3cret@127.0.0.1:1/x")
    assert "s3cret" not in info.value.message and "***" in info.value.message


def test_close_lost_runs_closes_only_dead_watches_of_this_host(ledger):
    pk = new_instance(ledger)
    dead = ledger.start_run(pk, started_at=at(0), command=None, log_path=None, host="box", pid=111)
    live = ledger.start_run(pk, started_at=at(0), command=None, log_path=None, host="box", pid=222)
    other_host = ledger.start_run(pk, started_at=at(0), command=None, log_path=None, host="elsewhere", pid=111)
    no_pid = ledger.start_run(pk, started_at=at(0), command=None, log_path=None, host="box")
    finished = ledger.start_run(pk, started_at=at(0), command=None, log_path=None, host="box", pid=111)
    ledger.accrue(dead, at(30), Decimal("1.2"), "USD")
    ledger.finish_run(finished, ended_at=at(5), exit_code=0, status="completed")

    closed = ledger.close_lost_runs(pk, host="box", alive=lambda pid: pid == 222)

    assert closed == [dead]
    with ledger.session() as s:
        runs = {r.id: r for r in s.scalars(select(Run)).all()}
    assert (runs[dead].status, runs[dead].ended_at) == ("lost", at(30))
    for rid in (live, other_host, no_pid):
        assert runs[rid].ended_at is None and runs[rid].status == "running"
    assert runs[finished].status == "completed"
    assert ledger.close_lost_runs(pk, host="box", alive=lambda pid: False) == [live]  # pid-less runs are never guessed at


def test_a_run_whose_watch_died_while_its_job_runs_on_is_unguarded_then_lost_once_the_job_ended(ledger):
    pk = new_instance(ledger)
    run = ledger.start_run(pk, started_at=at(0), command=["train"], log_path="/runs/a.log", host="box", pid=111)
    ledger.accrue(run, at(30), Decimal("1.2"), "USD")
    running = {"/runs/a.log": True}

    def job_running(r):
        return running.get(r.log_path, False)

    assert ledger.close_lost_runs(pk, host="box", alive=lambda pid: False, job_running=job_running) == []
    with ledger.session() as s:
        row = s.get(Run, run)
        assert (row.status, row.ended_at) == ("unguarded", None)
    running["/runs/a.log"] = False  # the job ended with no watch
    assert ledger.close_lost_runs(pk, host="box", alive=lambda pid: False, job_running=job_running) == [run]
    with ledger.session() as s:
        row = s.get(Run, run)
        assert (row.status, row.ended_at) == ("lost", at(30))


def test_measured_use_takes_the_busiest_gpus_mean_not_the_average_over_gpus(ledger):
    """Two GPUs, one busy (~90 %), one idle: the run's utilization is the busy GPU's mean (the
    right-sizing in `costctl bill` must not halve it), its peak memory the highest of any GPU."""
    from costctl.ledger.summaries import measured_use
    from costctl.records import GpuReading, SignalStatus, TelemetrySample

    pk = new_instance(ledger, gpu_count=2)
    run = new_run(ledger, pk)
    samples = [TelemetrySample(time=at(i), gpu_status=SignalStatus.OK, gpus=[
        GpuReading(index=0, utilization=88.0 + (i % 3) * 2, memory_used_bytes=10 * 2**30, memory_total_bytes=80 * 2**30),
        GpuReading(index=1, utilization=0.0, memory_used_bytes=2**20, memory_total_bytes=80 * 2**30)])
        for i in range(30)]
    ledger.record_samples(run, samples)
    with ledger.session() as s:
        use = measured_use(s, run)
    assert use.mean_utilization == pytest.approx(90.0)
    assert use.peak_memory_bytes == 10 * 2**30 and use.gpu_samples == 60
