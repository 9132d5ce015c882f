"""The decision recorder: ledger, summary, console line and subscribers, in one call; Action."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from costctl.decisions import DecisionRecorder, RecordedDecision
from costctl.records import Action, Decision
from costctl.summary import RunSummary

T = datetime(2026, 1, 1, tzinfo=timezone.utc)


class Store:
    def __init__(self) -> None:
        self.rows: list[tuple[str, Decision, str | None, bool]] = []

    def record_decision(self, run_id, decision, *, outcome=None, dry_run=False) -> int:
        self.rows.append((run_id, decision, outcome, dry_run))
        return len(self.rows)


def test_record_writes_the_ledger_the_summary_the_line_and_tells_subscribers() -> None:
    store, summary, lines, seen = Store(), RunSummary(), [], []
    rec = DecisionRecorder(store, summary, lines.append, run_id="run-1")
    rec.subscribe(seen.append)
    d = Decision(time=T, policy="idle", action="stop", reason="idle for 30m", key="idle:1")
    got = rec.record(d, "stopped", say="costctl: stopped")
    assert d.action is Action.STOP and d.action == "stop"  # plain strings are coerced
    assert store.rows == [("run-1", d, "stopped", False)]
    assert summary.decisions == [d] and lines == ["costctl: stopped"]
    assert seen == [got] and got == RecordedDecision(d, "stopped", "run-1", False, 1)
    rec.record(d, "advised")
    assert lines[-1] == "costctl idle: idle for 30m"
    rec.record(d, "advised", say=False)
    assert len(lines) == 2 and len(store.rows) == 3


def test_a_failing_subscriber_is_reported_and_the_others_still_run() -> None:
    lines, seen = [], []
    rec = DecisionRecorder(Store(), RunSummary(), lines.append, run_id="r")

    def broken(_: RecordedDecision) -> None:
        raise ValueError("boom")

    rec.subscribe(broken)
    rec.subscribe(seen.append)
    rec.record(Decision(time=T, policy="budget", action=Action.WARN, reason="80%"), "warned", say=False)
    assert lines == ["costctl: decision subscriber failed: ValueError: boom"] and len(seen) == 1


def test_an_unknown_action_is_refused() -> None:
    with pytest.raises(ValueError):
        Decision(time=T, policy="x", action="explode", reason="no")


def test_a_flood_of_plateau_episodes_prints_one_live_line_and_counts_the_rest(tmp_path) -> None:
    """A noisy, slowly falling loss in a flood opens plateau episode after episode (each one
    decision, all recorded and in the summary); the console gets one line per quiet time
    (``costctl.decisions.LIVE_QUIET_S``, 600 s), the next one counting those not shown (simulated clock)."""
    import random
    from datetime import timedelta

    from costctl.progress.batch import PointBatch
    from costctl.records import ProgressPoint
    from lifecycle_support import T0, FixedGpu, SimClock, settings, watcher

    s = settings(tmp_path, '[instance]\nprovider = "sim"\ngpu = "RTX 4090"\n[watch]\nsample_interval = "1s"\n'
                 '[policies.idle]\ntime_window = "6h"\n')
    clock = SimClock(T0)
    w = watcher(s, [], clock, sampler=FixedGpu(used_bytes=2**30, total_bytes=24 * 2**30, utilization=90.0))
    w.start()
    lines: list[str] = []
    w.recorder.say = lines.append
    r, step = random.Random(3), 0
    try:
        for second in range(1200):  # 20 minutes, 500 points a second
            batch = PointBatch()
            for _ in range(500):
                batch.append_point(ProgressPoint(time=clock.now(), value=1.0 / (1 + step / 5e4) + 0.05 * r.random(),
                                                 step=step, kind="train"))
                step += 1
            w._progress_q.put(batch)
            w.tick(clock.now())
            clock.advance(1)
    finally:
        w.finish(0, "completed")
    plateaus = [d for d in w.summary.decisions if d.policy == "plateau"]
    said = [line for line in lines if line.startswith("costctl plateau")]
    assert len(plateaus) > 10  # many episodes, each recorded
    assert len(said) == 2 == 1200 // 600  # one line per 10 minutes
    shown_first = [d for d in plateaus if (d.time - plateaus[0].time).total_seconds() < 600]
    assert f"[{len(shown_first) - 1} more plateau advice" in said[1]


def test_advice_of_a_quiet_policy_is_throttled_per_policy_only() -> None:
    from datetime import timedelta

    lines: list[str] = []
    rec = DecisionRecorder(Store(), RunSummary(), lines.append, run_id="r", live_quiet_s={"plateau": 60})
    for i in range(5):
        t = T + timedelta(seconds=10 * i)
        rec.record(Decision(time=t, policy="plateau", action="advise", reason=f"p{i}", key=f"plateau:{i}"), "advised")
        rec.record(Decision(time=t, policy="stall", action="advise", reason=f"s{i}", key=f"stall:{i}"), "advised")
    rec.record(Decision(time=T + timedelta(seconds=45), policy="plateau", action="stop", reason="stop",
                        key="plateau:stop"), "stopped", say="costctl plateau: stopping")
    rec.record(Decision(time=T + timedelta(seconds=70), policy="plateau", action="advise", reason="p9",
                        key="plateau:9"), "advised")
    assert [x for x in lines if "plateau" in x] == [
        "costctl plateau: p0", "costctl plateau: stopping",
        "costctl plateau: p9 [4 more plateau advice since the last line printed: recorded, counted in the summary]"]
    assert [x for x in lines if "stall" in x] == [f"costctl stall: s{i}" for i in range(5)]
    assert len(rec.summary.decisions) == 12
