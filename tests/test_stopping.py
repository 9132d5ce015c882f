"""The stop's state machine (:class:`costctl.stopping.StopProcess`) on a simulated clock, against
a scripted provider: transient failures re-sent with backoff, permanent ones escalated to the
self-stop (recorded before it runs), the deadline, 404 as gone, a cancel that wins over a late
answer, a self-stop that fails."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

from costctl.clock import SimClock
from costctl.config import StopConfig
from costctl.errors import CostctlError
from costctl.stopping import StopProcess, StopRoute, StopRunner, StopState, run_self_stop
from costctl_providers.base import BillingMode, Instance, Status
from costctl_providers.errors import AuthError, NotFoundError, ProviderUnavailableError

from lifecycle_support import T0

CFG = StopConfig(poll_interval="5s", resend_interval="30s", deadline="5m")
API = StopRoute("api", "credential accepted")


def _inst(status: Status) -> Instance:
    return Instance(provider="fake", id="i-1", gpu=None, gpu_raw=None, gpu_count=1, billing=BillingMode.ON_DEMAND,
                    price_per_hour=None, currency="USD", status=status)


class Scripted:
    """A provider whose stop and status reads follow scripts (an exception is raised)."""

    name = "fake"

    def __init__(self, stops, reads=()):
        self.stops = list(stops)
        self.reads = list(reads)
        self.calls: list[str] = []

    def _next(self, script, default):
        item = script.pop(0) if script else default
        if isinstance(item, BaseException):
            raise item
        return _inst(item)

    def stop_instance(self, instance_id, *, wait=True):
        assert wait is False
        self.calls.append("stop")
        return self._next(self.stops, Status.STOPPING)

    def get_instance(self, instance_id):
        self.calls.append("read")
        return self._next(self.reads, Status.RUNNING)


def _run(proc: StopProcess, clock: SimClock, max_steps: int = 500) -> None:
    for _ in range(max_steps):
        if proc.done:
            return
        if proc.next_at is not None and proc.next_at > clock.now():
            clock.set(proc.next_at)
        proc.step()
    raise AssertionError("the stop did not end")


def _process(provider, clock, **kw) -> tuple[StopProcess, list]:
    events: list = []
    proc = StopProcess(instances=provider, instance_id="i-1", route=kw.pop("route", API), clock=clock, config=CFG,
                       on_event=events.append, **kw)
    return proc, events


def test_a_transient_send_failure_is_sent_again_after_a_backoff_and_then_confirmed():
    clock = SimClock(T0)
    prov = Scripted([ProviderUnavailableError("fake: stop failed after 4 attempts: 503"), Status.STOPPING],
                    reads=[Status.STOPPING, Status.STOPPED])
    proc, events = _process(prov, clock)
    _run(proc, clock)
    assert proc.state is StopState.CONFIRMED and proc.attempts == 2
    retry = events[1]
    assert retry.state is StopState.REQUESTED and "stop request 1 failed" in retry.detail
    assert "after 4 attempts" in retry.detail and "sending it again in" in retry.detail
    assert prov.calls == ["stop", "stop", "read", "read"]
    # the backoff starts at poll_interval (5 s, ±10 % jitter)
    sent = next(e for e in events if e.state is StopState.SENT)
    assert timedelta(seconds=4.4) <= sent.time - T0 <= timedelta(seconds=5.6)


def test_a_stop_that_reads_running_is_resent_every_resend_interval_until_it_reads_stopped():
    clock = SimClock(T0)
    prov = Scripted([Status.RUNNING, Status.RUNNING, Status.RUNNING],
                    reads=[Status.RUNNING] * 13 + [Status.STOPPED])
    proc, events = _process(prov, clock)
    _run(proc, clock)
    assert proc.state is StopState.CONFIRMED and proc.attempts == 3
    assert prov.calls.count("stop") == 3  # at 0 s, 30 s, 60 s; confirmed at 70 s: no more
    assert proc.ended_at == T0 + timedelta(seconds=70)


def test_a_rejected_credential_escalates_to_the_self_stop_recorded_before_it_runs():
    clock = SimClock(T0)
    order: list[str] = []
    prov = Scripted([AuthError("fake: the credential was rejected (401)")])
    proc, events = _process(prov, clock, find_self_stop=lambda: ("shutdown",),
                            before_self_stop=lambda: order.append("flushed"),
                            run_command=lambda argv: order.append(f"ran {argv[0]}") or "shutdown exited 0")
    recorded_before: list[str] = []
    proc.on_event = lambda e: (events.append(e), recorded_before.append(e.state.value) if not order else None)
    _run(proc, clock)
    assert proc.state is StopState.SELF_STOP_SENT and proc.done
    assert "self-stop sent" in recorded_before  # stored before the command ran
    assert order == ["flushed", "ran shutdown"]
    assert "API route ended: stop request 1 refused: fake: the credential was rejected" in events[-2].detail
    assert events[-1].detail == "shutdown exited 0"


def test_without_a_self_stop_a_permanent_error_fails_at_once():
    clock = SimClock(T0)
    proc, events = _process(Scripted([AuthError("fake: 403")]), clock)
    _run(proc, clock)
    assert proc.state is StopState.FAILED and proc.attempts == 1
    assert events[-1].detail == "stop request 1 refused: fake: 403; no self-stop route for this instance"


def test_the_deadline_fails_a_stop_that_never_reads_stopped_and_says_how_many_requests():
    clock = SimClock(T0)
    proc, events = _process(Scripted([Status.RUNNING] * 20), clock)
    _run(proc, clock)
    assert proc.state is StopState.FAILED and proc.ended_at == T0 + timedelta(minutes=5)
    assert events[-1].detail.startswith("not confirmed 300s after the decision (10 stop request(s) sent, "
                                        "status still running)")


def test_an_instance_the_provider_no_longer_knows_is_gone():
    clock = SimClock(T0)
    proc, _ = _process(Scripted([Status.STOPPING], reads=[NotFoundError("fake: no instance i-1")]), clock)
    _run(proc, clock)
    assert proc.state is StopState.GONE and proc.state.stopped


def test_the_self_stop_route_runs_the_command_once_and_never_the_api():
    clock = SimClock(T0)
    prov = Scripted([])
    ran: list = []
    proc, events = _process(prov, clock, route=StopRoute("self-stop", "container", ("shutdown",)),
                            run_command=lambda argv: ran.append(argv) or "ok")
    _run(proc, clock)
    assert proc.state is StopState.SELF_STOP_SENT and ran == [("shutdown",)] and prov.calls == []


def test_a_self_stop_that_fails_is_a_failed_stop():
    clock = SimClock(T0)

    def broken(argv):
        raise CostctlError("self-stop 'shutdown' exited with status 1: permission denied")

    proc, events = _process(Scripted([]), clock, route=StopRoute("self-stop", "container", ("shutdown",)),
                            run_command=broken)
    _run(proc, clock)
    assert proc.state is StopState.FAILED and not proc.state.stopped
    assert [e.state for e in events] == [StopState.REQUESTED, StopState.SELF_STOP_SENT, StopState.FAILED]


def test_a_cancel_wins_over_an_answer_that_comes_later():
    clock = SimClock(T0)
    release = threading.Event()
    entered = threading.Event()

    class Slow(Scripted):
        def stop_instance(self, instance_id, *, wait=True):
            entered.set()
            release.wait(5)
            return _inst(Status.STOPPED)

    proc, events = _process(Slow([]), clock)
    runner = StopRunner(proc, wake_s=0.01)
    runner.start()
    assert entered.wait(5)
    proc.cancel("the watch got SIGTERM")  # does not wait for the call in flight
    assert proc.state is StopState.FAILED
    release.set()
    runner.join(5)
    assert [e.state for e in events][-1] is StopState.FAILED  # the late "stopped" is not recorded
    assert "the watch got SIGTERM, before the stop was confirmed (1 stop request(s) sent)" in events[-1].detail


def test_run_self_stop_reports_a_failing_command(tmp_path):
    assert run_self_stop(["true"]) == "true exited 0"
    with pytest.raises(CostctlError, match=r"exited with status 3: nope"):
        run_self_stop(["sh", "-c", "echo nope >&2; exit 3"])
    with pytest.raises(CostctlError, match="command not found"):
        run_self_stop([str(tmp_path / "missing")])
