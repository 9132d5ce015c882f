"""An in-process watch built from a TOML config, on a simulated clock, with no child process:
fully deterministic. It writes its ledger and sim state where its config says (tmp_path/data) —
the path a user's exported COSTCTL_DATABASE_URL once redirected into their own ledger."""

from __future__ import annotations

import json

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
