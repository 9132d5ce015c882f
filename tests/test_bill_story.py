"""`costctl bill` tells the money story: waste before a stop, money a confirmed stop saved (and the
counterfactual behind it), dry runs marked. A constructed ledger whose answers are known
(SQLite file and PostgreSQL), every grouping and format, and a real watch on the simulated
provider whose idle stop is confirmed.

The ledger, at 3.60 USD/h (0.001 USD a second), ``[bill] saved_horizon = "6h"``:

* instance A (T4): run 1, 00:00-02:00, idle since 01:20, its idle stop confirmed at 02:00:
  waste 40 min (2.40), saved 02:00 until run 2 began at 05:00 (3 h: 10.80, "next run");
  run 2, 05:00-06:00, a dry run: idle since 05:30, would-stop at 05:50: waste 20 min (1.20), no saving;
* instance B (L4): run 3, 00:00-01:00, idle since 00:10, its stop failed at 00:55: waste
  45 min (2.70), no saving;
  run 4, 22:00-02:00 the next day, idle since 23:30, confirmed at 02:00: waste 2 h 30 min
  (9.00: 0.5 h on 03-01, 2 h on 03-02), saved 6 h (21.60, "horizon") on 03-02;
* instance C (A10G, spot): run 5, 00:00-01:00, preempted: 10 min of lost work recorded
  (0.60), its preemption stop confirmed: no saving (the provider took the instance);
* instance D (T4): run 6, 03:00-04:00, a budget stop confirmed at 04:00 (no idle stretch):
  no waste, saved 6 h (21.60, "horizon").
"""

from __future__ import annotations

import csv
import io
import json
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest

from costctl.cli.main import main
from costctl.ledger import Ledger, queries
from costctl.records import Action, Decision

T0 = datetime(2026, 3, 1, 0, 0, tzinfo=timezone.utc)
RATE = Decimal("3.6")
HORIZON = timedelta(hours=6)


def at(hours: float = 0, minutes: float = 0) -> datetime:
    return T0 + timedelta(hours=hours, minutes=minutes)


def iso(t: datetime) -> str:
    return t.isoformat().replace("+00:00", "Z")


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COSTCTL_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("COSTCTL_BILL__SAVED_HORIZON", "6h")
    for name in ("COSTCTL_DATABASE_URL", "COSTCTL_WATCH__TIMEZONE"):
        monkeypatch.delenv(name, raising=False)


def _run(ledger: Ledger, pk: int, start: datetime, end: datetime, *, mode: str | None = None,
         status: str = "succeeded") -> str:
    run = ledger.start_run(pk, started_at=start, command=None, log_path=None, host="h", mode=mode)
    ledger.accrue(run, end, RATE, "USD")
    ledger.finish_run(run, ended_at=end, exit_code=0, status=status)
    return run


def _stop(ledger: Ledger, run: str, when: datetime, *, policy: str = "idle", idle_since: datetime | None = None,
          dry_run: bool = False, events: tuple[tuple[datetime, str], ...] = ()) -> int:
    evidence = {"idle_since": iso(idle_since)} if idle_since is not None else {"cap": "10"}
    decision = Decision(time=when, policy=policy, action=Action.STOP, reason=f"{policy} stop", evidence=evidence)
    did = ledger.record_decision(run, decision, outcome="stop requested", dry_run=dry_run)
    for k, (t, state) in enumerate(events):
        ledger.record_stop_event(run, decision_id=did, time=t, state=state, attempt=max(1, k))
    return did


def build(url: str) -> dict[str, str]:
    with Ledger.open(url) as ledger:
        def inst(name: str, gpu: str, billing: str = "on-demand") -> int:
            return ledger.ensure_instance("sim", name, gpu=gpu, gpu_count=1, billing=billing, price_per_hour=RATE,
                                          currency="USD")

        a, b, c, d = inst("a", "T4"), inst("b", "L4"), inst("c", "A10G", "spot"), inst("d", "T4")
        runs = {}
        runs["confirmed"] = _run(ledger, a, at(0), at(2))
        _stop(ledger, runs["confirmed"], at(1, 50), idle_since=at(1, 20),
              events=((at(1, 50), "requested"), (at(1, 51), "sent"), (at(2), "confirmed")))
        runs["dry"] = _run(ledger, a, at(5), at(6), mode="dry-run")
        _stop(ledger, runs["dry"], at(5, 50), idle_since=at(5, 30), dry_run=True)
        runs["failed"] = _run(ledger, b, at(0), at(1), status="stop failed")
        _stop(ledger, runs["failed"], at(0, 40), idle_since=at(0, 10),
              events=((at(0, 40), "requested"), (at(0, 41), "sent"), (at(0, 55), "failed")))
        runs["midnight"] = _run(ledger, b, at(22), at(26))
        _stop(ledger, runs["midnight"], at(25), idle_since=at(23, 30),
              events=((at(25), "requested"), (at(25, 1), "sent"), (at(26), "confirmed")))
        runs["preempted"] = _run(ledger, c, at(0), at(1), status="preempted")
        ledger.record_waste(runs["preempted"], start_at=at(0, 50), end_at=at(1), rate_per_hour=RATE, currency="USD",
                            reason="preemption")
        _stop(ledger, runs["preempted"], at(0, 59), policy="preemption",
              events=((at(0, 59), "requested"), (at(1), "confirmed")))
        runs["budget"] = _run(ledger, d, at(3), at(4))
        _stop(ledger, runs["budget"], at(3, 59), policy="budget",
              events=((at(3, 59), "requested"), (at(4), "confirmed")))
    return runs


def bill(capsys, *args: str) -> str:
    code = main(["bill", *args])
    out = capsys.readouterr()
    assert code == 0, out.err
    return out.out


def money(value: str) -> Decimal:
    return Decimal(value)


def test_waste_and_savings_by_run_have_the_known_answers(db_url, capsys):
    runs = build(db_url)
    doc = json.loads(bill(capsys, "--format", "json", "--db", db_url))
    rows = {r["run_id"]: r for r in doc["rows"]}
    want = {  # waste, idle waste, saved, saved seconds, bound, dry run
        "confirmed": ("2.400000", "2.400000", "10.800000", 10800, "next run", False),
        "dry": ("1.200000", "1.200000", "0.000000", 0, None, True),
        "failed": ("2.700000", "2.700000", "0.000000", 0, None, False),
        "midnight": ("9.000000", "9.000000", "21.600000", 21600, "horizon", False),
        "preempted": ("0.600000", "0.000000", "0.000000", 0, None, False),
        "budget": ("0.000000", "0.000000", "21.600000", 21600, "horizon", False),
    }
    for name, (waste, idle, saved, saved_s, bound, dry) in want.items():
        r = rows[runs[name]]
        assert (r["waste"], r["idle_waste"], r["saved"], r["saved_s"], r["saved_bound"], r["dry_run"]) == (
            waste, idle, saved, saved_s, bound, dry), name
        assert Decimal(r["waste"]) <= Decimal(r["spend"])  # waste is a share of what was paid
    assert rows[runs["confirmed"]]["saved_until"] == "2026-03-01T05:00:00+00:00"
    assert rows[runs["confirmed"]]["stop_policy"] == "idle" and rows[runs["budget"]]["stop_policy"] == "budget"
    assert rows[runs["dry"]]["stop_policy"] is None  # a dry run carries no stop through
    assert doc["waste_totals"] == {"USD": "15.900000"} and doc["saved_totals"] == {"USD": "54.000000"}
    assert doc["saved_counterfactual"]["horizon_s"] == 6 * 3600 and "6h" in doc["saved_counterfactual"]["text"]
    # CSV carries the same columns
    table = list(csv.DictReader(io.StringIO(bill(capsys, "--format", "csv", "--db", db_url))))
    assert {r["run_id"]: (r["waste"], r["saved"], r["dry_run"]) for r in table} == {
        rid: (r["waste"], r["saved"], str(r["dry_run"])) for rid, r in rows.items()}


def test_every_grouping_carries_the_same_waste_and_savings(db_url, capsys):
    build(db_url)
    by_instance = json.loads(bill(capsys, "--by", "instance", "--format", "json", "--db", db_url))
    assert {r["instance_id"]: (r["waste"], r["saved"]) for r in by_instance["rows"]} == {
        "a": ("3.600000", "10.800000"), "b": ("11.700000", "21.600000"), "c": ("0.600000", "0.000000"),
        "d": ("0.000000", "21.600000")}
    by_gpu = json.loads(bill(capsys, "--by", "gpu", "--format", "json", "--db", db_url))
    assert {r["gpu"]: (r["waste"], r["saved"]) for r in by_gpu["rows"]} == {
        "T4": ("3.600000", "32.400000"), "L4": ("11.700000", "21.600000"), "A10G": ("0.600000", "0.000000")}
    by_day = json.loads(bill(capsys, "--by", "day", "--format", "json", "--db", db_url))
    # run 4's idle stretch is split at midnight (30 min, then 2 h); its saving counts on the day of its stop
    assert {r["day"]: (r["waste"], r["saved"]) for r in by_day["rows"]} == {
        "2026-03-01": ("8.700000", "32.400000"), "2026-03-02": ("7.200000", "21.600000")}
    by_chain = json.loads(bill(capsys, "--by", "chain", "--format", "json", "--db", db_url))
    for doc in (by_instance, by_gpu, by_day, by_chain):
        assert doc["waste_totals"] == {"USD": "15.900000"} and doc["saved_totals"] == {"USD": "54.000000"}
        assert sum(Decimal(r["waste"]) for r in doc["rows"]) == Decimal("15.9")
        assert sum(Decimal(r["saved"]) for r in doc["rows"]) == Decimal("54")
    assert sum(r["dry_runs"] for r in by_chain["rows"]) == 1


def test_a_window_counts_the_waste_inside_it_and_the_savings_of_stops_confirmed_inside_it(db_url, capsys):
    runs = build(db_url)
    doc = json.loads(bill(capsys, "--format", "json", "--since", "2026-03-01T01:30:00Z",
                          "--until", "2026-03-02T01:00:00Z", "--db", db_url))
    rows = {r["run_id"]: r for r in doc["rows"]}
    assert (rows[runs["confirmed"]]["waste"], rows[runs["confirmed"]]["saved"]) == ("1.800000", "10.800000")
    # run 4's stop was confirmed after the window: its waste inside it (23:30 -> 01:00), no saving
    assert (rows[runs["midnight"]]["waste"], rows[runs["midnight"]]["saved"]) == ("5.400000", "0.000000")
    assert runs["failed"] not in rows and runs["preempted"] not in rows  # both ended at 01:00


def test_now_bounds_a_saving_still_accruing(db_url):
    runs = build(db_url)
    with Ledger.open(db_url) as ledger, ledger.session() as s:
        page = queries.run_page(s, now=at(2, 30), horizon=HORIZON, places=6)
    rows = {r.run_id: r for r in page.rows}
    confirmed = rows[runs["confirmed"]]
    assert (confirmed.saved_s, confirmed.saved, confirmed.saved_bound) == (1800, Decimal("1.8"), "now")
    # the stops confirmed after `now` (the ledger says so: a bill of the past) save nothing yet
    assert rows[runs["midnight"]].saved == 0 and rows[runs["budget"]].saved == 0
    assert page.saved_totals == {"USD": Decimal("1.800000")}


def test_the_table_shows_waste_saved_and_dry_runs_and_states_the_counterfactual(db_url, capsys):
    runs = build(db_url)
    out = bill(capsys, "--db", db_url)
    line = {name: next(ln for ln in out.splitlines() if runs[name][:12] in ln) for name in runs}
    assert "10.80" in line["confirmed"] and "2.40" in line["confirmed"]
    assert "dry run" in line["dry"] and "dry run" not in line["confirmed"]
    assert "21.60" in line["budget"] and "9.00" in line["midnight"]
    assert "$15.90" in out and "$54.00" in out and "TOTAL" in out  # the footers of WASTE and SAVED
    assert "Saved: what a confirmed stop avoided" in " ".join(out.split()) and "6h" in out


def test_a_bad_horizon_is_one_line(db_url, capsys, monkeypatch):
    build(db_url)
    monkeypatch.setenv("COSTCTL_BILL__SAVED_HORIZON", "90d")
    assert main(["bill", "--db", db_url]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "COSTCTL_BILL__SAVED_HORIZON" in err and "from 1h to 720h" in err


# ------------------------------------------------------------------ a real watch
GUARD = """
[instance]
provider = "sim"
gpu = "RTX 4090"
[watch]
sample_interval = "5s"
[policies.idle]
time_window = "30s"
"""


def _watch_bill(tmp_path, capsys, **options) -> tuple[dict, dict]:
    """Guard an idle sim instance in-process on a simulated clock (no job), then bill it: the
    run's row and its idle decision's evidence."""
    import signal

    from sqlalchemy import create_engine, select
    from sqlalchemy.orm import Session

    from costctl.ledger.schema import DecisionRow
    from lifecycle_support import T0 as W0, FixedGpu, SimClock, drive, settings, watcher

    s = settings(tmp_path, GUARD)
    clock = SimClock(W0)
    w = watcher(s, [], clock, sampler=FixedGpu(used_bytes=0, total_bytes=24 * 2**30, utilization=0.0), **options)

    def end_a_dry_run(now):  # a dry run guards on after its would-stop, until Ctrl-C
        if options.get("dry_run") and now >= W0 + timedelta(seconds=120) and w._signal is None:
            w._handle_signal(signal.SIGINT, None)

    drive(w, clock, step_s=5, max_real_s=60, on_step=end_a_dry_run)
    from costctl.paths import default_database_url

    url = default_database_url(s.data_dir)
    with Session(create_engine(url)) as db:
        (decision,) = db.scalars(select(DecisionRow).where(DecisionRow.policy == "idle")).all()
        evidence, decided = decision.evidence, decision.time
    (row,) = json.loads(bill(capsys, "--format", "json", "--db", url))["rows"]
    return row, {**evidence, "decided": decided}


def test_a_real_idle_stop_on_the_sim_is_waste_before_it_and_a_saving_after_it(tmp_path, capsys):
    row, evidence = _watch_bill(tmp_path, capsys)
    history = {e["state"]: datetime.fromisoformat(e["time"]) for e in row["stop_history"]}
    confirmed, idle_since = history["confirmed"], datetime.fromisoformat(evidence["idle_since"].replace("Z", "+00:00"))
    rate = Decimal(row["price_per_hour"])
    assert row["dry_run"] is False and row["advise_only"] is False and row["stop_policy"] == "idle"
    waste_s = (confirmed - idle_since).total_seconds()
    assert 30 <= waste_s <= 60 and row["idle_waste_s"] == row["waste_s"] == waste_s  # the window, then the stop
    assert Decimal(row["waste"]) == (rate * Decimal(str(waste_s)) / 3600).quantize(Decimal("0.000001"))
    # nothing ran on the instance after it: the counterfactual runs to the horizon (6h)
    assert (row["saved_s"], row["saved_bound"]) == (6 * 3600, "horizon")
    assert Decimal(row["saved"]) == (rate * 6).quantize(Decimal("0.000001"))


def test_a_dry_run_watch_is_marked_and_saves_nothing(tmp_path, capsys):
    row, evidence = _watch_bill(tmp_path, capsys, dry_run=True)
    assert row["dry_run"] is True and row["stop_state"] is None and row["stop_policy"] is None
    idle_since = datetime.fromisoformat(evidence["idle_since"].replace("Z", "+00:00"))
    decided = evidence["decided"].replace(tzinfo=timezone.utc) if evidence["decided"].tzinfo is None \
        else evidence["decided"]
    assert row["idle_waste_s"] == (decided - idle_since).total_seconds() > 0  # the stretch the decision proved
    assert (row["saved"], row["saved_s"]) == ("0.000000", 0)


def test_an_advise_only_watch_is_marked_its_idle_stretch_is_waste_and_it_saves_nothing(db_url, capsys):
    with Ledger.open(db_url) as ledger:
        pk = ledger.ensure_instance("autodl", "no-credential", gpu="RTX 4090", gpu_count=1, billing="on-demand",
                                    price_per_hour=RATE, currency="USD")
        run = _run(ledger, pk, at(0), at(3), mode="advise-only")
        advised = Decision(time=at(2), policy="idle", action=Action.ADVISE, reason="idle",
                           evidence={"idle_since": iso(at(1, 30)), "advise_only": True, "would": "stop"})
        ledger.record_decision(run, advised, outcome="advise-only: nothing stopped")
        plain = Decision(time=at(2, 30), policy="plateau", action=Action.ADVISE, reason="plateau",
                         evidence={"idle_since": iso(at(0))})  # advice, not a would-stop: no waste
        ledger.record_decision(run, plain, outcome="advised")
    (row,) = json.loads(bill(capsys, "--format", "json", "--db", db_url))["rows"]
    assert (row["advise_only"], row["dry_run"], row["stop_policy"]) == (True, False, None)
    assert (row["idle_waste_s"], row["waste"], row["saved"]) == (1800, "1.800000", "0.000000")
    assert "advise-only" in bill(capsys, "--db", db_url)
