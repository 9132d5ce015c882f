"""What the memory estimator needs to know about a model: a transformer's shape, or a measured
activation profile (CNNs and anything else), plus presets and a Hugging Face ``config.json`` reader.

Shapes follow the published configs (Hugging Face model cards / ``config.json``); parameter counts
computed by :meth:`TransformerShape.param_count` match the published ones (GPT-2 124,439,808;
Llama-2-7B 6,738,415,616) -- tests check it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

from ..errors import ConfigError, UsageError
from .. import jsonio
from ..i18n import _
from ..validation import require_regular_file


@dataclass(frozen=True)
class TransformerShape:
    """A decoder or encoder transformer.

    Attributes:
        name: label.
        n_layers, hidden_size, n_heads: L, h, a.
        vocab_size: V (embedding rows; 0 for models without a token embedding, e.g. ViT).
        intermediate_size: MLP width f (default 4h).
        n_kv_heads: key/value heads (grouped-query attention; default = n_heads).
        gated_mlp: SwiGLU-style MLP (three matrices: Llama, Mistral, Qwen...).
        dropout: the model applies dropout in training (BERT, GPT-2 yes; Llama no).
        bias: linear layers have biases and norms are LayerNorm (else RMSNorm, no biases).
        tied_embeddings: the LM head shares the token embedding.
        learned_positions: number of learned position embeddings (0 for rotary).
        token_types: BERT's segment embeddings.
        pooler: BERT's pooler (h x h) before a classifier.
        output_size: width of the logits: None = vocabulary (language-model head), else a
            classifier's number of labels.
        params: published parameter count, when it should win over the formula (e.g. ViT's patch embedding).
        fixed_seq_len: sequence length fixed by the model (ViT-B/16 at 224x224: 197 tokens).
        default_seq_len: sequence length used when the caller gives none.
        activation: MLP activation as implemented: ``gelu`` (fused ``F.gelu``), ``gelu_new``
            (GPT-2's tanh approximation written out in Hugging Face), ``relu``, ``silu`` (gated);
            None = ``silu`` for a gated MLP, else ``gelu``.
        fused_qkv: q, k and v come from one projection (GPT-2's ``c_attn``); separate
            projections (BERT, Llama) each cast their input under autocast.
        source: where the shape comes from.
    """

    name: str
    n_layers: int
    hidden_size: int
    n_heads: int
    vocab_size: int
    intermediate_size: int | None = None
    n_kv_heads: int | None = None
    gated_mlp: bool = False
    dropout: bool = True
    bias: bool = True
    tied_embeddings: bool = True
    learned_positions: int = 0
    token_types: int = 0
    pooler: bool = False
    output_size: int | None = None
    params: int | None = None
    fixed_seq_len: int | None = None
    default_seq_len: int = 2048
    activation: str | None = None
    fused_qkv: bool = False
    source: str = ""

    @property
    def mlp_activation(self) -> str:
        """The MLP activation (see ``activation``)."""
        return self.activation or ("silu" if self.gated_mlp else "gelu")

    @property
    def ffn(self) -> int:
        """MLP width f."""
        return self.intermediate_size or 4 * self.hidden_size

    @property
    def kv_heads(self) -> int:
        """Key/value heads."""
        return self.n_kv_heads or self.n_heads

    @property
    def head_dim(self) -> int:
        """h / a."""
        return self.hidden_size // self.n_heads

    @property
    def logits_width(self) -> int:
        """Width of the output logits: the vocabulary for an LM head, else the label count."""
        return self.vocab_size if self.output_size is None else self.output_size

    def layer_matmul_params(self) -> int:
        """Weights of one layer's linear projections (q, o: ``h*h``; k, v: ``h*kv_dim``; MLP
        ``2*h*f`` or ``3*h*f`` gated), biases and norms excluded: what a 4-bit base quantizes."""
        h, f = self.hidden_size, self.ffn
        return 2 * h * h + 2 * h * self.kv_heads * self.head_dim + (3 if self.gated_mlp else 2) * h * f

    def head_matmul_params(self) -> int:
        """Weights of the output head's matrix (``V*h`` for an LM head, tied or not; ``h*labels``
        plus the pooler for a classifier)."""
        h = self.hidden_size
        if self.output_size is None:
            return self.vocab_size * h
        return h * self.output_size + (h * h if self.pooler else 0)

    def largest_matmul_params(self) -> int:
        """The largest single projection matrix in a layer (``h*f`` or ``h*h``)."""
        return self.hidden_size * max(self.ffn, self.hidden_size)

    def param_count(self) -> int:
        """Parameters: ``params`` if given, else counted from the shape (embeddings, per-layer
        attention, MLP and norms, final norm, head)."""
        if self.params is not None:
            return self.params
        h, f = self.hidden_size, self.ffn
        kv_dim = self.kv_heads * self.head_dim
        b = 1 if self.bias else 0
        norm = 2 * h if self.bias else h
        attn = 2 * h * h + 2 * h * kv_dim + b * (2 * h + 2 * kv_dim)
        mlp = (3 if self.gated_mlp else 2) * h * f + b * ((2 if self.gated_mlp else 1) * f + h)
        per_layer = attn + mlp + 2 * norm
        embed = self.vocab_size * h + self.learned_positions * h + self.token_types * h
        head = 0
        if self.output_size is None:
            if not self.tied_embeddings:
                head = self.vocab_size * h
        else:
            head = h * self.output_size + b * self.output_size
            if self.pooler:
                head += h * h + b * h
        return embed + self.n_layers * per_layer + norm + head


@dataclass(frozen=True)
class MeasuredProfile:
    """A model described by measured activation memory: ``M(b) = fixed_bytes + b * per_sample_bytes``.

    Attributes:
        name: label.
        params: parameter count.
        per_sample_bytes: activation bytes autograd keeps per sample (slope m1), at ``measured_dtype_bytes``.
        fixed_bytes: batch-independent saved bytes (intercept M0).
        measured_dtype_bytes: bytes per element of the measured activations (4 for fp32);
            16-bit training is estimated at half.
        forward_flops_per_sample: forward FLOPs per sample (2 x multiply-accumulates), for time estimates.
        blocks: number of residual blocks (used for the activation-checkpointing estimate).
        source: where the numbers come from.
    """

    name: str
    params: int
    per_sample_bytes: int
    fixed_bytes: int = 0
    measured_dtype_bytes: int = 4
    forward_flops_per_sample: float | None = None
    blocks: int = 1
    source: str = ""

    def param_count(self) -> int:
        """Parameters."""
        return self.params


ModelSpec = Union[TransformerShape, MeasuredProfile]

_BERT = "Devlin et al. 2019 / Hugging Face config.json of google-bert/{}; sequence-classification head (num_labels=2) as in the HF 'model memory anatomy' fine-tune"
_GPT2 = "Radford et al. 2019 / Hugging Face config.json of openai-community/{}"

PRESETS: dict[str, ModelSpec] = {
    "bert-base": TransformerShape(
        "bert-base", 12, 768, 12, 30522, learned_positions=512, token_types=2, pooler=True,
        output_size=2, default_seq_len=128, source=_BERT.format("bert-base-uncased")),
    "bert-large": TransformerShape(
        "bert-large", 24, 1024, 16, 30522, learned_positions=512, token_types=2, pooler=True,
        output_size=2, default_seq_len=128, source=_BERT.format("bert-large-uncased")),
    "gpt2": TransformerShape("gpt2", 12, 768, 12, 50257, learned_positions=1024, default_seq_len=1024,
                             activation="gelu_new", fused_qkv=True, source=_GPT2.format("gpt2")),
    "gpt2-medium": TransformerShape("gpt2-medium", 24, 1024, 16, 50257, learned_positions=1024, activation="gelu_new", fused_qkv=True,
                                    default_seq_len=1024, source=_GPT2.format("gpt2-medium")),
    "gpt2-large": TransformerShape("gpt2-large", 36, 1280, 20, 50257, learned_positions=1024, activation="gelu_new", fused_qkv=True,
                                   default_seq_len=1024, source=_GPT2.format("gpt2-large")),
    "gpt2-xl": TransformerShape("gpt2-xl", 48, 1600, 25, 50257, learned_positions=1024, activation="gelu_new", fused_qkv=True,
                                default_seq_len=1024, source=_GPT2.format("gpt2-xl")),
    "llama-2-7b": TransformerShape(
        "llama-2-7b", 32, 4096, 32, 32000, intermediate_size=11008, gated_mlp=True, dropout=False,
        bias=False, tied_embeddings=False, default_seq_len=2048,
        source="Touvron et al. 2023 / config.json of meta-llama/Llama-2-7b-hf"),
    "llama-2-13b": TransformerShape(
        "llama-2-13b", 40, 5120, 40, 32000, intermediate_size=13824, gated_mlp=True, dropout=False,
        bias=False, tied_embeddings=False, default_seq_len=2048,
        source="Touvron et al. 2023 / config.json of meta-llama/Llama-2-13b-hf"),
    "llama-3-8b": TransformerShape(
        "llama-3-8b", 32, 4096, 32, 128256, intermediate_size=14336, n_kv_heads=8, gated_mlp=True,
        dropout=False, bias=False, tied_embeddings=False, default_seq_len=2048,
        source="config.json of meta-llama/Meta-Llama-3-8B"),
    "mistral-7b": TransformerShape(
        "mistral-7b", 32, 4096, 32, 32000, intermediate_size=14336, n_kv_heads=8, gated_mlp=True,
        dropout=False, bias=False, tied_embeddings=False, default_seq_len=2048,
        source="Jiang et al. 2023 / config.json of mistralai/Mistral-7B-v0.1"),
    "vit-base": TransformerShape(
        "vit-base", 12, 768, 12, 0, output_size=1000, params=86_567_656, fixed_seq_len=197,
        default_seq_len=197,
        source="Dosovitskiy et al. 2021, ViT-B/16 at 224x224 (196 patches + [CLS]); 86,567,656 params with a 1000-class head"),
    "resnet50": MeasuredProfile(
        "resnet50", params=25_557_032, per_sample_bytes=85_913_512, fixed_bytes=424_964,
        measured_dtype_bytes=4, forward_flops_per_sample=2 * 4.09e9, blocks=17,
        source=("ResNet-50 (He et al. 2016, torchvision layout) at 224x224: 85.9 MB/image of tensors saved for "
                "backward, measured with costctl.catalog.measure (fp32, CPU); consistent with NVIDIA "
                "DeepLearningExamples per-GPU batches (V100-16GB: FP32 112, AMP 256; T4: FP32 128). "
                "4.09 GMACs/image forward (torchvision model docs)")),
}


def preset(name: str) -> ModelSpec:
    """A preset by name (case-insensitive).

    Raises:
        UsageError: unknown name (the message lists the presets).
    """
    key = name.strip().lower()
    if key not in PRESETS:
        raise UsageError(_("unknown model preset {name!r}; choose one of: {choices}").format(
            name=name, choices=", ".join(PRESETS)))
    return PRESETS[key]


# GPT-3 model family (Brown et al. 2020, Table 2.1): (params, n_layers, d_model). Heads are
# d_model/128 above 1B and d_model/64 below, as in that table's d_head column.
_GPT3_SHAPES = (
    (125e6, 12, 768), (350e6, 24, 1024), (760e6, 24, 1536), (1.3e9, 24, 2048), (2.7e9, 32, 2560),
    (6.7e9, 32, 4096), (13e9, 40, 5120), (175e9, 96, 12288),
)


def shape_from_params(params: float) -> TransformerShape:
    """A decoder shape for a bare parameter count: the GPT-3 family row (Brown et al. 2020,
    Table 2.1) nearest in log-parameters supplies L and h for the activation terms; weights use
    ``params`` exactly. No dropout (modern practice), vocabulary 50257, MLP 4h.

    Raises:
        UsageError: params not a finite number >= 1e6 (nan, inf, 0 and negatives included).
    """
    if not math.isfinite(params) or params < 1e6:
        if not math.isfinite(params) or params <= 0:
            message = _("--params {params:g} is not a parameter count; give a parameter count of at least 1e6, "
                        "like 7e9 or 124e6")
        else:
            message = _("--params {params:g} is too small; give a parameter count of at least 1e6, like 7e9 or "
                        "124e6")
        raise UsageError(message.format(params=params))
    _size, layers, hidden = min(_GPT3_SHAPES, key=lambda row: abs(math.log(row[0]) - math.log(params)))
    heads = hidden // 128 if hidden >= 2048 else hidden // 64
    return TransformerShape(
        _("{params:.3g}-param decoder").format(params=params), layers, hidden, heads, 50257, dropout=False,
        params=int(params),
        default_seq_len=2048,
        source=f"GPT-3 family shape L={layers}, h={hidden} (Brown et al. 2020, Table 2.1) nearest to {params:.3g} params",
    )


_GATED_TYPES = {"llama", "mistral", "mixtral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3", "phi3",
                "internlm2", "yi", "deepseek", "olmo", "olmo2", "granite", "cohere"}
_LEARNED_POSITION_TYPES = {"gpt2", "bert", "roberta", "distilbert", "opt", "gpt_neo", "xlm-roberta", "electra",
                           "gpt_bigcode"}
#: Model types whose q, k and v come from one fused projection (GPT-2 ``c_attn``, GPTBigCode, Falcon, Phi-3...).
_FUSED_QKV_TYPES = {"gpt2", "gpt_bigcode", "falcon", "phi3", "bloom", "gpt_neox", "mpt", "chatglm"}
#: ``hidden_act`` / ``activation_function`` values -> how the activation saves tensors.
_ACTIVATIONS = {"gelu": "gelu", "gelu_pytorch_tanh": "gelu", "gelu_fast": "gelu", "quick_gelu": "gelu",
                "gelu_new": "gelu_new", "relu": "relu", "silu": "silu", "swish": "silu", "swiglu": "silu"}
#: config.json keys that give the number of key/value heads (grouped-query attention).
_KV_HEAD_KEYS = ("num_key_value_heads", "n_head_kv", "num_kv_heads", "multi_query_group_num", "n_kv_heads")


def _kv_heads(cfg: dict[str, Any], heads: int, path: Path) -> int | None:
    """Key/value heads from config.json: ``num_key_value_heads`` (Llama, Mistral, Qwen2),
    ``n_head_kv`` / ``num_kv_heads`` (Falcon), ``multi_query_group_num`` (ChatGLM), or
    ``multi_query: true`` (GPTBigCode / StarCoder, Falcon-7B: one K/V head); None = full
    multi-head attention.

    Raises:
        ConfigError: a count that is not a positive integer dividing the attention heads.
    """
    key = next((k for k in _KV_HEAD_KEYS if cfg.get(k) is not None), None)
    if key is not None:
        value = cfg[key]
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0 or heads % value:
            raise ConfigError(_("{path}: {key} {value!r} must be a positive integer that divides the {heads} "
                                "attention heads").format(path=path, key=key, value=value, heads=heads))
        return value
    if cfg.get("multi_query") is True:
        return 1
    return None


def _first(cfg: dict[str, Any], *keys: str) -> Any:
    for k in keys:
        if cfg.get(k) is not None:
            return cfg[k]
    return None


#: Ranges every integer of a model config.json must lie in (inclusive). The largest published
#: models stay far inside them (e.g. 126 layers, hidden 16,384, 128 heads, vocab ~256k, context
#: 1M tokens); the bounds keep each product in the estimator a plain machine-sized number.
CONFIG_INT_BOUNDS: dict[str, tuple[int, int]] = {
    "num_hidden_layers": (1, 10_000), "hidden_size": (1, 1 << 20), "num_attention_heads": (1, 1 << 16),
    "vocab_size": (1, 100_000_000), "intermediate_size": (1, 1 << 24), "max_position_embeddings": (1, 1 << 24),
    "type_vocab_size": (0, 1_000_000), "num_labels": (1, 1_000_000),
}


def _bounded(path: Path, key: str, value: Any, *, optional: bool = False) -> Any:
    """``value`` when it is a whole number within :data:`CONFIG_INT_BOUNDS` ``[key]`` (or None
    when ``optional``); else ConfigError naming the key, the value and the range."""
    if value is None and optional:
        return None
    low, high = CONFIG_INT_BOUNDS[key]
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        if getattr(value, "overflowed", False):  # jsonio.HugeNumber: hundreds of digits
            shown = _("(a number past the float range)")
        else:
            shown = repr(value)
            shown = shown if len(shown) <= 40 else shown[:37] + "..."
        raise ConfigError(_("{path}: {key} {value} is out of range; expected a whole number from {low} to {high}").format(
            path=path, key=key, value=shown, low=low, high=high))
    return value


def shape_from_hf_config(path: Path) -> TransformerShape:
    """A :class:`TransformerShape` from a Hugging Face ``config.json``.

    Reads ``num_hidden_layers``/``n_layer``, ``hidden_size``/``n_embd``/``d_model``,
    ``num_attention_heads``/``n_head``, the key/value heads (``num_key_value_heads``,
    ``n_head_kv``, ``num_kv_heads``, ``multi_query_group_num``, or ``multi_query: true`` for one
    shared K/V head), ``intermediate_size``/``n_inner``,
    ``vocab_size``, ``max_position_embeddings``/``n_positions``, ``tie_word_embeddings``,
    ``hidden_act``, dropout probabilities and ``architectures`` (a ``...ForSequenceClassification``
    model gets a classifier head of ``num_labels``/``id2label`` width).

    Raises:
        ConfigError: unreadable file, not JSON, a required key missing (named in the message),
            or inconsistent heads (hidden size not divisible by the heads, K/V heads not
            dividing them).
    """
    require_regular_file(path)
    try:
        cfg = jsonio.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(_("{path}: cannot read: {error}").format(path=path, error=exc.strerror or exc)) from None
    except (ValueError, UnicodeDecodeError) as exc:  # jsonio.JsonTooDeep is a ValueError
        raise ConfigError(_("{path}: not a JSON file: {error}").format(path=path, error=exc)) from None
    if not isinstance(cfg, dict):
        raise ConfigError(_("{path}: expected a JSON object (a Hugging Face config.json)").format(path=path))
    if isinstance(cfg.get("text_config"), dict):  # multimodal wrappers keep the LM config inside
        cfg = {**cfg["text_config"], "architectures": cfg.get("architectures")}
    layers = _first(cfg, "num_hidden_layers", "n_layer", "num_layers")
    hidden = _first(cfg, "hidden_size", "n_embd", "d_model")
    heads = _first(cfg, "num_attention_heads", "n_head", "num_heads")
    vocab = _first(cfg, "vocab_size")
    for key, value in (("num_hidden_layers", layers), ("hidden_size", hidden),
                       ("num_attention_heads", heads), ("vocab_size", vocab)):
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
            _bounded(path, key, value)  # a number out of range (or a fraction): named with its range
        if not isinstance(value, int) or value <= 0:
            raise ConfigError(_("{path}: needs a positive integer {key} (or its GPT-2 spelling); got {value!r}").format(
                path=path, key=key, value=value))
    intermediate = _bounded(path, "intermediate_size", _first(cfg, "intermediate_size", "n_inner", "ffn_dim"),
                            optional=True)
    if hidden % heads:
        raise ConfigError(_("{path}: hidden_size {hidden} is not a multiple of num_attention_heads {heads}").format(
            path=path, hidden=hidden, heads=heads))
    model_type = str(cfg.get("model_type") or "").lower()
    act = str(cfg.get("hidden_act") or cfg.get("activation_function") or "").lower()
    gated = model_type in _GATED_TYPES or act in {"silu", "swiglu", "swish"}
    kv_heads = _kv_heads(cfg, heads, path)
    drop_keys = ("hidden_dropout_prob", "resid_pdrop", "attention_dropout", "attention_probs_dropout_prob",
                 "hidden_dropout", "dropout")
    dropout = any(isinstance(cfg.get(k), (int, float)) and cfg[k] > 0 for k in drop_keys)
    max_pos = _bounded(path, "max_position_embeddings",
                       _first(cfg, "max_position_embeddings", "n_positions", "n_ctx") or 2048)
    archs = [str(a) for a in (cfg.get("architectures") or [])]
    output_size = None
    if any(a.endswith("ForSequenceClassification") for a in archs):
        labels = cfg.get("id2label")
        output_size = len(labels) if isinstance(labels, dict) and labels else _bounded(
            path, "num_labels", cfg.get("num_labels") or 2)
    bias = not gated and model_type not in {"t5", "mt5"}
    return TransformerShape(
        name=str(cfg.get("_name_or_path") or model_type or path.stem),
        n_layers=layers,
        hidden_size=hidden,
        n_heads=heads,
        vocab_size=vocab,
        intermediate_size=intermediate,
        n_kv_heads=kv_heads,
        gated_mlp=gated,
        dropout=dropout,
        bias=bias,
        tied_embeddings=bool(cfg.get("tie_word_embeddings", True)),
        learned_positions=int(max_pos) if model_type in _LEARNED_POSITION_TYPES else 0,
        token_types=_bounded(path, "type_vocab_size", cfg.get("type_vocab_size") or 0),
        pooler=model_type == "bert" and output_size is not None,
        output_size=output_size,
        default_seq_len=min(int(max_pos), 2048),
        activation="silu" if gated else _ACTIVATIONS.get(act, "gelu"),
        fused_qkv=model_type in _FUSED_QKV_TYPES,
        source=f"Hugging Face config.json {path}",
    )


__all__ = [
    "MeasuredProfile",
    "ModelSpec",
    "PRESETS",
    "TransformerShape",
    "preset",
    "shape_from_hf_config",
    "shape_from_params",
]
