"""Import prices from a SkyPilot catalog CSV (``~/.sky/catalogs/<version>/<cloud>/vms.csv``).

SkyPilot's column order differs by cloud (AWS: ``...,GpuInfo,Price,SpotPrice,Region,...``;
Lambda and RunPod: ``...,Price,Region,GpuInfo,SpotPrice``), so columns are read by header
name. Prices are USD per instance-hour; costctl stores them per GPU-hour (Price divided by
AcceleratorCount). ``GpuInfo`` is a Python literal (single quotes), parsed with
:func:`ast.literal_eval`; it may be missing (GCP) and its ``SizeInMiB`` is in GiB in some
catalogs (RunPod), so memory from it is used only to pick a GPU variant and sanity-checked.
An empty (or zero) Price or SpotPrice means that billing mode is not offered there.
Rows without an accelerator (CPU instances) are skipped. For each GPU and billing mode the
cheapest per-GPU-hour row across regions and instance types is kept.
"""

from __future__ import annotations

import ast
import csv
import io
from datetime import date
from decimal import Decimal, InvalidOperation
from pathlib import Path

from ..errors import ConfigError, UsageError
from ..i18n import _
from ..validation import require_regular_file
from .gpus import normalize_gpu_name
from .prices import PriceEntry, make_entry

REQUIRED_COLUMNS = ("AcceleratorName", "AcceleratorCount", "Price")


#: Characters a SkyPilot catalog cell may hold (its longest real cells, GpuInfo dicts, are a few
#: hundred); a row with a longer cell (a 10 MB field) is skipped and counted, never parsed.
MAX_CELL_CHARS = 4096


def _decimal(text: str | None) -> Decimal | None:
    text = (text or "").strip()
    if not text:
        return None
    try:
        value = Decimal(text)
    except InvalidOperation:
        return None
    return value if value.is_finite() else None


def parse_gpu_info(gpu_info: str | None) -> tuple[str | None, float | None]:
    """``(name, per-GPU memory in GiB)`` from a SkyPilot ``GpuInfo`` literal; None for what is
    absent or implausible.

    ``SizeInMiB`` is MiB in most catalogs but GiB in some (RunPod writes 80 for an 80 GB card):
    values below 1024 are taken as GiB.
    """
    text = (gpu_info or "").strip()
    if not text.startswith("{"):
        return None, None
    try:
        info = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None, None
    gpus = info.get("Gpus") if isinstance(info, dict) else None
    if not isinstance(gpus, list) or not gpus or not isinstance(gpus[0], dict):
        return None, None
    first = gpus[0]
    name = first.get("Name") if isinstance(first.get("Name"), str) and first.get("Name").strip() else None
    mem = first.get("MemoryInfo")
    size = mem.get("SizeInMiB") if isinstance(mem, dict) else None
    if not isinstance(size, (int, float)) or isinstance(size, bool) or size <= 0:
        return name, None
    return name, (float(size) if size < 1024 else float(size) / 1024)


def parse_skypilot_csv(text: str, *, provider: str, seen: date, source: str, currency: str = "USD",
                       counts: dict[str, int] | None = None) -> list[PriceEntry]:
    """Parse a SkyPilot ``vms.csv`` into per-GPU-hour prices.

    Args:
        text: file contents.
        provider: the cloud name to file the prices under (``"aws"``, ``"runpod"``...).
        seen: the date to record as "seen".
        source: recorded with each price (e.g. the file path).
        currency: SkyPilot catalogs are in USD.
        counts: when given, ``counts["long_cells"]`` counts the rows skipped for a cell over
            :data:`MAX_CELL_CHARS` characters.

    Returns:
        one entry per (GPU, billing) present: the cheapest per-GPU-hour price.

    Raises:
        ConfigError: the header lacks AcceleratorName, AcceleratorCount or Price, or no row has
            both an accelerator and a price.
    """
    if len(text) >= csv.field_size_limit():  # read any cell length; long cells are skipped below
        csv.field_size_limit(len(text) + 1)
    reader = csv.DictReader(io.StringIO(text))
    header = [h.strip() for h in (reader.fieldnames or [])]
    reader.fieldnames = header
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        raise ConfigError(
            _("{source}: not a SkyPilot catalog CSV: missing column(s) {missing} (need {required}; SpotPrice and "
              "GpuInfo optional)").format(source=source, missing=", ".join(missing),
                                          required=", ".join(REQUIRED_COLUMNS))
        )
    best: dict[tuple[str, str], PriceEntry] = {}
    for row in reader:
        if any(len(v) > MAX_CELL_CHARS for v in row.values() if isinstance(v, str)) or any(
                len(v) > MAX_CELL_CHARS for vs in row.values() if isinstance(vs, list) for v in vs):
            if counts is not None:
                counts["long_cells"] = counts.get("long_cells", 0) + 1
            continue
        name = (row.get("AcceleratorName") or "").strip()
        count = _decimal(row.get("AcceleratorCount"))
        if not name or count is None or count <= 0:
            continue  # CPU-only instance type
        info_name, memory_gb = parse_gpu_info(row.get("GpuInfo"))
        # The cloud's own name in GpuInfo ("A100 PCIe") is more specific than SkyPilot's
        # AcceleratorName ("A100"); use it when the catalog knows it.
        if info_name and normalize_gpu_name(info_name, memory_gb=memory_gb)[1]:
            name = info_name
        where = " ".join(x for x in ((row.get("InstanceType") or "").strip(), (row.get("Region") or "").strip()) if x)
        for billing, column in (("on-demand", "Price"), ("spot", "SpotPrice")):
            price = _decimal(row.get(column))
            if price is None or price <= 0:
                continue  # empty (or zero) price: not offered
            per_gpu = price / count
            entry = make_entry(
                provider, name, billing, per_gpu, currency, seen,
                f"{source} ({where})" if where else source, memory_gb=memory_gb,
            )
            current = best.get((entry.gpu, billing))
            if current is None or entry.price_per_gpu_hour < current.price_per_gpu_hour:
                best[(entry.gpu, billing)] = entry
    if not best:
        raise ConfigError(_("{source}: no row with an accelerator and a price").format(source=source))
    return sorted(best.values(), key=lambda e: (e.gpu, e.billing))


def provider_from_path(path: Path) -> str | None:
    """The cloud a SkyPilot catalog file belongs to, from SkyPilot's layout
    ``.../catalogs/<version>/<cloud>/vms.csv`` (``~/.sky/catalogs/v7/aws/vms.csv`` -> ``"aws"``).
    None for a file elsewhere: a folder name like ``Downloads`` is not a provider."""
    resolved = path.resolve()
    if resolved.name != "vms.csv" or "catalogs" not in [p.name for p in resolved.parents]:
        return None
    return resolved.parent.name.strip().lower() or None


def import_skypilot_csv(path: Path, *, provider: str | None = None, seen: date, currency: str = "USD",
                        counts: dict[str, int] | None = None) -> list[PriceEntry]:
    """Read and parse a SkyPilot catalog file (see :func:`parse_skypilot_csv`).

    ``provider`` defaults to the cloud folder of SkyPilot's layout (see :func:`provider_from_path`);
    ``counts`` as in :func:`parse_skypilot_csv`.

    Raises:
        ConfigError: unreadable file, or see :func:`parse_skypilot_csv`.
    """
    require_regular_file(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise ConfigError(_("{path}: cannot read: {error}").format(path=path, error=exc.strerror or exc)) from None
    except UnicodeDecodeError:
        raise ConfigError(_("{path}: not a UTF-8 text file").format(path=path)) from None
    name = provider or provider_from_path(path)
    if not name:
        raise UsageError(_("{path}: cannot tell the provider from the file name (only SkyPilot's "
                           "catalogs/<version>/<cloud>/vms.csv); pass --provider").format(path=path))
    try:
        return parse_skypilot_csv(text, provider=name, seen=seen, source=str(path), currency=currency, counts=counts)
    except csv.Error as exc:
        raise ConfigError(_("{path}: not a readable CSV file: {error}").format(path=path, error=exc)) from None


__all__ = ["parse_gpu_info", "import_skypilot_csv", "parse_skypilot_csv", "provider_from_path"]
