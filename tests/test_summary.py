"""The end-of-watch summary: loss figures, plateau point, decisions grouped per policy."""

from __future__ import annotations

import io
from datetime import datetime, timedelta, timezone
from decimal import Decimal

from costctl.money import Money
from costctl.records import Decision, ProgressPoint
from costctl.summary import RunSummary

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def _render(summary: RunSummary) -> str:
    buf = io.StringIO()
    summary.print("abcdef0123", "USD", buf)
    return buf.getvalue()


def test_losses_best_point_and_repeated_decisions_are_summarised():
    s = RunSummary(spend=Money(Decimal("0.0274"), "USD"), duration=timedelta(seconds=143))
    s.add_progress([ProgressPoint(T0, v, epoch=float(i + 1)) for i, v in enumerate([3.0, 1.0, float("nan"), 2.0])])
    s.add_progress([ProgressPoint(T0, 0.5, kind="eval", name="val_loss", epoch=1.0)])
    for epoch in (50, 72, 85):
        s.add_decision(Decision(T0, "plateau", "advise", f"train loss plateaued at epoch {epoch}: no improvement",
                                evidence={"epoch": float(epoch), "index": epoch - 1}))
    s.add_decision(Decision(T0, "on-exit", "stop", "the command exited"))
    text = _render(s)
    assert (s.first_loss, s.best_loss, s.last_loss, s.best_at) == (3.0, 1.0, 2.0, "epoch 2")
    assert s.loss_points == 4 and s.eval_points == 1
    assert "plateau detected at" in text and "epoch 50.0" in text
    assert text.count("decision plateau") == 1
    flat = " ".join(text.replace("│", " ").split())  # the table wraps long cells
    assert "fired 3 times; the last: train loss plateaued at epoch 85" in flat
    assert "$0.0274" in text and "0:02:23" in text  # a spend under 1 with 4 decimals (format_amount)


def test_dry_run_says_would():
    s = RunSummary(dry_run=True)
    s.add_decision(Decision(T0, "idle", "stop", "idle for 30m"))
    assert "would stop (dry run): idle for 30m" in _render(s)
