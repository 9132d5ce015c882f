"""An in-process watch built from a TOML config, on a simulated clock, with no child process:
fully deterministic. It writes its ledger and sim state where its config says (tmp_path/data) —
the path a user's exported COSTCTL_DATABASE_URL once redirected into their own ledger."""

from __future__ import annotations

import json
from decimal import Decimal

from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from costctl.ledger.schema import DecisionRow, Run
from lifecycle_support import T0, FixedGpu, SimClock, drive, settings, watcher


def test_an_idle_guard_from_a_toml_config_stops_the_sim_instance_and_records_it(tmp_path):
    s = settings(tmp_path, """
[instance]
provider = "sim"
gpu = "RTX 4090"
[watch]
sample_interval = "5s"
[policies.idle]
time_window = "30s"
""")
    clock = SimClock(T0)
    w = watcher(s, [], clock, sampler=FixedGpu(used_bytes=0, total_bytes=24 * 2**30, utilization=0.0))
    code, status = drive(w, clock, step_s=5, max_real_s=60)
    assert code == 0
    with Session(create_engine(f"sqlite:///{tmp_path / 'data' / 'costctl.db'}")) as db:
        runs = db.scalars(select(Run)).all()
        stops = db.scalars(select(DecisionRow).where(DecisionRow.policy == "idle")).all()
    assert len(runs) == 1 and [d.action for d in stops] == ["stop"]
    state = json.loads((tmp_path / "data" / "sim" / "state.json").read_text())
    assert {i["status"] for i in state["instances"].values()} == {"stopped"}


def test_with_the_ledger_down_the_policies_still_decide_from_memory_and_stop(tmp_path):
    """After start-up no tick reads the ledger: with every ledger call failing (server gone),
    the daily budget cap is still reached from the in-memory spend and the instance stopped."""
    from sqlalchemy import exc as sa_exc

    from costctl.errors import LedgerError

    s = settings(tmp_path, """
[instance]
provider = "sim"
gpu = "RTX 4090"
[watch]
sample_interval = "5s"
ledger_flush_timeout = "1s"
[policies.idle]
time_window = "6h"
[policies.budget]
daily = "0.02"
""")
    clock = SimClock(T0)
    w = watcher(s, [], clock, sampler=FixedGpu(used_bytes=2**30, total_bytes=24 * 2**30, utilization=90.0))
    calls: list[str] = []

    def down(name):
        def fail(*args, **kwargs):
            calls.append(name)
            err = LedgerError("cannot record spend (postgresql://db/costctl): server closed the connection")
            err.__cause__ = sa_exc.OperationalError("SELECT 1", {}, Exception("server closed the connection"))
            raise err
        return fail

    def cut(now):
        if w.ledger is not None and not calls and "spend" not in vars(w.ledger):
            for name in ("spend", "last_charge_end", "accrue", "record_samples", "record_progress",
                         "record_decision", "finish_run", "session"):
                setattr(w.ledger, name, down(name))

    drive(w, clock, step_s=5, max_real_s=60, on_step=cut)
    assert w.executor.stop is not None
    assert [d.policy for d in w.summary.decisions if d.action == "stop"] == ["budget"]
    assert w.history.spend_today.amount >= Decimal("0.02")
    assert not {"spend", "last_charge_end", "session"} & set(calls), "a tick read the ledger"
    state = json.loads((tmp_path / "data" / "sim" / "state.json").read_text())
    assert {i["status"] for i in state["instances"].values()} == {"stopped"}


def test_a_tick_after_the_stop_ended_charges_nothing_past_it(tmp_path):
    """The stop is confirmed inside one step; the next turn's tick runs before the watch sees it
    ended. That tick must not charge past the stop's end: the run's charges end exactly where the
    run does, at the provider's confirmed stop (found by a PostgreSQL outage test where a slower
    exit path let a tick in: 39 ms charged after the instance stopped)."""
    from costctl.ledger.schema import Charge

    s = settings(tmp_path, """
[instance]
provider = "sim"
gpu = "RTX 4090"
[watch]
sample_interval = "5s"
[policies.idle]
time_window = "30s"
""")
    clock = SimClock(T0)
    w = watcher(s, [], clock, sampler=FixedGpu(used_bytes=0, total_bytes=24 * 2**30, utilization=0.0))
    ticked_after_stop: list[bool] = []

    def watch_for_the_stop(now):
        stop = w.executor.stop if w.executor is not None else None
        if stop is not None and stop.ended_at is not None and now > stop.ended_at:
            ticked_after_stop.append(True)

    code, status = drive(w, clock, step_s=5, max_real_s=60, on_step=watch_for_the_stop)
    assert code == 0 and status == "stopped"
    assert ticked_after_stop, "the scenario must tick after the stop ended"
    with Session(create_engine(f"sqlite:///{tmp_path / 'data' / 'costctl.db'}")) as db:
        run = db.scalars(select(Run)).one()
        last = db.scalars(select(Charge).order_by(Charge.end_at.desc())).first()
    assert run.ended_at == w.executor.stop.ended_at
    assert last.end_at == run.ended_at, (last.end_at, run.ended_at)
