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
