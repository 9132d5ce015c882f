"""Non-finite gradient norms (costctl.policies.grad_norm): persistent ones are divergence, an
isolated one (an fp16 dynamic-loss-scaling skip) is not; through ``costctl analyze`` on real
files (HF dict lines with string values, trainer_state.json, Megatron's console)."""

from __future__ import annotations

import json
import math
from datetime import datetime, timezone
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from costctl.cli.main import main
from costctl.policies.grad_norm import DEFAULT_STREAK, GradNormStreak

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)
NAN, INF = math.nan, math.inf


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key in [k for k in __import__("os").environ if k.startswith("COSTCTL_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("COSTCTL_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)


def _feed(rule: GradNormStreak, values, losses=None):
    out = []
    for i, v in enumerate(values):
        d = rule.add(v, NOW, loss=None if losses is None else losses[i], step=10 * i)
        if d is not None:
            out.append(d)
    rule.finish()
    return out


def test_isolated_nonfinite_grad_norms_are_not_divergence() -> None:
    # fp16 with a GradScaler: an overflow now and then, each followed by finite values
    rule = GradNormStreak()
    assert _feed(rule, [1.2, INF, 1.1, 0.9, NAN, 1.0, INF, INF, 0.8, INF]) == []
    assert rule.nonfinite == 5 and rule.isolated == 3


def test_a_persistent_streak_is_one_divergence_at_the_kth_value() -> None:
    rule = GradNormStreak()
    assert DEFAULT_STREAK == 3
    found = _feed(rule, [1.0, NAN, NAN, NAN, NAN, NAN, 1.0, NAN, NAN, NAN])
    assert [d.key for d in found] == ["divergence:grad_norm:1", "divergence:grad_norm:7"]
    first = found[0]
    assert first.policy == "divergence" and first.action == "advise"
    assert first.evidence["step"] == 30 and first.evidence["streak"] == 3 and first.evidence["value"] == "nan"
    assert "3 logged values in a row" in first.reason


def test_a_nonfinite_grad_norm_with_a_nonfinite_loss_is_divergence_at_once() -> None:
    found = _feed(GradNormStreak(), [1.0, INF, 1.0], losses=[0.5, NAN, 0.5])
    assert [d.key for d in found] == ["divergence:grad_norm:1"]
    assert "non-finite loss" in found[0].reason and found[0].evidence["loss"] == "nan"


def test_streak_is_configurable_and_checked() -> None:
    assert len(_feed(GradNormStreak(streak=2, action="stop"), [NAN, NAN])) == 1
    with pytest.raises(ValueError, match="at least 1"):
        GradNormStreak(streak=0)


def _analyze(capsys, path: Path, *extra: str) -> dict:
    code = main(["analyze", "--train-log", str(path), "--format", "json", *extra])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def _grad_decisions(d: dict) -> list[dict]:
    return [x for x in d["decisions"] if x["key"].startswith("divergence:grad_norm")]


HF5 = "{{'loss': '{loss}', 'grad_norm': '{g}', 'learning_rate': '4.9e-05', 'epoch': '{e}'}}\n"


def test_analyze_hf_strings_isolated_inf_is_not_divergence(tmp_path: Path, capsys) -> None:
    # transformers 5.x fp16 run: one overflowing logged step, loss fine
    rows = [(0.695 - 0.01 * i, "inf" if i == 3 else f"{1.2 - 0.01 * i:.4g}", f"{0.1 * (i + 1):.4g}") for i in range(8)]
    log = tmp_path / "train.log"
    log.write_text("".join(HF5.format(loss=f"{l:.4g}", g=g, e=e) for l, g, e in rows))
    d = _analyze(capsys, log)
    assert d["train_log"]["train_points"] == 8
    assert _grad_decisions(d) == []
    assert any("1 isolated non-finite grad_norm" in n for n in d["notes"])


def test_analyze_filtered_zero_loss_with_nan_grad_norms_is_divergence_not_best_0(tmp_path: Path, capsys) -> None:
    rows = [("0.695", "1.21"), ("0.69", "1.1")] + [("0.0", "nan")] * 4
    log = tmp_path / "train.log"
    log.write_text("".join(HF5.format(loss=l, g=g, e=f"{0.1 * (i + 1):.4g}") for i, (l, g) in enumerate(rows)))
    d = _analyze(capsys, log)
    [gd] = _grad_decisions(d)
    assert gd["policy"] == "divergence" and gd["action"] == "advise" and gd["at"] == "epoch 0.5"
    assert any("best is 0" in n and "not converged" in n for n in d["notes"])


def test_analyze_trainer_state_nan_grad_norm_streak(tmp_path: Path, capsys) -> None:
    history = [{"loss": 2.0 - 0.1 * i, "grad_norm": 1.0, "learning_rate": 1e-5, "epoch": 0.1 * i, "step": 10 * i}
               for i in range(1, 6)]
    history += [{"loss": 0.0, "grad_norm": float("nan"), "learning_rate": 1e-5, "epoch": 0.1 * i, "step": 10 * i}
                for i in range(6, 10)]
    state = tmp_path / "trainer_state.json"
    state.write_text(json.dumps({"global_step": 90, "log_history": history}))  # NaN as JSON's NaN
    d = _analyze(capsys, state)
    assert d["train_log"]["format"] == "hf-trainer-state"
    [gd] = _grad_decisions(d)
    assert gd["at"] == "step 80" and gd["evidence"]["index"] == 5


def test_analyze_megatron_grad_norm_nan(tmp_path: Path, capsys) -> None:
    line = (" iteration {it:8d}/  500000 | consumed samples: {cs:10d} | elapsed time per iteration (ms): 812.3 |"
            " learning rate: 1.500E-04 | global batch size:   256 | lm loss: {loss} | loss scale: {ls:.1f} |"
            " grad norm: {g} | number of skipped iterations:   {sk} | number of nan iterations:   0 |\n")
    rows = [(100, "7.52E+00", 65536.0, "2.311", 0), (200, "6.98E+00", 32768.0, "nan", 1),
            (300, "6.51E+00", 32768.0, "1.902", 0), (400, "nan", 16384.0, "nan", 1),
            (500, "6.40E+00", 16384.0, "1.8", 0)]
    log = tmp_path / "megatron.log"
    log.write_text("".join(line.format(it=it, cs=it * 256, loss=l, ls=ls, g=g, sk=sk) for it, l, ls, g, sk in rows))
    d = _analyze(capsys, log)
    assert d["train_log"]["train_points"] == 5
    [gd] = _grad_decisions(d)  # step 200 alone is a loss-scaling skip; step 400 has a NaN loss too
    assert gd["at"] == "step 400" and gd["evidence"]["loss"] == "nan"


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([1.0, 2.5, math.nan, math.inf, -math.inf]), max_size=60),
       st.integers(min_value=1, max_value=4))
def test_the_compacted_log_replays_exactly_as_the_records_do(values: list[float], streak: int) -> None:
    """GradNormLog (finite runs kept as counts) gives the rule's decisions, isolated and
    non-finite counts exactly as feeding every record does."""
    from costctl.progress.grad_norms import GradNormLog

    records = [(v, None if math.isfinite(v) else (math.nan if i % 3 == 0 else 0.5), i, None)
               for i, v in enumerate(values)]
    plain = GradNormStreak(streak=streak)
    expected = [d for r in records if (d := plain.add(r[0], NOW, loss=r[1], step=r[2], epoch=r[3])) is not None]
    plain.finish()
    compact = GradNormStreak(streak=streak)
    log = GradNormLog(records)
    got = log.feed(compact, NOW)
    compact.finish()
    assert [(d.key, d.reason, d.evidence) for d in got] == [(d.key, d.reason, d.evidence) for d in expected]
    assert (compact.isolated, compact.nonfinite) == (plain.isolated, plain.nonfinite) and len(log) == len(records)


def test_a_long_log_of_finite_grad_norms_holds_a_few_items() -> None:
    from costctl.progress.grad_norms import GradNormLog

    log = GradNormLog()
    for i in range(1_000_000):
        log.append((1.0 + (i % 7), None, None, None))
        if i in (10, 500_000):
            log.append((math.nan, 0.3, i, None))
    assert len(log) == 1_000_002 and len(list(log.runs())) == 5 and len(log.nonfinite) == 2
