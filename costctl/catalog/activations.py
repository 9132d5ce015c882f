"""Activation memory of a transformer: the tensors autograd saves for backward, tensor by tensor.

A first-principles count (no fitted factor). Korthikanti et al. 2022 ("Reducing Activation
Recomputation in Large Transformer Models", sec. 4.1) list what one GPT layer saves with every
tensor in 16-bit: ``s*b*h*(34 + 5*a*s/h)`` bytes. Real training keeps some of those tensors in
other dtypes and keeps others not at all, so each saved tensor is listed here with the dtype it
really has and the condition under which it is saved:

* **dtypes.** ``c`` = bytes of a matmul output (4 in fp32, 2 in fp16/bf16 and under autocast).
  Under autocast (``precision="mixed"``) PyTorch runs ``layer_norm``, ``softmax`` and ``pow`` in
  fp32 (torch.amp docs, "CUDA Ops that can autocast to float32"), and a residual add of a 16-bit
  branch to the fp32 stream (the embeddings and parameters are fp32) promotes to fp32: the
  residual stream, the LayerNorm inputs and the softmax outputs are 4 bytes. A matmul casts its
  fp32 input to 16-bit and saves the cast copy (2 bytes); autocast caches casts of parameters
  only, so separate q, k, v projections cast the same input three times. RMSNorm as Hugging Face
  Llama (``LlamaRMSNorm``) writes it upcasts to fp32 in every precision: it saves a 4-byte copy
  of its input. Dropout masks are 1 byte (``torch.native_dropout`` returns a bool mask).
* **frozen weights.** A linear layer saves its input only to compute its weight gradient
  (autograd saves ``mat1`` of ``mm`` only when ``mat2`` needs a gradient): with a frozen LoRA
  base those inputs are not kept. bitsandbytes' 4-bit matmul (``MatMul4Bit``) keeps its input
  ``A`` in ``ctx.tensors`` whenever ``A`` needs a gradient, so a QLoRA base keeps them again.
* **attention.** Eager attention keeps the ``a*s*s`` probabilities (softmax output, dropout
  mask, dropout output; under autocast the fp16 cast of the probabilities for the PV matmul);
  a fused kernel (flash / SDPA memory-efficient) keeps q, k, v, the output and a fp32 logsumexp
  of ``a*s`` per sample instead.
* **MLP activations.** ``gelu`` (fused ``F.gelu``) saves its input; ``gelu_new`` is the tanh
  approximation as GPT-2 in Hugging Face writes it, ``0.5*x*(1+tanh(sqrt(2/pi)*(x+0.044715*x**3)))``,
  whose ``pow``, ``tanh`` and two multiplications save four f-wide tensors (``pow`` in fp32 under
  autocast); ``relu`` saves its output; the gated ``silu`` MLP (Llama) saves the gate output, the
  silu output and the up-projection output.

For the paper's layout (LayerNorm, GELU MLP with f = 4h, dropout, all tensors 16-bit, all weights
trained) :func:`layer_saved_bytes` is exactly ``s*b*h*(34 + 5*a*s/h)``; tests check it.
"""

from __future__ import annotations

from dataclasses import dataclass

from .models import TransformerShape

#: Modes of the trained weights: full fine-tune, LoRA on a frozen 16-bit base, LoRA on a 4-bit base.
TRAINING_MODES: tuple[str, ...] = ("full", "lora", "qlora")
#: LoRA adapts q and v (PEFT's default targets for Llama, litgpt's defaults): 2 adapted modules.
LORA_ADAPTED_MODULES = 2


def compute_bytes(precision: str) -> int:
    """Bytes of a matmul output: 4 in fp32, 2 in fp16/bf16 and under autocast (``mixed``)."""
    return 4 if precision == "fp32" else 2


def stream_bytes(precision: str) -> int:
    """Bytes of the residual stream and of LayerNorm/softmax outputs: 4 in fp32 and under
    autocast (fp32 ops and type promotion, module docstring), 2 in pure fp16/bf16."""
    return 2 if precision in ("fp16", "bf16") else 4


@dataclass(frozen=True)
class LayerTensors:
    """What one layer saves, as bytes per token (``per_token``, multiply by ``s*b``) and bytes
    per attention-score element (``per_score``, multiply by ``a*s*s*b``), with each tensor's
    share named in ``items`` (name -> bytes per token, or per score element for names starting
    with ``scores``)."""

    per_token: int
    per_score: int
    items: tuple[tuple[str, int], ...]

    def bytes(self, n_heads: int, batch: int, seq: int) -> int:
        """Bytes for a micro-batch of ``batch`` samples of ``seq`` tokens."""
        return self.per_token * seq * batch + self.per_score * n_heads * seq * seq * batch


def _norm(shape: TransformerShape, precision: str, trained: bool) -> int:
    """Bytes per token one norm saves: LayerNorm its input in the stream dtype; RMSNorm (Llama)
    an fp32 copy of its input, plus the 16-bit normalized copy when its weight is trained."""
    h = shape.hidden_size
    if shape.bias:  # LayerNorm (bias=True layouts: BERT, GPT-2, GPTBigCode)
        return stream_bytes(precision) * h
    # LlamaRMSNorm: pow/mean/rsqrt on an fp32 copy (4 B); ``weight * x.to(input_dtype)`` keeps the
    # normalized tensor (stream dtype) only when the weight is trained
    return 4 * h + (stream_bytes(precision) * h if trained else 0)


def _projection_input(precision: str, width: int, keep: bool, casts: int) -> int:
    """Bytes per token a projection keeps of its input: under autocast one 2-byte cast per
    separate projection reading it; otherwise the input itself once (shared)."""
    if not keep:
        return 0
    if precision == "mixed":
        return 2 * width * casts
    return compute_bytes(precision) * width


def _mlp(shape: TransformerShape, precision: str, keep_inputs: bool) -> list[tuple[str, int]]:
    """The MLP's f-wide saved tensors, bytes per token (module docstring)."""
    f = shape.ffn
    c = compute_bytes(precision)
    act = shape.mlp_activation
    out: list[tuple[str, int]] = []
    if act == "silu":  # gated: down(silu(gate(x)) * up(x))
        out.append(("mlp gate output (silu input)", c * f))
        out.append(("mlp silu output", c * f))
        out.append(("mlp up output", c * f))
        if keep_inputs:
            out.append(("mlp down-projection input", c * f))
    elif act == "gelu_new":
        fp32_ops = 4 if precision in ("mixed", "fp32") else c  # pow (autocast fp32) and what it promotes
        out.append(("mlp pow input (fc output)", fp32_ops * f))
        out.append(("mlp tanh output", fp32_ops * f))
        out.append(("mlp 0.5*x", c * f))
        out.append(("mlp 1+tanh", fp32_ops * f))
        if keep_inputs:
            out.append(("mlp fc2 input", (2 if precision == "mixed" else c) * f))
    elif act == "relu":
        out.append(("mlp relu output (fc2 input)", c * f))
    else:  # fused gelu
        out.append(("mlp gelu input", c * f))
        if keep_inputs:
            out.append(("mlp fc2 input", c * f))
    return out


def layer_tensors(shape: TransformerShape, precision: str = "bf16", *, flash_attention: bool = False,
                  mode: str = "full") -> LayerTensors:
    """The tensors one transformer layer saves for backward (module docstring).

    Args:
        shape: the model.
        precision: fp32 | fp16 | bf16 (pure) | mixed (autocast).
        flash_attention: a fused attention kernel (no ``s x s`` tensors kept).
        mode: ``full`` (every weight trained), ``lora`` (frozen 16-bit base, adapters with
            dropout on q and v), ``qlora`` (frozen 4-bit base whose matmuls keep their inputs).

    Returns:
        :class:`LayerTensors` (bytes per token and per score element).
    """
    h, a = shape.hidden_size, shape.n_heads
    kv = shape.kv_heads * shape.head_dim
    c = compute_bytes(precision)
    trained = mode == "full"
    keep_inputs = mode in ("full", "qlora")  # trained weights need their inputs; so does MatMul4Bit
    drop = shape.dropout
    items: list[tuple[str, int]] = [("norm before attention", _norm(shape, precision, trained))]
    qkv_in = _projection_input(precision, h, keep_inputs, 1 if shape.fused_qkv else 3)
    if qkv_in:
        items.append(("q/k/v projection input", qkv_in))
    if mode in ("lora", "qlora"):
        # each adapted module: dropout mask (1 B) + the dropout output lora_A keeps (2 B cast
        # under autocast, else the compute dtype)
        items.append(("LoRA dropout masks and lora_A inputs", LORA_ADAPTED_MODULES * (1 + c) * h))
    items.append(("q, k, v", c * (h + 2 * kv)))
    per_score = 0
    if flash_attention:
        items.append(("attention output (kept by the fused kernel)", c * h))
        items.append(("attention logsumexp (fp32)", 4 * a))
        if keep_inputs:
            items.append(("output-projection input", c * h))
    else:
        softmax = stream_bytes(precision)  # softmax output: fp32 under autocast
        pv_input = 2 if precision == "mixed" else c  # what the PV matmul keeps of the probabilities
        if drop:  # + dropout mask (1 B) + the dropout output (its fp16 cast under autocast)
            per_score = softmax + 1 + pv_input
        else:  # the probabilities are the softmax output (under autocast, plus their fp16 cast)
            per_score = softmax + (pv_input if precision == "mixed" else 0)
        if keep_inputs:
            items.append(("output-projection input", c * h))
    if drop:
        items.append(("attention residual dropout mask", h))
    items.append(("norm before MLP", _norm(shape, precision, trained)))
    mlp_in = _projection_input(precision, h, keep_inputs, 2 if shape.gated_mlp else 1)
    if mlp_in:
        items.append(("MLP input", mlp_in))
    items.extend(_mlp(shape, precision, keep_inputs))
    if drop:
        items.append(("MLP residual dropout mask", h))
    if per_score:
        items.append(("scores: softmax output, dropout mask and output", per_score))
    per_token = sum(v for k, v in items if not k.startswith("scores"))
    return LayerTensors(per_token, per_score, tuple(items))


def layer_saved_bytes(shape: TransformerShape, batch: int, seq: int, precision: str = "bf16", *,
                      flash_attention: bool = False, mode: str = "full") -> int:
    """Bytes one layer saves for a micro-batch (see :func:`layer_tensors`)."""
    return layer_tensors(shape, precision, flash_attention=flash_attention, mode=mode).bytes(shape.n_heads, batch, seq)


def model_activation_bytes(shape: TransformerShape, batch: int, seq: int, precision: str = "bf16", *,
                           flash_attention: bool = False, grad_checkpointing: bool = False,
                           mode: str = "full", inference: bool = False) -> int:
    """Activation bytes of the whole model for one micro-batch (logits excluded).

    Training: ``L`` layers, or with full activation checkpointing each layer's input (the
    residual stream, :func:`stream_bytes` per element) plus one layer while it is recomputed;
    plus the embedding-dropout mask, the final norm's input and the head's input (Korthikanti
    et al. 2022, sec. 4: ``5*s*b*h`` in 16-bit). Inference keeps one layer's working set.
    """
    layer = layer_saved_bytes(shape, batch, seq, precision, flash_attention=flash_attention, mode=mode)
    if inference:
        return layer
    tokens = seq * batch
    h = shape.hidden_size
    if grad_checkpointing:
        total = shape.n_layers * stream_bytes(precision) * h * tokens + layer
    else:
        total = shape.n_layers * layer
    extras = _norm(shape, precision, mode == "full") + (h if shape.dropout else 0)
    if mode in ("full", "qlora"):
        extras += compute_bytes(precision) * h  # the LM head's (or classifier's) input
    return total + extras * tokens


__all__ = [
    "LORA_ADAPTED_MODULES",
    "LayerTensors",
    "TRAINING_MODES",
    "compute_bytes",
    "layer_saved_bytes",
    "layer_tensors",
    "model_activation_bytes",
    "stream_bytes",
]
