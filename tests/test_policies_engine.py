"""The policy engine (building, dedup, retention) and History, on a simulated run."""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

import pytest

from costctl.clock import SimClock
from costctl.config import Settings, load_settings
from costctl.money import Money, cost_of
from costctl.policies import History, PolicyEngine, plateau_fires
from costctl.policies.history import DEFAULT_RETENTION
from costctl.records import GpuReading, ProgressPoint, SignalStatus, TelemetrySample

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


@pytest.fixture
def settings_from(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    for key in [k for k in os.environ if k.upper().startswith("COSTCTL_")]:
        monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)

    def make(**overrides) -> Settings:
        return load_settings(overrides=overrides)

    return make


def sample(t: datetime, util: float, cpu: float) -> TelemetrySample:
    return TelemetrySample(time=t, gpus=(GpuReading(index=0, utilization=util),), gpu_status=SignalStatus.OK,
                           cpu_percent=cpu, cpu_status=SignalStatus.OK)


def test_builds_the_enabled_policies(settings_from) -> None:
    assert PolicyEngine(settings_from()).names == ["idle", "idle_fraction", "stall", "plateau", "not_learning", "overfitting", "unstable", "divergence"]
    s = settings_from(policies={"idle": {"time_window": "off"}, "stall": {"stall_window": "off", "stop_after": "off"},
                                "idle_fraction": {"time_window": "off"}, "budget": {"daily": "3"}})
    assert PolicyEngine(s).names == ["budget", "plateau", "not_learning", "overfitting", "unstable", "divergence"]
    assert PolicyEngine(s, only=["plateau"]).names == ["plateau"]
    with pytest.raises(ValueError, match="unknown policy 'nope'"):
        PolicyEngine(s, only=["nope"])


def test_a_simulated_run_plateau_then_exit_then_idle_stop(settings_from) -> None:
    s = settings_from(
        instance={"price_per_hour": "2.5", "currency": "CNY"},
        watch={"sample_interval": "10s"},
        policies={"idle": {"time_window": "5m"}, "stall": {"stall_window": "10m"},
                  "plateau": {"patience": 3, "threshold_mode": "abs", "threshold": 0.01},
                  "budget": {"total": "1", "warn_at": 0.5}},
    )
    engine = PolicyEngine(s)
    clock = SimClock(T0)
    history = History(sample_interval=s.watch.sample_interval, started_at=T0, child_running=True,
                      progress_source=True, total_steps=40)
    rate = Money(s.instance.price_per_hour, "CNY")
    losses = [1 / (1 + e) + 0.2 for e in range(15)] + [0.26] * 25  # improves, then flat
    decisions = []
    for tick in range(0, 800):  # 10 s ticks for 8000 s: the job trains 400 s, then exits at 400 s
        now = clock.now()
        running = tick < 40
        history.child_running = running
        history.add_sample(sample(now, 90.0 if running else 0.0, 100.0 if running else 0.0))
        if running:
            history.add_progress(ProgressPoint(time=now, value=losses[tick], step=tick + 1, epoch=tick + 1))
        history.spend_total = Money(cost_of(rate.amount, now - T0), "CNY")
        history.rate = rate
        for d in engine.evaluate(history, now):
            decisions.append(((now - T0).total_seconds(), d))
        clock.advance(10)
    by_policy = {}
    for sec, d in decisions:
        by_policy.setdefault(d.policy, []).append((sec, d))
        json.dumps(d.evidence, allow_nan=False)
    expected_plateau = plateau_fires(losses, patience=3, threshold_mode="abs", threshold=0.01)
    # One advice per plateau episode: the flat stretch fires the rule where torch would, once
    # advised and its repeats counted (the rule's every fire, first included).
    assert len(expected_plateau) > 1 and [d.evidence["index"] for _, d in by_policy["plateau"]] == expected_plateau[:1]
    plateau = next(p for p in engine.policies if p.name == "plateau")
    assert plateau.fires == len(expected_plateau)
    first_plateau = by_policy["plateau"][0][1]
    assert first_plateau.evidence["rest_of_run"]["currency"] == "CNY"
    # idle: the last busy sample is at 390 s; the first idle one at 400 s; 5 min later: 700 s.
    assert [(sec, d.action) for sec, d in by_policy["idle"]] == [(700.0, "stop")]
    # budget: 0.5 CNY at 720 s, 1 CNY at 1440 s (at 2.50 CNY/h)
    assert [(sec, d.action) for sec, d in by_policy["budget"]] == [(720.0, "warn"), (1440.0, "stop")]
    # no stall: the child exited before 10 min of silence; no divergence: all losses finite
    assert "stall" not in by_policy and "divergence" not in by_policy
    # History stays bounded: idle needs 5 min + 4 ticks, idle_fraction its hour + 4 ticks
    assert history.retention == max(DEFAULT_RETENTION, timedelta(minutes=5, seconds=40), timedelta(hours=1, seconds=40))
    assert len(history.samples) == history.retention / timedelta(seconds=10) + 1


def test_seen_keys_are_not_reported_again(settings_from) -> None:
    s = settings_from(policies={"budget": {"total": "1"}})
    history = History(spend_total=Money(Decimal("2"), "USD"))
    assert [d.key for d in PolicyEngine(s).evaluate(history, T0)] == ["budget:total:act"]
    engine = PolicyEngine(s, seen_keys=["budget:total:act"])
    assert engine.evaluate(history, T0) == []


def test_history_bounds_and_sequence_numbers() -> None:
    history = History(sample_interval=timedelta(seconds=1), retention=timedelta(seconds=10), max_progress=5)
    for i in range(100):
        history.add_sample(TelemetrySample(time=T0 + timedelta(seconds=i)))
        history.add_progress(ProgressPoint(time=T0 + timedelta(seconds=i), value=float(i)))
    assert len(history.samples) == 11 and history.samples[0].time == T0 + timedelta(seconds=89)
    assert len(history.progress) == 5 and history.last_progress_at == T0 + timedelta(seconds=99)
    points, missed = history.new_progress(90)
    assert [p.value for p in points] == [95.0, 96.0, 97.0, 98.0, 99.0] and missed == 5
    assert history.new_samples(100) == ([], 0)
    history.keep_at_least(timedelta(seconds=5))
    assert history.retention == timedelta(seconds=10)  # never shrinks


def test_a_window_longer_than_the_default_retention_keeps_its_evidence(settings_from) -> None:
    s = settings_from(watch={"sample_interval": "60s"}, policies={"idle": {"time_window": "90m"}})
    engine = PolicyEngine(s, only=["idle"])
    history = History(sample_interval=s.watch.sample_interval, started_at=T0)
    fired = []
    for minute in range(0, 121):
        now = T0 + timedelta(minutes=minute)
        history.add_sample(sample(now, 0.0, 0.0))
        fired += [(minute, d) for d in engine.evaluate(history, now)]
    assert [m for m, _ in fired] == [90]
    evidence = fired[0][1].evidence
    assert evidence["anchor_sample"] == "2026-01-01T00:00:00Z" and evidence["samples"] == 91


# --- a policy that raises never silences the others ---------------------------------------
def test_a_raising_policy_is_skipped_reported_once_and_the_others_still_decide():
    from datetime import datetime, timezone

    from costctl.config import Settings
    from costctl.policies import PolicyEngine
    from costctl.policies import base as policy_base
    from costctl.policies.base import POLICIES, Policy, register
    from costctl.policies.history import History
    from costctl.records import Decision

    saved_policies, saved_specs = dict(POLICIES), dict(policy_base._SPECS)
    try:
        @register
        class Broken(Policy):  # the docstring's plugin shape: no constructor of its own
            name = "broken_test"
            order = 1

            def evaluate(self, history, now):
                raise RuntimeError("plugin bug")

        @register
        class Fine(Policy):
            name = "fine_test"

            def evaluate(self, history, now):
                return Decision(time=now, policy=self.name, action="advise", reason="still here", key=f"fine:{now}")

        errors = []
        engine = PolicyEngine(Settings(), only=["broken_test", "fine_test"], on_error=lambda n, e: errors.append((n, str(e))))
        t = datetime(2026, 1, 1, tzinfo=timezone.utc)
        history = History()
        first = engine.evaluate(history, t)
        second = engine.evaluate(history, t.replace(minute=1))
        assert [d.policy for d in first + second] == ["fine_test", "fine_test"]
        assert errors == [("broken_test", "plugin bug")]  # said once, tried again each time
        assert isinstance(engine.failures["broken_test"], RuntimeError)
    finally:
        POLICIES.clear()
        POLICIES.update(saved_policies)
        policy_base._SPECS.clear()
        policy_base._SPECS.update(saved_specs)


def test_history_progress_is_a_plain_view_without_an_attribute_hook() -> None:
    """``History.progress`` is the init argument and then a read-only view of the held points;
    no ``__getattribute__`` hook taxes every other attribute read (found by the trial)."""
    from costctl.policies.history import History
    from costctl.records import ProgressPoint

    assert "__getattribute__" not in vars(History)
    t = datetime(2026, 1, 1, tzinfo=timezone.utc)
    first = ProgressPoint(time=t, value=2.0, step=1)
    history = History(progress=[first], max_progress=2)
    assert [p.value for p in history.progress] == [2.0]
    for i in range(2, 6000):
        history.add_progress(ProgressPoint(time=t + timedelta(seconds=i), value=1.0 / i, step=i))
    held = history.progress
    assert held[-1].step == 5999 and len(held) >= 2 and held == history.progress
    assert History().progress == [] and "progress=[" not in repr(History())
    with pytest.raises(AttributeError):
        history.progress = []  # type: ignore[misc]
