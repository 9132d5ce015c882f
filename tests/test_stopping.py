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
    proc.step()
    assert proc.state is StopState.SELF_STOP_SENT and not proc.done  # waits for the power-off
    assert "self-stop sent" in recorded_before  # stored before the command ran
    assert order == ["flushed", "ran shutdown"]
    assert "API route ended: stop request 1 refused: fake: the credential was rejected" in events[-2].detail
    assert events[-1].detail == "shutdown exited 0; the machine should power off within 120s"
    assert proc.next_at == T0 + timedelta(minutes=2)


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
    assert events[-1].detail.startswith("not confirmed 300s after the first stop request (10 stop requests "
                                        "sent, status still running)")


def test_the_deadline_counts_from_the_first_request_not_from_a_slow_hook_or_job_end():
    clock = SimClock(T0)
    prov = Scripted([Status.STOPPING], reads=[Status.STOPPING, Status.STOPPED])
    # the before_stop hook and the job's grace period took 20 minutes, longer than the deadline
    proc, events = _process(prov, clock, prepare=lambda: clock.advance(1200) and "before_stop succeeded")
    _run(proc, clock)
    assert proc.state is StopState.CONFIRMED and prov.calls[0] == "stop"
    assert proc.deadline == T0 + timedelta(minutes=20 + 5)


def test_an_instance_the_provider_no_longer_knows_is_gone():
    clock = SimClock(T0)
    proc, _ = _process(Scripted([Status.STOPPING], reads=[NotFoundError("fake: no instance i-1")]), clock)
    _run(proc, clock)
    assert proc.state is StopState.GONE and proc.state.stopped


def test_the_self_stop_route_runs_the_command_once_and_never_the_api_and_a_machine_still_up_fails():
    clock = SimClock(T0)
    prov = Scripted([])
    ran: list = []
    proc, events = _process(prov, clock, route=StopRoute("self-stop", "container", ("shutdown",)),
                            run_command=lambda argv: ran.append(argv) or "ok")
    _run(proc, clock)
    assert ran == [("shutdown",)] and prov.calls == []
    # this process outlived the self-stop by self_stop_grace: the machine did not power off
    assert proc.state is StopState.FAILED and proc.ended_at == T0 + timedelta(minutes=2)
    assert events[-1].detail == "the self-stop returned but this machine is still running 120s later: " \
                                "the instance was not stopped"


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
    assert "the watch got SIGTERM, before the stop was confirmed (1 stop request sent)" in events[-1].detail


def test_run_self_stop_reports_a_failing_command(tmp_path):
    assert run_self_stop(["true"]) == "true exited 0"
    with pytest.raises(CostctlError, match=r"exited with status 3: nope"):
        run_self_stop(["sh", "-c", "echo nope >&2; exit 3"])
    with pytest.raises(CostctlError, match="command not found"):
        run_self_stop([str(tmp_path / "missing")])


def test_a_poll_or_resend_interval_longer_than_the_deadline_is_one_config_error(tmp_path):
    from costctl.config import load_settings
    from costctl.errors import ConfigError

    cfg = tmp_path / "costctl.toml"
    cfg.write_text('[stop]\npoll_interval = "2h"\n')
    with pytest.raises(ConfigError) as err:
        load_settings(cfg)
    assert "stop.poll_interval (2h)" in err.value.message and "stop.deadline (15m)" in err.value.message
    assert "\n" not in err.value.message


def test_aborting_a_stop_ends_a_before_stop_hook_still_running_with_its_children(tmp_path):
    import psutil

    from costctl.config import HooksConfig
    from costctl.executor import Executor
    from costctl.protocols import RunState
    from costctl.records import Action, Decision

    class _NoJob:
        exists = running = False
        pid = batch = resume_from = None

        def end(self):
            return None

    class _Run:
        stopped_at = None
        state = RunState(provider="fake", instance_id="i-1", instance=None, rate=None, gpu_name=None, gpu_count=1,
                         billing="on-demand", instance_pk=1, run_id="r", run_started_at=T0)

        def mark_stopped(self, when):
            pass

    class _Log:
        def record(self, decision, outcome, **kw):
            return None

    pid_file = tmp_path / "hook.pid"
    said: list[str] = []
    ex = Executor(log=_Log(), clock=SimClock(T0), job=_NoJob(), instances=Scripted([Status.STOPPED]), run=_Run(),
                  hooks=HooksConfig(before_stop=f"sleep 300 & echo $! > '{pid_file}'; wait", before_stop_timeout="5m"),
                  say=said.append)
    ex.handle(Decision(time=T0, policy="idle", action=Action.STOP, reason="idle", key="idle"))
    stepper = threading.Thread(target=ex.stopping.step, daemon=True)
    stepper.start()
    for _ in range(1500):  # up to 30 s on a loaded machine: the hook's shell must start first
        if pid_file.exists() and pid_file.read_text().strip():
            break
        threading.Event().wait(0.02)
    grandchild = int(pid_file.read_text())
    ex.stopping.cancel("the watch got SIGTERM")
    ex.abort()
    stepper.join(30)
    assert not stepper.is_alive()

    def gone() -> bool:
        try:
            return not psutil.pid_exists(grandchild) or psutil.Process(grandchild).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    for _ in range(500):  # the kill is sent; the process may take a moment to go
        if gone():
            break
        threading.Event().wait(0.02)
    assert gone()
    # cancelled: nothing claims the stop goes on
    assert not any("stopping anyway" in line for line in said), said


def test_a_self_stop_command_that_hangs_is_killed_with_its_group_at_its_timeout(tmp_path):
    import psutil

    pid_file = tmp_path / "child.pid"
    with pytest.raises(CostctlError, match=r"did not return within 1s \(its process group was killed\)"):
        run_self_stop(["sh", "-c", f"sleep 300 & echo $! > '{pid_file}'; wait"], timeout_s=1)
    child = int(pid_file.read_text())
    for _ in range(100):
        if not psutil.pid_exists(child) or psutil.Process(child).status() == psutil.STATUS_ZOMBIE:
            break
        threading.Event().wait(0.02)
    assert not psutil.pid_exists(child) or psutil.Process(child).status() == psutil.STATUS_ZOMBIE


def test_a_self_stop_command_killed_by_a_signal_is_said_so():
    with pytest.raises(CostctlError, match=r"^self-stop 'sh -c kill -TERM \$\$' was killed by SIGTERM$"):
        run_self_stop(["sh", "-c", "kill -TERM $$"])


def test_a_stop_stuck_in_stopping_is_said_unconfirmed_once_after_unconfirmed_after_then_fails_at_the_deadline():
    """Tester finding: a stop stuck in the provider's "stopping" raised no alarm until the
    15-minute deadline. It is said once, ``[stop] unconfirmed_after`` after the first request."""
    clock = SimClock(T0)
    prov = Scripted([Status.STOPPING], reads=[Status.STOPPING] * 1000)
    proc, events = _process(prov, clock)
    _run(proc, clock)
    said = [e for e in events if e.unconfirmed]
    assert len(said) == 1
    assert T0 + timedelta(minutes=2) <= said[0].time < T0 + timedelta(minutes=2, seconds=10)
    assert said[0].state is StopState.SENT and said[0].attempt == 1
    assert said[0].detail.startswith("not confirmed 120s after the first stop request (1 stop request(s) sent, "
                                     "status stopping)")
    assert proc.state is StopState.FAILED and proc.ended_at == T0 + timedelta(minutes=5)


def test_a_stop_confirmed_before_unconfirmed_after_is_never_said_unconfirmed():
    clock = SimClock(T0)
    proc, events = _process(Scripted([Status.STOPPING], reads=[Status.STOPPING] * 10 + [Status.STOPPED]), clock)
    _run(proc, clock)
    assert proc.state is StopState.CONFIRMED and not any(e.unconfirmed for e in events)


def test_unconfirmed_after_defaults_to_two_minutes():
    assert StopConfig().unconfirmed_after == timedelta(minutes=2)


def test_the_status_line_counts_attempts_from_one_and_says_none_before_the_first_is_sent():
    clock = SimClock(T0)
    prov = Scripted([Status.STOPPING], reads=[Status.STOPPED])
    proc, _events = _process(prov, clock)
    assert proc.attempts == 0 and proc.describe() == "stopping i-1: requested"  # nothing sent yet: no "(attempt 0)"
    proc.step()
    assert proc.attempts == 1 and "(attempt 1)" in proc.describe()


def test_no_wait_or_re_send_runs_past_the_deadline_the_failure_is_declared_at_it():
    """``[stop] deadline = 2m``, every stop request fails transiently: the backoff grows to
    ``resend_interval`` (60 s, ±10 %), and the re-send it would schedule past 2m is clamped to
    the deadline: the failure is declared at 2m exactly, not a minute later."""
    clock = SimClock(T0)
    prov = Scripted([ProviderUnavailableError("fake: stop failed: 503")] * 50)
    events: list = []
    proc = StopProcess(instances=prov, instance_id="i-1", route=API, clock=clock,
                       config=StopConfig(poll_interval="5s", resend_interval="60s", deadline="2m"),
                       on_event=events.append)
    _run(proc, clock)
    assert proc.state is StopState.FAILED
    assert proc.ended_at == T0 + timedelta(minutes=2)
    assert all(e.time <= T0 + timedelta(minutes=2) for e in events)
    # a read that keeps failing transiently is clamped too
    clock = SimClock(T0)
    prov = Scripted([Status.STOPPING], reads=[ProviderUnavailableError("fake: read failed: 503")] * 100)
    proc = StopProcess(instances=prov, instance_id="i-1", route=API, clock=clock,
                       config=StopConfig(poll_interval="7s", resend_interval="60s", deadline="2m"),
                       on_event=lambda event: None)
    _run(proc, clock)
    assert proc.state is StopState.FAILED and proc.ended_at == T0 + timedelta(minutes=2)
