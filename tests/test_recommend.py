"""`costctl recommend`: which cards fit, ranked by job cost, and what makes the others fit."""

from __future__ import annotations

import json
from datetime import date
from decimal import Decimal
from pathlib import Path

import pytest

from costctl.catalog.gpus import get_gpu, load_catalog
from costctl.catalog.memory import GIB, Setup, estimate_memory
from costctl.catalog.models import preset
from costctl.catalog.prices import PriceTable, make_entry
from costctl.catalog.recommend import (
    Reference,
    job_hours_from_flops,
    recommend,
    suggestions_for,
    training_flops,
    usable_bytes,
)
from costctl.cli.main import main
from costctl.money import ExchangeRate

DATA = Path(__file__).parent / "data"
EIGHTY_GB = ["A100-80GB", "A100-80GB-PCIe", "A800-80GB", "H100-SXM", "H100-PCIe", "H800"]


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("COSTCTL_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("COLUMNS", "250")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _prices(*rows, rates=()):
    return PriceTable(tuple(make_entry(*r, "2026-07-01", "test") for r in rows), rates=tuple(rates))


NO_PRICES = PriceTable(())


def _fit_names(rec):
    return {o.gpu.name for o in rec.fits}


def test_bert_base_batch_32_seq_128_mixed_fits_a_16gb_t4():
    """The common blog case: BERT-base (110M) fine-tune, batch 32, seq 128, mixed precision, on a T4."""
    rec = recommend(preset("bert-base"), Setup(batch_size=32, seq_len=128, precision="mixed"), load_catalog(), NO_PRICES)
    assert "T4" in _fit_names(rec)
    t4 = next(o for o in rec.fits if o.gpu.name == "T4")
    assert t4.dtype == "fp16"  # the T4 has no BF16: mixed precision runs in fp16 there
    assert t4.required_bytes < usable_bytes(get_gpu("T4"), 0.10)


def test_7b_full_fine_tune_needs_more_than_one_80gb_card():
    """7B full fine-tune, mixed precision, AdamW: 18 B/param alone is 121 GB (HF anatomy)."""
    setup = Setup(batch_size=1, seq_len=2048, precision="mixed", optimizer="adamw")
    rec = recommend(preset("llama-2-7b"), setup, load_catalog(), NO_PRICES)
    assert rec.breakdown.total > 80 * GIB
    assert rec.fits == []  # not even the H200 (141 GB) with 10 % headroom
    advice = {a.gpu.name: a for a in rec.no_fit}
    for name in EIGHTY_GB:
        changes = " | ".join(s.change for s in advice[name].suggestions)
        assert "ZeRO-3" in changes and "Offload" in changes and "LoRA" in changes, name
        assert all(s.fits for s in advice[name].suggestions)
        zero = next(s for s in advice[name].suggestions if "ZeRO-3" in s.change)
        assert zero.gpus > 1 and zero.setup.zero_stage == 3
    assert any("no single card fits" in n and "A100-80GB" in n for n in rec.notes)


def test_7b_recommend_cli_says_so(env, capsys):
    assert main(["recommend", "--model", "llama-2-7b", "--batch", "1", "--seq-len", "2048"]) == 0
    out = capsys.readouterr().out
    assert "No single card fits" in out
    assert "ZeRO-3" in out and "ZeRO-Offload" in out and "LoRA" in out


@pytest.mark.parametrize("gpu", ["V100-16GB", "T4", "RTX A4000"])
def test_resnet50_fp32_batch_256_does_not_fit_16gb_but_112_does(gpu):
    """NVIDIA DeepLearningExamples ResNet-50 v1.5 uses per-GPU batch 112 in FP32 (256 with AMP) on
    a V100-16GB; batch 256 in FP32 does not fit 16 GB."""
    card = get_gpu(gpu)
    model = preset("resnet50")
    r256 = recommend(model, Setup(batch_size=256, precision="fp32", optimizer="sgd-momentum"), load_catalog(),
                     NO_PRICES, gpus=[card])
    r112 = recommend(model, Setup(batch_size=112, precision="fp32", optimizer="sgd-momentum"), load_catalog(),
                     NO_PRICES, gpus=[card])
    assert r256.fits == [] and [a.gpu.name for a in r256.no_fit] == [gpu]
    assert _fit_names(r112) == {gpu}
    amp = recommend(model, Setup(batch_size=256, precision="mixed", optimizer="sgd-momentum"), load_catalog(),
                    NO_PRICES, gpus=[card])
    assert _fit_names(amp) == {gpu}  # DLE's AMP batch on the same card
    # and the advice for batch 256 in fp32 includes a micro-batch that keeps the effective batch
    micro = next(s for s in r256.no_fit[0].suggestions if s.change.startswith("micro-batch"))
    steps = int(micro.change.split(" x ")[1].split()[0])
    assert micro.setup.batch_size * steps == 256 and micro.fits


def test_bf16_precision_skips_cards_without_bf16():
    rec = recommend(preset("gpt2"), Setup(batch_size=1, seq_len=256, precision="bf16"), load_catalog(), NO_PRICES)
    skipped = dict(rec.excluded)
    # every card without BF16 (Turing and Volta: T4, the V100s, RTX 2080 Ti), and only those
    assert set(skipped) == {g.name for g in load_catalog().models if not g.bf16}
    assert {"T4", "V100-16GB", "V100-32GB", "RTX 2080 Ti"} <= set(skipped)
    assert "BF16" in skipped["T4"]


def test_ranked_by_job_cost_from_flops():
    """6*N + 6*L*s*h FLOPs per token (Kaplan et al. 2020; N = the weights that go through
    matmuls: the layers' projections and the output head, not the position embeddings) at the
    fraction of the dense peak published runs reach (gpt2 has no row: the median one);
    cost = price x GPUs x hours."""
    prices = _prices(("p", "RTX 4090", "on-demand", "0.60", "USD"), ("p", "H100 SXM", "on-demand", "2.50", "USD"),
                     ("p", "A100 SXM", "on-demand", "1.20", "USD"))
    model, setup, tokens = preset("gpt2"), Setup(batch_size=8, seq_len=1024, precision="mixed"), 1e10
    rec = recommend(model, setup, load_catalog(), prices, work=tokens)
    [(currency, ranked)] = [(c, opts) for c, opts in rec.groups if c is not None]
    assert currency == "USD"
    costs = [o.cost.amount for o in ranked]
    assert costs == sorted(costs)
    matmul = 12 * (4 * 768 * 768 + 2 * 768 * 3072) + 50257 * 768
    # all params less position embeddings (1024 x 768), per-layer biases and LayerNorms (13h), final norm (2h)
    assert matmul == model.param_count() - 1024 * 768 - 12 * 13 * 768 - 2 * 768
    flops = (6 * matmul + 6 * 12 * 1024 * 768) * tokens
    assert training_flops(model, setup, tokens, 1024) == pytest.approx(flops)
    h100 = next(o for o in ranked if o.gpu.name == "H100-SXM")
    assert h100.mfu_basis == "median" and 0.15 < h100.mfu < 0.35
    assert h100.hours == pytest.approx(flops / (989.5e12 * h100.mfu) / 3600)
    fixed = recommend(model, setup, load_catalog(), prices, work=tokens, mfu=0.35)
    h100_fixed = next(o for o in fixed.fits if o.gpu.name == "H100-SXM")
    assert h100_fixed.hours == pytest.approx(flops / (989.5e12 * 0.35) / 3600) and h100_fixed.mfu_basis == "given"
    assert h100.cost.amount == pytest.approx(Decimal("2.50") * Decimal(repr(h100.hours)))
    assert h100.cost.currency == "USD"
    # cards without a price still show, after the priced ones
    assert rec.groups[-1][0] is None and "A40" in {o.gpu.name for o in rec.groups[-1][1]}


def test_multi_gpu_cost_counts_every_gpu():
    prices = _prices(("p", "H100 SXM", "on-demand", "2.00", "USD"))
    model = preset("gpt2")
    one = recommend(model, Setup(batch_size=8, seq_len=1024), load_catalog(), prices, work=1e10, provider="p")
    four = recommend(model, Setup(batch_size=8, seq_len=1024, gpus=4), load_catalog(), prices, work=1e10, provider="p")
    [o1], [o4] = one.fits, four.fits
    assert o4.hours == pytest.approx(o1.hours / 4)
    assert o4.hourly.amount == 4 * o1.hourly.amount
    assert o4.cost.amount == pytest.approx(o1.cost.amount)


def test_time_from_a_reference_card_scales_by_tflops_and_bandwidth():
    prices = _prices(("p", "A100 SXM", "on-demand", "1.20", "USD"), ("p", "H100 SXM", "on-demand", "2.50", "USD"))
    ref = Reference(get_gpu("A100-80GB"), hours=10.0)
    rec = recommend(preset("gpt2"), Setup(batch_size=8, seq_len=1024), load_catalog(), prices, reference=ref)
    hours = {o.gpu.name: o.hours for o in rec.fits if o.price}
    assert hours["A100-80GB"] == pytest.approx(10.0)
    assert hours["H100-SXM"] == pytest.approx(10.0 * (0.5 * 312 / 989.5 + 0.5 * 2039 / 3350))
    assert any("scaled from 10 h on A100-80GB" in n for n in rec.notes)


def test_currencies_rank_separately_without_a_rate_and_together_with_one():
    rows = (("autodl", "RTX 4090", "on-demand", "1.98", "CNY"), ("runpod", "RTX 4090", "on-demand", "0.34", "USD"),
            ("runpod", "RTX 3090", "on-demand", "0.30", "USD"))
    setup = Setup(batch_size=8, seq_len=512)
    apart = recommend(preset("gpt2"), setup, load_catalog(), _prices(*rows), work=1e9)
    assert [c for c, _ in apart.groups if c] == ["CNY", "USD"]
    assert any("ranked separately" in n for n in apart.notes)
    rate = ExchangeRate("USD", "CNY", Decimal("7.10"), date(2026, 7, 1))
    together = recommend(preset("gpt2"), setup, load_catalog(), _prices(*rows, rates=[rate]), work=1e9, currency="USD")
    priced = [g for g in together.groups if g[0]]
    assert [c for c, _ in priced] == ["USD"] and len(priced[0][1]) == 3
    assert "prices converted at 1 USD = 7.10 CNY (as of 2026-07-01)" in together.notes


def test_suggestions_for_a_card_that_is_too_small():
    model, setup = preset("gpt2"), Setup(batch_size=8, seq_len=1024, precision="fp32")  # ~25 GB
    card = get_gpu("RTX 4090")
    assert estimate_memory(model, setup).total > usable_bytes(card, 0.10)
    tips = suggestions_for(model, setup, card, 0.10)
    changes = [s.change for s in tips]
    assert changes[0].startswith("micro-batch ")  # least intrusive first
    assert any(c.startswith("mixed precision") for c in changes)
    assert any("activation checkpointing" == c for c in changes)
    for s in tips:
        assert s.fits and s.required_bytes <= usable_bytes(card, 0.10)
        assert s.required_bytes == estimate_memory(model, s.setup).total


def test_combined_plan_when_no_single_change_is_enough():
    tips = suggestions_for(preset("llama-2-7b"), Setup(batch_size=4, seq_len=2048), get_gpu("RTX 4090"), 0.10)
    assert len(tips) == 1 and tips[0].fits and " + " in tips[0].change and "LoRA" in tips[0].change


def test_hours_need_a_rate_for_the_dtype():
    assert job_hours_from_flops(989.5e12 * 3600, get_gpu("H100-SXM"), "bf16", 1, 1.0) == pytest.approx(1.0)


# --- CLI --------------------------------------------------------------------------------------------


def test_cli_json_has_total_bytes_and_every_term(env, capsys):
    assert main(["recommend", "--model", "bert-base", "--batch", "32", "--seq-len", "128", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    mem = out["memory"]
    assert mem["total_bytes"] == sum(mem["terms_bytes"].values())
    assert set(mem["terms_bytes"]) == {"weights", "weight_copies", "gradients", "optimizer_state", "activations",
                                       "logits", "kv_cache", "optimizer_step", "cuda_context", "fragmentation"}
    fitting = {o["gpu"] for g in out["fits"] for o in g["ranked"]}
    assert "T4" in fitting


def test_cli_params_and_config_json_and_steps(env, capsys):
    assert main(["recommend", "--params", "7e9", "--batch", "1", "--seq-len", "512", "--format", "json"]) == 0
    by_params = json.loads(capsys.readouterr().out)
    assert by_params["memory"]["params"] == 7_000_000_000
    assert main(["recommend", "--config-json", str(DATA / "hf_gpt2_config.json"), "--batch", "8", "--seq-len", "1024",
                 "--precision", "fp32", "--steps", "100", "--format", "json"]) == 0
    by_config = json.loads(capsys.readouterr().out)
    assert by_config["memory"]["params"] == 124_439_808
    assert by_config["memory"]["total_bytes"] == pytest.approx(27.5e9, rel=0.15)
    assert any("training FLOPs" in n for n in by_config["notes"])
    priced = [o for g in by_config["fits"] if g["currency"] for o in g["ranked"]]
    assert priced and all(o["hours"] > 0 and o["cost"] for o in priced)


def test_cli_table_output(env, capsys):
    assert main(["recommend", "--model", "gpt2", "--batch", "8", "--seq-len", "1024", "--tokens", "1e9",
                 "--billing", "any"]) == 0
    out = capsys.readouterr().out
    assert "Memory per GPU: gpt2" in out and "activations" in out and "Cards that fit" in out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["recommend", "--params", "7e9", "--model", "gpt2"], "exactly one of"),
        (["recommend"], "exactly one of"),
        (["recommend", "--model", "gpt5"], "unknown model preset"),
        (["recommend", "--model", "gpt2", "--tokens", "1e9", "--steps", "10"], "not both"),
        (["recommend", "--model", "gpt2", "--reference-gpu", "A100-80GB"], "go together"),
        (["recommend", "--model", "gpt2", "--reference-gpu", "GTX 480", "--reference-hours", "2"], "not in the catalog"),
        (["recommend", "--model", "gpt2", "--headroom", "1.5"], "headroom"),
        (["recommend", "--config-json", "missing.json"], "cannot read"),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_2(env, capsys, argv, message):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.startswith("costctl: ") and err.count("\n") == 1 and "Traceback" not in err


def test_provider_filter_without_prices_still_says_which_cards_fit(env, capsys):
    prices = _prices(("autodl", "RTX 4090", "on-demand", "1.98", "CNY"))
    rec = recommend(preset("bert-base"), Setup(batch_size=32, seq_len=128), load_catalog(), prices, provider="runpod")
    assert rec.fits == [] and rec.fits_single_card and "T4" in {g.name for g in rec.fitting_gpus}
    assert any("no on-demand price for them from runpod" in n for n in rec.notes)
    only = recommend(preset("bert-base"), Setup(batch_size=32, seq_len=128), load_catalog(), prices, provider="autodl")
    assert [(o.gpu.name, o.price.provider) for o in only.fits] == [("RTX 4090", "autodl")]
    assert main(["recommend", "--model", "bert-base", "--batch", "32", "--provider", "nosuch"]) == 0
    out = capsys.readouterr().out
    assert "No single card fits" not in out and "no on-demand price" in out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["recommend", "--model", "gpt2", "--precision", "fp8"], "'fp8' is not one of 'fp32', 'fp16', 'bf16', 'mixed'"),
        (["recommend", "--model", "gpt2", "--optimizer", "lion"], "'lion' is not one of"),
        (["recommend", "--model", "gpt2", "--zero", "4"], "--zero"),
    ],
)
def test_cli_choice_errors_name_the_allowed_values(env, capsys, argv, message):
    """Choices are checked by the CLI parser (typer): usage line, the allowed values, exit 2."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
