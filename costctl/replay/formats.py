"""Tell a recorded log's format from its content (never from its name: Keras' CSVLogger writes
``training.log``, and users rename files).

:func:`detect_format` looks at the first 32 Ki characters (decoded as :mod:`.textio` does) and
returns one of :data:`GPU_FORMATS` or :data:`TRAIN_FORMATS`:

====================  ================================================================
``nvidia-smi-csv``    ``nvidia-smi --query-gpu=... --format=csv`` (header or nvidia-smi timestamps)
``nvidia-smi-table``  the plain ``nvidia-smi`` dashboard printed in a loop
``wandb-system``      JSON lines with ``system.gpu.N.*`` keys (wandb system metrics)
``gpu-csv``           a custom CSV with a GPU-utilization column and no loss column
``hf-trainer-state``  a JSON document with ``log_history`` (Hugging Face / TRL)
``detectron2-jsonl``  JSON lines with ``iteration`` and ``total_loss`` / ``loss_*``
``mmengine-jsonl``    JSON lines with ``step`` and ``iter`` or ``coco/*`` (MMEngine scalars)
``metrics-jsonl``     other JSON lines holding a loss
``yolo-csv``          CSV with ``train/*_loss`` columns (YOLOv5 / Ultralytics ``results.csv``)
``lightning-csv``     CSV with a ``step`` column and a loss (Lightning ``metrics.csv``)
``keras-csv``         CSV with ``epoch`` and ``loss`` and no ``step`` (Keras ``CSVLogger``)
``metrics-csv``       other CSV with a loss column
``console``           anything else: a training job's console output
====================  ================================================================
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

from ..jsonio import loads
from ..progress.metrics_file import csv_rows
from .gpu_smi_csv import looks_like_custom_gpu_csv, looks_like_smi_csv
from .gpu_smi_table import looks_like_table
from .gpu_wandb import looks_like_wandb
from .textio import read_head

GPU_FORMATS = ("nvidia-smi-csv", "nvidia-smi-table", "wandb-system", "gpu-csv")
TRAIN_FORMATS = (
    "hf-trainer-state", "detectron2-jsonl", "mmengine-jsonl", "metrics-jsonl",
    "yolo-csv", "lightning-csv", "keras-csv", "metrics-csv", "console",
)


def _first_lines(text: str, count: int = 2) -> list[str]:
    out = []
    for line in text.splitlines():
        if line.strip():
            out.append(line)
            if len(out) == count:
                break
    return out


def _json_records(text: str, limit: int = 20) -> list[dict]:
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            record = loads(line)
        except ValueError:  # not JSON, an integer past the parser's limit, nested too deep (jsonio)
            break
        if isinstance(record, dict):
            out.append(record)
        if len(out) >= limit:
            break
    return out


_COLUMN_NAME = re.compile(r"^[A-Za-z_][\w./()\[\]%:-]*$")


def _csv_header(line: str, second: str | None) -> list[str] | None:
    """The column names when ``line`` is a CSV header (names without inner spaces) and the next
    line, if any, has as many cells; else None (a console line that happens to hold commas)."""
    if "," not in line:
        return None
    try:
        names = [c.strip() for c in next(csv_rows(line), [])]
        if len(names) < 2 or not all(_COLUMN_NAME.match(n) for n in names):
            return None
        if second is not None and len(next(csv_rows(second), [])) != len(names):
            return None
    except csv.Error:
        return None
    return names


def detect_format(head: str) -> str:
    """The format of a log whose decoded beginning is ``head`` (see the module table)."""
    head = head.lstrip("\ufeff")
    lines = _first_lines(head)
    first = lines[0] if lines else ""
    stripped = first.strip()
    if stripped.startswith("{"):
        records = _json_records(head)
        if not records:
            # a pretty-printed JSON document (trainer_state.json starts with "{" alone)
            return "hf-trainer-state" if stripped == "{" or '"log_history"' in head else "console"
        keys = set().union(*(r.keys() for r in records))
        if any(looks_like_wandb(r) for r in records):
            return "wandb-system"
        if "log_history" in keys:
            return "hf-trainer-state"
        if "iteration" in keys and ("total_loss" in keys or any(k.startswith("loss_") for k in keys)):
            return "detectron2-jsonl"
        if "step" in keys and ("iter" in keys or any(k.startswith("coco/") for k in keys)):
            return "mmengine-jsonl"
        if any("loss" in k for k in keys):
            return "metrics-jsonl"
        return "console"
    if looks_like_table(head):
        return "nvidia-smi-table"
    if looks_like_smi_csv(first):
        return "nvidia-smi-csv"
    header = _csv_header(first, lines[1] if len(lines) > 1 and len(head) > len(first) + 1 else None)
    if header is not None:
        names = [h.lower() for h in header]
        if any(n.startswith("train/") and n.endswith("_loss") for n in names):
            return "yolo-csv"
        if looks_like_custom_gpu_csv(names):
            return "gpu-csv"
        has_loss = any("loss" in n for n in names)
        if has_loss and "step" in names:
            return "lightning-csv"
        if has_loss and "epoch" in names:
            return "keras-csv"
        if has_loss:
            return "metrics-csv"
    return "console"


def detect_file(path: Path) -> str:
    """:func:`detect_format` on the beginning of ``path``.

    Raises:
        UsageError: the file cannot be read.
    """
    return detect_format(read_head(path))
