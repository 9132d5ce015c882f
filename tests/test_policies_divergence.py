"""The divergence policy: NaN/inf loss, once per non-finite streak and kind."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

from costctl.config import DivergenceConfig
from costctl.policies import DivergencePolicy, History
from costctl.records import ProgressPoint

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
NAN, INF = float("nan"), float("inf")


def test_one_decision_per_non_finite_streak() -> None:
    history = History(progress_source=True)
    policy = DivergencePolicy(DivergenceConfig())
    values = [2.0, 1.5, NAN, NAN, INF, 1.2, 1.1, -INF, 1.0]
    decisions = []
    for i, v in enumerate(values):
        history.add_progress(ProgressPoint(time=T0 + timedelta(seconds=i), value=v, step=10 * i))
        decisions += policy.decisions(history, T0 + timedelta(seconds=i))
        decisions += policy.decisions(history, T0 + timedelta(seconds=i, milliseconds=500))  # extra tick
    assert [d.key for d in decisions] == ["divergence:train:2", "divergence:train:7"]
    assert [d.evidence["value"] for d in decisions] == ["nan", "-inf"]
    assert decisions[0].action == "advise" and "NaN at step 20" in decisions[0].reason
    json.dumps([d.evidence for d in decisions], allow_nan=False)


def test_train_and_eval_are_kept_apart() -> None:
    history = History(progress_source=True)
    policy = DivergencePolicy(DivergenceConfig(action="stop"))
    history.add_progress(ProgressPoint(time=T0, value=NAN))
    history.add_progress(ProgressPoint(time=T0, value=NAN, kind="eval", name="eval_loss"))
    decisions = policy.decisions(history, T0)
    assert [d.key for d in decisions] == ["divergence:train:0", "divergence:eval:0"]
    assert all(d.action == "stop" for d in decisions)


def test_finite_losses_never_fire() -> None:
    history = History(progress_source=True)
    policy = DivergencePolicy(DivergenceConfig())
    for i in range(100):
        history.add_progress(ProgressPoint(time=T0, value=1e30 * i))
    assert policy.decisions(history, T0) == []
