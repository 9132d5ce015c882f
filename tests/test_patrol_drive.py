"""costctl.patrol.drive: a sweep's stops stepped side by side on a simulated clock; a stop that
raises ends as failed alone. Real StopProcesses over a small in-memory provider."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

from costctl.clock import SimClock
from costctl.config import StopConfig
from costctl.patrol.drive import drive
from costctl.stopping import StopEvent, StopProcess, StopRoute
from costctl_providers.base import BillingMode, Capabilities, Instance, Status


class Provider:
    """Stops ``confirms`` at once; never stops the others; raises RuntimeError for ``broken``."""

    name = "mem"
    capabilities = Capabilities(stop=True)

    def __init__(self, confirms: set[str], broken: set[str]) -> None:
        self.confirms, self.broken, self.stopped = confirms, broken, set()

    def get_instance(self, iid: str) -> Instance:
        status = Status.STOPPED if iid in self.stopped else Status.RUNNING
        return Instance(provider="mem", id=iid, gpu="A100", gpu_raw="A100", gpu_count=1, billing=BillingMode.ON_DEMAND,
                        price_per_hour=Decimal("1.2"), currency="USD", status=status)

    def stop_instance(self, iid: str, *, wait: bool = True) -> Instance:
        if iid in self.broken:
            raise RuntimeError("adapter bug")
        if iid in self.confirms:
            self.stopped.add(iid)
        return self.get_instance(iid)


def test_stops_go_side_by_side_and_one_that_raises_ends_alone():
    clock = SimClock()
    start = clock.now()
    provider = Provider(confirms={"F"}, broken={"B"})
    config = StopConfig(deadline=timedelta(minutes=15), poll_interval=timedelta(seconds=5))
    events: list[tuple[str, StopEvent]] = []
    procs = {iid: StopProcess(instances=provider, instance_id=iid, route=StopRoute("api", "test"), clock=clock,
                              config=config, on_event=lambda e, iid=iid: events.append((iid, e)))
             for iid in "ABCDEF"}
    ended: list[tuple[str, str, object]] = []
    drive(list(procs), procs.get, clock=clock, say=lambda line: None, max_at_once=3,
          ended=lambda iid: ended.append((iid, procs[iid].state.value, clock.now())))
    order = [iid for iid, _state, _at in ended]
    assert order[:2] == ["B", "F"] or order[:2] == ["F", "B"]
    states = {iid: state for iid, state, _at in ended}
    assert states == {"A": "failed", "B": "failed", "C": "failed", "D": "failed", "E": "failed", "F": "confirmed"}
    at = {iid: when for iid, _state, when in ended}
    assert at["F"] - start < timedelta(minutes=1) and at["B"] - start < timedelta(minutes=1)
    assert all(at[iid] - start >= timedelta(minutes=15) for iid in "ACDE")
    [(_, failed_b)] = [(i, e) for i, e in events if i == "B" and e.state.value == "failed"]
    assert "RuntimeError" in failed_b.detail
