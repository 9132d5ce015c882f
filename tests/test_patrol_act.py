"""A patrol's stop and release go through the watch's verified stop, against each adapter's local
fake (real HTTP on 127.0.0.1) on a simulated clock: confirmed only by the provider's own status
(a release: terminated, or the provider no longer knows the instance), re-sent while it is not,
failed at the deadline; every step a stop event of the decision (no run); the preflight refuses
an adapter that cannot do it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import sqlalchemy as sa

from costctl.clock import SimClock
from costctl.config import StopConfig
from costctl.ledger import Ledger
from costctl.ledger import patrol_store as store
from costctl.patrol.act import carry_out, route_for
from costctl.records import Action, Decision
from costctl_providers.base import Capabilities
from tests.fakes.http import Reply
from tests.provider_rigs import RIGS

T = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
STOP = StopConfig(poll_interval="5s", resend_interval="30s", deadline="5m")


@pytest.fixture(params=sorted(RIGS))
def rig(request, tmp_path):
    yield from RIGS[request.param](tmp_path)


def _claimed(ledger: Ledger, key: tuple[str, str], action: Action) -> tuple[int, Decision]:
    decision = Decision(time=T, policy="patrol:p", action=action, reason="matched", evidence={"mark": 1})
    facts = store.InstanceFacts(gpu=None, gpu_count=1, billing="on-demand", price_per_hour=Decimal(1), currency="USD")
    claimed = store.claim(ledger, key, facts, decision, outcome="stop requested", check=lambda past: None)
    assert claimed.decision_id is not None
    return claimed.decision_id, decision


def _events(ledger: Ledger, decision_id: int) -> list[tuple]:
    with ledger.engine.connect() as conn:
        return [tuple(r) for r in conn.execute(sa.text(
            "SELECT run_id, state FROM stop_events WHERE decision_id = :d ORDER BY id"), {"d": decision_id})]


def test_a_patrol_stop_is_confirmed_by_the_provider_s_status(rig, tmp_path):
    inst = rig.provider.get_instance(rig.instance_id)
    route, problem = route_for(rig.provider, inst, release=False)
    assert problem is None and route.kind == "api"
    with Ledger.open(f"sqlite:///{tmp_path / 'l.db'}") as ledger:
        did, decision = _claimed(ledger, (rig.name, rig.instance_id), Action.STOP)
        result = carry_out(ledger=ledger, decision_id=did, decision=decision, provider=rig.provider, inst=inst,
                           route=route, release=False, clock=SimClock(T), stop_config=STOP, say=lambda line: None)
        events = _events(ledger, did)
        with ledger.engine.connect() as conn:
            action, outcome, evidence = conn.execute(sa.text(
                "SELECT action, outcome, evidence FROM decisions WHERE id = :d"), {"d": did}).one()
    assert result.state == "confirmed" and rig.stops_done() == 1
    assert events[0] == (None, "requested") and events[-1] == (None, "confirmed")
    assert action == "stop" and "confirmed" in outcome and '"stop_route": "API (credential accepted)"' in evidence


def test_a_patrol_release_ends_when_the_provider_no_longer_has_it(rig, tmp_path):
    rig.provider.stop_instance(rig.instance_id, wait=True)
    inst = rig.provider.get_instance(rig.instance_id)
    route, problem = route_for(rig.provider, inst, release=True)
    assert problem is None
    with Ledger.open(f"sqlite:///{tmp_path / 'l.db'}") as ledger:
        did, decision = _claimed(ledger, (rig.name, rig.instance_id), Action.RELEASE)
        result = carry_out(ledger=ledger, decision_id=did, decision=decision, provider=rig.provider, inst=inst,
                           route=route, release=True, clock=SimClock(T), stop_config=STOP, say=lambda line: None)
        events = _events(ledger, did)
        with ledger.engine.connect() as conn:
            action = conn.execute(sa.text("SELECT action FROM decisions WHERE id = :d"), {"d": did}).scalar()
    assert result.state in ("confirmed", "gone") and action == "release"
    assert events[-1][1] == result.state
    from costctl_providers.errors import NotFoundError

    with pytest.raises(NotFoundError):
        rig.provider.get_instance(rig.instance_id)


def test_a_release_the_provider_ignores_is_sent_again_and_fails_at_the_deadline(tmp_path):
    with _vast_rig(tmp_path) as rig:
        rig.provider.stop_instance(rig.instance_id, wait=True)
        inst = rig.provider.get_instance(rig.instance_id)
        # Vast answers "destroyed" and keeps the instance: a release never carried out
        rig.fake.server.route("DELETE", "/api/v0/instances/{id}/", Reply.json({"success": True}))
        route, _problem = route_for(rig.provider, inst, release=True)
        with Ledger.open(f"sqlite:///{tmp_path / 'l.db'}") as ledger:
            did, decision = _claimed(ledger, ("vastai", rig.instance_id), Action.RELEASE)
            result = carry_out(ledger=ledger, decision_id=did, decision=decision, provider=rig.provider, inst=inst,
                               route=route, release=True, clock=SimClock(T), stop_config=STOP,
                               say=lambda line: None)
        deletes = rig.fake.server.count("DELETE", "/api/v0/instances/{id}/")
    assert result.state == "failed" and "not confirmed 300s after the first stop request" in result.detail
    assert "not released yet" in result.detail and deletes >= 5


def _vast_rig(tmp_path):
    from contextlib import contextmanager

    @contextmanager
    def opened():
        gen = RIGS["vastai"](tmp_path)
        rig = next(gen)
        try:
            yield rig
        finally:
            gen.close()

    return opened()


def test_the_preflight_refuses_an_adapter_that_cannot(tmp_path):
    with _vast_rig(tmp_path) as rig:
        inst = rig.provider.get_instance(rig.instance_id)
        rig.provider.capabilities = Capabilities(release="no API for it", stop="no API for it")
        route, problem = route_for(rig.provider, inst, release=True)
        assert route is None and problem == "vastai cannot release instances through its API (no API for it)"
        route, problem = route_for(rig.provider, inst, release=False)
        assert route is None and "cannot stop instances through its API (no API for it)" in problem
