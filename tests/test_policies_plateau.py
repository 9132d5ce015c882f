"""The plateau rule against PyTorch's own ReduceLROnPlateau, plus the plateau policy.

torch is required under CI=true (CI installs torch==2.13.0); elsewhere the torch comparisons
skip with a reason when torch is missing. A fire in torch is detected as the learning rate
dropping after ``scheduler.step(loss)`` (factor 0.5, eps 0, so every reduction is visible).
"""

from __future__ import annotations

import json
import math
import os
import random
import re
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

import pytest

from costctl.config import PlateauConfig
from costctl.money import Money
from costctl.policies import History, PlateauPolicy, PlateauTracker, plateau_fires
from costctl.records import ProgressPoint
from helpers import SHIELD

REPO = Path(__file__).resolve().parents[1]
from replay_support import corpus_file  # noqa: E402 - skips, or fails under CI, when absent
EXAMPLE = REPO / "examples" / "train_digits.py"
IN_CI = os.environ.get("CI", "").lower() == "true"
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def require_torch():
    """Import torch; under CI a missing torch FAILS the test, elsewhere it skips."""
    try:
        import torch
    except ImportError:
        if IN_CI:
            pytest.fail("torch is required under CI=true (pip install torch==2.13.0)")
        pytest.skip("torch is not installed; the ReduceLROnPlateau comparison needs it")
    return torch


def torch_fires(values: list[float], *, mode: str = "min", threshold: float = 1e-4,
                threshold_mode: str = "rel", patience: int = 10, cooldown: int = 0) -> list[int]:
    """0-based indices where torch's ReduceLROnPlateau lowers the LR on ``values``."""
    torch = require_torch()
    param = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([param], lr=1.0)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(
        optimizer, mode=mode, factor=0.5, patience=patience, threshold=threshold,
        threshold_mode=threshold_mode, cooldown=cooldown, min_lr=0.0, eps=0.0,
    )
    fires = []
    for i, value in enumerate(values):
        before = optimizer.param_groups[0]["lr"]
        scheduler.step(value)
        after = optimizer.param_groups[0]["lr"]
        if after < before:
            fires.append(i)
        assert after > 0, "LR underflowed: the torch reference can no longer show fires"
    return fires


def assert_same_as_torch(values: list[float], *, min_fires: int = 1, **kwargs) -> list[int]:
    expected = torch_fires(values, **kwargs)
    got = plateau_fires(values, **kwargs)
    assert got == expected
    assert len(got) >= min_fires, f"the rule must actually fire (>= {min_fires}) for {kwargs}"
    return got


# ---------------------------------------------------------------- synthetic sequences
def decay_then_noise(seed: int, n: int = 240) -> list[float]:
    rng = random.Random(seed)
    return [2.0 * math.exp(-i / 15) + 0.3 + rng.gauss(0, 0.01) for i in range(n)]


def with_nans(seed: int) -> list[float]:
    values = decay_then_noise(seed)
    rng = random.Random(seed + 100)
    for i in rng.sample(range(20, len(values)), 25):
        values[i] = float("nan")
    values[5] = float("nan")  # early NaN: a bad step before any plateau
    values[len(values) - 1] = float("inf")
    return values


def negative_losses(seed: int) -> list[float]:
    # e.g. a log-likelihood objective that goes below zero (use abs mode there)
    return [v - 1.5 for v in decay_then_noise(seed)]


def staircase() -> list[float]:
    # exact ties are not improvements: plateaus of equal values, then a drop
    return [float(3 - i // 30) for i in range(150)]


SEQUENCES = {
    "decay-noise-1": decay_then_noise(1),
    "decay-noise-2": decay_then_noise(2),
    "with-nan": with_nans(3),
    "staircase": staircase(),
}


@pytest.mark.parametrize("name", sorted(SEQUENCES))
@pytest.mark.parametrize("threshold_mode,threshold", [("rel", 1e-4), ("rel", 1e-2), ("abs", 1e-3), ("abs", 5e-2)])
@pytest.mark.parametrize("patience", [2, 5, 10])
def test_synthetic_sequences_fire_where_torch_does(name: str, threshold_mode: str, threshold: float,
                                                   patience: int) -> None:
    assert_same_as_torch(SEQUENCES[name], threshold_mode=threshold_mode, threshold=threshold, patience=patience)


@pytest.mark.parametrize("name", sorted(SEQUENCES))
@pytest.mark.parametrize("threshold_mode", ["rel", "abs"])
@pytest.mark.parametrize("patience,cooldown", [(2, 3), (5, 5), (0, 4)])
def test_cooldown_fires_again_like_torch(name: str, threshold_mode: str, patience: int, cooldown: int) -> None:
    assert_same_as_torch(SEQUENCES[name], threshold_mode=threshold_mode, patience=patience, cooldown=cooldown,
                         min_fires=2)


@pytest.mark.parametrize("threshold_mode,threshold", [("abs", 1e-3), ("abs", 0.0), ("rel", 1e-4)])
@pytest.mark.parametrize("patience", [2, 5])
def test_negative_losses_like_torch(threshold_mode: str, threshold: float, patience: int) -> None:
    # rel mode "misbehaves" for negative values (best*(1-t) is above best) — but the same way.
    assert_same_as_torch(negative_losses(4), threshold_mode=threshold_mode, threshold=threshold, patience=patience)


@pytest.mark.parametrize("threshold_mode", ["rel", "abs"])
def test_mode_max_like_torch(threshold_mode: str) -> None:
    accuracy = [1.0 - v / 3 for v in decay_then_noise(5)]
    assert_same_as_torch(accuracy, mode="max", threshold_mode=threshold_mode, patience=4, cooldown=2, min_fires=2)


def test_all_nan_sequence_fires_like_torch() -> None:
    # NaN < inf is False: every NaN is a bad step, from the first one on.
    fires = assert_same_as_torch([float("nan")] * 12, patience=3, min_fires=3)
    assert fires[0] == 3


@pytest.mark.parametrize("weight", [0.6, 0.9])
def test_smoothed_rule_equals_torch_on_the_tensorboard_ema(weight: float) -> None:
    values = with_nans(6)
    # TensorBoard's debiased EMA, written out independently; non-finite values pass through.
    smoothed, last, n = [], 0.0, 0
    for y in values:
        if not math.isfinite(y):
            smoothed.append(y)
            continue
        last = last * weight + (1 - weight) * y
        n += 1
        smoothed.append(last / (1 - weight ** n))
    expected = torch_fires(smoothed, patience=3, threshold=1e-3, threshold_mode="abs")
    got = plateau_fires(values, patience=3, threshold=1e-3, threshold_mode="abs", smoothing=weight)
    assert got == expected and got


def test_tensorboard_ema_first_values() -> None:
    tracker = PlateauTracker(smoothing=0.5)
    assert tracker.smooth(1.0) == pytest.approx(1.0)  # debiased: the first value is itself
    assert tracker.smooth(3.0) == pytest.approx((0.5 * 0.5 + 0.5 * 3.0) / (1 - 0.25))
    assert math.isnan(tracker.smooth(float("nan")))
    assert tracker.smooth(3.0) == pytest.approx((0.5 * 1.75 + 0.5 * 3.0) / (1 - 0.125))


# ---------------------------------------------------------------- real loss sequences
def t5_losses() -> list[float]:
    path = corpus_file("hf_trainer_state_t5_plateau.json")
    state = json.loads(path.read_text())
    losses = [entry["loss"] for entry in state["log_history"] if "loss" in entry]
    assert len(losses) == 430  # SOURCES.md
    return losses


@pytest.mark.parametrize("threshold_mode,threshold", [("rel", 1e-4), ("abs", 1e-3), ("abs", 1e-2)])
@pytest.mark.parametrize("patience,cooldown", [(2, 0), (5, 0), (10, 0), (5, 10)])
def test_t5_trainer_state_losses_like_torch(threshold_mode: str, threshold: float, patience: int,
                                            cooldown: int) -> None:
    assert_same_as_torch(t5_losses(), threshold_mode=threshold_mode, threshold=threshold, patience=patience,
                         cooldown=cooldown, min_fires=2)


_LOSS_LINE = re.compile(r"^epoch\s+(\d+)\s*/\s*(\d+)\s+(loss|val_loss):\s*(\S+)\s*$", re.MULTILINE)
#: Epochs for the example run. Its ``--quick`` alone runs 6 epochs, too few for patience 10; 60
#: quick epochs take seconds and reach the plateau. COSTCTL_TEST_FULL_EXAMPLE=1 runs the
#: README's full default run instead (minutes on a slow CPU).
EXAMPLE_EPOCHS = "60"


@pytest.fixture(scope="module")
def example_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[float]]:
    """Run examples/train_digits.py and read its per-epoch ``loss`` and ``val_loss`` lines."""
    if not EXAMPLE.is_file():
        if IN_CI:
            pytest.fail(f"{EXAMPLE} is missing")
        pytest.skip(f"{EXAMPLE} not written yet")
    env = {k: v for k, v in os.environ.items() if not k.startswith("COSTCTL_") or k == SHIELD}
    env["PYTHONUNBUFFERED"] = "1"
    workdir = tmp_path_factory.mktemp("digits")
    help_text = subprocess.run([sys.executable, str(EXAMPLE), "--help"], capture_output=True, text=True,
                               timeout=120, env=env, cwd=workdir).stdout
    args = ["--checkpoint-dir", str(workdir / "checkpoints")]
    if not os.environ.get("COSTCTL_TEST_FULL_EXAMPLE"):
        args += ["--quick"] if "--quick" in help_text else []
        args += ["--epochs", EXAMPLE_EPOCHS] if "--epochs" in help_text else []
    proc = subprocess.run([sys.executable, str(EXAMPLE), *args], capture_output=True, text=True, timeout=600,
                          env=env, cwd=workdir)
    assert proc.returncode == 0, proc.stderr[-2000:]
    series: dict[str, list[float]] = {"loss": [], "val_loss": []}
    for m in _LOSS_LINE.finditer(proc.stdout):
        series[m.group(3)].append(float(m.group(4)))
    assert len(series["loss"]) >= 20 and len(series["val_loss"]) == len(series["loss"]), proc.stdout[-2000:]
    return series


@pytest.mark.parametrize("threshold_mode,threshold", [("rel", 1e-4), ("abs", 1e-3)])
@pytest.mark.parametrize("patience", [2, 5, 10])
def test_example_run_losses_fire_where_torch_does(example_run: dict[str, list[float]], threshold_mode: str,
                                                  threshold: float, patience: int) -> None:
    assert_same_as_torch(example_run["loss"], threshold_mode=threshold_mode, threshold=threshold,
                         patience=patience)


@pytest.mark.parametrize("threshold_mode,threshold,patience,cooldown",
                         [("rel", 1e-4, 2, 2), ("abs", 1e-3, 5, 5), ("rel", 1e-2, 5, 5)])
def test_example_run_cooldown_fires_twice_like_torch(example_run: dict[str, list[float]], threshold_mode: str,
                                                     threshold: float, patience: int, cooldown: int) -> None:
    assert_same_as_torch(example_run["loss"], threshold_mode=threshold_mode, threshold=threshold,
                         patience=patience, cooldown=cooldown, min_fires=2)


@pytest.mark.parametrize("patience", [2, 5])
def test_example_run_eval_losses_like_torch(example_run: dict[str, list[float]], patience: int) -> None:
    assert_same_as_torch(example_run["val_loss"], patience=patience)


def test_example_run_through_the_policy(example_run: dict[str, list[float]]) -> None:
    """The policy, fed ProgressPoints one tick at a time, fires on the same points as the rule;
    a decision opens each plateau episode (later fires with no improvement between are repeats)."""
    history = _history()
    policy = PlateauPolicy(PlateauConfig(patience=5))
    fired = []
    for epoch, (loss, val) in enumerate(zip(example_run["loss"], example_run["val_loss"]), start=1):
        now = T0 + timedelta(seconds=epoch)
        history.add_progress(ProgressPoint(time=now, value=loss, epoch=epoch))
        history.add_progress(ProgressPoint(time=now, value=val, kind="eval", name="val_loss", epoch=epoch))
        fired += [d.evidence["epoch"] - 1 for d in policy.decisions(history, now)]
    expected = torch_fires(example_run["loss"], patience=5)
    assert policy.fires == len(expected)
    assert fired and fired[0] == expected[0] and set(fired) <= set(expected) and len(fired) < len(expected)


# ---------------------------------------------------------------- the policy
def _history(**kwargs) -> History:
    return History(sample_interval=timedelta(seconds=5), started_at=T0, progress_source=True, **kwargs)


def test_policy_evaluates_once_per_progress_point_and_names_it() -> None:
    history = _history(rate=Money(Decimal("2.50"), "CNY"))
    policy = PlateauPolicy(PlateauConfig(patience=2, threshold=1e-3, threshold_mode="abs"))
    losses = [1.0, 0.5, 0.5, 0.5, 0.5, 0.4, 0.4, 0.4, 0.4]
    decisions = []
    for i, value in enumerate(losses):
        now = T0 + timedelta(minutes=i + 1)
        history.add_progress(ProgressPoint(time=now, value=value, step=100 * (i + 1)))
        for _ in range(3):  # several ticks per point change nothing
            decisions += policy.decisions(history, now)
    assert [d.evidence["index"] for d in decisions] == plateau_fires(losses, patience=2, threshold=1e-3,
                                                                      threshold_mode="abs") == [4, 8]
    first = decisions[0]
    assert first.key == "plateau:train:4" and first.action == "advise"
    assert first.evidence["step"] == 500 and first.evidence["value"] == 0.5 and first.evidence["best"] == 0.5
    assert first.evidence["rest_of_run"] is None  # the run's length is unknown ...
    assert first.evidence["spend_per_hour"] == "2.50" and "CN¥2.50/h" in first.reason  # ... so: spend per hour
    json.dumps(first.evidence, allow_nan=False)


def test_policy_prices_the_rest_of_the_run_when_its_length_is_known() -> None:
    rate = Money(Decimal("2.50"), "CNY")
    history = _history(rate=rate, total_steps=1000)
    policy = PlateauPolicy(PlateauConfig(hold_until_learning=False, patience=0, threshold_mode="abs", threshold=0.0))
    history.add_progress(ProgressPoint(time=T0 + timedelta(hours=1), value=1.0, step=100))
    history.add_progress(ProgressPoint(time=T0 + timedelta(hours=2), value=1.0, step=200))
    (decision,) = policy.decisions(history, T0 + timedelta(hours=2))
    rest = decision.evidence["rest_of_run"]
    # 2 h for 200 of 1000 steps -> 8 h more at 2.50 CNY/h
    assert Decimal(rest["remaining_s"]) == Decimal(2 * 3600) * 800 / 200
    assert Decimal(rest["cost"]) == Decimal("2.50") * Decimal(8)
    assert rest["currency"] == "CNY" and "about CN¥20.00 at the current rate" in decision.reason
    # A point's own total (tqdm total) wins over History.total_steps (after an improvement,
    # so that the next fire opens a new plateau episode, with a decision of its own).
    history.add_progress(ProgressPoint(time=T0 + timedelta(hours=2, minutes=30), value=0.5, step=250))
    history.add_progress(ProgressPoint(time=T0 + timedelta(hours=3), value=0.5, step=300, total=400))
    (decision,) = policy.decisions(history, T0 + timedelta(hours=3))
    assert Decimal(decision.evidence["rest_of_run"]["cost"]) == Decimal("2.50") * Decimal(3) * 100 / 300


def test_policy_monitors_only_the_configured_kind() -> None:
    history = _history()
    policy = PlateauPolicy(PlateauConfig(hold_until_learning=False, patience=1, monitor="eval", action="downsize"))
    train = [ProgressPoint(time=T0 + timedelta(seconds=i), value=1.0) for i in range(10)]
    for p in train:
        history.add_progress(p)
    assert policy.decisions(history, T0 + timedelta(seconds=10)) == []
    for i in range(3):
        history.add_progress(ProgressPoint(time=T0 + timedelta(seconds=20 + i), value=2.0, kind="eval",
                                           name="eval_loss"))
    (decision,) = policy.decisions(history, T0 + timedelta(seconds=30))
    assert decision.key == "plateau:eval:2" and decision.evidence["metric"] == "eval_loss"
    assert decision.action == "downsize" and decision.evidence["configured_action"] == "downsize"


def test_tracker_rejects_bad_settings() -> None:
    for kwargs in ({"mode": "median"}, {"threshold_mode": "pct"}, {"patience": -1}, {"smoothing": 1.0}):
        with pytest.raises(ValueError):
            PlateauTracker(**kwargs)


def test_rest_of_run_from_epoch_lines() -> None:
    """``epoch 30/120 loss: ...`` gives epoch=30, total=120 and no step: the epoch is the position."""
    history = _history(rate=Money(Decimal("1.20"), "USD"))
    policy = PlateauPolicy(PlateauConfig(patience=0, threshold_mode="abs", threshold=0.0))
    for epoch in (29, 30):
        history.add_progress(ProgressPoint(time=T0 + timedelta(minutes=epoch), value=0.5, epoch=float(epoch),
                                           total=120))
    (decision,) = policy.decisions(history, T0 + timedelta(minutes=30))
    # 30 min for 30 of 120 epochs -> 90 min more at 1.20 USD/h
    assert Decimal(decision.evidence["rest_of_run"]["cost"]) == Decimal("1.20") * Decimal(90) / 60
    assert decision.evidence["epoch"] == 30.0 and "epoch 30" in decision.reason


# ---------------------------------------------------------------- at volume: batches, episodes
def _flood_values(n: int, seed: int = 7) -> list[float]:
    """A decaying loss with noise, then long flat noisy stretches and a late second drop."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        base = 2.0 * math.exp(-i / (n / 20)) + (0.5 if i < n * 0.7 else 0.2)
        out.append(base + rng.gauss(0, 0.01))
    return out


def test_one_million_points_in_batches_fire_exactly_where_the_rule_does() -> None:
    """The batched loop (PlateauTracker.step_many) equals the point-by-point rule (which the
    torch parity tests pin to ReduceLROnPlateau) on a 1 M-point sequence fed in chunks, and the
    policy fed the same sequence through a bounded History counts every fire."""
    from costctl.progress.batch import PointBatch

    values = _flood_values(1_000_000)
    kwargs = dict(patience=10, threshold=1e-4, threshold_mode="rel")
    expected = plateau_fires(values, **kwargs)
    assert len(expected) > 100
    policy = PlateauPolicy(PlateauConfig(**kwargs, hold_until_learning=False))  # the rule alone, every fire
    history = _history(max_progress=10_000)
    decisions = []
    pos = 0
    sizes = [1, 7, 4096, 65536, 100_000]
    k = 0
    while pos < len(values):
        n = sizes[k % len(sizes)]
        k += 1
        batch = PointBatch()
        for v in values[pos:pos + n]:
            batch.append(v, step=pos, time=(T0 + timedelta(seconds=pos)).timestamp())
            pos += 1
        history.add_batch(batch)
        decisions += policy.decisions(history, T0 + timedelta(seconds=pos))
    assert policy.missed == 0 and policy.fires == len(expected)
    assert history.progress_held <= 100_000  # max_progress, or the newest batch when larger
    # one decision per episode: each opens at a fire preceded by an improvement since the last fire
    tracker = PlateauTracker(**kwargs)
    opens = []
    for i, v in enumerate(values):
        if tracker.step(v) and (not opens or improved):
            opens.append(i)
        if tracker.fires and tracker.fires[-1] == i:
            improved = False
        elif tracker.best == v:
            improved = True
    assert [d.evidence["index"] for d in decisions] == opens
    assert 0 < len(decisions) < len(expected)


def test_a_plateau_episode_is_one_decision_with_its_repeats_counted() -> None:
    history = _history()
    policy = PlateauPolicy(PlateauConfig(patience=2, threshold=1e-3, threshold_mode="abs"))
    flat = [1.0, 0.5] + [0.5] * 30  # fires at 4, 7, 10, ... without improving: one episode
    decisions, updates = [], []
    for i, value in enumerate(flat):
        now = T0 + timedelta(seconds=10 * (i + 1))
        history.add_progress(ProgressPoint(time=now, value=value, step=i))
        decisions += policy.decisions(history, now)
        updates += policy.updates(now)
    fires = plateau_fires(flat, patience=2, threshold=1e-3, threshold_mode="abs")
    assert len(fires) == 10 and [d.evidence["index"] for d in decisions] == fires[:1]
    assert decisions[0].evidence["repeats"] == 1
    # updated at most once per UPDATE_EVERY_S (60 s of progress time here: every 6 points)
    assert updates and all(key == decisions[0].key for key, _ in updates)
    assert len(updates) <= (len(flat) * 10) // int(PlateauPolicy.UPDATE_EVERY_S) + 1
    # the metric improves: the episode ends (its final count), and the next fire opens a new one
    for j, value in enumerate([0.1] + [0.1] * 3):
        now = T0 + timedelta(seconds=10 * (len(flat) + j + 1))
        history.add_progress(ProgressPoint(time=now, value=value, step=len(flat) + j))
        decisions += policy.decisions(history, now)
        updates += policy.updates(now)
    final = [e for _, e in updates if e["episode_ended"]]
    assert len(final) == 1 and final[0]["repeats"] == len(fires)
    assert len(decisions) == 2 and decisions[1].key != decisions[0].key


def test_a_decision_made_inside_a_batch_carries_the_state_it_fired_in() -> None:
    """A fire in the middle of a large batch (a flood between two ticks, or analyze's blocks)
    reports the rule's best and monitored value at that fire, exactly as point-by-point feeding
    does, not the state at the end of the batch (which once said "no improvement on best 0.1004"
    for a plateau whose best was 0.6571)."""
    from costctl.progress.batch import PointBatch

    values = _flood_values(20_000)
    kwargs = dict(patience=10, threshold=1e-4, threshold_mode="rel")

    def run(sizes: list[int]) -> list[dict]:
        policy = PlateauPolicy(PlateauConfig(**kwargs))
        history = _history(max_progress=100_000)
        out, pos, k = [], 0, 0
        while pos < len(values):
            n = sizes[k % len(sizes)]
            k += 1
            batch = PointBatch()
            for v in values[pos:pos + n]:
                batch.append(v, step=pos, time=(T0 + timedelta(seconds=pos)).timestamp())
                pos += 1
            history.add_batch(batch)
            out += policy.decisions(history, T0 + timedelta(seconds=pos))
        return [{k: d.evidence[k] for k in ("index", "step", "value", "monitored_value", "best")}
                | {"reason": d.reason} for d in out]

    one_by_one = run([1])
    assert len(one_by_one) > 3
    assert run([20_000]) == one_by_one
    assert run([7, 4096, 333]) == one_by_one


def test_the_rule_restarts_when_the_monitored_series_moves_to_another() -> None:
    """The live watch's primary series can move ('loss' first, a 'total' appearing later takes
    over: costctl.progress.series.PrimarySeries). A best value of one loss says nothing about
    another, so the rule restarts on the new series: a falling 'total' whose values are all
    above the old series' best is no plateau — whether the move falls between two batches or
    inside one — and decision indexes stay unique across the move."""
    from costctl.progress.batch import PointBatch

    old = [1.0 - 0.01 * i for i in range(50)]  # 'loss': falls to 0.51
    new = [5.0 - 0.05 * i for i in range(50)]  # 'total': falls, every value above 0.51

    def run(split_inside: bool) -> tuple[list, PlateauPolicy]:
        policy = PlateauPolicy(PlateauConfig(patience=5, threshold=1e-4, threshold_mode="rel"))
        history = _history(max_progress=1000)
        batches = []
        first = PointBatch()
        for i, v in enumerate(old[:40]):
            first.append(v, name="loss", step=i, time=(T0 + timedelta(seconds=i)).timestamp())
        batches.append(first)
        second = PointBatch()  # the rest of 'loss', then 'total' (one drain holding the move)
        for i, v in enumerate(old[40:], start=40):
            second.append(v, name="loss", step=i, time=(T0 + timedelta(seconds=i)).timestamp())
        if not split_inside:
            batches.append(second)
            second = PointBatch()
        for i, v in enumerate(new, start=50):
            second.append(v, name="total", step=i, time=(T0 + timedelta(seconds=i)).timestamp())
        batches.append(second)
        out = []
        for n, batch in enumerate(batches):
            history.add_batch(batch)
            out += policy.decisions(history, T0 + timedelta(seconds=100 + n))
        return out, policy

    for split_inside in (False, True):
        decisions, policy = run(split_inside)
        assert decisions == [], [d.reason for d in decisions]
        assert policy.tracker.last_epoch == len(new) and policy._index_base == len(old)

    # the same 'total' values after the 'loss' ones as ONE series would plateau at once
    policy = PlateauPolicy(PlateauConfig(patience=5, threshold=1e-4, threshold_mode="rel"))
    history = _history(max_progress=1000)
    batch = PointBatch()
    for i, v in enumerate(old + new):
        batch.append(v, name="loss", step=i, time=(T0 + timedelta(seconds=i)).timestamp())
    history.add_batch(batch)
    assert policy.decisions(history, T0 + timedelta(seconds=200))


def test_a_plateau_of_a_named_series_says_which_loss() -> None:
    """A GAN's 'D loss' plateau names the series; the plain 'loss' needs no name."""
    from costctl.progress.batch import PointBatch

    for name, said in (("D loss", "train loss 'D loss' plateaued"), ("loss", "train loss plateaued")):
        policy = PlateauPolicy(PlateauConfig(patience=2, threshold=1e-3, threshold_mode="abs"))
        history = _history()
        batch = PointBatch()
        for i, v in enumerate([1.0, 0.5, 0.5, 0.5, 0.5]):
            batch.append(v, name=name, step=i, time=(T0 + timedelta(seconds=i)).timestamp())
        history.add_batch(batch)
        (d,) = policy.decisions(history, T0 + timedelta(seconds=10))
        assert d.reason.startswith(said), d.reason
