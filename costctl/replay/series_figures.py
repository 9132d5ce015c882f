"""Per-series loss figures of a training log, for ``costctl analyze --format json``.

One entry per loss series the log holds: the train and eval series the policies read (the
primary ones) and, for metrics files, every other column whose name holds ``loss`` (Lightning's
``train_loss_epoch`` beside ``train_loss_step``, YOLO's ``train/obj_loss``...). Each entry::

    {"name": "loss", "kind": "train" | "eval", "granularity": "batch" | "epoch",
     "primary": bool, "count": int, "nonfinite": int, "first": float|str|None,
     "last": float|str|None, "min": float|None, "argmin": {"step": int|None, "epoch": float|None}}

``count`` includes NaN/inf values (written as ``"nan"``/``"inf"``/``"-inf"``); ``min`` is the
smallest finite value and ``argmin`` where it is first reached. ``granularity`` is ``epoch``
for per-epoch series (a name ending in ``_epoch``, Keras and YOLO CSVs, an epoch-average
phrasing), else ``batch`` (one value per logged step).
"""

from __future__ import annotations

import math
from typing import Any

from ..policies.history import finite_or_text
from .loss_stats import LossSummary
from .train_log import GRAD_NORM_KEYS, SeriesPoint, TrainLog

#: formats whose rows are one per epoch.
_EPOCH_FORMATS = ("keras-csv", "yolo-csv")
_EVAL_PREFIXES = ("val", "valid", "validation", "eval", "evaluation", "dev")
_SKIP_PREFIXES = ("test", "predict")


def granularity(fmt: str, name: str) -> str:
    """``"epoch"`` or ``"batch"`` for the series ``name`` of a ``fmt`` log (see the module docstring)."""
    low = name.lower()
    if fmt in _EPOCH_FORMATS or low.endswith("_epoch") or low.startswith(("epoch", "avg", "average", "mean")):
        return "epoch"
    return "batch"


def _kind(name: str) -> str | None:
    low = name.lower().lstrip("_")
    head = low.replace("/", "_").split("_", 1)[0]
    if head in _SKIP_PREFIXES:
        return None
    return "eval" if head in _EVAL_PREFIXES else "train"


def _column(name: str, kind: str, fmt: str, points: list[SeriesPoint], by_step: bool) -> dict[str, Any]:
    values = [v for _, v in points]
    finite = [(x, v) for x, v in points if math.isfinite(v)]
    best = min(finite, key=lambda p: p[1]) if finite else None
    x = best[0] if best else None
    return {
        "name": name, "kind": kind, "granularity": granularity(fmt, name), "primary": False,
        "count": len(values), "nonfinite": len(values) - len(finite),
        "first": finite_or_text(values[0]) if values else None,
        "last": finite_or_text(values[-1]) if values else None,
        "min": best[1] if best else None,
        "argmin": {"step": int(x) if x is not None and by_step else None,
                   "epoch": x if x is not None and not by_step else None},
    }


def _summary_entry(name: str, kind: str, gran: str, s: LossSummary, *, primary: bool) -> dict[str, Any]:
    best = s.min
    return {
        "name": name, "kind": kind, "granularity": gran, "primary": primary,
        "count": s.count, "nonfinite": s.nonfinite,
        "first": finite_or_text(s.first.value) if s.first else None,
        "last": finite_or_text(s.last.value) if s.last else None,
        "min": best.value if best else None,
        "argmin": {"step": best.step if best else None, "epoch": best.epoch if best else None},
    }


def series_figures(log: TrainLog) -> list[dict[str, Any]]:
    """The figures of every loss series of ``log`` (primary train first, then eval, then the others)."""
    out: list[dict[str, Any]] = []
    for kind in ("train", "eval"):
        if not log.count(kind):
            continue
        s = log.summary_of(kind)
        name = log.primary_names.get(kind) or (s.first.name if s.first is not None else "loss")
        gran = log.granularities.get((kind, name)) or granularity(log.format, name)
        out.append(_summary_entry(name, kind, gran, s, primary=True))
    for kind, name, gran, s in log.extra:
        out.append(_summary_entry(name, kind, gran, s, primary=False))
    by_step = log.x_axis == "step"
    for name, points in log.series.items():
        if "loss" not in name.lower() or name in GRAD_NORM_KEYS or not points:
            continue
        kind = _kind(name)
        if kind is None:
            continue
        out.append(_column(name, kind, log.format, points, by_step))
    return out


__all__ = ["granularity", "series_figures"]
