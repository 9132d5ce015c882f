"""The memory estimator against published peak-memory measurements, like with like.

Each test names its source, the settings it states, and what was measured:

* ``nvidia-smi`` / NVML "used" memory is the caching allocator's reserved memory plus the CUDA
  context: compared with the whole estimate (context as the same source measured it, plus the
  estimator's allocator fragmentation);
* ``torch.cuda.max_memory_allocated`` is allocated bytes only: compared with the estimate
  without the CUDA context and without fragmentation.

Every point must be within +-10 % and the median error at most 5 % (issue 15, part 4). The
estimator has no per-model factor: the settings below are the ones each source states.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

import pytest

from costctl.catalog.memory import Setup, estimate_memory
from costctl.catalog.models import ModelSpec, preset, shape_from_hf_config

DATA = Path(__file__).parent / "data"
MIB = 1024**2
GIB = 1024**3

HF_PERF = "https://huggingface.co/docs/transformers/v4.27.2/en/perf_train_gpu_one"
LITGPT = "https://github.com/Lightning-AI/litgpt/blob/8641822/tutorials/resource-tables.md"
HF_LLM = "https://huggingface.co/docs/transformers/llm_tutorial_optimization"

#: HF "Methods and tools for efficient training on a single GPU" measured the CUDA context
#: (``torch.ones((1, 1)).to("cuda")``) on the same V100: "GPU memory occupied: 1343 MB".
HF_V100_CONTEXT = 1343 * MIB


def nvidia_smi(**kw: object) -> Setup:
    """Like with like for NVML "used" memory: context as measured, plus fragmentation."""
    return Setup(cuda_context_bytes=HF_V100_CONTEXT, **kw)  # type: ignore[arg-type]


def max_allocated(**kw: object) -> Setup:
    """Like with like for ``torch.cuda.max_memory_allocated``: no context, no fragmentation."""
    return Setup(cuda_context_bytes=0, fragmentation=0, **kw)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Point:
    """One published measurement."""

    name: str
    source: str
    measured: str  # what was measured
    model: str  # preset name or a config.json under tests/data
    setup: Setup
    bytes: float

    def spec(self) -> ModelSpec:
        return shape_from_hf_config(DATA / self.model) if self.model.endswith(".json") else preset(self.model)

    def error(self) -> float:
        return (estimate_memory(self.spec(), self.setup).total - self.bytes) / self.bytes


# bert-large-uncased, AutoModelForSequenceClassification (2 labels), random tokens, seq 512,
# Trainer on a V100-16GB (Jan 2022: transformers 4.15, default optimizer adamw_hf, a
# per-parameter loop), fp16=True is torch.cuda.amp autocast. "GPU memory occupied" = NVML used.
_BERT = dict(seq_len=512, optimizer_foreach=False)
POINTS = [
    Point("bert-large fp32 batch 4", HF_PERF, "NVML used 14949 MB", "bert-large",
          nvidia_smi(batch_size=4, precision="fp32", **_BERT), 14949 * MIB),
    Point("bert-large fp32 batch 1 (grad accumulation 4)", HF_PERF, "NVML used 8681 MB", "bert-large",
          nvidia_smi(batch_size=1, precision="fp32", **_BERT), 8681 * MIB),
    Point("bert-large fp32 batch 1 + gradient checkpointing", HF_PERF, "NVML used 6775 MB", "bert-large",
          nvidia_smi(batch_size=1, precision="fp32", grad_checkpointing=True, **_BERT), 6775 * MIB),
    Point("bert-large fp16 autocast batch 4", HF_PERF, "NVML used 13939 MB", "bert-large",
          nvidia_smi(batch_size=4, precision="mixed", **_BERT), 13939 * MIB),
    Point("bert-large fp16 autocast batch 1 + gradient checkpointing", HF_PERF, "NVML used 7275 MB", "bert-large",
          nvidia_smi(batch_size=1, precision="mixed", grad_checkpointing=True, **_BERT), 7275 * MIB),
    Point("bert-large fp32 batch 4, bitsandbytes Adam8bit", HF_PERF, "NVML used 13085 MB", "bert-large",
          nvidia_smi(batch_size=4, precision="fp32", optimizer="adam-8bit", seq_len=512), 13085 * MIB),
    Point("bert-large fp16 autocast batch 1 + checkpointing, Adam8bit", HF_PERF, "NVML used 5363 MB", "bert-large",
          nvidia_smi(batch_size=1, precision="mixed", optimizer="adam-8bit", grad_checkpointing=True, seq_len=512),
          5363 * MIB),
    # litgpt commit 8641822 (PyTorch 2.1, bitsandbytes 0.41.1, A100-SXM4-40GB): finetune/lora.py,
    # --precision bf16-true, LoRA r=8 on query and value (4,194,304 trainable params for Llama 2
    # 7B), lora_dropout 0.05, AdamW; the first iteration is the longest Alpaca sample, 1304
    # Llama-2 tokens (micro-batches are padded to their longest); attention through
    # scaled_dot_product_attention (flash). "Max GPU RAM" = torch.cuda.max_memory_allocated()/1e9.
    Point("llama-2-7b LoRA r=8 bf16 micro-batch 1", LITGPT, "max_memory_allocated 21.30 GB", "llama-2-7b",
          max_allocated(batch_size=1, seq_len=1304, precision="bf16", lora_rank=8, flash_attention=True), 21.30e9),
    Point("llama-2-7b LoRA r=8 bf16 micro-batch 2", LITGPT, "max_memory_allocated 29.07 GB", "llama-2-7b",
          max_allocated(batch_size=2, seq_len=1304, precision="bf16", lora_rank=8, flash_attention=True), 29.07e9),
    Point("llama-2-13b LoRA r=8 bf16 micro-batch 1", LITGPT, "max_memory_allocated 38.12 GB", "llama-2-13b",
          max_allocated(batch_size=1, seq_len=1304, precision="bf16", lora_rank=8, flash_attention=True), 38.12e9),
    Point("llama-2-7b QLoRA (bnb.nf4-dq) r=8 micro-batch 1", LITGPT, "max_memory_allocated 13.84 GB", "llama-2-7b",
          max_allocated(batch_size=1, seq_len=1304, precision="bf16", lora_rank=8, base_weight_bits=4,
                        flash_attention=True), 13.84e9),
    Point("llama-2-13b QLoRA (bnb.nf4-dq) r=8 micro-batch 1", LITGPT, "max_memory_allocated 22.55 GB", "llama-2-13b",
          max_allocated(batch_size=1, seq_len=1304, precision="bf16", lora_rank=8, base_weight_bits=4,
                        flash_attention=True), 22.55e9),
    # litgpt generate/base.py: bf16, one prompt plus 50 new tokens (~64 tokens), KV cache.
    Point("llama-2-7b inference bf16", LITGPT, "max_memory_allocated 13.52 GB", "llama-2-7b",
          max_allocated(batch_size=1, seq_len=64, precision="bf16", optimizer="none", flash_attention=True), 13.52e9),
    Point("llama-2-13b inference bf16", LITGPT, "max_memory_allocated 26.21 GB", "llama-2-13b",
          max_allocated(batch_size=1, seq_len=64, precision="bf16", optimizer="none", flash_attention=True), 26.21e9),
    Point("llama-2-7b inference bnb.nf4-dq", LITGPT, "max_memory_allocated 4.26 GB", "llama-2-7b",
          max_allocated(batch_size=1, seq_len=64, precision="bf16", optimizer="none", base_weight_bits=4,
                        flash_attention=True), 4.26e9),
    # bigcode/octocoder (GPTBigCode, 15.5B, multi-query attention), a ~20-token prompt plus
    # max_new_tokens=60 through the text-generation pipeline, eager attention; on a 40 GB A100.
    Point("octocoder inference bf16 (multi-query attention)", HF_LLM,
          "max_memory_allocated 29.0260648727417 GiB", "hf_octocoder_config.json",
          max_allocated(batch_size=1, seq_len=80, precision="bf16", optimizer="none"), 29.0260648727417 * GIB),
    # load_in_4bit=True with no torch_dtype: bitsandbytes' defaults (FP4, no double quantization,
    # float32 compute dtype) and the unquantized modules (embeddings, norms, tied head) in fp32.
    Point("octocoder inference load_in_4bit (fp32 compute)", HF_LLM,
          "max_memory_allocated 9.543574333190918 GiB", "hf_octocoder_config.json",
          max_allocated(batch_size=1, seq_len=80, precision="fp32", optimizer="none", base_weight_bits=4,
                        double_quant=False), 9.543574333190918 * GIB),
]


@pytest.mark.parametrize("point", POINTS, ids=[p.name for p in POINTS])
def test_estimate_within_ten_percent_of_the_published_measurement(point):
    assert abs(point.error()) <= 0.10, f"{point.name}: {point.error():+.1%} ({point.source}, {point.measured})"


def test_median_error_at_most_five_percent_and_the_settings_are_covered():
    errors = [abs(p.error()) for p in POINTS]
    assert statistics.median(errors) <= 0.05
    setups = [p.setup for p in POINTS]
    assert len(POINTS) >= 12
    assert sum(s.precision == "mixed" for s in setups) >= 3
    assert sum(s.mode == "lora" for s in setups) >= 2
    assert sum(s.mode == "qlora" for s in setups) >= 1
    assert {s.precision for s in setups} >= {"fp32", "mixed", "bf16"}
    assert any(not s.training for s in setups) and any(s.training for s in setups)
    assert len({p.model for p in POINTS}) >= 4  # BERT, Llama 2 (7B, 13B), GPTBigCode


def test_mixed_precision_is_no_longer_under_estimated_against_the_16_bit_formula():
    """Issue 15: the all-16-bit formula under-estimated autocast. bert-large batch 4 fp16 on a
    V100 measured 13939 MB; with every activation at 2 bytes the estimate was ~20 % lower."""
    point = next(p for p in POINTS if p.name == "bert-large fp16 autocast batch 4")
    model = point.spec()
    pure = estimate_memory(model, point.setup.but(precision="fp16"))
    mixed = estimate_memory(model, point.setup)
    assert mixed.terms["activations"] > 1.25 * pure.terms["activations"]


def test_multi_query_config_gives_the_published_size():
    """bigcode/octocoder's config.json says ``multi_query: true``: one K/V head. Read as
    multi-head, parameters were 19 % high and the KV cache 48x too large."""
    octo = shape_from_hf_config(DATA / "hf_octocoder_config.json")
    assert octo.kv_heads == 1
    assert octo.param_count() == pytest.approx(15.5e9, rel=0.01)  # "15.5B parameter models"
    setup = Setup(batch_size=1, seq_len=16_000, precision="bf16", optimizer="none")
    # HF's guide: 16,000 tokens of MHA cache are ~15 GB; MQA "less than 400 MB"
    assert estimate_memory(octo, setup).terms["kv_cache"] < 400e6
