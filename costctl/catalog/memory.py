"""GPU memory estimator: every term of a training (or inference) step, in bytes per GPU.

Terms (keys of :attr:`MemoryBreakdown.terms`, in this order):

* ``weights`` -- parameters as stored: 4 B/param in fp32 and in mixed precision (fp32 master
  params under autocast), 2 B in pure fp16/bf16; a LoRA base is frozen in 16-bit. A 4-bit
  base (QLoRA; or 4-bit inference) quantizes the layers' linear projections only, at 4.127
  bits/param with NF4 double quantization (4 bits + 8-bit absmax per 64 weights + fp32 absmax
  per 256 blocks; Dettmers et al. 2023, sec. 3) or 4.5 without (fp32 absmax per 64 weights);
  embeddings, norms and the LM head stay 16-bit, as bitsandbytes through Hugging Face leaves
  them (``llm_int8_skip_modules``: the output head is never converted).
* ``weight_copies`` -- mixed precision: the 16-bit copies autocast caches of the fp32 weights
  that go through matmuls (the linear projections and the head; not embeddings or norms),
  2 B each, alive until the end of the forward pass. A 4-bit base: the one matrix being
  dequantized to the compute dtype for its matmul (bitsandbytes ``dequantize_4bit``).
* ``gradients`` -- one per trainable param, 4 B (fp32, mixed) or 2 B (fp16/bf16).
* ``optimizer_state`` -- per trainable param: Adam/AdamW two states, 8 B (fp32 or mixed), 4 B
  in pure 16-bit; 8-bit Adam 2 B (bitsandbytes); SGD with momentum one state, 4 B (2 B in
  16-bit); plain SGD and inference none.
  So fp32 + Adam = 16 B/param, mixed + AdamW = 18, pure bf16 AdamW = 8, fp32 SGD-momentum = 12.
* ``activations`` -- transformers: every tensor a layer saves for backward, with its real dtype
  (autocast keeps LayerNorm and softmax outputs and the residual stream in fp32), counted in
  :mod:`costctl.catalog.activations` (reduces to Korthikanti et al. 2022's
  ``s*b*h*(34 + 5*a*s/h)`` for an all-16-bit GPT layer). Measured profiles (CNNs):
  ``M0 + b*m1`` at the measured dtype, halved for 16-bit.
* ``logits`` -- ``4*b*s*V`` bytes per fp32 copy of the logits; training keeps two at the end of
  the forward pass (the logits the caller holds, Hugging Face returning them upcast to fp32, and
  the log-softmax cross-entropy saves), inference one.
* ``kv_cache`` -- inference only: ``2*L*n_kv*d_head*s*b*bytes`` (``n_kv`` = the key/value heads:
  one with multi-query attention).
* ``optimizer_step`` -- the step's temporaries beyond what the backward pass had freed: the
  multi-tensor (``foreach``) Adam/AdamW of PyTorch (the default on CUDA since 2.0) computes
  ``torch._foreach_sqrt(exp_avg_sqs)`` into a new list, one state-dtype copy of the trainable
  params (torch/optim/adamw.py, ``_multi_tensor_adamw``); the per-parameter loop holds one
  parameter's worth. The step runs after the activations, logits and autocast copies are freed,
  so this term is ``max(0, temporaries - (activations + logits + weight copies))``.
* ``cuda_context`` -- the CUDA context and kernels, 0.5 GiB by default (0.3-0.5 GB with
  lazy module loading; 1.3 GB measured on a V100 without it, HF "model memory anatomy").
* ``fragmentation`` -- the caching allocator's unusable slack, 10 % of the allocated terms
  (DESIGN.md, "Memory estimation facts"). What ``nvidia-smi`` shows is reserved memory plus
  the context; ``torch.cuda.max_memory_allocated`` is the allocated terms alone.

Multi-GPU data parallel with ZeRO (Rajbhandari et al. 2020): stage 1 partitions the optimizer
state over the GPUs, stage 2 also the gradients, stage 3 also the weights. ``offload`` moves
the optimizer state and fp32 master weights to CPU memory (ZeRO-Offload, Ren et al. 2021);
gradients then wait on the GPU in 16-bit. The blog formula "params x 4 x batch" is wrong:
only activations (and logits, KV cache) grow with the batch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Literal

from ..errors import UsageError
from ..i18n import _
from .activations import compute_bytes, model_activation_bytes
from .models import MeasuredProfile, ModelSpec, TransformerShape

Precision = Literal["fp32", "fp16", "bf16", "mixed"]
Optimizer = Literal["adamw", "adam", "sgd", "sgd-momentum", "adam-8bit", "none"]
PRECISIONS: tuple[str, ...] = ("fp32", "fp16", "bf16", "mixed")
OPTIMIZERS: tuple[str, ...] = ("adamw", "adam", "sgd", "sgd-momentum", "adam-8bit", "none")
TERMS: tuple[str, ...] = (
    "weights", "weight_copies", "gradients", "optimizer_state", "activations", "logits",
    "kv_cache", "optimizer_step", "cuda_context", "fragmentation",
)

GIB = 1024**3
#: CUDA context + kernels per GPU: 0.5 GiB (DESIGN.md: 0.3-0.5 GB with lazy loading).
DEFAULT_CUDA_CONTEXT_BYTES = 512 * 1024**2
#: Allocator fragmentation as a fraction of the allocated terms (DESIGN.md: ~10 %).
DEFAULT_FRAGMENTATION = 0.10
#: fp32 copies of the logits alive at the peak of a training step (logits + log-softmax).
DEFAULT_LOGITS_COPIES = 2
#: Default LoRA rank for suggestions; PEFT's default targets for Llama are q_proj and v_proj.
DEFAULT_LORA_RANK = 16
#: QLoRA: NF4 weights with double quantization cost 4 + 8/64 + 32/(64*256) = 4.127 bits/param
#: (Dettmers et al. 2023, sec. 3: blocksize 64, 8-bit absmax, second-level blocksize 256).
QLORA_BITS_PER_PARAM = 4.127
#: 4-bit weights without double quantization: 4 + 32/64 = 4.5 bits/param (fp32 absmax per 64).
FOUR_BIT_BITS_PER_PARAM = 4.5


@dataclass(frozen=True)
class Setup:
    """How the model is trained (or served).

    Attributes:
        batch_size: micro-batch per GPU (samples per forward pass).
        seq_len: tokens per sample (transformers); None = the model's default.
        precision: fp32 | fp16 | bf16 (pure 16-bit: weights, grads and optimizer in 16-bit) |
            mixed (autocast: fp32 params, 16-bit compute).
        optimizer: adamw | adam | sgd | sgd-momentum | adam-8bit | none (= inference).
        gpus: data-parallel GPUs.
        zero_stage: ZeRO stage 0-3 (DeepSpeed / FSDP); partitions over ``gpus``.
        offload: optimizer state and fp32 master weights in CPU memory (ZeRO-Offload).
        grad_checkpointing: full activation recomputation.
        flash_attention: attention without materializing the s x s scores.
        lora_rank: train LoRA adapters of this rank on the attention q and v projections
            (PEFT's default for Llama); the base weights are frozen in 16-bit.
        base_weight_bits: 4 for a 4-bit base (QLoRA with ``lora_rank``, or 4-bit inference);
            None = unquantized.
        double_quant: the 4-bit base uses double quantization (4.127 bits/param; else 4.5).
        optimizer_foreach: the optimizer is PyTorch's multi-tensor (foreach) implementation,
            the default on CUDA since PyTorch 2.0 (False: a per-parameter loop such as the
            Hugging Face ``adamw_hf`` of transformers < 4.28).
        cuda_context_bytes: per-GPU CUDA context.
        fragmentation: allocator slack as a fraction of the allocated terms.
        logits_copies: fp32 copies of the logits alive at the training peak.
    """

    batch_size: int = 1
    seq_len: int | None = None
    precision: str = "mixed"
    optimizer: str = "adamw"
    gpus: int = 1
    zero_stage: int = 0
    offload: bool = False
    grad_checkpointing: bool = False
    flash_attention: bool = False
    lora_rank: int | None = None
    base_weight_bits: int | None = None
    double_quant: bool = True
    optimizer_foreach: bool = True
    cuda_context_bytes: int = DEFAULT_CUDA_CONTEXT_BYTES
    fragmentation: float = DEFAULT_FRAGMENTATION
    logits_copies: int = DEFAULT_LOGITS_COPIES

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise UsageError(_("precision {precision!r} is not one of {choices}").format(
                precision=self.precision, choices=", ".join(PRECISIONS)))
        if self.optimizer not in OPTIMIZERS:
            raise UsageError(_("optimizer {optimizer!r} is not one of {choices}").format(
                optimizer=self.optimizer, choices=", ".join(OPTIMIZERS)))
        if self.batch_size < 1:
            raise UsageError(_("batch size {batch_size} must be at least 1").format(batch_size=self.batch_size))
        if self.seq_len is not None and self.seq_len < 1:
            raise UsageError(_("sequence length {seq_len} must be at least 1").format(seq_len=self.seq_len))
        if self.gpus < 1:
            raise UsageError(_("GPU count {gpus} must be at least 1").format(gpus=self.gpus))
        if self.zero_stage not in (0, 1, 2, 3):
            raise UsageError(_("ZeRO stage {stage} is not one of 0, 1, 2, 3").format(stage=self.zero_stage))
        if self.lora_rank is not None and self.lora_rank < 1:
            raise UsageError(_("LoRA rank {rank} must be at least 1").format(rank=self.lora_rank))
        if self.base_weight_bits not in (None, 4, 8, 16):
            raise UsageError(_("base weight bits {bits} is not one of 4, 8, 16").format(bits=self.base_weight_bits))
        if not 0 <= self.fragmentation < 1:
            raise UsageError(_("fragmentation {fragmentation} must be in [0, 1)").format(
                fragmentation=self.fragmentation))
        if self.cuda_context_bytes < 0 or self.logits_copies < 0:
            raise UsageError(_("CUDA context bytes and logits copies must be >= 0"))

    @property
    def training(self) -> bool:
        """False for inference (optimizer ``none``)."""
        return self.optimizer != "none"

    @property
    def mode(self) -> str:
        """Which weights train: ``full``, ``lora`` (frozen 16-bit base) or ``qlora`` (4-bit base)."""
        if self.lora_rank is None:
            return "full"
        return "qlora" if self.base_weight_bits == 4 else "lora"

    @property
    def base_bits_per_param(self) -> float:
        """Bits per quantized base weight: 4.127 with double quantization, else 4.5 (4-bit), or
        ``base_weight_bits`` for 8-bit."""
        if self.base_weight_bits == 4:
            return QLORA_BITS_PER_PARAM if self.double_quant else FOUR_BIT_BITS_PER_PARAM
        return float(self.base_weight_bits or 16)

    def but(self, **changes: object) -> "Setup":
        """A copy with ``changes`` applied (validated)."""
        return replace(self, **changes)  # type: ignore[arg-type]


@dataclass(frozen=True)
class MemoryBreakdown:
    """The estimate for one GPU.

    Attributes:
        model: model label.
        setup: the setup estimated.
        params: total parameters; trainable_params: those with gradients and optimizer state.
        seq_len: the sequence length used (None for measured profiles).
        terms: bytes per GPU for each name in :data:`TERMS` (zero terms included).
        cpu_bytes: bytes moved to host memory by offload.
        notes: assumptions worth showing the user.
    """

    model: str
    setup: Setup
    params: int
    trainable_params: int
    seq_len: int | None
    terms: dict[str, int]
    cpu_bytes: int = 0
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def total(self) -> int:
        """Sum of all terms, bytes per GPU."""
        return sum(self.terms.values())

    def to_dict(self) -> dict[str, object]:
        """JSON-ready dict: totals and every term in bytes."""
        s = self.setup
        return {
            "model": self.model,
            "params": self.params,
            "trainable_params": self.trainable_params,
            "batch_size": s.batch_size,
            "seq_len": self.seq_len,
            "precision": s.precision,
            "optimizer": s.optimizer,
            "gpus": s.gpus,
            "zero_stage": s.zero_stage,
            "offload": s.offload,
            "grad_checkpointing": s.grad_checkpointing,
            "flash_attention": s.flash_attention,
            "lora_rank": s.lora_rank,
            "total_bytes": self.total,
            "terms_bytes": dict(self.terms),
            "cpu_offload_bytes": self.cpu_bytes,
            "notes": list(self.notes),
        }


# --- parameter terms ---------------------------------------------------------------------------


def _param_dtype_bytes(precision: str) -> int:
    """Bytes of a stored trainable parameter (fp32 master in mixed precision)."""
    return 2 if precision in ("fp16", "bf16") else 4


def weight_bytes(params: int, precision: str, *, trainable: int | None = None,
                 base_weight_bits: int | None = None, inference: bool = False,
                 quantized: int | None = None, bits_per_param: float | None = None) -> int:
    """Bytes of the parameters as stored.

    Trainable params take 4 B in fp32/mixed and 2 B in fp16/bf16. Frozen params (a LoRA base,
    ``params - trainable``; every param for inference) take the compute dtype (4 B in fp32,
    else 2 B), except ``quantized`` of them (default: all frozen ones) stored at
    ``bits_per_param`` (default 4.127 for ``base_weight_bits=4``) when ``base_weight_bits`` is set.
    """
    frozen_dtype = 4 if precision == "fp32" else 2
    trainable = 0 if inference else (params if trainable is None else trainable)
    frozen = params - trainable
    quant = 0
    quant_bytes = 0
    if base_weight_bits is not None:
        quant = frozen if quantized is None else min(quantized, frozen)
        bits = bits_per_param if bits_per_param is not None else (
            QLORA_BITS_PER_PARAM if base_weight_bits == 4 else float(base_weight_bits))
        quant_bytes = math.ceil(quant * bits / 8)
    return trainable * _param_dtype_bytes(precision) + (frozen - quant) * frozen_dtype + quant_bytes


def weight_copy_bytes(matmul_params: int, precision: str, *, inference: bool = False) -> int:
    """Mixed precision's 16-bit copies (autocast cache) of the fp32 weights that go through
    matmuls: 2 B each; 0 otherwise."""
    if precision != "mixed" or inference:
        return 0
    return 2 * matmul_params


def gradient_bytes(trainable: int, precision: str, optimizer: str) -> int:
    """Gradients: 4 B per trainable param in fp32/mixed (gradients of fp32 params are fp32),
    2 B in fp16/bf16; 0 for inference."""
    if optimizer == "none":
        return 0
    return trainable * _param_dtype_bytes(precision)


def optimizer_state_bytes(trainable: int, precision: str, optimizer: str) -> int:
    """Optimizer state per trainable param: Adam/AdamW 2 states (8 B fp32/mixed, 4 B pure
    16-bit), 8-bit Adam 2 B, SGD with momentum 1 state (4 B / 2 B), SGD and inference 0."""
    state_bytes = _param_dtype_bytes(precision)
    per_param = {
        "adamw": 2 * state_bytes,
        "adam": 2 * state_bytes,
        "adam-8bit": 2,
        "sgd-momentum": state_bytes,
        "sgd": 0,
        "none": 0,
    }[optimizer]
    return trainable * per_param


def optimizer_step_temporaries(trainable: int, precision: str, optimizer: str, *, foreach: bool = True,
                               largest_param: int = 0) -> int:
    """Bytes the optimizer step allocates beyond its state: Adam/AdamW in PyTorch's
    multi-tensor form hold ``sqrt(exp_avg_sq)`` for every trainable param at once (one
    state-dtype copy: 4 B fp32/mixed, 2 B pure 16-bit; ``_multi_tensor_adamw``); a
    per-parameter loop holds it for ``largest_param`` elements only. 8-bit Adam (bitsandbytes
    updates each tensor in one kernel), SGD and inference: 0."""
    if optimizer not in ("adam", "adamw"):
        return 0
    return (trainable if foreach else min(largest_param, trainable)) * _param_dtype_bytes(precision)


# --- activation terms ----------------------------------------------------------------------------


def transformer_layer_activation_bytes(shape: TransformerShape, batch: int, seq: int, *,
                                       flash_attention: bool = False, precision: str = "bf16",
                                       mode: str = "full") -> int:
    """Bytes one layer keeps for backward (:func:`costctl.catalog.activations.layer_saved_bytes`);
    by default all tensors 16-bit, where it is Korthikanti et al. 2022's
    ``s*b*h*(34 + 5*a*s/h)`` for the paper's GPT layout."""
    from .activations import layer_saved_bytes

    return layer_saved_bytes(shape, batch, seq, precision, flash_attention=flash_attention, mode=mode)


def transformer_activation_bytes(shape: TransformerShape, batch: int, seq: int, *, precision: str = "mixed",
                                 flash_attention: bool = False, grad_checkpointing: bool = False,
                                 inference: bool = False, mode: str = "full") -> int:
    """Activation bytes of the whole model for one micro-batch, logits excluded
    (:func:`costctl.catalog.activations.model_activation_bytes`)."""
    return model_activation_bytes(shape, batch, seq, precision, flash_attention=flash_attention,
                                  grad_checkpointing=grad_checkpointing, mode=mode, inference=inference)


def measured_activation_bytes(profile: MeasuredProfile, batch: int, *, precision: str = "mixed",
                              grad_checkpointing: bool = False, inference: bool = False) -> int:
    """Activations of a measured profile: ``(M0 + b*m1)`` scaled from the measured dtype to the
    activation dtype (4 B fp32, 2 B otherwise). Checkpointing with sqrt(n) segments keeps about
    ``2/sqrt(n)`` of it (Chen et al. 2016, "Training Deep Nets with Sublinear Memory Cost");
    inference keeps about one block's worth."""
    act_bytes = 4 if precision == "fp32" else 2
    raw = (profile.fixed_bytes + batch * profile.per_sample_bytes) * act_bytes / profile.measured_dtype_bytes
    blocks = max(profile.blocks, 1)
    if inference:
        raw /= blocks
    elif grad_checkpointing and blocks > 1:
        raw *= min(1.0, 2 / math.sqrt(blocks))
    return int(raw)


def logits_bytes(batch: int, seq: int, width: int, copies: int = DEFAULT_LOGITS_COPIES) -> int:
    """``4*b*s*V`` bytes per fp32 copy of the logits."""
    return 4 * batch * seq * width * copies


def kv_cache_bytes(shape: TransformerShape, batch: int, seq: int, dtype_bytes: int = 2) -> int:
    """KV cache for inference: ``2*L*n_kv*d_head*s*b*bytes`` (``n_kv`` key/value heads: 1 with
    multi-query attention, the group count with grouped-query attention)."""
    return 2 * shape.n_layers * shape.kv_heads * shape.head_dim * seq * batch * dtype_bytes


def lora_trainable_params(shape: ModelSpec, rank: int) -> int:
    """LoRA adapter parameters on the q and v projections (PEFT's default targets for Llama):
    ``L * rank * ((h + h) + (h + kv_dim))``. Llama-2-7B at r=8: 4,194,304 (PEFT's printout).
    A measured profile (no attention) gets 1 % of its params as a rough stand-in."""
    if isinstance(shape, TransformerShape):
        h = shape.hidden_size
        kv_dim = shape.kv_heads * shape.head_dim
        return shape.n_layers * rank * ((h + h) + (h + kv_dim))
    return max(1, shape.params // 100)


# --- the estimate --------------------------------------------------------------------------------


def _matmul_params(model: ModelSpec) -> int:
    """Weights that go through matmuls (autocast casts them); a measured profile: all params."""
    if isinstance(model, TransformerShape) and model.params is None:
        return model.n_layers * model.layer_matmul_params() + model.head_matmul_params()
    return model.param_count()


def _quantized_params(model: ModelSpec) -> int:
    """Weights a 4-bit base quantizes: the layers' linear projections (embeddings, norms and
    the output head stay 16-bit); a measured profile: all params."""
    if isinstance(model, TransformerShape):
        return model.n_layers * model.layer_matmul_params()
    return model.param_count()


def _largest_param(model: ModelSpec) -> int:
    """The largest single parameter tensor (the embedding / head ``V*h`` or a layer matrix)."""
    if isinstance(model, TransformerShape):
        return max(model.vocab_size * model.hidden_size, model.largest_matmul_params())
    return model.param_count()


def estimate_memory(model: ModelSpec, setup: Setup) -> MemoryBreakdown:
    """Estimate per-GPU memory for ``model`` under ``setup``.

    Returns:
        a :class:`MemoryBreakdown`; ``terms`` in bytes per GPU, ``cpu_bytes`` offloaded.

    Raises:
        UsageError: a setup that cannot apply (LoRA with inference, 4-bit base with training
            but without LoRA).
    """
    s = setup
    inference = not s.training
    if s.lora_rank is not None and inference:
        raise UsageError(_("LoRA applies to training; drop --lora-rank or pick an optimizer"))
    if s.base_weight_bits is not None and s.lora_rank is None and not inference:
        raise UsageError(_("a quantized base (4-bit) needs LoRA adapters for training: set a LoRA rank"))
    params = model.param_count()
    trainable = 0 if inference else (lora_trainable_params(model, s.lora_rank) if s.lora_rank else params)
    notes: list[str] = []
    quantized = _quantized_params(model) if s.base_weight_bits is not None else None

    weights = weight_bytes(params, s.precision, trainable=trainable, base_weight_bits=s.base_weight_bits,
                           inference=inference, quantized=quantized,
                           bits_per_param=s.base_bits_per_param if s.base_weight_bits else None)
    if s.base_weight_bits is not None and isinstance(model, TransformerShape):
        # the matrix being dequantized for its matmul, in the compute dtype
        copies = model.largest_matmul_params() * compute_bytes(s.precision)
    else:
        copies = weight_copy_bytes(_matmul_params(model) if s.mode == "full" else trainable, s.precision,
                                   inference=inference)
    grads = gradient_bytes(trainable, s.precision, s.optimizer)
    optim = optimizer_state_bytes(trainable, s.precision, s.optimizer)
    temps = 0 if inference else optimizer_step_temporaries(
        trainable, s.precision, s.optimizer, foreach=s.optimizer_foreach, largest_param=_largest_param(model))
    cpu = 0
    if s.offload and not inference:
        master = trainable * _param_dtype_bytes(s.precision) if s.precision == "mixed" else 0
        cpu = optim + master + grads
        weights -= master  # the fp32 master copy lives on the host; the 16-bit copy stays
        copies = max(copies, trainable * 2) if s.precision == "mixed" else copies
        optim = 0
        temps = 0  # the step runs on the CPU
        grads = trainable * 2 if s.precision != "fp32" else grads  # 16-bit grads wait on the GPU
        notes.append(_("offload: optimizer state and fp32 master weights in CPU RAM (ZeRO-Offload)"))
    n = s.gpus
    if s.zero_stage and n > 1 and not inference:
        optim = math.ceil(optim / n)
        temps = math.ceil(temps / n)
        if s.zero_stage >= 2:
            grads = math.ceil(grads / n)
        if s.zero_stage >= 3:
            weights = math.ceil(weights / n)
            copies = math.ceil(copies / n)
    elif s.zero_stage and n == 1:
        notes.append(_("ZeRO partitions across GPUs: with one GPU it saves nothing (use --gpus or offload)"))

    seq: int | None
    kv = 0
    if isinstance(model, TransformerShape):
        seq = model.fixed_seq_len or s.seq_len or model.default_seq_len
        if model.fixed_seq_len and s.seq_len and s.seq_len != model.fixed_seq_len:
            notes.append(_("{model} has a fixed sequence of {tokens} tokens; --seq-len ignored").format(
                model=model.name, tokens=model.fixed_seq_len))
        acts = model_activation_bytes(model, s.batch_size, seq, s.precision, flash_attention=s.flash_attention,
                                      grad_checkpointing=s.grad_checkpointing, mode=s.mode, inference=inference)
        logit = logits_bytes(s.batch_size, seq, model.logits_width, 1 if inference else s.logits_copies)
        if inference:
            kv = kv_cache_bytes(model, s.batch_size, seq, compute_bytes(s.precision))
    else:
        seq = None
        acts = measured_activation_bytes(model, s.batch_size, precision=s.precision,
                                         grad_checkpointing=s.grad_checkpointing, inference=inference)
        logit = 0  # the measured saved tensors already include the head's output
        if s.flash_attention:
            notes.append(_("flash attention does not apply to a measured (non-transformer) profile"))
    if s.precision == "bf16" or s.precision == "fp16":
        notes.append(_("pure {precision}: weights, gradients and optimizer state in 16-bit").format(
            precision=s.precision))

    terms = {
        "weights": weights,
        "weight_copies": copies,
        "gradients": grads,
        "optimizer_state": optim,
        "activations": acts,
        "logits": logit,
        "kv_cache": kv,
        # the step runs once activations, logits and autocast copies are freed
        "optimizer_step": max(0, temps - (acts + logit + copies)),
        "cuda_context": s.cuda_context_bytes,
    }
    allocated = sum(v for k, v in terms.items() if k != "cuda_context")
    terms["fragmentation"] = int(allocated * s.fragmentation)
    return MemoryBreakdown(
        model=getattr(model, "name", "model"), setup=s, params=params, trainable_params=trainable,
        seq_len=seq, terms=terms, cpu_bytes=cpu, notes=tuple(notes),
    )


__all__ = [
    "DEFAULT_CUDA_CONTEXT_BYTES",
    "DEFAULT_FRAGMENTATION",
    "DEFAULT_LOGITS_COPIES",
    "GIB",
    "MemoryBreakdown",
    "OPTIMIZERS",
    "PRECISIONS",
    "Setup",
    "TERMS",
    "FOUR_BIT_BITS_PER_PARAM",
    "QLORA_BITS_PER_PARAM",
    "estimate_memory",
    "gradient_bytes",
    "kv_cache_bytes",
    "logits_bytes",
    "lora_trainable_params",
    "measured_activation_bytes",
    "optimizer_state_bytes",
    "optimizer_step_temporaries",
    "transformer_activation_bytes",
    "transformer_layer_activation_bytes",
    "weight_bytes",
    "weight_copy_bytes",
]
