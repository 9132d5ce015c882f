"""GPU memory estimator: every term of a training (or inference) step, in bytes per GPU.

Terms (keys of :attr:`MemoryBreakdown.terms`, in this order):

* ``weights`` -- parameters as stored: 4 B/param in fp32 and in mixed precision (fp32 master
  params under autocast), 2 B in pure fp16/bf16; a LoRA base is frozen in 16-bit (or 4-bit
  for QLoRA, plus 0.127 bit/param of double-quantized constants, Dettmers et al. 2023).
* ``weight_copies`` -- mixed precision only: the 16-bit copies autocast caches of fp32
  params, 2 B/param (Hugging Face "model memory anatomy": mixed precision keeps the model in
  fp32 and fp16, 6 B/param).
* ``gradients`` -- one per trainable param, 4 B (fp32, mixed) or 2 B (fp16/bf16).
* ``optimizer_state`` -- per trainable param: Adam/AdamW two states, 8 B (fp32 or mixed), 4 B
  in pure 16-bit; 8-bit Adam 2 B (bitsandbytes); SGD with momentum one state, 4 B (2 B in
  16-bit); plain SGD and inference none.
  So fp32 + Adam = 16 B/param, mixed + AdamW = 18, pure bf16 AdamW = 8, fp32 SGD-momentum = 12.
* ``activations`` -- transformers: Korthikanti et al. 2022 ("Reducing Activation Recomputation
  in Large Transformer Models", eq. 1): ``s*b*h*(34 + 5*a*s/h)`` bytes per layer with 16-bit
  activations; generalized term by term to gated MLPs, grouped-query attention and models
  without dropout (it reduces exactly to 34 and 5 for the paper's GPT layout). Flash attention
  removes the ``5*a*s^2*b`` score term; full activation checkpointing keeps the ``2*s*b*h``
  layer input per layer plus one layer's activations while it is recomputed; fp32 activations
  double every 16-bit term. Plus the embedding-dropout mask, final-norm and head inputs
  (``5*s*b*h``, same paper). Measured profiles (CNNs): ``M0 + b*m1`` at the measured dtype,
  halved for 16-bit.
* ``logits`` -- ``4*b*s*V`` bytes per fp32 copy of the logits; training keeps two (the logits
  and the log-softmax saved by cross-entropy), inference one.
* ``kv_cache`` -- inference only: ``2*L*n_kv*d_head*s*b*bytes``.
* ``cuda_context`` -- the CUDA context and kernels, 0.5 GiB by default (0.3-0.5 GB with
  lazy module loading; 1.3 GB measured on a V100 without it, HF "model memory anatomy").
* ``fragmentation`` -- the caching allocator's unusable slack, 10 % of the allocated terms.

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
from .models import MeasuredProfile, ModelSpec, TransformerShape

Precision = Literal["fp32", "fp16", "bf16", "mixed"]
Optimizer = Literal["adamw", "adam", "sgd", "sgd-momentum", "adam-8bit", "none"]
PRECISIONS: tuple[str, ...] = ("fp32", "fp16", "bf16", "mixed")
OPTIMIZERS: tuple[str, ...] = ("adamw", "adam", "sgd", "sgd-momentum", "adam-8bit", "none")
TERMS: tuple[str, ...] = (
    "weights", "weight_copies", "gradients", "optimizer_state", "activations", "logits",
    "kv_cache", "cuda_context", "fragmentation",
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
#: QLoRA: NF4 weights with double quantization cost 4.127 bits/param (Dettmers et al. 2023).
QLORA_BITS_PER_PARAM = 4.127


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
        base_weight_bits: 4 for a QLoRA base (with ``lora_rank``); None = 16-bit.
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
    cuda_context_bytes: int = DEFAULT_CUDA_CONTEXT_BYTES
    fragmentation: float = DEFAULT_FRAGMENTATION
    logits_copies: int = DEFAULT_LOGITS_COPIES

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise UsageError(f"precision {self.precision!r} is not one of {', '.join(PRECISIONS)}")
        if self.optimizer not in OPTIMIZERS:
            raise UsageError(f"optimizer {self.optimizer!r} is not one of {', '.join(OPTIMIZERS)}")
        if self.batch_size < 1:
            raise UsageError(f"batch size {self.batch_size} must be at least 1")
        if self.seq_len is not None and self.seq_len < 1:
            raise UsageError(f"sequence length {self.seq_len} must be at least 1")
        if self.gpus < 1:
            raise UsageError(f"GPU count {self.gpus} must be at least 1")
        if self.zero_stage not in (0, 1, 2, 3):
            raise UsageError(f"ZeRO stage {self.zero_stage} is not one of 0, 1, 2, 3")
        if self.lora_rank is not None and self.lora_rank < 1:
            raise UsageError(f"LoRA rank {self.lora_rank} must be at least 1")
        if self.base_weight_bits not in (None, 4, 8, 16):
            raise UsageError(f"base weight bits {self.base_weight_bits} is not one of 4, 8, 16")
        if not 0 <= self.fragmentation < 1:
            raise UsageError(f"fragmentation {self.fragmentation} must be in [0, 1)")
        if self.cuda_context_bytes < 0 or self.logits_copies < 0:
            raise UsageError("CUDA context bytes and logits copies must be >= 0")

    @property
    def training(self) -> bool:
        """False for inference (optimizer ``none``)."""
        return self.optimizer != "none"

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
                 base_weight_bits: int | None = None, inference: bool = False) -> int:
    """Bytes of the parameters as stored.

    Trainable params take 4 B in fp32/mixed and 2 B in fp16/bf16; frozen params (a LoRA base,
    ``params - trainable``) take 2 B (4 B in fp32) or ``base_weight_bits`` (4-bit QLoRA:
    4.127 bits/param). Inference stores all weights in the compute dtype (4 B fp32, else 2 B).
    """
    if inference:
        return params * (4 if precision == "fp32" else 2)
    trainable = params if trainable is None else trainable
    frozen = params - trainable
    if base_weight_bits == 4:
        frozen_bytes = math.ceil(frozen * QLORA_BITS_PER_PARAM / 8)
    elif base_weight_bits is not None:
        frozen_bytes = frozen * base_weight_bits // 8
    else:
        frozen_bytes = frozen * (4 if precision == "fp32" else 2)
    return trainable * _param_dtype_bytes(precision) + frozen_bytes


def weight_copy_bytes(trainable: int, precision: str, *, inference: bool = False) -> int:
    """Mixed precision's 16-bit copies of fp32 params (autocast cache): 2 B per fp32 param; else 0."""
    if precision != "mixed" or inference:
        return 0
    return 2 * trainable


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


# --- activation terms ----------------------------------------------------------------------------


def transformer_layer_activation_bytes(shape: TransformerShape, batch: int, seq: int, *,
                                       flash_attention: bool = False) -> int:
    """Bytes one layer keeps for backward with 16-bit activations (Korthikanti et al. 2022).

    ``s*b*h`` coefficients: attention 2 (QKV input) + 2 (Q) + 4*n_kv/a (K, V) + 2 (output
    projection input) + 1 (dropout mask, if dropout); MLP 2 (input) + 1 (dropout mask) and
    ``s*b*f`` x 4 (activation input and output; 8 for a gated MLP: gate, up, activation output,
    product); norms 4. Scores ``a*s^2*b`` x (2 softmax output + 1 dropout mask + 2 dropout
    output), without dropout x 2; flash attention keeps none. For the paper's GPT layout
    (f = 4h, MHA, dropout) this is exactly ``s*b*h*(34 + 5*a*s/h)``.
    """
    h, f, a = shape.hidden_size, shape.ffn, shape.n_heads
    drop = 1 if shape.dropout else 0
    sbh = seq * batch * h
    attn = sbh * (2 + 2 + 2 + drop) + 4 * seq * batch * shape.kv_heads * shape.head_dim
    mlp = sbh * (2 + drop) + seq * batch * f * (8 if shape.gated_mlp else 4)
    norms = 4 * sbh
    scores = 0 if flash_attention else a * seq * seq * batch * (5 if shape.dropout else 2)
    return attn + mlp + norms + scores


def transformer_activation_bytes(shape: TransformerShape, batch: int, seq: int, *, precision: str = "mixed",
                                 flash_attention: bool = False, grad_checkpointing: bool = False,
                                 inference: bool = False) -> int:
    """Activation bytes of the whole model for one micro-batch (logits excluded).

    Training: ``L`` layers (or, with full checkpointing, ``2*s*b*h`` per layer plus one layer
    being recomputed) plus ``5*s*b*h`` for the embedding-dropout mask and the final-norm and
    head inputs (Korthikanti et al. 2022, sec. 4). Inference keeps only one layer's working
    set. fp32 activations double every term.
    """
    layer = transformer_layer_activation_bytes(shape, batch, seq, flash_attention=flash_attention)
    sbh = seq * batch * shape.hidden_size
    if inference:
        total = layer
    else:
        if grad_checkpointing:
            total = shape.n_layers * 2 * sbh + layer
        else:
            total = shape.n_layers * layer
        total += sbh * (4 + (1 if shape.dropout else 0))
    return total * (2 if precision == "fp32" else 1)


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
    """KV cache for inference: ``2*L*n_kv*d_head*s*b*bytes``."""
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


def estimate_memory(model: ModelSpec, setup: Setup) -> MemoryBreakdown:
    """Estimate per-GPU memory for ``model`` under ``setup``.

    Returns:
        a :class:`MemoryBreakdown`; ``terms`` in bytes per GPU, ``cpu_bytes`` offloaded.

    Raises:
        UsageError: a setup that cannot apply (LoRA with inference, 4-bit base without LoRA).
    """
    s = setup
    inference = not s.training
    if s.lora_rank is not None and inference:
        raise UsageError("LoRA applies to training; drop --lora-rank or pick an optimizer")
    if s.base_weight_bits is not None and s.lora_rank is None:
        raise UsageError("a quantized base (4-bit) needs LoRA adapters: set a LoRA rank")
    params = model.param_count()
    trainable = 0 if inference else (lora_trainable_params(model, s.lora_rank) if s.lora_rank else params)
    notes: list[str] = []

    weights = weight_bytes(params, s.precision, trainable=trainable, base_weight_bits=s.base_weight_bits,
                           inference=inference)
    copies = weight_copy_bytes(trainable, s.precision, inference=inference)
    grads = gradient_bytes(trainable, s.precision, s.optimizer)
    optim = optimizer_state_bytes(trainable, s.precision, s.optimizer)
    cpu = 0
    if s.offload and not inference:
        master = trainable * _param_dtype_bytes(s.precision) if s.precision == "mixed" else 0
        cpu = optim + master + grads
        weights -= master  # the fp32 master copy lives on the host; the 16-bit copy stays
        optim = 0
        grads = trainable * 2 if s.precision != "fp32" else grads  # 16-bit grads wait on the GPU
        notes.append("offload: optimizer state and fp32 master weights in CPU RAM (ZeRO-Offload)")
    n = s.gpus
    if s.zero_stage and n > 1 and not inference:
        optim = math.ceil(optim / n)
        if s.zero_stage >= 2:
            grads = math.ceil(grads / n)
        if s.zero_stage >= 3:
            weights = math.ceil(weights / n)
            copies = math.ceil(copies / n)
    elif s.zero_stage and n == 1:
        notes.append("ZeRO partitions across GPUs: with one GPU it saves nothing (use --gpus or offload)")

    seq: int | None
    kv = 0
    if isinstance(model, TransformerShape):
        seq = model.fixed_seq_len or s.seq_len or model.default_seq_len
        if model.fixed_seq_len and s.seq_len and s.seq_len != model.fixed_seq_len:
            notes.append(f"{model.name} has a fixed sequence of {model.fixed_seq_len} tokens; --seq-len ignored")
        acts = transformer_activation_bytes(model, s.batch_size, seq, precision=s.precision,
                                            flash_attention=s.flash_attention,
                                            grad_checkpointing=s.grad_checkpointing, inference=inference)
        logit = logits_bytes(s.batch_size, seq, model.logits_width, 1 if inference else s.logits_copies)
        if inference:
            kv = kv_cache_bytes(model, s.batch_size, seq, 4 if s.precision == "fp32" else 2)
    else:
        seq = None
        acts = measured_activation_bytes(model, s.batch_size, precision=s.precision,
                                         grad_checkpointing=s.grad_checkpointing, inference=inference)
        logit = 0  # the measured saved tensors already include the head's output
        if s.flash_attention:
            notes.append("flash attention does not apply to a measured (non-transformer) profile")
    if s.precision == "bf16" or s.precision == "fp16":
        notes.append(f"pure {s.precision}: weights, gradients and optimizer state in 16-bit")

    terms = {
        "weights": weights,
        "weight_copies": copies,
        "gradients": grads,
        "optimizer_state": optim,
        "activations": acts,
        "logits": logit,
        "kv_cache": kv,
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
    "estimate_memory",
    "gradient_bytes",
    "kv_cache_bytes",
    "logits_bytes",
    "lora_trainable_params",
    "measured_activation_bytes",
    "optimizer_state_bytes",
    "transformer_activation_bytes",
    "transformer_layer_activation_bytes",
    "weight_bytes",
    "weight_copy_bytes",
]
