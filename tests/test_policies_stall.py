"""The stall policy: alive, progress seen, then silence for stall_window."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from costctl.config import StallConfig
from costctl.policies import History, StallPolicy
from costctl.records import ProgressPoint

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def at(sec: float) -> datetime:
    return T0 + timedelta(seconds=sec)


def drive(progress_times: list[int], end: int, *, child_exits_at: int | None = None,
          window: str | None = "60s") -> list[tuple[int, str]]:
    history = History(sample_interval=timedelta(seconds=5), started_at=T0, progress_source=True,
                      child_running=True)
    policy = StallPolicy(StallConfig(stall_window=window))
    pending = sorted(progress_times)
    fired, seen = [], set()
    for second in range(end + 1):
        while pending and pending[0] <= second:
            history.add_progress(ProgressPoint(time=at(pending.pop(0)), value=1.0, step=second))
        if child_exits_at is not None and second >= child_exits_at:
            history.child_running = False
        decision = policy.evaluate(history, at(second))
        if decision is not None and decision.key not in seen:
            seen.add(decision.key)
            fired.append((second, decision.key))
            assert decision.action == "advise" and decision.policy == "stall"
    return fired


def test_fires_once_stall_window_after_the_last_progress() -> None:
    assert drive([0, 10, 20, 30], end=300) == [(90, "stall:2026-01-01T00:00:30Z")]


def test_each_silent_stretch_fires_once() -> None:
    fired = drive([0, 10, 200], end=400)
    assert [sec for sec, _ in fired] == [70, 260]


def test_never_before_any_progress() -> None:
    assert drive([], end=600) == []


def test_never_while_progress_keeps_coming() -> None:
    assert drive(list(range(0, 600, 59)), end=600) == []


def test_not_after_the_child_exited() -> None:
    assert drive([0, 10], end=300, child_exits_at=50) == []


def test_off_never_fires() -> None:
    assert drive([0, 10], end=3000, window="off") == []


def test_no_child_no_stall() -> None:
    history = History(child_running=None, progress_source=True)
    history.add_progress(ProgressPoint(time=T0, value=1.0))
    assert StallPolicy(StallConfig(stall_window="60s")).evaluate(history, at(3600)) is None


def test_evidence() -> None:
    history = History(child_running=True, progress_source=True)
    history.add_progress(ProgressPoint(time=T0, value=float("nan"), step=7))
    decision = StallPolicy(StallConfig(stall_window="60s", action="stop")).evaluate(history, at(90))
    assert decision is not None and decision.action == "stop"
    assert decision.evidence["silent_for_s"] == 90.0 and decision.evidence["last_value"] == "nan"
    assert decision.evidence["last_step"] == 7
