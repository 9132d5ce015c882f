"""costctl watch on a real provider adapter: AutoDL's API served by a local fake on 127.0.0.1."""

from __future__ import annotations

import sys
from decimal import Decimal
from pathlib import Path

from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from costctl.ledger.schema import Charge, DecisionRow, Instance
from helpers import costctl_env, run_costctl
from tests.fakes.autodl import TOKEN, FakeAutoDL

ID = "pro-76419909953e"


def test_idle_policy_stops_the_autodl_instance_and_charges_its_reported_price(tmp_path: Path):
    with FakeAutoDL() as fake:
        fake.add_pro(ID, payg_price=1880)  # 1880 厘/h = 1.88 CNY/h
        cfg = tmp_path / "costctl.toml"
        cfg.write_text(
            "[instance]\n"
            'provider = "autodl"\n'
            f'id = "{ID}"\n'
            'price_per_hour = "9.99"   # a fallback only: the provider\'s price wins\n'
            'currency = "CNY"\n'
            "[policies.idle]\n"
            'time_window = "2s"\n'
            "[providers.autodl]\n"
            f'base_url = "{fake.url}"\n'
            "poll_interval = 0.05\n"
            "stop_timeout = 10\n"
        )
        env = costctl_env(tmp_path, AUTODL_TOKEN=TOKEN)
        proc = run_costctl(
            "watch", "--config", str(cfg), "--on-exit", "guard", "--",
            sys.executable, "-c", "print('loss: 0.5')", env=env, timeout=60,
        )
        assert proc.returncode == 0, proc.stderr.decode()
        assert TOKEN.encode() not in proc.stderr + proc.stdout
        assert fake.status_of(ID) == "shutdown"
        offs = [t for t in fake.transitions if t[0] == ID and t[2] in ("shutting_down", "shutdown")]
        assert offs and offs[0][1] == "running"
        power_offs = [c for c in fake.server.calls("POST") if c.path.endswith("/pro/power_off")]
        assert len(power_offs) == 1
    engine = create_engine(f"sqlite:///{tmp_path / 'costctl.db'}")
    with Session(engine) as s:
        inst = s.scalars(select(Instance)).one()
        charges = s.scalars(select(Charge)).all()
        idle = s.scalars(select(DecisionRow).where(DecisionRow.policy == "idle")).one()
    assert (inst.provider, inst.provider_instance_id, inst.currency) == ("autodl", ID, "CNY")
    assert inst.price_per_hour == Decimal("1.88")
    assert charges and {(c.rate_per_hour, c.currency) for c in charges} == {(Decimal("1.88"), "CNY")}
    assert idle.action == "stop" and "stopped" in idle.outcome
