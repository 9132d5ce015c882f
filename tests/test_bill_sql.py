"""The bill summed in SQL equals the brute-force Decimal sum (tests/bill_oracle.py) to the
micro-unit, in every grouping and format, with --since/--until cutting buckets and charges and
in non-UTC zones (Asia/Kolkata +05:30, America/New_York across its DST change), on SQLite and
PostgreSQL; bill never reads the samples and reads charges only in its edge aggregates; a past
run keeps its card; --limit."""

from __future__ import annotations

import csv
import io
import json
import random
import re
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy import event, select
from sqlalchemy.engine import Engine

import bill_oracle as oracle
from costctl.cli.main import main
from costctl.i18n import format_money
from costctl.ledger import Ledger, queries
from costctl.ledger.accrual import epoch_us
from costctl.ledger.schema import Charge, ChargeRollup
from costctl.records import GpuReading, SignalStatus, TelemetrySample

UTC = timezone.utc
#: Saturday evening before New York's spring-forward night (2026-03-08 02:00 local).
T0 = datetime(2026, 3, 7, 20, 0, tzinfo=UTC)
ZONES = [ZoneInfo("UTC"), ZoneInfo("Asia/Kolkata"), ZoneInfo("America/New_York")]
TINY = Decimal("1e-15")
SIX = Decimal("0.000001")


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COSTCTL_DATA_DIR", str(tmp_path / "data"))
    for name in ("COSTCTL_DATABASE_URL", "COSTCTL_WATCH__TIMEZONE"):
        monkeypatch.delenv(name, raising=False)


INSTANCES = [
    ("sim", "a", "A100 80GB", 1, "on-demand", "USD", [Decimal("0.45"), Decimal("1.2"), Decimal("0.333333")]),
    ("sim", "b", "RTX 4090", 2, "spot", "CNY", [Decimal("2.18"), Decimal("3.5")]),
    ("vastai", "c", "T4", 1, "on-demand", "USD", [Decimal("0.1234567")]),
]


def random_ledger(url: str, seed: int) -> None:
    """Three instances in two currencies, runs one after another (some overlapping, some open),
    accruals at random microseconds over ~3 days with rate changes."""
    rng = random.Random(seed)
    with Ledger.open(url) as ledger:
        for provider, iid, gpu, count, billing, cur, rates in INSTANCES:
            pk = ledger.ensure_instance(provider, iid, gpu=gpu, gpu_count=count, billing=billing,
                                        price_per_hour=rates[0], currency=cur)
            t = T0 + timedelta(microseconds=rng.randrange(0, 3600 * 10**6))
            for _ in range(rng.randint(2, 4)):
                start = t - timedelta(microseconds=rng.randrange(0, 600 * 10**6)) if rng.random() < 0.3 else t
                run = ledger.start_run(pk, started_at=start, command=None, log_path=None, host=None)
                rate = rng.choice(rates)
                for _ in range(rng.randint(1, 8)):
                    t += timedelta(microseconds=rng.randrange(1, 4 * 3600 * 10**6))
                    if rng.random() < 0.3:
                        rate = rng.choice(rates)
                    ledger.accrue(run, t, rate, cur)
                if rng.random() < 0.8:
                    ledger.finish_run(run, ended_at=t, exit_code=0, status="succeeded")
                t += timedelta(microseconds=rng.randrange(0, 2 * 3600 * 10**6))


def windows(rng: random.Random) -> list[tuple[datetime | None, datetime | None]]:
    def at_us() -> datetime:
        return T0 + timedelta(microseconds=rng.randrange(0, 40 * 3600 * 10**6))

    a, b = sorted([at_us(), at_us()])
    bucket = T0 + timedelta(minutes=15 * rng.randrange(4, 100))
    inside = bucket + timedelta(microseconds=rng.randrange(1, 400 * 10**6))
    return [(None, None), (a, b), (a, None), (None, b), (bucket, bucket + timedelta(hours=7)),
            (inside, inside + timedelta(minutes=7)),  # both bounds inside one bucket
            (bucket + timedelta(seconds=1), bucket + timedelta(minutes=15, seconds=1))]


def near(x: Decimal, y: Decimal) -> bool:
    return abs(x - y) <= TINY


def check_all(ledger: Ledger, since, until) -> None:
    with ledger.session() as s:
        page = queries.run_page(s, since, until, limit=None)
        want = oracle.by_run(s, since, until)
        got = {(r.run_id, r.currency): r for r in page.rows}
        assert set(got) == set(want)
        for key, (spend, duration, price) in want.items():
            assert near(got[key].spend, spend), key
            assert got[key].duration_s == pytest.approx(duration, abs=1e-6)
            assert got[key].price_per_hour == price
        assert set(page.totals) == set(oracle.totals(s, since, until))
        for cur, amount in oracle.totals(s, since, until).items():
            assert near(page.totals[cur], amount)
        assert queries.spend_by_currency(s, since=since, until=until).keys() == page.totals.keys()

        inst = {(r.instance_id, r.currency): r for r in queries.bill_by_instance(s, since, until)}
        want_i = oracle.by_instance(s, since, until)
        ids = {pk: iid for pk, iid in s.execute(select(ChargeRollup.instance_pk, ChargeRollup.instance_pk))}
        from costctl.ledger.schema import Instance
        names = {i.id: i.provider_instance_id for i in s.scalars(select(Instance))}
        assert set(inst) == {(names[pk], cur) for pk, cur in want_i}, ids
        for (pk, cur), (spend, dur, runs, first, last, lo, hi, newest) in want_i.items():
            r = inst[(names[pk], cur)]
            assert near(r.spend, spend) and r.duration_s == pytest.approx(dur, abs=1e-6) and r.runs == runs
            assert (r.first_charge_at, r.last_charge_at) == (first, last)
            assert (r.min_price_per_hour, r.max_price_per_hour, r.price_per_hour) == (lo, hi, newest)

        for tz in ZONES:
            days = {(d.day, d.currency): d for d in queries.bill_by_day(s, tz, since, until)}
            want_d = oracle.by_day(s, tz, since, until)
            assert set(days) == set(want_d), tz
            for key, (spend, dur, runs, insts) in want_d.items():
                d = days[key]
                assert near(d.spend, spend) and d.duration_s == pytest.approx(dur, abs=1e-6), (tz, key)
                assert (d.runs, d.instances) == (runs, insts), (tz, key)

        gpus = {(g.gpu, g.currency): g for g in queries.bill_by_gpu(s, since, until)}
        want_g = oracle.by_gpu(s, since, until)
        assert set(gpus) == set(want_g)
        for key, (spend, dur, hours, runs, insts) in want_g.items():
            g = gpus[key]
            assert near(g.spend, spend) and g.duration_s == pytest.approx(dur, abs=1e-6)
            assert g.gpu_hours == pytest.approx(hours, abs=1e-9) and (g.runs, g.instances) == (runs, insts)


@pytest.mark.parametrize("seed", range(4))
def test_sql_bill_equals_brute_force_in_every_grouping(db_url, seed):
    random_ledger(db_url, seed)
    rng = random.Random(1000 + seed)
    with Ledger.open(db_url) as ledger:
        with ledger.session() as s:
            # the rollups hold exactly the charges' time, bucket by bucket
            total_us = sum(int(us) for (us,) in s.execute(select(ChargeRollup.duration_us)))
            rows = s.execute(select(Charge.start_at, Charge.end_at, Charge.duration_us)).all()
            assert all(epoch_us(e) - epoch_us(b) == us for b, e, us in rows)
            assert total_us == sum(us for _, _, us in rows)
        for since, until in windows(rng):
            check_all(ledger, since, until)


def cli(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["bill", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_every_format_and_grouping_through_the_cli(db_url, capsys, monkeypatch):
    random_ledger(db_url, 7)
    since, until = T0 + timedelta(hours=3, microseconds=123457), T0 + timedelta(hours=30, minutes=7)
    window = ["--since", since.isoformat(), "--until", until.isoformat()]
    monkeypatch.setenv("COSTCTL_WATCH__TIMEZONE", "America/New_York")
    with Ledger.open(db_url) as ledger, ledger.session() as s:
        want_totals = {cur: str(v.quantize(SIX)) for cur, v in oracle.totals(s, since, until).items()}
        want_days = {(d.isoformat(), cur): str(v[0].quantize(SIX))
                     for (d, cur), v in oracle.by_day(s, ZoneInfo("America/New_York"), since, until).items()}
    for by in ("run", "chain", "instance", "day", "gpu"):
        code, out, err = cli(capsys, "--by", by, "--format", "json", "--db", db_url, *window)
        assert code == 0, err
        doc = json.loads(out)
        # the totals add the rows' rounded spend (costctl.report's rule), within half a
        # micro-unit per row of the exact total
        sums: dict[str, Decimal] = {}
        for r in doc["rows"]:
            sums[r["currency"]] = sums.get(r["currency"], Decimal(0)) + Decimal(r["spend"])
        assert doc["totals"] == {cur: str(v) for cur, v in sorted(sums.items())}, by
        for cur, amount in want_totals.items():
            n = sum(1 for r in doc["rows"] if r["currency"] == cur)
            assert abs(Decimal(doc["totals"][cur]) - Decimal(amount)) <= n * SIX / 2 + SIX / 2, by
        if by == "day":
            assert {(r["day"], r["currency"]): r["spend"] for r in doc["rows"]} == want_days
        code, out, err = cli(capsys, "--by", by, "--format", "csv", "--db", db_url, *window)
        assert code == 0, err
        assert [r["spend"] for r in csv.DictReader(io.StringIO(out))] == [r["spend"] for r in doc["rows"]]
        code, out, err = cli(capsys, "--by", by, "--db", db_url, *window)
        assert code == 0, err
        for cur, amount in doc["totals"].items():
            assert format_money(Decimal(amount), cur) in out


class Statements:
    """Every SQL statement any engine runs meanwhile (a before_cursor_execute hook)."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def __call__(self, conn, cursor, statement, parameters, context, executemany) -> None:
        self.seen.append(statement)

    def __enter__(self) -> Statements:
        event.listen(Engine, "before_cursor_execute", self)
        return self

    def __exit__(self, *exc) -> None:
        event.remove(Engine, "before_cursor_execute", self)


def test_bill_never_reads_samples_and_charges_only_in_edge_aggregates(db_url, capsys):
    random_ledger(db_url, 3)
    with Ledger.open(db_url) as ledger:  # telemetry exists: bill must not look at it
        run = ledger.start_run(1, started_at=T0, command=None, log_path=None, host=None)
        ledger.record_samples(run, [TelemetrySample(time=T0, gpus=(GpuReading(
            index=0, utilization=10.0, memory_used_bytes=1, memory_total_bytes=2, power_w=None),),
            gpu_status=SignalStatus.OK, cpu_percent=1.0, cpu_status=SignalStatus.OK, source="test")])
    cut = ["--since", (T0 + timedelta(hours=2, seconds=7)).isoformat(),
           "--until", (T0 + timedelta(hours=20, seconds=3)).isoformat()]
    for by in ("run", "chain", "instance", "day", "gpu"):
        for window in ([], cut):
            with Statements() as sql:
                code, out, err = cli(capsys, "--by", by, "--format", "json", "--db", db_url, *window)
            assert code == 0, err
            assert sql.seen
            assert not [q for q in sql.seen if re.search(r"\bsamples\b", q)], by
            touching = [q for q in sql.seen if re.search(r"\bcharges\b", q)]
            if not window:
                assert not touching, (by, touching)  # whole buckets only: the rollups
            for q in touching:  # the cut buckets: aggregates of their charges, by the end_at index
                assert "GROUP BY" in q and "sum(" in q.lower() and "charges.end_at" in q, q


def test_a_past_run_keeps_the_card_it_ran_on(db_url, capsys):
    with Ledger.open(db_url) as ledger:
        pk = ledger.ensure_instance("sim", "x", gpu="A100 80GB", gpu_count=1, billing="on-demand",
                                    price_per_hour=Decimal("1.89"), currency="USD")
        old = ledger.start_run(pk, started_at=T0, command=None, log_path=None, host=None)
        ledger.record_samples(old, [TelemetrySample(time=T0 + timedelta(seconds=s), gpus=(GpuReading(
            index=0, utilization=u, memory_used_bytes=m, memory_total_bytes=80, power_w=None),),
            gpu_status=SignalStatus.OK, cpu_percent=1.0, cpu_status=SignalStatus.OK, source="test")
            for s, u, m in ((1, 10.0, 5), (2, 30.0, 7))])
        ledger.accrue(old, T0 + timedelta(hours=1), Decimal("1.89"), "USD")
        ledger.finish_run(old, ended_at=T0 + timedelta(hours=1), exit_code=0, status="succeeded")
        # The same instance id, re-rented with another card.
        ledger.ensure_instance("sim", "x", gpu="H100", gpu_count=8, billing="spot",
                               price_per_hour=Decimal("20"), currency="USD")
        new = ledger.start_run(pk, started_at=T0 + timedelta(hours=2), command=None, log_path=None, host=None)
        ledger.accrue(new, T0 + timedelta(hours=3), Decimal("20"), "USD")
        with ledger.session() as s:
            rows = {r.run_id: r for r in queries.bill_by_run(s)}
            assert (rows[old].gpu, rows[old].gpu_count, rows[old].billing) == ("A100 80GB", 1, "on-demand")
            assert (rows[new].gpu, rows[new].gpu_count, rows[new].billing) == ("H100", 8, "spot")  # open: current
            page = queries.run_page(s)
            assert page.use[old].peak_memory_bytes == 7 and page.use[old].mean_utilization == 20.0
            assert page.use[old].memory_total_bytes == 80 and page.use[old].samples == 2
            gpus = {g.gpu: g for g in queries.bill_by_gpu(s)}
            assert gpus["A100 80GB"].gpu_hours == 1 and gpus["H100"].gpu_hours == 8
            assert gpus["A100 80GB"].spend == Decimal("1.89")


def test_limit_shows_the_newest_runs_and_totals_cover_all(db_url, capsys):
    with Ledger.open(db_url) as ledger:
        pk = ledger.ensure_instance("sim", "l", gpu="T4", gpu_count=1, billing="on-demand",
                                    price_per_hour=Decimal("3.6"), currency="USD")
        ids = []
        for i in range(5):
            run = ledger.start_run(pk, started_at=T0 + timedelta(hours=i), command=None, log_path=None, host=None)
            ledger.accrue(run, T0 + timedelta(hours=i, seconds=100), Decimal("3.6"), "USD")
            ledger.finish_run(run, ended_at=T0 + timedelta(hours=i, seconds=100), exit_code=0, status="succeeded")
            ids.append(run)
    code, out, err = cli(capsys, "--format", "json", "--limit", "2", "--db", db_url)
    doc = json.loads(out)
    assert [r["run_id"] for r in doc["rows"]] == ids[3:]  # the newest two, oldest first
    assert doc["runs_not_shown"] == 3 and doc["totals"] == {"USD": "0.500000"}
    code, out, err = cli(capsys, "--limit", "2", "--db", db_url)
    assert code == 0 and "3 older runs not shown (--limit 2)" in out and "$0.50" in out
    code, out, err = cli(capsys, "--format", "csv", "--limit", "4", "--db", db_url)
    assert len(out.splitlines()) == 5 and "1 older run not shown" in err
    doc = json.loads(cli(capsys, "--format", "json", "--db", db_url)[1])
    assert len(doc["rows"]) == 5 and "runs_not_shown" not in doc  # default --limit 100


def test_accrual_adds_no_orm_objects_and_splits_at_bucket_bounds(db_url):
    from sqlalchemy.orm import Session

    flushed: list[int] = []

    def count(session, context, instances) -> None:
        flushed.append(len(session.new) + len(session.dirty))

    with Ledger.open(db_url) as ledger:
        pk = ledger.ensure_instance("sim", "s", gpu="T4", gpu_count=1, billing="on-demand",
                                    price_per_hour=Decimal("3.6"), currency="USD")
        run = ledger.start_run(pk, started_at=T0 + timedelta(minutes=10), command=None, log_path=None, host=None)
        event.listen(Session, "before_flush", count)
        try:
            ledger.accrue(run, T0 + timedelta(minutes=50, microseconds=7), Decimal("3.6"), "USD")  # 4 buckets
            ledger.accrue(run, T0 + timedelta(minutes=55), Decimal("3.6"), "USD")  # extends the row
        finally:
            event.remove(Session, "before_flush", count)
        assert not any(flushed)
        with ledger.session() as s:
            rows = s.execute(select(ChargeRollup.bucket_s, ChargeRollup.duration_us, ChargeRollup.first_us,
                                    ChargeRollup.last_us).order_by(ChargeRollup.bucket_s)).all()
            (us,) = s.execute(select(Charge.duration_us)).one()
        b0 = epoch_us(T0) // 10**6
        assert [(b - b0, d) for b, d, _, _ in rows] == [(0, 5 * 60 * 10**6), (900, 900 * 10**6),
                                                        (1800, 900 * 10**6), (2700, 10 * 60 * 10**6)]
        assert rows[0][2] == epoch_us(T0 + timedelta(minutes=10)) and rows[-1][3] == epoch_us(T0 + timedelta(minutes=55))
        assert us == 45 * 60 * 10**6


def test_finish_run_takes_the_use_it_is_given_without_reading_samples(db_url):
    from costctl.ledger.summaries import RunUse

    with Ledger.open(db_url) as ledger:
        pk = ledger.ensure_instance("sim", "u", gpu="T4", gpu_count=1, billing="on-demand",
                                    price_per_hour=Decimal("1"), currency="USD")
        run = ledger.start_run(pk, started_at=T0, command=None, log_path=None, host=None)
        with Statements() as sql:
            ledger.finish_run(run, ended_at=T0, exit_code=0, status="succeeded",
                              use=RunUse(peak_memory_bytes=5, memory_total_bytes=16, mean_utilization=12.5,
                                         gpu_samples=3, points=9))
        assert not [q for q in sql.seen if re.search(r"\bsamples\b|\bprogress\b", q)]
        with ledger.session() as s:
            page = queries.run_page(s)
        assert page.use[run].peak_memory_bytes == 5 and page.use[run].mean_utilization == 12.5
        other = ledger.start_run(pk, started_at=T0, command=None, log_path=None, host=None)
        with Statements() as sql:
            ledger.finish_run(other, ended_at=T0, exit_code=0, status="succeeded")
        measured = [q for q in sql.seen if re.search(r"\bsamples\b", q)]
        assert len(measured) == 1 and "max(" in measured[0].lower() and "samples.run_id" in measured[0]
