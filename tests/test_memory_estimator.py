"""Memory estimator: each term on its own, published measurements, monotonicity, ZeRO, presets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from costctl.catalog.memory import (
    DEFAULT_CUDA_CONTEXT_BYTES,
    TERMS,
    Setup,
    estimate_memory,
    gradient_bytes,
    kv_cache_bytes,
    logits_bytes,
    lora_trainable_params,
    optimizer_state_bytes,
    transformer_activation_bytes,
    transformer_layer_activation_bytes,
    weight_bytes,
    weight_copy_bytes,
)
from costctl.catalog.models import PRESETS, TransformerShape, preset, shape_from_hf_config, shape_from_params
from costctl.errors import ConfigError, UsageError

DATA = Path(__file__).parent / "data"
MIB = 1024**2
P = 1_000_000  # a round parameter count for per-term arithmetic


# --- published measurements (+-15 %) ------------------------------------------------------------


def test_bert_large_fp32_adamw_matches_hf_model_memory_anatomy():
    """Hugging Face transformers docs, "Model training anatomy": bert-large-uncased fine-tune,
    fp32, AdamW, batch 4, seq 512: nvidia-smi shows 14,949 MB (MiB) on a V100-16GB."""
    b = estimate_memory(preset("bert-large"), Setup(batch_size=4, seq_len=512, precision="fp32", optimizer="adamw"))
    measured = 14_949 * MIB
    assert b.total == pytest.approx(measured, rel=0.15)


def test_gpt2_small_fp32_adamw_matches_trentonbricken():
    """trentonbricken.com, "Transformer Memory Requirements" (2022): Hugging Face GPT-2 124M,
    fp32, batch 8, seq 1024 uses 27.5 GB."""
    b = estimate_memory(preset("gpt2"), Setup(batch_size=8, seq_len=1024, precision="fp32", optimizer="adamw"))
    assert b.total == pytest.approx(27.5e9, rel=0.15)
    # activations and logits dominate there, not the 124M parameters
    assert b.terms["activations"] + b.terms["logits"] > 5 * (b.terms["weights"] + b.terms["optimizer_state"])


# --- each term on its own -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "precision, optimizer, weights, copies, grads, optim, total_per_param",
    [
        ("fp32", "adamw", 4, 0, 4, 8, 16),  # DESIGN.md: fp32 + Adam 16 B/param
        ("fp32", "adam", 4, 0, 4, 8, 16),
        ("mixed", "adamw", 4, 2, 4, 8, 18),  # HF anatomy: mixed precision 18 B/param
        ("bf16", "adamw", 2, 0, 2, 4, 8),  # pure bf16 AdamW 8 B/param
        ("fp16", "adamw", 2, 0, 2, 4, 8),
        ("fp32", "sgd-momentum", 4, 0, 4, 4, 12),  # SGD with momentum fp32 12 B/param
        ("fp32", "sgd", 4, 0, 4, 0, 8),
        ("fp32", "adam-8bit", 4, 0, 4, 2, 10),  # 8-bit Adam: optimizer 8 -> 2
        ("mixed", "adam-8bit", 4, 2, 4, 2, 12),
    ],
)
def test_parameter_terms_per_param(precision, optimizer, weights, copies, grads, optim, total_per_param):
    assert weight_bytes(P, precision) == weights * P
    assert weight_copy_bytes(P, precision) == copies * P
    assert gradient_bytes(P, precision, optimizer) == grads * P
    assert optimizer_state_bytes(P, precision, optimizer) == optim * P
    assert weights + copies + grads + optim == total_per_param


def test_inference_keeps_only_weights_in_the_compute_dtype():
    assert weight_bytes(P, "fp32", inference=True) == 4 * P
    assert weight_bytes(P, "mixed", inference=True) == 2 * P
    assert weight_bytes(P, "bf16", inference=True) == 2 * P
    assert gradient_bytes(P, "fp32", "none") == 0 and optimizer_state_bytes(P, "fp32", "none") == 0
    assert weight_copy_bytes(P, "mixed", inference=True) == 0


def test_frozen_base_weights_for_lora_and_qlora():
    trainable = 10_000
    assert weight_bytes(P, "mixed", trainable=trainable) == trainable * 4 + (P - trainable) * 2
    assert weight_bytes(P, "fp32", trainable=trainable) == P * 4
    qlora = weight_bytes(P, "mixed", trainable=trainable, base_weight_bits=4)
    assert qlora - trainable * 4 == pytest.approx((P - trainable) * 4.127 / 8, abs=1)
    # only the quantized part shrinks; the rest of the frozen base stays 16-bit
    part = weight_bytes(P, "bf16", trainable=trainable, base_weight_bits=4, quantized=P // 2)
    assert part == pytest.approx(trainable * 2 + (P // 2 - trainable) * 2 + P // 2 * 4.127 / 8, abs=1)


def test_qlora_quantizes_the_layers_linear_weights_only():
    """NF4 + double quantization: 4 + 8/64 + 32/(64*256) = 4.127 bits (Dettmers et al. 2023);
    4.5 without double quantization. Embeddings, norms and the LM head stay 16-bit."""
    llama = preset("llama-2-7b")
    setup = Setup(batch_size=1, seq_len=512, precision="bf16", lora_rank=8, base_weight_bits=4)
    b = estimate_memory(llama, setup)
    linear = llama.n_layers * llama.layer_matmul_params()
    rest = llama.param_count() - linear
    trainable = lora_trainable_params(llama, 8)
    assert b.terms["weights"] == pytest.approx(trainable * 2 + (rest - trainable) * 2 + linear * 4.127 / 8, abs=2)
    no_dq = estimate_memory(llama, setup.but(double_quant=False))
    assert no_dq.terms["weights"] - b.terms["weights"] == pytest.approx(linear * (4.5 - 4.127) / 8, rel=1e-6)
    assert b.terms["weight_copies"] == 11008 * 4096 * 2  # one matrix dequantized for its matmul
    # QLoRA keeps more activations than LoRA: bitsandbytes' 4-bit matmul keeps its input
    lora = estimate_memory(llama, setup.but(base_weight_bits=None))
    assert b.terms["activations"] > lora.terms["activations"]


def test_multi_tensor_adamw_holds_one_more_copy_of_the_params_during_the_step():
    """torch.optim.AdamW(foreach=True): ``torch._foreach_sqrt(exp_avg_sqs)`` is a new list, one
    state-dtype copy of the trainable params; the step runs after the activations are freed."""
    gpt2 = preset("gpt2")
    n = gpt2.param_count()
    small = Setup(batch_size=1, seq_len=16, precision="fp32", grad_checkpointing=True)
    b = estimate_memory(gpt2, small)
    freed = b.terms["activations"] + b.terms["logits"] + b.terms["weight_copies"]
    assert b.terms["optimizer_step"] == 4 * n - freed
    loop = estimate_memory(gpt2, small.but(optimizer_foreach=False))
    assert loop.terms["optimizer_step"] == max(0, 4 * 50257 * 768 - freed)
    big = estimate_memory(gpt2, small.but(batch_size=8, seq_len=1024, grad_checkpointing=False))
    assert big.terms["optimizer_step"] == 0  # the activations freed before the step were larger
    assert estimate_memory(gpt2, small.but(optimizer="adam-8bit")).terms["optimizer_step"] == 0


GPT_LAYOUT = TransformerShape("t", n_layers=2, hidden_size=64, n_heads=4, vocab_size=1000)


def test_layer_activations_are_korthikanti_eq1():
    """Korthikanti et al. 2022, eq. 1: s*b*h*(34 + 5*a*s/h) bytes per layer (16-bit)."""
    for s, b in ((128, 1), (512, 4), (100, 3)):
        h, a = GPT_LAYOUT.hidden_size, GPT_LAYOUT.n_heads
        expected = s * b * h * (34 + 5 * a * s / h)
        assert transformer_layer_activation_bytes(GPT_LAYOUT, b, s) == pytest.approx(expected, abs=0)


def test_flash_attention_trades_the_score_term_for_the_kernels_output_and_logsumexp():
    """A fused kernel keeps no s x s tensor, but keeps its output (2 B, beside the output
    projection's input copy) and an fp32 logsumexp per head and token."""
    s, b = 256, 2
    full = transformer_layer_activation_bytes(GPT_LAYOUT, b, s)
    flash = transformer_layer_activation_bytes(GPT_LAYOUT, b, s, flash_attention=True)
    assert full - flash == 5 * GPT_LAYOUT.n_heads * s * s * b - (2 * GPT_LAYOUT.hidden_size + 4 * GPT_LAYOUT.n_heads) * s * b
    assert flash == (34 + 2) * s * b * GPT_LAYOUT.hidden_size + 4 * GPT_LAYOUT.n_heads * s * b


def test_activation_checkpointing_keeps_layer_inputs_plus_one_layer():
    s, b, h, L = 256, 2, GPT_LAYOUT.hidden_size, GPT_LAYOUT.n_layers
    layer = transformer_layer_activation_bytes(GPT_LAYOUT, b, s)
    extras = 5 * s * b * h  # embedding-dropout mask, final-norm and head inputs
    assert transformer_activation_bytes(GPT_LAYOUT, b, s, precision="bf16") == L * layer + extras
    assert (transformer_activation_bytes(GPT_LAYOUT, b, s, precision="bf16", grad_checkpointing=True)
            == L * 2 * s * b * h + layer + extras)
    # under autocast the checkpointed layer inputs are the fp32 residual stream
    mixed_layer = transformer_layer_activation_bytes(GPT_LAYOUT, b, s, precision="mixed")
    mixed_extras = (4 + 1 + 2) * s * b * h  # fp32 final-norm input, dropout mask, fp16 cast of the head input
    assert (transformer_activation_bytes(GPT_LAYOUT, b, s, precision="mixed", grad_checkpointing=True)
            == L * 4 * s * b * h + mixed_layer + mixed_extras)


def test_fp32_doubles_every_tensor_but_the_one_byte_dropout_masks():
    s, b, h, a = 128, 2, GPT_LAYOUT.hidden_size, GPT_LAYOUT.n_heads
    half = transformer_layer_activation_bytes(GPT_LAYOUT, b, s, precision="bf16")
    full = transformer_layer_activation_bytes(GPT_LAYOUT, b, s, precision="fp32")
    masks = 2 * s * b * h + a * s * s * b  # two residual-dropout masks and the attention-dropout mask
    assert full == 2 * half - masks
    assert transformer_layer_activation_bytes(GPT_LAYOUT, b, s, precision="fp16") == half


def test_autocast_keeps_layernorm_softmax_and_the_residual_stream_in_fp32():
    """torch.amp runs layer_norm and softmax in fp32 and the residual add promotes to fp32: per
    token 38 instead of 34 (two LayerNorm inputs at 4 B), per score element 7 instead of 5
    (fp32 softmax output, 1-B mask, fp16 cast of the dropout output for the PV matmul); with
    separate q, k, v projections each casts its fp32 input (+4)."""
    s, b, h, a = 512, 4, GPT_LAYOUT.hidden_size, GPT_LAYOUT.n_heads
    fused = TransformerShape("t", 2, 64, 4, 1000, fused_qkv=True)
    assert transformer_layer_activation_bytes(fused, b, s, precision="mixed") == 38 * s * b * h + 7 * a * s * s * b
    assert transformer_layer_activation_bytes(GPT_LAYOUT, b, s, precision="mixed") == 42 * s * b * h + 7 * a * s * s * b
    # BERT-large at seq 512: the layer under autocast saves ~1.3x what the all-16-bit formula says
    bert = preset("bert-large")
    ratio = (transformer_layer_activation_bytes(bert, 4, 512, precision="mixed")
             / transformer_layer_activation_bytes(bert, 4, 512, precision="bf16"))
    assert 1.25 < ratio < 1.35


def test_gated_mlp_and_grouped_query_attention_terms():
    llama = preset("llama-2-7b")
    h, f, a = llama.hidden_size, llama.ffn, llama.n_heads
    # pure 16-bit, no dropout: RMSNorm 4 (fp32 copy) + 2 (trained weight keeps the normalized
    # copy) twice, q/k/v input 2, q k v 6, o-proj input 2, scores 2*a, gated MLP input 2 + 8*f
    assert transformer_layer_activation_bytes(llama, 1, 1) == 2 * 6 * h + 2 * h + 6 * h + 2 * h + 2 * a + 2 * h + 8 * f
    gqa = preset("llama-3-8b")  # 8 KV heads of 32: K and V shrink 4x
    kv_dim = gqa.kv_heads * gqa.head_dim
    assert (transformer_layer_activation_bytes(gqa, 1, 1)
            == 2 * 6 * h + 2 * h + 2 * h + 4 * kv_dim + 2 * h + 2 * a + 2 * h + 8 * gqa.ffn)
    # a frozen LoRA base keeps no linear-layer inputs; a 4-bit base (bitsandbytes MatMul4Bit) does
    lora = transformer_layer_activation_bytes(llama, 1, 1, mode="lora")
    qlora = transformer_layer_activation_bytes(llama, 1, 1, mode="qlora")
    assert qlora - lora == 2 * h + 2 * h + 2 * h + 2 * f


def test_logits_are_4bsv_per_fp32_copy():
    assert logits_bytes(8, 1024, 50257, copies=1) == 4 * 8 * 1024 * 50257
    assert logits_bytes(8, 1024, 50257) == 2 * 4 * 8 * 1024 * 50257


def test_kv_cache_for_inference():
    llama = preset("llama-2-7b")  # 2 * 32 layers * 32 heads * 128 * 4096 tokens * 2 B = 2 GiB
    assert kv_cache_bytes(llama, 1, 4096) == 2 * 32 * 32 * 128 * 4096 * 2 == 2 * 1024**3
    b = estimate_memory(llama, Setup(batch_size=1, seq_len=4096, precision="bf16", optimizer="none"))
    assert b.terms["kv_cache"] == 2 * 1024**3
    assert b.terms["gradients"] == b.terms["optimizer_state"] == 0
    assert b.terms["weights"] == 2 * llama.param_count()
    assert b.terms["logits"] == logits_bytes(1, 4096, 32000, copies=1)
    train = estimate_memory(llama, Setup(batch_size=1, seq_len=4096, precision="bf16"))
    assert train.terms["kv_cache"] == 0


def test_cuda_context_and_fragmentation():
    b = estimate_memory(preset("gpt2"), Setup(batch_size=2, seq_len=256))
    assert b.terms["cuda_context"] == DEFAULT_CUDA_CONTEXT_BYTES == 512 * MIB
    allocated = sum(v for k, v in b.terms.items() if k not in ("cuda_context", "fragmentation"))
    assert b.terms["fragmentation"] == int(allocated * 0.10)
    none = estimate_memory(preset("gpt2"), Setup(batch_size=2, seq_len=256, fragmentation=0, cuda_context_bytes=0))
    assert none.total == allocated
    assert list(b.terms) == list(TERMS) and b.total == sum(b.terms.values())


# --- how the total moves --------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["bert-base", "gpt2", "llama-2-7b", "resnet50", "vit-base"])
def test_monotone_in_batch_and_activations_linear_in_batch(name):
    model = preset(name)
    totals = [estimate_memory(model, Setup(batch_size=b, seq_len=256)).total for b in (1, 2, 4, 8)]
    # never decreasing; flat only while the optimizer step's temporaries are the peak
    assert totals == sorted(totals)
    assert len(set(totals)) == 4 or estimate_memory(model, Setup(batch_size=1, seq_len=256)).terms["optimizer_step"]
    acts = [estimate_memory(model, Setup(batch_size=b, seq_len=256)).terms["activations"] for b in (1, 2, 3)]
    if name == "resnet50":  # M0 + b*m1 with a small measured M0
        assert acts[2] - acts[1] == pytest.approx(acts[1] - acts[0], abs=2)
    else:
        assert acts[1] == 2 * acts[0] and acts[2] == 3 * acts[0]


@pytest.mark.parametrize("name", ["bert-base", "gpt2", "llama-2-7b"])
def test_monotone_in_sequence_length(name):
    setups = [Setup(batch_size=2, seq_len=s, optimizer_foreach=False) for s in (64, 128, 512, 1024)]
    totals = [estimate_memory(preset(name), st).total for st in setups]
    assert totals == sorted(totals) and len(set(totals)) == 4
    acts = [estimate_memory(preset(name), st.but(optimizer_foreach=True)).terms["activations"] for st in setups]
    assert acts == sorted(acts) and len(set(acts)) == 4


def test_the_params_times_4_times_batch_blog_formula_is_wrong():
    """Weights, gradients and optimizer state do not grow with the batch; activations do."""
    small = estimate_memory(preset("gpt2"), Setup(batch_size=1, seq_len=1024, precision="fp32"))
    large = estimate_memory(preset("gpt2"), Setup(batch_size=16, seq_len=1024, precision="fp32"))
    for term in ("weights", "gradients", "optimizer_state", "cuda_context"):
        assert small.terms[term] == large.terms[term]
    assert large.terms["activations"] == 16 * small.terms["activations"]


# --- data parallel, ZeRO, offload, LoRA -------------------------------------------------------------


def test_zero_stages_partition_state_over_gpus():
    """ZeRO (Rajbhandari et al. 2020): stage 1 optimizer state, 2 + gradients, 3 + parameters."""
    model = preset("llama-2-7b")
    one = estimate_memory(model, Setup(batch_size=1, seq_len=512)).terms
    z = {k: estimate_memory(model, Setup(batch_size=1, seq_len=512, gpus=8, zero_stage=k)).terms for k in (0, 1, 2, 3)}
    assert z[0] == one  # plain data parallel replicates everything
    assert z[1]["optimizer_state"] == pytest.approx(one["optimizer_state"] / 8, abs=1)
    assert z[1]["gradients"] == one["gradients"]
    assert z[2]["gradients"] == pytest.approx(one["gradients"] / 8, abs=1)
    assert z[2]["weights"] == one["weights"]
    assert z[3]["weights"] == pytest.approx(one["weights"] / 8, abs=1)
    assert z[3]["weight_copies"] == pytest.approx(one["weight_copies"] / 8, abs=1)
    for k in (0, 1, 2, 3):
        assert z[k]["activations"] == one["activations"]  # per-GPU micro-batch unchanged
    single = estimate_memory(model, Setup(batch_size=1, seq_len=512, zero_stage=3))
    assert single.terms == one and any("one GPU" in n for n in single.notes)


def test_offload_moves_optimizer_and_master_weights_to_cpu():
    model = preset("llama-2-7b")
    n = model.param_count()
    b = estimate_memory(model, Setup(batch_size=1, seq_len=512, offload=True))
    assert b.terms["optimizer_state"] == 0
    assert b.terms["weights"] == 0 and b.terms["weight_copies"] == 2 * n  # 16-bit copy stays on the GPU
    assert b.terms["gradients"] == 2 * n
    assert b.cpu_bytes == 8 * n + 4 * n + 4 * n


def test_lora_trains_only_adapters():
    """PEFT prints "trainable params: 4,194,304" for Llama-2-7B with r=8 on q_proj and v_proj."""
    llama = preset("llama-2-7b")
    assert lora_trainable_params(llama, 8) == 4_194_304
    b = estimate_memory(llama, Setup(batch_size=1, seq_len=512, lora_rank=8))
    assert b.trainable_params == 4_194_304
    assert b.terms["optimizer_state"] == 8 * 4_194_304 and b.terms["gradients"] == 4 * 4_194_304
    assert b.terms["weights"] == 4 * 4_194_304 + 2 * (llama.param_count() - 4_194_304)


def test_impossible_setups_are_usage_errors():
    with pytest.raises(UsageError, match="precision"):
        Setup(precision="fp8")
    with pytest.raises(UsageError, match="optimizer"):
        Setup(optimizer="lion")
    with pytest.raises(UsageError, match="ZeRO"):
        Setup(zero_stage=4)
    with pytest.raises(UsageError, match="batch"):
        Setup(batch_size=0)
    with pytest.raises(UsageError, match="LoRA"):
        estimate_memory(preset("gpt2"), Setup(optimizer="none", lora_rank=8))
    with pytest.raises(UsageError, match="LoRA"):
        estimate_memory(preset("gpt2"), Setup(base_weight_bits=4))


def test_breakdown_json_has_total_and_every_term():
    d = estimate_memory(preset("bert-base"), Setup(batch_size=32, seq_len=128)).to_dict()
    json.dumps(d)
    assert set(d["terms_bytes"]) == set(TERMS)
    assert d["total_bytes"] == sum(d["terms_bytes"].values())


# --- model descriptions ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, published",
    [
        ("gpt2", 124_439_808),  # HF openai-community/gpt2
        ("gpt2-medium", 354_823_168),
        ("gpt2-xl", 1_557_611_200),
        ("llama-2-7b", 6_738_415_616),  # HF meta-llama/Llama-2-7b-hf
        ("llama-2-13b", 13_015_864_320),
        ("llama-3-8b", 8_030_261_248),
        ("mistral-7b", 7_241_732_096),
        ("bert-large", 335_141_888 + 1024 * 2 + 2),  # bert-large-uncased + a 2-label classifier
        ("bert-base", 109_482_240 + 768 * 2 + 2),
    ],
)
def test_parameter_counts_match_published(name, published):
    assert preset(name).param_count() == published


def test_hf_config_json_gives_the_same_shape_as_the_preset():
    llama = shape_from_hf_config(DATA / "hf_llama2_7b_config.json")
    assert llama.param_count() == 6_738_415_616
    assert llama.gated_mlp and not llama.dropout and not llama.tied_embeddings
    gpt2 = shape_from_hf_config(DATA / "hf_gpt2_config.json")
    assert gpt2.param_count() == 124_439_808 and gpt2.dropout
    setup = Setup(batch_size=8, seq_len=1024, precision="fp32")
    assert estimate_memory(gpt2, setup).total == estimate_memory(preset("gpt2"), setup).total


def test_hf_config_json_errors_name_the_problem(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="not a JSON file"):
        shape_from_hf_config(bad)
    bad.write_text(json.dumps({"hidden_size": 64, "num_attention_heads": 4, "vocab_size": 10}))
    with pytest.raises(ConfigError, match="num_hidden_layers"):
        shape_from_hf_config(bad)
    with pytest.raises(ConfigError, match="cannot read"):
        shape_from_hf_config(tmp_path / "missing.json")


def test_shape_from_params_uses_the_count_for_weights():
    shape = shape_from_params(7e9)
    assert shape.param_count() == 7_000_000_000
    assert (shape.n_layers, shape.hidden_size) == (32, 4096)  # GPT-3 6.7B row
    assert (shape_from_params(125e6).n_layers, shape_from_params(125e6).hidden_size) == (12, 768)
    with pytest.raises(UsageError, match="too small"):
        shape_from_params(10)


def test_unknown_preset_lists_the_choices():
    with pytest.raises(UsageError, match="bert-base"):
        preset("gpt5")
    assert set(PRESETS) >= {"bert-base", "bert-large", "gpt2", "llama-2-7b", "llama-2-13b", "resnet50", "vit-base"}


@pytest.mark.parametrize(
    "extra, kv_heads",
    [
        ({"num_key_value_heads": 8}, 8),  # Llama 3, Mistral, Qwen2
        ({"multi_query": True}, 1),  # GPTBigCode / StarCoder
        ({"n_head_kv": 1}, 1),  # Falcon-7B
        ({"num_kv_heads": 8}, 8),  # Falcon-40B
        ({"multi_query_group_num": 2}, 2),  # ChatGLM
        ({}, 32),  # plain multi-head
    ],
)
def test_config_json_reads_grouped_and_multi_query_attention(tmp_path, extra, kv_heads):
    cfg = {"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
           "intermediate_size": 14336, "vocab_size": 128256, "tie_word_embeddings": False, **extra}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    shape = shape_from_hf_config(path)
    assert shape.kv_heads == kv_heads
    if kv_heads == 8 and "num_key_value_heads" in extra:
        assert shape.param_count() == 8_030_261_248  # meta-llama/Meta-Llama-3-8B
    infer = Setup(batch_size=1, seq_len=8192, precision="bf16", optimizer="none")
    assert estimate_memory(shape, infer).terms["kv_cache"] == 2 * 32 * kv_heads * 128 * 8192 * 2


@pytest.mark.parametrize(
    "extra, message",
    [
        ({"num_key_value_heads": 5}, "num_key_value_heads 5 must be a positive integer that divides the 32"),
        ({"num_key_value_heads": 0}, "num_key_value_heads 0"),
        ({"num_key_value_heads": "8"}, "num_key_value_heads '8'"),
        ({"hidden_size": 4100}, "hidden_size 4100 is not a multiple of num_attention_heads 32"),
    ],
)
def test_inconsistent_attention_heads_in_config_json_are_one_line_errors(tmp_path, extra, message):
    cfg = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 4096, "num_attention_heads": 32,
           "vocab_size": 32000, **extra}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(ConfigError, match=message) as info:
        shape_from_hf_config(path)
    assert "\n" not in str(info.value)


def test_gpt2_config_json_reads_the_fused_projection_and_gelu_new():
    gpt2 = shape_from_hf_config(DATA / "hf_gpt2_config.json")
    assert gpt2.fused_qkv and gpt2.mlp_activation == "gelu_new"
    llama = shape_from_hf_config(DATA / "hf_llama2_7b_config.json")
    assert not llama.fused_qkv and llama.mlp_activation == "silu"


def test_four_bit_inference_needs_no_lora():
    llama = preset("llama-2-7b")
    b = estimate_memory(llama, Setup(batch_size=1, seq_len=64, precision="bf16", optimizer="none", base_weight_bits=4))
    linear = llama.n_layers * llama.layer_matmul_params()
    assert b.terms["weights"] == pytest.approx((llama.param_count() - linear) * 2 + linear * 4.127 / 8, abs=2)
