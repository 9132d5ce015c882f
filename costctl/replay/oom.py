"""Recognize GPU out-of-memory errors in a job's output and read the sizes they report.

Shapes recognized (all seen in real issue threads, see ``corpus/oom_messages_from_issues.txt``):

* PyTorch <= 2.0: ``RuntimeError: CUDA out of memory. Tried to allocate 12.50 MiB (GPU 0;
  10.92 GiB total capacity; 8.57 MiB already allocated; 9.28 GiB free; ...)``, also without the
  space after ``RuntimeError:``, with ``torch.cuda.OutOfMemoryError:`` as the name, or as a
  fragment that starts at ``Tried to allocate``;
* PyTorch >= 2.1: ``... Tried to allocate 1.70 GiB. GPU 0 has a total capacty of 6.00 GiB of which
  0 bytes is free. ...`` (``capacty`` is PyTorch's own typo until 2.2, ``capacity`` after),
  named ``torch.cuda.OutOfMemoryError`` or (2.5+) ``torch.OutOfMemoryError``, with or without a
  log prefix (vLLM: ``ERROR 04-01 23:46:56 [engine.py:160] ...``) or any exception name;
* the CUDA runtime's own ``CUDA error: out of memory``, TensorFlow's
  ``ResourceExhaustedError: OOM when allocating tensor`` and XLA/JAX's
  ``RESOURCE_EXHAUSTED: Out of memory while trying to allocate N bytes``.

The memory already in use is read where the message states it: PyTorch <= 2.0's ``X already
allocated`` and ``Y reserved in total by PyTorch`` (``Y cached`` before 1.5); PyTorch >= 2.1's
``Of the allocated memory X is allocated by PyTorch, and Z is reserved by PyTorch but
unallocated`` (reserved in total is then X + Z, as ``c10/cuda/CUDACachingAllocator.cpp``
computes Z as reserved minus allocated).

Sizes are converted to bytes with binary units (PyTorch's ``MiB``/``GiB`` are 2**20/2**30; see
``torch/cuda/memory.py`` ``_format_size``); a value is rounded to the nearest byte. A size past
2**63 - 1 bytes, and a ``GPU N`` index past it, are not read (None): the message is still an OOM
event, and a number of thousands of digits costs no conversion error.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal

from ..numbers import INT64_MAX, parse_count

_UNITS = {
    "b": 1,
    "byte": 1,
    "bytes": 1,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
}
# A size: at most 40 digits on either side of the point, not inside a longer number (the
# lookbehind), so a search tries each start in bounded time: a line of thousands of digits is
# read in linear time, and a number that long is no size (past 2**63 bytes anyway).
_SIZE = r"(?<![\d.])(\d{1,40}(?:\.\d{1,40})?)\s*(bytes|byte|B|KiB|MiB|GiB|TiB|KB|MB|GB|TB)\b"

_RECOGNIZERS = (
    re.compile(r"CUDA out of memory", re.IGNORECASE),
    re.compile(r"\bOutOfMemoryError\b"),
    re.compile(r"CUDA error: out of memory", re.IGNORECASE),
    re.compile(r"Tried to allocate " + _SIZE + r"\s*\(GPU \d+;"),
    re.compile(r"Tried to allocate " + _SIZE + r"\.\s*GPU \d+ has a total capac"),
    re.compile(r"ResourceExhaustedError\b.*\bOOM when allocating"),
    re.compile(r"RESOURCE_EXHAUSTED: Out of memory"),
)
#: Literal text every recognizer's match contains (``"out of memory"`` in any case): text
#: without any of them holds no OOM message (see :func:`may_hold_oom`).
_LITERALS = ("OutOfMemoryError", "Tried to allocate ", "OOM when allocating")
_ANY_CASE = "out of memory"
_REQUESTED = re.compile(r"(?:Tried to allocate|trying to allocate)\s+" + _SIZE, re.IGNORECASE)
_TOTAL_OLD = re.compile(_SIZE + r"\s+total capacity")
_TOTAL_NEW = re.compile(r"has a total capac(?:i)?ty of\s+" + _SIZE)
_FREE_OLD = re.compile(r"already allocated;\s*" + _SIZE + r"\s+free")
_FREE_NEW = re.compile(r"of which\s+" + _SIZE + r"\s+is free")
_ALLOCATED_OLD = re.compile(_SIZE + r"\s+already allocated")
_ALLOCATED_NEW = re.compile(_SIZE + r"\s+is allocated by PyTorch")
_RESERVED_OLD = re.compile(_SIZE + r"\s+(?:reserved in total by PyTorch|cached\b)")
_UNALLOCATED_NEW = re.compile(_SIZE + r"\s+is reserved by PyTorch but unallocated")
_GPU = re.compile(r"\bGPU (\d{1,19})(?:;| has)")
_NAME = re.compile(r"((?:[\w.]+\.)?(?:OutOfMemoryError|RuntimeError|ResourceExhaustedError))\s*:")


def may_hold_oom(text: str) -> bool:
    """False when ``text`` (any length, many lines) certainly holds no OOM message; True when
    it may (then search it with the recognizers). A few substring searches at memory speed
    (a few ms per 5 MB), where the recognizers themselves take 100+ ms: the watch runs it on
    every chunk of the job's output."""
    return any(lit in text for lit in _LITERALS) or _ANY_CASE in text.lower()


def oom_in(text: str) -> bool:
    """Whether any line of ``text`` holds an OOM message a recognizer knows (prefiltered by
    :func:`may_hold_oom`)."""
    return may_hold_oom(text) and any(p.search(text) for p in _RECOGNIZERS)


def size_to_bytes(number: str, unit: str) -> int | None:
    """``("12.50", "MiB")`` -> 13107200. Binary units for ``KiB/MiB/GiB/TiB``, decimal for ``KB/MB/GB``.

    Returns:
        the size in bytes, or None when it is past 2**63 - 1 bytes (no memory is that large;
        ``number`` is ``\\d+(\\.\\d+)?`` of any length, checked before any arithmetic).

    Raises:
        KeyError: an unknown unit.
    """
    factor = _UNITS[unit.lower()]
    if len(number.split(".", 1)[0].lstrip("0")) > 19:
        return None
    size = int((Decimal(number) * factor).to_integral_value())
    return size if size <= INT64_MAX else None


@dataclass(frozen=True, slots=True)
class OomEvent:
    """One out-of-memory error found in a log.

    Attributes:
        line_number: 1-based line in the scanned text (None when matching a single string).
        message: the line as found (stripped).
        exception: the exception name when the line has one (``torch.OutOfMemoryError``...).
        gpu_index: ``GPU N`` from the message, when given.
        requested_bytes: the allocation that failed ("Tried to allocate"), bytes.
        total_bytes: the device's total capacity as the message states it, bytes.
        free_bytes: free memory on the device at the time, bytes.
        allocated_bytes: memory held by PyTorch's tensors at the time ("already allocated",
            "is allocated by PyTorch"), bytes.
        reserved_bytes: memory PyTorch's caching allocator held in total at the time ("reserved
            in total by PyTorch"; 2.1+: allocated + "reserved by PyTorch but unallocated"), bytes.
    """

    line_number: int | None
    message: str
    exception: str | None = None
    gpu_index: int | None = None
    requested_bytes: int | None = None
    total_bytes: int | None = None
    free_bytes: int | None = None
    allocated_bytes: int | None = None
    reserved_bytes: int | None = None


#: Characters of an OOM line kept as :attr:`OomEvent.message` (a real message is under 1,000).
MAX_MESSAGE_CHARS = 2000


def _size(pattern: re.Pattern[str], text: str) -> int | None:
    m = pattern.search(text)
    return size_to_bytes(m.group(1), m.group(2)) if m else None


def _reserved(line: str, allocated: int | None) -> int | None:
    """Reserved in total (bytes): stated (<= 2.0), or allocated + reserved-but-unallocated (2.1+)."""
    stated = _size(_RESERVED_OLD, line)
    if stated is not None:
        return stated
    unallocated = _size(_UNALLOCATED_NEW, line)
    if allocated is None or unallocated is None or allocated + unallocated > INT64_MAX:
        return None
    return allocated + unallocated


def match_oom(line: str, line_number: int | None = None) -> OomEvent | None:
    """An :class:`OomEvent` if ``line`` reports an out-of-memory error, else None.

    Lines that only mention the words (a traceback's source line, ``During handling of the
    above exception``) are not OOM events.
    """
    if not any(p.search(line) for p in _RECOGNIZERS):
        return None
    name = _NAME.search(line)
    gpu = _GPU.search(line)
    allocated = _size(_ALLOCATED_OLD, line)
    if allocated is None:
        allocated = _size(_ALLOCATED_NEW, line)
    return OomEvent(
        line_number=line_number,
        message=_cut(line.strip()),
        exception=name.group(1) if name else None,
        gpu_index=parse_count(gpu.group(1)) if gpu else None,
        requested_bytes=_size(_REQUESTED, line),
        total_bytes=_size(_TOTAL_NEW, line) or _size(_TOTAL_OLD, line),
        free_bytes=_size(_FREE_NEW, line) if _FREE_NEW.search(line) else _size(_FREE_OLD, line),
        allocated_bytes=allocated,
        reserved_bytes=_reserved(line, allocated),
    )


def _cut(text: str) -> str:
    return text if len(text) <= MAX_MESSAGE_CHARS else text[: MAX_MESSAGE_CHARS - 3] + "..."


def find_oom(lines: Iterable[str]) -> list[OomEvent]:
    """Every OOM event in ``lines`` (1-based line numbers), in order."""
    events = []
    for number, line in enumerate(lines, start=1):
        event = match_oom(line, number)
        if event is not None:
            events.append(event)
    return events
