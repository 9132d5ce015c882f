"""The GPU catalog: one row per GPU model, loaded from ``costctl/catalog/data/gpus.toml``.

Every figure carries its source (an NVIDIA datasheet or whitepaper). Tensor TFLOPS are dense
with FP32 accumulate -- never the 2:4-sparsity figure, never GeForce's FP16-accumulate
figure -- because that is the rate a PyTorch fp16/bf16 matmul runs at. The loader refuses a
row whose dense figure is not below its sparse figure.

:func:`normalize_gpu_name` maps the many spellings that NVML, nvidia-smi, SkyPilot, AutoDL,
RunPod and Vast.ai use ("NVIDIA GeForce RTX 4090", "RTX4090", "A100-SXM4-80GB") to one
catalog name. Provider adapters call it; its name and signature are stable.
"""

from __future__ import annotations

import difflib
import re
import tomllib
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources

from ..errors import ConfigError
from ..i18n import _
from ..validation import toml_error_text

GIB = 1024**3

#: Words that vendors and tools prepend and that never distinguish two models.
_NOISE_WORDS = re.compile(r"\b(nvidia|geforce|tesla|graphics card)\b")
_NON_ALNUM = re.compile(r"[^a-z0-9]+")


def _key(name: str) -> str:
    """Matching key: lower case, vendor words dropped, only letters and digits kept."""
    text = _NOISE_WORDS.sub(" ", name.lower())
    return _NON_ALNUM.sub("", text)


@dataclass(frozen=True)
class GpuModel:
    """One GPU model of the catalog.

    Attributes:
        name: catalog name, e.g. ``"RTX 4090"``, ``"A100-80GB"``.
        architecture: NVIDIA architecture name ("Ampere", "Hopper"...).
        memory_gb: the vendor's nominal memory capacity, counted in GiB (2**30 bytes): the
            "48 GB" of an L40S is 48 GiB of DRAM. NVML / nvidia-smi report less as the total
            (46068 MiB = 45.0 GiB on an L40S; ECC and driver reservations), so planners keep
            headroom (:func:`costctl.catalog.recommend.usable_bytes`).
        memory_bandwidth_gbs: memory bandwidth in GB/s (10**9 bytes/s).
        fp32_tflops: non-tensor FP32 peak, 10**12 FLOP/s.
        fp16_tensor_tflops: dense FP16 tensor-core peak with FP32 accumulate.
        bf16_tensor_tflops: dense BF16 tensor-core peak with FP32 accumulate; None = no BF16.
        fp16_tensor_tflops_sparse: the 2:4 structured-sparsity figure datasheets print (reference only).
        fp16_tensor_tflops_fp16_acc: GeForce's FP16-accumulate figure (reference only).
        compute_capability: CUDA compute capability, e.g. ``"8.9"``.
        tdp_w: board power in watts.
        form_factor: "PCIe", "SXM4"...
        aliases: other spellings of the name (matching ignores case, spaces, dashes and vendor words).
        source: where the figures come from.
        notes: caveats (e.g. which variants share the row).
    """

    name: str
    architecture: str
    memory_gb: float
    memory_bandwidth_gbs: float
    fp32_tflops: float
    fp16_tensor_tflops: float
    compute_capability: str
    tdp_w: int
    source: str
    bf16_tensor_tflops: float | None = None
    fp16_tensor_tflops_sparse: float | None = None
    fp16_tensor_tflops_fp16_acc: float | None = None
    form_factor: str = ""
    aliases: tuple[str, ...] = ()
    notes: str = ""

    @property
    def bf16(self) -> bool:
        """Whether the card has BF16 tensor support (False on Turing/Volta: T4, V100)."""
        return self.bf16_tensor_tflops is not None

    @property
    def memory_bytes(self) -> int:
        """Nominal memory in bytes (``memory_gb`` GiB; more than NVML's usable total)."""
        return int(self.memory_gb * GIB)

    def peak_tflops(self, dtype: str) -> float | None:
        """Dense peak for a compute dtype: ``"fp32"`` (CUDA cores), ``"fp16"`` or ``"bf16"``
        (tensor cores, FP32 accumulate). None when the card lacks that dtype (bf16 on a T4).

        Raises:
            ValueError: for another dtype.
        """
        if dtype == "fp32":
            return self.fp32_tflops
        if dtype == "fp16":
            return self.fp16_tensor_tflops
        if dtype == "bf16":
            return self.bf16_tensor_tflops
        raise ValueError(f"unknown compute dtype {dtype!r}; expected fp32, fp16 or bf16")

    def to_dict(self) -> dict[str, object]:
        """JSON-ready dict; tensor keys say explicitly that they are dense."""
        return {
            "name": self.name,
            "architecture": self.architecture,
            "memory_gb": self.memory_gb,
            "memory_bandwidth_gbs": self.memory_bandwidth_gbs,
            "fp32_tflops": self.fp32_tflops,
            "fp16_tensor_tflops_dense": self.fp16_tensor_tflops,
            "bf16_tensor_tflops_dense": self.bf16_tensor_tflops,
            "bf16": self.bf16,
            "compute_capability": self.compute_capability,
            "tdp_w": self.tdp_w,
            "form_factor": self.form_factor,
            "source": self.source,
            "notes": self.notes,
        }


@dataclass(frozen=True)
class Catalog:
    """All GPU models plus the name index.

    Attributes:
        models: catalog rows in file order.
        ambiguous: family names (``"A100"``) -> candidate catalog names, default first.
    """

    models: tuple[GpuModel, ...]
    ambiguous: dict[str, tuple[str, ...]] = field(default_factory=dict)
    _index: dict[str, str] = field(default_factory=dict, repr=False, compare=False)
    _ambiguous_index: dict[str, tuple[str, ...]] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        index: dict[str, str] = {}
        for model in self.models:
            for spelling in (model.name, *model.aliases):
                key = _key(spelling)
                other = index.get(key)
                if other is not None and other != model.name:
                    raise ConfigError(_("GPU catalog: alias {alias!r} names both {first} and {second}").format(
                        alias=spelling, first=other, second=model.name))
                index[key] = model.name
        amb: dict[str, tuple[str, ...]] = {}
        for spelling, names in self.ambiguous.items():
            for name in names:
                if _key(name) not in index:
                    raise ConfigError(_("GPU catalog: ambiguous name {name!r} lists unknown model {model!r}").format(
                        name=spelling, model=name))
            amb[_key(spelling)] = tuple(index[_key(n)] for n in names)
        object.__setattr__(self, "_index", index)
        object.__setattr__(self, "_ambiguous_index", amb)

    def get(self, name: str) -> GpuModel | None:
        """The model for any known spelling of ``name``, or None."""
        resolved, known = self.normalize(name)
        if not known:
            return None
        return next(m for m in self.models if m.name == resolved)

    def names_like(self, query: str, limit: int = 5) -> list[str]:
        """Catalog names that ``query`` may mean, best first (at most ``limit``): models whose name
        or alias contains it (``"4090"`` -> RTX 4090, RTX 4090 D), else close spellings
        (:func:`difflib.get_close_matches`). Empty when nothing is near."""
        key = _key(query or "")
        if not key:
            return []
        containing: list[str] = []
        for model in self.models:
            if any(key in _key(spelling) for spelling in (model.name, *model.aliases)):
                containing.append(model.name)
        if containing:
            return containing[:limit]
        by_key = {_key(m.name): m.name for m in self.models}
        return [by_key[k] for k in difflib.get_close_matches(key, list(by_key), n=limit, cutoff=0.6)]

    def normalize(self, raw: str, *, memory_gb: float | None = None) -> tuple[str, bool]:
        """See :func:`normalize_gpu_name`."""
        text = (raw or "").strip()
        key = _key(text)
        if not key:
            return text, False
        if key in self._ambiguous_index:
            candidates = self._ambiguous_index[key]
            if memory_gb is None:
                return candidates[0], True
            by_name = {m.name: m for m in self.models}
            best = min(candidates, key=lambda n: abs(by_name[n].memory_gb - memory_gb))
            return best, True
        if key in self._index:
            return self._index[key], True
        return text, False


def _model_from_row(row: dict[str, object]) -> GpuModel:
    try:
        row = dict(row)
        row["aliases"] = tuple(row.get("aliases", ()))  # type: ignore[arg-type]
        model = GpuModel(**row)  # type: ignore[arg-type]
    except TypeError as exc:
        raise ConfigError(_("GPU catalog row {name!r}: {error}").format(name=row.get("name"), error=exc)) from None
    dense, sparse = model.fp16_tensor_tflops, model.fp16_tensor_tflops_sparse
    if sparse is not None and not dense < sparse:
        raise ConfigError(_("GPU catalog row {name}: dense FP16 tensor {dense} is not below sparse {sparse}").format(
            name=model.name, dense=dense, sparse=sparse))
    if model.fp16_tensor_tflops_fp16_acc is not None and not dense < model.fp16_tensor_tflops_fp16_acc:
        raise ConfigError(_("GPU catalog row {name}: FP32-accumulate figure must be below the FP16-accumulate "
                            "one").format(name=model.name))
    return model


def parse_catalog(text: str) -> Catalog:
    """Build a :class:`Catalog` from TOML text in the format of ``data/gpus.toml``.

    Raises:
        ConfigError: malformed TOML, an unknown field, a sparse figure given as dense, or an
            alias claimed by two models.
    """
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(toml_error_text(_("GPU catalog"), exc)) from None
    models = tuple(_model_from_row(row) for row in data.get("gpu", []))
    ambiguous = {k: tuple(v) for k, v in data.get("ambiguous", {}).items()}
    return Catalog(models=models, ambiguous=ambiguous)


@lru_cache(maxsize=1)
def load_catalog() -> Catalog:
    """The catalog shipped in the package (cached)."""
    text = resources.files("costctl.catalog").joinpath("data/gpus.toml").read_text(encoding="utf-8")
    return parse_catalog(text)


def normalize_gpu_name(raw: str, *, memory_gb: float | None = None) -> tuple[str, bool]:
    """Map a GPU name as a provider, NVML or nvidia-smi spells it to the catalog name.

    Matching ignores case, spaces, dashes, underscores and the words NVIDIA/GeForce/Tesla, so
    ``"NVIDIA GeForce RTX 4090"``, ``"RTX4090"`` and AutoDL's ``"RTX 4090"`` all give
    ``("RTX 4090", True)``; ``"A100-80GB"``, ``"A100-SXM4-80GB"`` and
    ``"NVIDIA A100-SXM4-80GB"`` give ``("A100-80GB", True)``.

    Args:
        raw: the name as reported.
        memory_gb: optional per-GPU memory the source reports (GiB); it picks the variant
            for family names that several rows share (a plain ``"A100"`` is 40 GB unless
            ``memory_gb`` is nearer 80).

    Returns:
        ``(name, known)``: the catalog name and True, or -- for a name the catalog does not
        know -- the raw name stripped of surrounding spaces and False. Never raises.
    """
    try:
        return load_catalog().normalize(raw, memory_gb=memory_gb)
    except ConfigError:  # a broken catalog must not break callers that only want a label
        return (raw or "").strip(), False


def get_gpu(name: str) -> GpuModel | None:
    """The catalog row for any known spelling of ``name``; None if unknown."""
    return load_catalog().get(name)


__all__ = ["Catalog", "GpuModel", "GIB", "get_gpu", "load_catalog", "normalize_gpu_name", "parse_catalog"]
