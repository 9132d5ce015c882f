"""How fast a model trains on a card: FLOPs at the fraction of the card's dense peak that
published runs achieve.

The model: ``hours = training FLOPs / (GPUs x dense peak x fraction)``. The FLOPs are
:func:`costctl.catalog.recommend.training_flops`; the peak is the card's dense rate for the
compute dtype (16-bit tensor cores under mixed precision, FP32 CUDA cores in fp32); the
fraction (model FLOPs utilization, MFU) is what published single-GPU runs achieved:

* the model's own rows in ``data/throughput.csv`` (NVIDIA DeepLearningExamples tables, each
  row with its source and date): the row for the same precision on the card whose peak is
  nearest (same peak first, then nearest bandwidth), its ``samples/s x FLOPs/sample / peak``;
* a model without rows: the median fraction of all rows of the precision class (16-bit:
  ~0.23; fp32: ~0.53). Large language models often reach more (PaLM reports 46 % MFU), so
  ``--mfu`` overrides it.

A ResNet-50 or BERT run with mixed precision reaches about a quarter of the tensor peak,
because the elementwise and normalization kernels between the matmuls are bound by memory,
not by the tensor cores; in fp32 the CUDA cores are the bottleneck and half the peak is
reached. A single fraction for every card and precision made fp32 cards look slow and
16-bit runs 1.5-2x too fast.
"""

from __future__ import annotations

import csv
import io
import math
import statistics
from dataclasses import dataclass
from datetime import date
from functools import lru_cache
from importlib import resources
from typing import Callable

from ..errors import ConfigError
from ..i18n import _
from .gpus import GpuModel, get_gpu

PRECISION_CLASSES: tuple[str, ...] = ("mixed", "fp32")


def precision_class(precision: str) -> str:
    """``fp32`` for fp32 training, else ``mixed`` (16-bit tensor cores: mixed, fp16, bf16)."""
    return "fp32" if precision == "fp32" else "mixed"


@dataclass(frozen=True)
class ThroughputRow:
    """One published training throughput.

    Attributes:
        model: preset name; gpu: catalog row; precision: ``mixed`` or ``fp32``.
        batch: per-GPU batch (None when not stated); seq_len: tokens per sample (transformers).
        samples_per_second: per GPU.
        framework, seen, source: where and when it was published.
    """

    model: str
    gpu: GpuModel
    precision: str
    batch: int | None
    seq_len: int | None
    samples_per_second: float
    framework: str
    seen: date
    source: str

    def peak_tflops(self) -> float:
        """The card's dense peak for this row's precision (TFLOPS)."""
        return _peak(self.gpu, self.precision)


def _peak(gpu: GpuModel, precision: str) -> float:
    """Dense peak TFLOPS: FP32 CUDA cores for fp32, else BF16 tensor (FP16 where no BF16)."""
    if precision_class(precision) == "fp32":
        return gpu.fp32_tflops
    return gpu.bf16_tensor_tflops or gpu.fp16_tensor_tflops


def parse_throughput_csv(text: str, *, origin: str) -> tuple[ThroughputRow, ...]:
    """Rows of a throughput CSV (``#`` lines are comments).

    Raises:
        ConfigError: an unknown GPU, a precision not mixed/fp32, or a bad number or date.
    """
    lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith("#")]
    rows = []
    for n, r in enumerate(csv.DictReader(io.StringIO("\n".join(lines))), start=2):
        try:
            gpu = get_gpu(r["gpu"])
            if gpu is None:
                raise ValueError(_("unknown GPU {gpu!r}").format(gpu=r["gpu"]))
            if r["precision"] not in PRECISION_CLASSES:
                raise ValueError(_("precision {precision!r} is not mixed or fp32").format(precision=r["precision"]))
            rows.append(ThroughputRow(
                model=r["model"].strip().lower(), gpu=gpu, precision=r["precision"],
                batch=int(r["batch"]) if r.get("batch") else None,
                seq_len=int(r["seq_len"]) if r.get("seq_len") else None,
                samples_per_second=float(r["samples_per_second"]), framework=r["framework"],
                seen=date.fromisoformat(r["seen"]), source=r["source"],
            ))
        except (KeyError, ValueError, TypeError) as exc:
            raise ConfigError(_("{origin} row {row}: {error}").format(origin=origin, row=n, error=exc)) from None
    return tuple(rows)


@lru_cache(maxsize=1)
def published_throughput() -> tuple[ThroughputRow, ...]:
    """The shipped table ``data/throughput.csv`` (cached)."""
    text = resources.files("costctl.catalog").joinpath("data/throughput.csv").read_text(encoding="utf-8")
    return parse_throughput_csv(text, origin="costctl/catalog/data/throughput.csv")


def achieved_fraction(row: ThroughputRow, flops_per_sample: float) -> float:
    """``samples/s x FLOPs/sample / dense peak``: the MFU the published run reached."""
    return row.samples_per_second * flops_per_sample / (row.peak_tflops() * 1e12)


@dataclass(frozen=True)
class Efficiency:
    """The fraction of the dense peak used for a model on a card, and where it comes from.

    Attributes:
        fraction: MFU in (0, 1].
        basis: ``"published"`` (the model's row on this card), ``"transferred"`` (the model's
            row on another card), ``"median"`` (the median of all rows) or ``"given"`` (--mfu).
        row: the published row used (None for median and given).
    """

    fraction: float
    basis: str
    row: ThroughputRow | None = None

    def describe(self) -> str:
        """One line for the recommendation's notes."""
        if self.row is not None:
            r = self.row
            if self.basis == "published":
                line = _("{fraction:.0%} of the dense peak, as {model} reached on this card ({rate:g} samples/s, "
                         "{framework}, {source})")
            else:
                line = _("{fraction:.0%} of the dense peak, as {model} reached on {gpu} ({rate:g} samples/s, "
                         "{framework}, {source})")
            return line.format(fraction=self.fraction, model=r.model, gpu=r.gpu.name, rate=r.samples_per_second,
                               framework=r.framework, source=r.source)
        if self.basis == "median":
            return _("{fraction:.0%} of the dense peak: the median of the published runs in costctl's throughput "
                     "table for this precision").format(fraction=self.fraction)
        return _("{fraction:.0%} of the dense peak (--mfu)").format(fraction=self.fraction)


def _nearest(rows: list[ThroughputRow], gpu: GpuModel, precision: str) -> ThroughputRow:
    """The row whose card is nearest ``gpu``: same card first, then nearest peak (log ratio),
    then nearest memory bandwidth."""
    peak = _peak(gpu, precision)

    def distance(r: ThroughputRow) -> tuple[bool, float, float]:
        return (r.gpu.name != gpu.name, abs(math.log(r.peak_tflops() / peak)),
                abs(math.log(r.gpu.memory_bandwidth_gbs / gpu.memory_bandwidth_gbs)))

    return min(rows, key=distance)


def efficiency(model_name: str, gpu: GpuModel, precision: str, flops_per_sample: FlopsFn,
               *, rows: tuple[ThroughputRow, ...] | None = None, exclude_gpu: str | None = None) -> Efficiency:
    """The fraction of ``gpu``'s dense peak a training run of ``model_name`` reaches.

    Args:
        model_name: preset name (rows are looked up by it).
        gpu, precision: the card and the setup's precision.
        flops_per_sample: (seq_len or None) -> training FLOPs of one sample at that length.
        rows: the table (default: the shipped one).
        exclude_gpu: leave this card's rows out (to check a prediction against them).
    """
    table = published_throughput() if rows is None else rows
    cls = precision_class(precision)
    usable = [r for r in table if r.precision == cls and r.gpu.name != exclude_gpu]
    own = [r for r in usable if r.model == model_name.strip().lower()]
    if own:
        row = _nearest(own, gpu, precision)
        basis = "published" if row.gpu.name == gpu.name else "transferred"
        return Efficiency(achieved_fraction(row, flops_per_sample(row.seq_len)), basis, row)
    fractions = [achieved_fraction(r, flops_of_row(r)) for r in usable]
    if not fractions:
        raise ConfigError(_("the throughput table has no {precision} rows").format(precision=cls))
    return Efficiency(statistics.median(fractions), "median")


def flops_of_row(row: ThroughputRow) -> float:
    """Training FLOPs of one sample of a row's model at the row's sequence length."""
    from .memory import Setup
    from .models import preset
    from .recommend import training_flops

    model = preset(row.model)
    return training_flops(model, Setup(seq_len=row.seq_len), samples_work(model, row.seq_len), row.seq_len)


def samples_work(model: object, seq_len: int | None) -> float:
    """The ``work`` of one sample for :func:`~costctl.catalog.recommend.training_flops`: its
    tokens for a transformer (``seq_len``, else the model's default), 1 for a measured profile."""
    from .models import TransformerShape

    if isinstance(model, TransformerShape):
        return float(model.fixed_seq_len or seq_len or model.default_seq_len)
    return 1.0


#: (seq_len or None) -> training FLOPs of one sample at that length.
FlopsFn = Callable[[int | None], float]

__all__ = [
    "Efficiency",
    "PRECISION_CLASSES",
    "ThroughputRow",
    "achieved_fraction",
    "efficiency",
    "flops_of_row",
    "parse_throughput_csv",
    "precision_class",
    "published_throughput",
    "samples_work",
]
