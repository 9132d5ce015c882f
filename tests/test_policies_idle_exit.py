"""The idle policy's exit_window: a shorter window once the watched command exited, or — guarding
the machine — once the last SSH session closed on an idle machine. Exact firing seconds on a
simulated clock (one evaluation per second)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from costctl.config import IdleConfig
from costctl.policies import History, IdlePolicy
from costctl.records import GpuReading, SignalStatus, TelemetrySample

T0 = datetime(2026, 1, 1, 3, 0, tzinfo=timezone.utc)
OK, ABSENT = SignalStatus.OK, SignalStatus.ABSENT


def at(sec: float) -> datetime:
    return T0 + timedelta(seconds=sec)


def sample(t: float, util: float, cpu: float = 0.0, ssh: int | None = None) -> TelemetrySample:
    return TelemetrySample(time=at(t), gpus=(GpuReading(index=0, utilization=util),), gpu_status=OK,
                           cpu_percent=cpu, cpu_status=OK, ssh_sessions=ssh,
                           ssh_status=OK if ssh is not None else ABSENT)


def first_fire(samples: list[TelemetrySample], end: int, *, exit_at: float | None = None,
               child: bool | None = None, restart_at: float | None = None, **cfg: object) -> int | None:
    """Evaluate every second; the child runs until ``exit_at`` (child=True) or there is none (child=None)."""
    policy = IdlePolicy(IdleConfig(**{"time_window": "30m", "exit_window": "2m", **cfg}))
    history = History(sample_interval=timedelta(seconds=10), child_running=child)
    k = 0
    for sec in range(end + 1):
        while k < len(samples) and samples[k].time <= at(sec):
            history.add_sample(samples[k])
            k += 1
        if child and exit_at is not None and sec >= exit_at and (restart_at is None or sec < restart_at):
            history.child_running, history.child_exited_at = False, at(exit_at)
        elif child and restart_at is not None and sec >= restart_at:
            history.child_running, history.child_exited_at = True, None
        if policy.evaluate(history, at(sec)) is not None:
            return sec
    return None


def trace(busy_until: int, end: int, **kw: object) -> list[TelemetrySample]:
    return [sample(t, 95 if t < busy_until else 0, 150 if t < busy_until else 0, **kw) for t in range(0, end + 1, 10)]


def test_defaults() -> None:
    cfg = IdleConfig()
    assert cfg.exit_window == timedelta(minutes=2) and cfg.time_window == timedelta(minutes=30)
    assert cfg.count_ssh_sessions is True


def test_after_the_command_exited_two_minutes_of_idle_suffice() -> None:
    samples = trace(600, 4000)  # busy until 600 s, the command exits at 600 s
    assert first_fire(samples, 4000, child=True, exit_at=600) == 720
    # the decision says why the window is short
    policy = IdlePolicy(IdleConfig())
    history = History(sample_interval=timedelta(seconds=10), child_running=False, child_exited_at=at(600))
    for s in samples[:80]:
        history.add_sample(s)
    decision = policy.evaluate(history, at(720))
    assert decision is not None and "exit_window: the command exited at 2026-01-01 03:10:00+00:00" in decision.reason
    assert decision.evidence["exit_window"] is True


def test_an_idle_stretch_before_the_exit_counts_from_the_exit() -> None:
    samples = trace(600, 4000)  # idle from 600 s, but the command only exits at 1000 s
    assert first_fire(samples, 4000, child=True, exit_at=1000) == 1120


def test_while_the_command_runs_the_whole_time_window_applies() -> None:
    samples = trace(600, 4000)
    assert first_fire(samples, 4000, child=True, exit_at=None) == 600 + 1800


def test_exit_window_off_means_time_window_after_the_exit() -> None:
    samples = trace(600, 4000)
    assert first_fire(samples, 4000, child=True, exit_at=600, exit_window="off") == 600 + 1800


def test_a_restarted_command_gets_the_whole_window_back() -> None:
    samples = trace(600, 4000)  # exits at 600 s, restarted (OOM retry) at 660 s but stays idle
    assert first_fire(samples, 4000, child=True, exit_at=600, restart_at=660) == 600 + 1800


def test_a_shorter_time_window_wins() -> None:
    samples = trace(600, 4000)
    assert first_fire(samples, 4000, child=True, exit_at=600, time_window="1m") == 660


def test_guarding_the_machine_the_last_ssh_session_closing_on_an_idle_machine() -> None:
    # GPU and CPU idle from 600 s, the user's session stays open until 1200 s
    samples = [sample(t, 95 if t < 600 else 0, 100 if t < 600 else 0, ssh=1 if t < 1200 else 0)
               for t in range(0, 5001, 10)]
    assert first_fire(samples, 5000, child=None) == 1200 + 120
    # the session open all along: never
    open_all = [sample(t, 95 if t < 600 else 0, 100 if t < 600 else 0, ssh=1) for t in range(0, 5001, 10)]
    assert first_fire(open_all, 5000, child=None) is None


def test_guarding_the_machine_a_logoff_while_the_gpu_works_keeps_the_full_window() -> None:
    # the session closes at 600 s while the GPU still works until 1200 s (a job in tmux)
    samples = [sample(t, 95 if t < 1200 else 0, 100 if t < 1200 else 0, ssh=1 if t < 600 else 0)
               for t in range(0, 5001, 10)]
    assert first_fire(samples, 5000, child=None) == 1200 + 1800
