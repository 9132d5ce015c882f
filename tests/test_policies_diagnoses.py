"""The curve diagnoses beside the plateau: not learning, overfitting, unstable (each rule on
synthetic sequences, where it does not apply, one decision per episode, the money at stake), and
the plateau held back on a run that has not shown it learns. Simulated times only."""

from __future__ import annotations

import math
import random
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from costctl.money import Money
from costctl.policies import History, PlateauConfig, PlateauPolicy
from costctl.policies.not_learning import LearningCheck, NotLearningConfig, NotLearningPolicy
from costctl.policies.overfitting import OverfittingConfig, OverfittingPolicy
from costctl.policies.unstable import SwingCheck, UnstableConfig, UnstablePolicy
from costctl.progress.batch import PointBatch
from costctl.records import ProgressPoint

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _noise(n: int, level: float = 2.0, sd: float = 0.1, seed: int = 1) -> list[float]:
    rng = random.Random(seed)
    return [level + rng.gauss(0, sd) for _ in range(n)]


def _check(values: list[float], **kw) -> tuple[LearningCheck, list[tuple[int, str]]]:
    rule = LearningCheck(**kw)
    events = [(i, e) for i, v in enumerate(values) if (e := rule.add(v))]
    return rule, events


# -- not learning --------------------------------------------------------------------------------
def test_flat_noise_is_not_learning_once_at_min_points() -> None:
    rule, events = _check(_noise(200))
    assert events == [(24, "not_learning")] and rule.state == "not_learning"


def test_a_falling_loss_has_learned_and_never_fires() -> None:
    values = [2.0 * math.exp(-i / 30) + v - 2.0 for i, v in enumerate(_noise(200, sd=0.05))]
    rule, events = _check(values)
    assert events == [] and rule.state == "learned"
    assert _check(values[:12])[0].state == "learned"  # early


def test_a_slow_noisy_fall_counts_by_its_trend() -> None:
    values = [2.0 - 0.01 * i + v - 2.0 for i, v in enumerate(_noise(60, sd=0.08))]
    _, events = _check(values)
    assert events == []


def test_a_run_that_learns_later_ends_the_episode() -> None:
    values = _noise(40) + [1.0 + v - 2.0 for v in _noise(40, seed=2)]
    rule, events = _check(values)
    assert [e for _, e in events] == ["not_learning", "learned"] and rule.state == "learned"


def test_the_rule_does_not_apply_to_a_zero_start_negative_gan_rl_or_resumed_loss() -> None:
    rule, events = _check([0.0] + _noise(50))  # GRPO's loss
    assert events == [] and "at or below 0" in rule.not_applicable
    rule, events = _check(_noise(10) + [-0.5] + _noise(50))
    assert events == [] and "negative" in rule.not_applicable
    for name in ("G loss", "loss_D", "policy_loss", "value_loss", "kl", "contrastive_loss"):
        rule = LearningCheck()
        rule.name(name)
        assert rule.not_applicable and [rule.add(v) for v in _noise(50)].count("not_learning") == 0, name
    for name in ("loss", "train_loss", "train/box_loss", "total_loss", "train/dfl_loss"):
        rule = LearningCheck()
        rule.name(name)
        assert rule.not_applicable is None, name
    rule = LearningCheck()
    rule.position(140749.0)
    rule.add(2.0)
    rule.position(140799.0)
    assert "resumed" in rule.not_applicable


def test_warmup_points_are_ignored() -> None:
    values = [5.0] * 10 + _noise(100)  # a warm-up spike, then flat: not learning from its real start
    _, events = _check(values, warmup_points=10)
    assert events == [(34, "not_learning")]


def _history(**kw) -> History:
    return History(sample_interval=timedelta(seconds=5), started_at=T0, **kw)


def _add(history: History, values: list[float], *, kind: str = "train", name: str = "loss",
         step0: int = 0, every: int = 10, seconds: float = 60.0, total: int | None = None) -> None:
    batch = PointBatch()
    for i, v in enumerate(values):
        step = step0 + i * every
        batch.append(v, kind=kind, name=name, step=step, total=total,
                     time=(T0 + timedelta(seconds=seconds * (i + 1) + step0)).timestamp())
    history.add_batch(batch)


def test_not_learning_policy_says_what_it_is_and_prices_the_rest() -> None:
    history = _history(rate=Money(Decimal("2.00"), "USD"))
    policy = NotLearningPolicy(NotLearningConfig())
    _add(history, _noise(100), total=2000)
    [d] = policy.decisions(history, T0 + timedelta(hours=3))
    assert d.policy == "not_learning" and d.action == "advise" and d.evidence["step"] == 240
    assert "not a plateau" in d.reason and "cheaper card" in d.reason
    assert d.evidence["rest_of_run"]["cost"] and "the rest of the run would cost about" in d.reason
    assert policy.decisions(history, T0 + timedelta(hours=4)) == []  # once


def test_plateau_is_held_back_on_a_run_that_is_not_learning_even_with_downsize() -> None:
    history = _history()
    policy = PlateauPolicy(PlateauConfig(action="downsize", patience=3))
    _add(history, _noise(300))
    assert policy.decisions(history, T0) == [] and policy.held_back > 0
    # the same rule without the hold fires (ReduceLROnPlateau alone)
    history = _history()
    bare = PlateauPolicy(PlateauConfig(action="downsize", patience=3, hold_until_learning=False))
    _add(history, _noise(300))
    assert bare.decisions(history, T0)


def test_plateau_fires_on_a_run_that_learned_then_flattened() -> None:
    history = _history()
    policy = PlateauPolicy(PlateauConfig(patience=5))
    values = [2.0 * math.exp(-i / 10) + 0.5 for i in range(40)] + [0.5 + 0.0001 * (i % 3) for i in range(40)]
    _add(history, values)
    assert [d.policy for d in policy.decisions(history, T0)] == ["plateau"]


# -- unstable ------------------------------------------------------------------------------------
def test_swings_far_beyond_the_trend_are_unstable_once_per_episode() -> None:
    rule = SwingCheck()
    noisy = _noise(100, level=2.0, sd=0.5)
    events = [e for v in noisy if (e := rule.add(v))]
    assert events == ["unstable"]
    calm = _noise(100, level=2.0, sd=0.01, seed=3)
    assert [e for v in calm if (e := rule.add(v))] == ["stable"]


def test_a_single_jump_and_a_falling_trend_are_not_unstable() -> None:
    rule = SwingCheck()
    values = [2.0 - 0.01 * i for i in range(30)] + [24.0 - 0.3 * i for i in range(30)]  # composition change
    assert [e for v in values if (e := rule.add(v))] == []
    rule = SwingCheck()  # a loss near 0 printed with 4 decimals: its rounding is no swing
    values = [0.3 * math.exp(-i / 5) for i in range(30)] + [0.0001 * (1 + i % 3) for i in range(100)]
    assert [e for v in values if (e := rule.add(round(v, 4)))] == []


def test_unstable_policy_advises_a_bigger_effective_batch() -> None:
    history = _history(rate=Money(Decimal("1.50"), "USD"))
    policy = UnstablePolicy(UnstableConfig())
    _add(history, _noise(60, sd=0.6))
    [d] = policy.decisions(history, T0)
    assert "bigger effective batch" in d.reason and "memory-bound" in d.reason and "1.50" in d.reason


# -- overfitting ---------------------------------------------------------------------------------
def _overfit_run(history: History, *, interleaved: bool) -> None:
    train = [2.0 * math.exp(-i / 20) + 0.01 for i in range(100)]
    evals = [1.0, 0.9, 0.95, 1.0, 1.1, 1.2]
    if not interleaved:
        _add(history, train)
        _add(history, evals, kind="eval", name="eval_loss", every=200, seconds=1200.0)
        return
    for k, e in enumerate(evals):
        _add(history, train[k * 20:(k + 1) * 20] if k < 5 else [], step0=k * 200)
        _add(history, [e], kind="eval", name="eval_loss", step0=k * 200, seconds=1200.0)


def test_eval_rising_while_train_falls_is_overfitting_with_the_money_since_the_best_eval() -> None:
    history = _history(rate=Money(Decimal("3.00"), "USD"))
    policy = OverfittingPolicy(OverfittingConfig(smoothing=0.0, patience=2))
    _overfit_run(history, interleaved=False)
    [d] = policy.decisions(history, T0)
    assert d.policy == "overfitting" and d.evidence["best_step"] == 200 and d.evidence["step"] == 600
    assert d.evidence["spent_since_best"] == {"amount": "2.00", "currency": "USD"}  # 40 min at 3/h
    assert "stop, or keep the best checkpoint" in d.reason and "$2.00 was spent since the best eval" in d.reason


def test_overfitting_is_the_same_whether_train_and_eval_come_interleaved_or_apart() -> None:
    a, b = _history(), _history()
    pa, pb = (OverfittingPolicy(OverfittingConfig(smoothing=0.0, patience=2)),
              OverfittingPolicy(OverfittingConfig(smoothing=0.0, patience=2)))
    _overfit_run(a, interleaved=False)
    _overfit_run(b, interleaved=True)
    da, db = pa.decisions(a, T0), pb.decisions(b, T0)
    assert [(d.key, d.evidence["step"], d.evidence["best_step"]) for d in da] == \
        [(d.key, d.evidence["step"], d.evidence["best_step"]) for d in db] == [("overfitting:eval_loss:3", 600, 200)]


def test_eval_flat_while_train_flat_too_is_no_overfitting() -> None:
    history = _history()
    policy = OverfittingPolicy(OverfittingConfig(smoothing=0.0))
    _add(history, [1.0] * 100)
    _add(history, [1.0, 1.0, 1.01, 1.02, 1.03], kind="eval", name="eval_loss", every=200)
    assert policy.decisions(history, T0) == []


def test_unstable_names_a_bigger_card_only_when_the_run_is_memory_bound() -> None:
    from costctl.records import GpuReading, SignalStatus, TelemetrySample

    def advice(used_gib: float) -> str:
        history = _history()
        gpu = GpuReading(index=0, utilization=95.0, memory_used_bytes=int(used_gib * 2**30),
                         memory_total_bytes=24 * 2**30)
        history.add_sample(TelemetrySample(time=T0, gpus=(gpu,), gpu_status=SignalStatus.OK))
        _add(history, _noise(60, sd=0.6))
        [d] = UnstablePolicy(UnstableConfig()).decisions(history, T0)
        return d.reason

    assert "memory-bound" in advice(23.0) and "bigger card would let the batch grow" in advice(23.0)
    assert "not a bigger card" in advice(8.0)


def test_a_flood_is_thinned_for_the_statistical_diagnoses_and_still_judged() -> None:
    """A batch of a million values (a job flooding its output) feeds not_learning, unstable and
    the plateau rule's hold at most DIAGNOSIS_MAX_PER_BATCH values (every k-th, the newest kept):
    bounded work per evaluation, and the judgement stands (flat noise is not learning, a falling
    loss is learning)."""
    from costctl.policies.history import DIAGNOSIS_MAX_PER_BATCH, thin

    assert thin(range(10)) == range(10)
    picked = thin(range(1_000_001))
    assert len(picked) <= DIAGNOSIS_MAX_PER_BATCH and picked[0] == 0 and picked[-1] == 1_000_000
    rng = random.Random(3)
    for falling in (False, True):
        history = _history(max_progress=2_000_000)
        batch = PointBatch()
        for i in range(1_000_000):
            v = (2.0 * math.exp(-i / 200_000) if falling else 1.0) + 0.05 * rng.random()
            batch.append(v, step=i, time=(T0 + timedelta(milliseconds=i)).timestamp())
        history.add_batch(batch)
        nl = NotLearningPolicy(NotLearningConfig())
        un = UnstablePolicy(UnstableConfig())
        found = nl.decisions(history, T0 + timedelta(hours=1))
        un.decisions(history, T0 + timedelta(hours=1))
        assert nl.rule.n <= DIAGNOSIS_MAX_PER_BATCH and un.rule.n <= DIAGNOSIS_MAX_PER_BATCH
        assert bool(found) is (not falling), [d.reason for d in found]


def test_plateau_hold_applies_the_users_not_learning_settings() -> None:
    """The hold uses ``[policies.not_learning]`` as configured (not its defaults): a run whose
    fall is not "meaningful" under the user's ``min_drop`` has not shown it learns, so its plateau
    is held back."""
    from costctl.config import Settings
    from costctl.policies import PolicyEngine

    values = [2.0 * math.exp(-i / 10) + 0.5 for i in range(30)] + [0.5 + 0.0001 * (i % 3) for i in range(300)]

    def plateaus(**not_learning) -> tuple[int, int]:
        settings = Settings(policies={"plateau": {"patience": 5}, "not_learning": not_learning})
        engine = PolicyEngine(settings, only=("plateau",))
        history = _history()
        _add(history, values)
        found = [d for d in engine.evaluate(history, T0) if d.policy == "plateau"]
        return len(found), engine.policies[0].held_back

    fired, held = plateaus()
    assert fired >= 1 and held == 0
    fired, held = plateaus(min_drop=1000, min_trend_t=1000)  # no fall is meaningful: never shown to learn
    assert fired == 0 and held >= 1


def _interleaved(train: list[float], evals: dict[int, float]) -> list[tuple[str, int, float]]:
    out = []
    for i, v in enumerate(train):
        out.append(("train", i * 10, v))
        if i in evals:
            out.append(("eval", i * 10, evals[i]))
    return out


def test_an_open_overfitting_episode_supersedes_the_plateau_live_and_a_downsize_never_happens() -> None:
    """Train loss falls and flattens while the eval loss turned: after the overfitting decision no
    plateau decision (with ``action = "downsize"``: no move to a cheaper card) is reported, point
    by point as a live watch reads them; when the eval loss improves again, plateau may speak."""
    from costctl.config import Settings
    from costctl.policies import PolicyEngine

    train = [2.0 * math.exp(-i / 15) + 0.2 for i in range(60)] + [0.2 + 0.02 * math.exp(-i / 40) + 0.0001 * (i % 2)
                                                                  for i in range(400)]
    evals = {i: 1.0 - 0.01 * (i // 20) if i <= 100 else 0.95 + 0.03 * ((i - 100) // 20) for i in range(0, 460, 20)}
    settings = Settings(policies={"plateau": {"patience": 5, "action": "downsize"}})
    engine = PolicyEngine(settings, only=("plateau", "overfitting"))
    history = _history()
    found = []
    for n, (kind, step, v) in enumerate(_interleaved(train, evals)):
        batch = PointBatch()
        batch.append(v, kind=kind, name="loss" if kind == "train" else "eval_loss", step=step,
                     time=(T0 + timedelta(seconds=n)).timestamp())
        history.add_batch(batch)
        found += engine.evaluate(history, T0 + timedelta(seconds=n))
    over = [d for d in found if d.policy == "overfitting"]
    assert len(over) == 1
    opened = over[0].evidence["step"]
    assert not [d for d in found if d.policy == "plateau" and d.evidence["step"] >= opened]
    assert engine.superseded.get("plateau", 0) >= 1  # there were plateaus to drop
    # without the overfitting policy the same run gets plateau advice after that step
    bare = PolicyEngine(settings, only=("plateau",))
    history = _history()
    for n, (kind, step, v) in enumerate(_interleaved(train, evals)):
        batch = PointBatch()
        batch.append(v, kind=kind, name="loss" if kind == "train" else "eval_loss", step=step,
                     time=(T0 + timedelta(seconds=n)).timestamp())
        history.add_batch(batch)
        found = bare.evaluate(history, T0 + timedelta(seconds=n))
        if any(d.evidence["step"] >= opened for d in found):
            break
    else:
        raise AssertionError("the plateau rule alone never fired after the overfitting step")


def test_overfitting_covers_only_inside_its_episode() -> None:
    from costctl.records import Decision

    policy = OverfittingPolicy(OverfittingConfig())
    policy.episodes.append([(1000, None, None), (3000, None, None)])
    policy.episodes.append([(5000, None, None), None])

    def plateau(step):
        return Decision(time=T0, policy="plateau", action="advise", reason="", evidence={"step": step}, key=f"p{step}")

    assert [policy.covers(plateau(s)) for s in (500, 1000, 2999, 3000, 4999, 5000, 9000)] == [
        False, True, True, False, False, True, True]
    assert not policy.covers(Decision(time=T0, policy="unstable", action="advise", reason="",
                                      evidence={"step": 1500}, key="u"))


def test_a_suspected_overfit_covers_a_plateau_before_patience_runs_out() -> None:
    """The eval loss is worse than its best at one evaluation while the train loss fell: a train
    plateau from there is covered (never downsized), though overfitting is not reported yet."""
    from costctl.records import Decision

    history = _history()
    policy = OverfittingPolicy(OverfittingConfig(smoothing=0.0))
    train = [2.0 * math.exp(-i / 20) + 0.01 for i in range(60)]
    _add(history, train)
    _add(history, [1.0, 0.9, 0.95], kind="eval", name="eval_loss", every=200, seconds=1200.0)
    assert policy.decisions(history, T0) == []  # patience 3: not yet
    plateau = Decision(time=T0, policy="plateau", action="downsize", reason="", evidence={"step": 450}, key="p")
    early = Decision(time=T0, policy="plateau", action="downsize", reason="", evidence={"step": 150}, key="q")
    assert policy.covers(plateau) and not policy.covers(early)
    _add(history, [0.8], kind="eval", name="eval_loss", step0=600, seconds=1200.0)  # improves: no longer suspect
    policy.decisions(history, T0)
    later = Decision(time=T0, policy="plateau", action="downsize", reason="", evidence={"step": 700}, key="r")
    assert not policy.covers(later)
