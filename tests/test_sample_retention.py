"""Telemetry retention (costctl.ledger.sample_rollup): raw samples older than
``[ledger] sample_retention`` become exact per-minute rollups, in bounded passes, idempotently;
``costctl db compact`` applies it and ``--dry-run`` writes nothing. SQLite file and PostgreSQL.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import event, func, select
from sqlalchemy.engine import Engine

from costctl.cli.main import main
from costctl.clock import utcnow
from costctl.config import load_settings
from costctl.errors import ConfigError
from costctl.ledger import Ledger
from costctl.ledger.lifecycle import gpu_use_by_run
from costctl.ledger.sample_rollup import STATUS_RANK, floor_minute
from costctl.ledger.schema import Sample, SampleMinute
from costctl.records import GpuReading, SignalStatus, TelemetrySample

T0 = datetime(2026, 3, 1, 12, 0, 3, tzinfo=UTC)
RETENTION = timedelta(days=7)


def _run(ledger: Ledger, iid: str, start: datetime) -> str:
    pk = ledger.ensure_instance("sim", iid, gpu="A100", gpu_count=2, billing="on-demand", price_per_hour=None,
                                currency="USD")
    return ledger.start_run(pk, started_at=start, command=None, log_path=None, host="h")


def telemetry(rng: random.Random, when: datetime) -> TelemetrySample:
    """Two GPUs and the CPU; values are multiples of 1/4 so that sums are exact in any order."""
    gpus = []
    for index in (0, 1):
        if index == 1 and rng.random() < 0.2:
            gpus.append(GpuReading(index, error="NVML_ERROR_GPU_IS_LOST", memory_used_bytes=1))
        else:
            gpus.append(GpuReading(index, utilization=rng.randrange(0, 401) / 4 if rng.random() > 0.1 else None,
                                   memory_used_bytes=rng.randrange(1, 80) * 2**30, memory_total_bytes=80 * 2**30,
                                   power_w=rng.randrange(200, 1600) / 4 if rng.random() > 0.1 else None))
    cpu_known = rng.random() > 0.15
    return TelemetrySample(time=when, gpus=tuple(gpus), gpu_status=SignalStatus.OK,
                           cpu_percent=rng.randrange(0, 800) / 4 if cpu_known else None,
                           cpu_status=SignalStatus.OK if cpu_known else SignalStatus.UNKNOWN, source="nvml")


def populate(ledger: Ledger, start: datetime, minutes: int, *, seed: int = 1) -> list[str]:
    """Two runs sampled every 7 s (one tick apart) for ``minutes`` minutes from ``start``."""
    rng = random.Random(seed)
    runs = [_run(ledger, "i-a", start), _run(ledger, "i-b", start)]
    ticks: dict[str, list[TelemetrySample]] = {run: [] for run in runs}
    t = start
    while t < start + timedelta(minutes=minutes):
        for k, run in enumerate(runs):
            ticks[run].append(telemetry(rng, t + timedelta(seconds=k)))
        t += timedelta(seconds=7)
    for run, samples in ticks.items():
        ledger.record_samples(run, samples)
    return runs


def raw_rows(ledger: Ledger) -> list[Sample]:
    with ledger.session() as s:
        return list(s.scalars(select(Sample).order_by(Sample.id)))


def expected_minutes(rows: list[Sample], cutoff: datetime) -> dict[tuple, dict]:
    """Per (run, gpu, minute) figures, brute force from raw rows before ``cutoff``."""
    out: dict[tuple, dict] = {}
    for r in rows:
        if r.time >= cutoff:
            continue
        key = (r.run_id, r.gpu_index, floor_minute(r.time))
        g = out.setdefault(key, {"samples": 0, "ok": 0, "util": [], "mem": [], "total": [], "power": [],
                                 "status": "ok"})
        g["samples"] += 1
        if STATUS_RANK[r.status] > STATUS_RANK[g["status"]]:
            g["status"] = r.status
        if r.status == "ok":
            g["ok"] += 1
            for name, value in (("util", r.utilization), ("mem", r.memory_used_bytes),
                                ("total", r.memory_total_bytes), ("power", r.power_w)):
                if value is not None:
                    g[name].append(value)
    return {key: {"samples": g["samples"], "ok_samples": g["ok"], "status": g["status"],
                  "utilization_sum": sum(g["util"]) if g["util"] else None, "utilization_count": len(g["util"]),
                  "utilization_max": max(g["util"], default=None), "memory_used_max": max(g["mem"], default=None),
                  "memory_total_max": max(g["total"], default=None),
                  "power_sum": sum(g["power"]) if g["power"] else None, "power_count": len(g["power"])}
            for key, g in out.items()}


def stored_minutes(ledger: Ledger) -> dict[tuple, dict]:
    """The rollups, the rows of one minute added up (a minute rolled up in two passes)."""
    out: dict[tuple, dict] = {}
    with ledger.session() as s:
        for m in s.scalars(select(SampleMinute).order_by(SampleMinute.id)):
            key = (m.run_id, m.gpu_index, m.minute)
            g = out.get(key)
            row = {"samples": m.samples, "ok_samples": m.ok_samples, "status": m.status,
                   "utilization_sum": m.utilization_sum, "utilization_count": m.utilization_count,
                   "utilization_max": m.utilization_max, "memory_used_max": m.memory_used_max,
                   "memory_total_max": m.memory_total_max, "power_sum": m.power_sum, "power_count": m.power_count}
            if g is None:
                out[key] = row
                continue
            for name in ("samples", "ok_samples", "utilization_count", "power_count"):
                g[name] += row[name]
            for name in ("utilization_sum", "power_sum"):
                if row[name] is not None:
                    g[name] = row[name] if g[name] is None else g[name] + row[name]
            for name in ("utilization_max", "memory_used_max", "memory_total_max"):
                if row[name] is not None and (g[name] is None or row[name] > g[name]):
                    g[name] = row[name]
            if STATUS_RANK[row["status"]] > STATUS_RANK[g["status"]]:
                g["status"] = row["status"]
    return out


def compact_all(ledger: Ledger, now: datetime, *, dry_run: bool = False, **kw):
    passes, start = [], None
    while len(passes) < 10_000:
        result = ledger.compact(now, RETENTION, dry_run=dry_run, start=start, **kw)
        passes.append(result)
        if result.done:
            return passes
        start = result.resume_at if dry_run else None
    raise AssertionError("compaction does not end")


def test_compaction_keeps_per_minute_figures_exact_in_bounded_passes_and_is_idempotent(ledger):
    runs = populate(ledger, T0, 20)
    now = T0 + RETENTION + timedelta(minutes=12, seconds=30)
    cutoff = floor_minute(now - RETENTION)
    before = raw_rows(ledger)
    want = expected_minutes(before, cutoff)
    with ledger.session() as s:
        use_before = gpu_use_by_run(s)
    per_minute = max(sum(1 for r in before if floor_minute(r.time) == m) for m in {floor_minute(r.time) for r in before})
    passes = compact_all(ledger, now, max_rows=7)
    assert len(passes) > 5  # bounded work: many short passes
    assert all(p.samples <= max(7, per_minute) for p in passes)
    assert sum(p.samples for p in passes) == sum(1 for r in before if r.time < cutoff)
    assert stored_minutes(ledger) == want and len(want) == 12 * 2 * 3
    left = raw_rows(ledger)
    assert left and all(r.time >= cutoff for r in left)
    assert len(left) == sum(1 for r in before if r.time >= cutoff)
    with ledger.session() as s:
        assert gpu_use_by_run(s) == use_before and set(use_before) == set(runs)
        table = s.execute(select(SampleMinute.__table__)).all()
    # idempotent: nothing more to do, nothing changed
    again = ledger.compact(now, RETENTION)
    assert again.samples == 0 and again.rollups == 0 and again.done
    with ledger.session() as s:
        assert s.execute(select(SampleMinute.__table__)).all() == table
    # a sample that arrives late into a minute already rolled up: the next pass adds it
    late = TelemetrySample(time=T0 + timedelta(minutes=3, seconds=1), gpus=(GpuReading(0, utilization=100.0,
                           memory_used_bytes=81 * 2**30, memory_total_bytes=80 * 2**30, power_w=700.0),),
                           gpu_status=SignalStatus.OK, cpu_status=SignalStatus.ERROR, source="nvml")
    ledger.record_samples(runs[0], [late])
    expected_late = expected_minutes(before + raw_rows(ledger)[-2:], cutoff)
    assert ledger.compact(now, RETENTION).samples == 2
    assert stored_minutes(ledger) == expected_late
    with ledger.session() as s:
        assert gpu_use_by_run(s)[runs[0]].peak_memory_bytes == 81 * 2**30


def test_a_dry_run_counts_the_same_and_writes_nothing(ledger):
    populate(ledger, T0, 6)
    now = T0 + RETENTION + timedelta(minutes=4)
    statements: list[str] = []

    def spy(conn, cursor, statement, *args):
        statements.append(statement.split(None, 1)[0].upper())

    event.listen(ledger.engine, "before_cursor_execute", spy)
    try:
        dry = compact_all(ledger, now, max_rows=10, dry_run=True)
    finally:
        event.remove(ledger.engine, "before_cursor_execute", spy)
    assert statements and set(statements) <= {"SELECT", "BEGIN", "ROLLBACK", "COMMIT"}
    assert sum(p.samples for p in dry) > 0
    with ledger.session() as s:
        assert s.scalar(select(func.count(SampleMinute.id))) == 0
    # the dry passes go on from resume_at, so they see what a real compaction then does
    real = compact_all(ledger, now, max_rows=10)
    assert sum(p.samples for p in dry) == sum(p.samples for p in real)
    assert sum(p.rollups for p in dry) == sum(p.rollups for p in real)


def test_compact_arguments_are_checked(ledger):
    with pytest.raises(ValueError):
        ledger.compact(datetime(2026, 1, 1), RETENTION)
    with pytest.raises(ValueError):
        ledger.compact(T0, timedelta(0))
    with pytest.raises(ValueError):
        ledger.compact(T0, RETENTION, max_rows=0)


# ---------------------------------------------------------------------- costctl db compact

@pytest.fixture
def isolated(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COSTCTL_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("COSTCTL_DATABASE_URL", raising=False)


def _counts(url: str) -> tuple[int, int]:
    with Ledger.open(url, migrate=False) as ledger, ledger.session() as s:
        return s.scalar(select(func.count(Sample.id))), s.scalar(select(func.count(SampleMinute.id)))


def test_db_compact_cli_dry_run_writes_nothing_then_compacts(db_url, isolated, capsys):
    old = floor_minute(utcnow() - RETENTION - timedelta(hours=2))
    with Ledger.open(db_url) as ledger:
        populate(ledger, old, 3)
        ledger.record_samples(_run(ledger, "i-c", utcnow()), [TelemetrySample(time=utcnow(), cpu_percent=1.0,
                                                                              cpu_status=SignalStatus.OK)])
    raw_before = _counts(db_url)
    statements: list[str] = []

    def spy(conn, cursor, statement, *args):
        statements.append(statement.split(None, 1)[0].upper())

    event.listen(Engine, "before_cursor_execute", spy)
    try:
        assert main(["db", "compact", "--dry-run", "--db", db_url]) == 0
    finally:
        event.remove(Engine, "before_cursor_execute", spy)
    out = capsys.readouterr().out
    assert "would roll up" in out and "dry run: nothing written" in out and "sample_retention 168h" in out
    assert statements and not {"INSERT", "UPDATE", "DELETE", "CREATE", "DROP", "ALTER"} & set(statements)
    assert _counts(db_url) == raw_before
    assert main(["db", "compact", "--db", db_url]) == 0
    out = capsys.readouterr().out
    n = raw_before[0] - 1  # all but the recent CPU sample
    assert f"rolled up {n} raw samples" in out and "2 run(s)" in out
    samples, minutes = _counts(db_url)
    assert samples == 1 and minutes == 3 * 2 * 3
    assert main(["db", "compact", "--db", db_url]) == 0
    assert "nothing done" in capsys.readouterr().out


def test_db_compact_with_retention_off_does_nothing(tmp_path, isolated, capsys):
    cfg = tmp_path / "costctl.toml"
    cfg.write_text('[ledger]\nsample_retention = "off"\n')
    assert main(["db", "compact", "--config", str(cfg)]) == 0
    assert "sample_retention is off" in capsys.readouterr().out


# ---------------------------------------------------------------------- [ledger] settings

def _load(tmp_path: Path, body: str):
    cfg = tmp_path / "costctl.toml"
    cfg.write_text("[ledger]\n" + body + "\n")
    return load_settings(cfg)


def test_ledger_settings_defaults_and_bounds(tmp_path, isolated):
    ledger = load_settings().ledger
    assert ledger.sample_retention == timedelta(days=7)
    assert ledger.progress_interval == timedelta(seconds=60) and ledger.progress_points_per_interval == 20
    assert _load(tmp_path, 'sample_retention = "off"').ledger.sample_retention is None
    assert _load(tmp_path, 'sample_retention = "24h"').ledger.sample_retention == timedelta(hours=24)
    for body, says in [
        ('sample_retention = "30m"', "ledger.sample_retention = '30m': expected a retention from 1h to 87600h"),
        ('sample_retention = "90000h"', "expected a retention from 1h to 87600h (ten years)"),
        ('sample_retention = "soon"', "ledger.sample_retention"),
        # a value the duration parser itself refuses names the setting's own bounds, not 1s
        ("sample_retention = -5", "expected a retention from 1h to 87600h (ten years)"),
        ('sample_retention = "0.5"', "expected a retention from 1h to 87600h"),
        ('sample_retention = "soon"', "expected a retention from 1h to 87600h"),
        ('progress_interval = "-5"', "expected an interval from 1s to 1h"),
        ('progress_interval = "2h"', "ledger.progress_interval = '2h': expected an interval from 1s to 1h"),
        ("progress_points_per_interval = 0", "ledger.progress_points_per_interval"),
        ("progress_points_per_interval = 100000", "ledger.progress_points_per_interval"),
    ]:
        with pytest.raises(ConfigError) as info:
            _load(tmp_path, body)
        assert says in info.value.message and "\n" not in info.value.message
        assert "at least 1s" not in info.value.message


def test_rollup_figures_compose_per_minute():
    """The raw-row aggregation itself, on a hand-made minute."""
    from costctl.ledger.sample_rollup import rollup_rows

    m = T0.replace(second=0)
    rows = [
        ("r", 0, m + timedelta(seconds=1), 50.0, 10, 80, 300.0, "ok", "nvml", None),
        ("r", 0, m + timedelta(seconds=30), 100.0, 30, 80, None, "ok", "nvml", None),
        ("r", 0, m + timedelta(seconds=59), None, 99, None, 999.0, "error", "nvml", "lost"),
        ("r", 0, m + timedelta(seconds=60), 0.0, 5, 80, 100.0, "ok", "nvml", None),
    ]
    first, second = rollup_rows(rows)
    assert first["minute"] == m and second["minute"] == m + timedelta(minutes=1)
    assert (first["samples"], first["ok_samples"], first["status"], first["error"]) == (3, 2, "error", "lost")
    assert (first["utilization_sum"], first["utilization_count"], first["utilization_max"]) == (150.0, 2, 100.0)
    assert (first["memory_used_max"], first["power_sum"], first["power_count"]) == (30, 300.0, 1)
    assert SampleMinute(utilization_sum=150.0, utilization_count=2).utilization_mean == 75.0
    assert SampleMinute(power_sum=None, power_count=0).power_mean is None


@pytest.mark.postgres
def test_two_compactions_at_once_never_count_a_sample_twice(postgres_schema):
    """Two watches on one PostgreSQL ledger compacting at once: the second one's DELETE waits
    for the first's rows and, once they are gone, rolls up nothing (DELETE ... RETURNING)."""
    import threading

    from conftest import reset_postgres_schema

    from costctl.ledger.sample_rollup import compact_chunk

    url, schema, admin = postgres_schema
    reset_postgres_schema(admin, schema)
    url = url.render_as_string(hide_password=False)
    first, second = Ledger.open(url), Ledger.open(url)
    try:
        populate(first, T0, 3)
        now = T0 + RETENTION + timedelta(hours=1)
        total = len(raw_rows(first))
        results = {}
        with first._write("compact telemetry") as s:  # the first compaction, not yet committed
            results["first"] = compact_chunk(s, now=now, retention=RETENTION, max_rows=10_000)
            waiter = threading.Thread(target=lambda: results.setdefault(
                "second", second.compact(now, RETENTION, max_rows=10_000)))
            waiter.start()
            waiter.join(1.0)
            assert waiter.is_alive()  # blocked on the rows the first one deleted
        waiter.join(30)
        assert results["first"].samples == total and results["second"].samples == 0
        assert results["second"].rollups == 0
        assert sum(m["samples"] for m in stored_minutes(first).values()) == total
    finally:
        first.close()
        second.close()


def test_every_duration_setting_names_its_own_minimum():
    """The general mechanism: a bounded duration type's message states its own bounds; the
    plain Duration/Window state theirs (1s to a year)."""
    from pydantic import BaseModel, ValidationError

    from costctl.config_types import Duration, bounded_duration, bounded_window

    class M(BaseModel):
        plain: Duration = timedelta(seconds=5)
        long: bounded_duration(timedelta(minutes=5)) = timedelta(minutes=10)  # type: ignore[valid-type]
        capped: bounded_window(timedelta(minutes=1), timedelta(hours=2)) = None  # type: ignore[valid-type]

    for field, value, says in [("plain", "-5", "from 1s to 8760h (a year)"), ("long", "-5", "from 5m to 8760h"),
                               ("long", "1m", "from 5m to 8760h"), ("capped", "3h", "from 1m to 2h"),
                               ("capped", "x", "from 1m to 2h")]:
        with pytest.raises(ValidationError) as info:
            M(**{field: value})
        assert says in str(info.value)
    assert M(long="5m").long == timedelta(minutes=5) and M(capped="off").capped is None
    assert M(capped="2h").capped == timedelta(hours=2)


@pytest.mark.parametrize("value", ["1e99", 1e99, "1e20", "1e20h", float("nan"), "nan", float("inf")])
def test_a_duration_past_any_range_is_a_config_error_not_a_crash(value) -> None:
    """1e99 seconds overflowed timedelta and ended `costctl bill` with "internal error"
    (exit 70); every duration setting now answers with its own allowed range."""
    from costctl.config_types import parse_duration, parse_window

    for parse in (parse_duration, parse_window):
        with pytest.raises(ValueError, match="expected"):
            parse(value)
