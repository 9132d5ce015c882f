"""Does the memory that ran out depend on the batch size? Compare the OOM evidence of two
attempts of one job: the batch ``B`` that died, then the halved batch that died again.

The evidence is what :func:`costctl.replay.oom.match_oom` reads from each OOM message:
the requested allocation ("Tried to allocate X"), and where the message states them the
device's total capacity and the memory already allocated / reserved by PyTorch (all bytes).

Rules (:func:`compare_attempts`):

* no requested size in either message (``CUDA error: out of memory``, TensorFlow's ``OOM when
  allocating``): the comparison is not possible (``unknown``);
* a different total capacity: not the same device, no comparison (``unknown``);
* the requested sizes differ by more than :data:`REL_TOLERANCE`: the failing allocation
  changed with the batch (``changed``), halving again may help;
* the same requested size: the allocation that fails does not depend on the batch
  (``same``) -- the weights or optimizer state alone do not fit, or a fixed-size buffer does
  not -- so a smaller batch will not fit it either. Except for the caching allocator's pooled
  block sizes (:data:`POOLED_BLOCK_BYTES`): every tensor under 1 MiB asks for a 2 MiB block
  and every one under 10 MiB for a 20 MiB block, so "Tried to allocate 20.00 MiB" at both
  batches says nothing about the batch; then only identical allocated *and* reserved figures
  (the job died at the same point with the same memory in use) count as ``same``.

Why :data:`REL_TOLERANCE` is 1 %: PyTorch prints sizes with two decimals of the largest unit
that keeps the number under 1024 (``format_size`` in ``c10/cuda/CUDACachingAllocator.cpp``,
``_format_size`` in ``torch/cuda/memory.py``), so a printed size is within 0.5 % of the true one
(the number is >= 1 in its unit); two prints of allocations that really are equal read the same,
and two of allocations within a rounding step of each other read at most ~1 % apart. An
allocation that scales with the batch shrinks by about half when the batch halves, 50 times
the tolerance, so 1 % cannot mistake a batch-dependent allocation for a fixed one, and one that
changes by less than 1 % per halving does not, for fitting, depend on the batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from ..i18n import N_, _
from ..replay.oom import OomEvent

#: Largest relative difference (of the larger figure) between two requested sizes still read as
#: the same allocation; see the module docstring.
REL_TOLERANCE = 0.01
#: The caching allocator's block sizes for small tensors (bytes): ``kSmallBuffer`` (2 MiB, tensors
#: up to 1 MiB) and ``kLargeBuffer`` (20 MiB, tensors up to 10 MiB), c10/cuda/CUDACachingAllocator.cpp.
POOLED_BLOCK_BYTES = frozenset({2 * 2**20, 20 * 2**20})

Verdict = Literal["same", "changed", "unknown"]


def mib(n_bytes: int) -> str:
    """``n_bytes`` (bytes) as MiB with two decimals, e.g. ``"20480.00 MiB"``."""
    return f"{n_bytes / 2**20:.2f} MiB"


def same_size(a: int, b: int, tolerance: float = REL_TOLERANCE) -> bool:
    """Whether byte counts ``a`` and ``b`` differ by at most ``tolerance`` of the larger."""
    return abs(a - b) <= tolerance * max(a, b)


@dataclass(frozen=True, slots=True)
class Attempt:
    """One attempt that died of an OOM: the batch it was given (the one costctl passed) and the
    OOM event read from its output."""

    batch_size: int
    event: OomEvent


@dataclass(frozen=True, slots=True)
class Comparison:
    """The verdict on two successive attempts (``before`` at batch B, ``after`` at a smaller one).

    Attributes:
        verdict: ``same`` (the failing allocation does not depend on the batch), ``changed`` or
            ``unknown`` (no comparison possible; ``why`` says why).
        why: one short phrase, in English (the evidence).
        before, after: the two attempts compared.
        why_text: ``why`` in the language in force when compared (:mod:`costctl.i18n`), for
            the user line (empty: ``why``).
    """

    verdict: Verdict
    why: str
    before: Attempt
    after: Attempt
    why_text: str = ""

    def evidence(self) -> dict[str, Any]:
        """The figures compared, for the decision's evidence (sizes in bytes)."""
        def figures(a: Attempt) -> dict[str, Any]:
            e = a.event
            return {"batch_size": a.batch_size, "requested_bytes": e.requested_bytes,
                    "allocated_bytes": e.allocated_bytes, "reserved_bytes": e.reserved_bytes,
                    "total_bytes": e.total_bytes}
        return {"verdict": self.verdict, "why": self.why, "tolerance": REL_TOLERANCE,
                "before": figures(self.before), "after": figures(self.after)}


def _equal(a: int | None, b: int | None) -> bool:
    return a is not None and b is not None and a == b


def _comparison(verdict: Verdict, why: str, before: Attempt, after: Attempt, **values: Any) -> Comparison:
    """A :class:`Comparison` whose ``why`` is the :func:`~costctl.i18n.N_` sentence ``why`` with
    ``values`` filled, in English and (``why_text``) in the current language."""
    return Comparison(verdict, why.format(**values), before, after, why_text=_(why).format(**values))


def compare_attempts(before: Attempt, after: Attempt) -> Comparison:
    """Whether the OOM of ``after`` (the smaller batch) failed on the same allocation as that of
    ``before``; the rules and the tolerance are in the module docstring."""
    b, a = before.event, after.event
    if b.requested_bytes is None or a.requested_bytes is None:
        return _comparison("unknown", N_("the OOM message gives no allocation size"), before, after)
    if b.total_bytes is not None and a.total_bytes is not None and not same_size(b.total_bytes, a.total_bytes):
        return _comparison("unknown", N_("the two attempts report different GPUs"), before, after)
    if after.batch_size >= before.batch_size:
        return _comparison("unknown", N_("the batch did not shrink"), before, after)
    if not same_size(b.requested_bytes, a.requested_bytes):
        return _comparison("changed", N_("the allocation went from {was} to {now}"), before, after,
                           was=mib(b.requested_bytes), now=mib(a.requested_bytes))
    said = {"requested": mib(a.requested_bytes), "batch": before.batch_size, "smaller": after.batch_size}
    if a.requested_bytes in POOLED_BLOCK_BYTES or b.requested_bytes in POOLED_BLOCK_BYTES:
        if _equal(b.allocated_bytes, a.allocated_bytes) and _equal(b.reserved_bytes, a.reserved_bytes):
            assert a.allocated_bytes is not None
            return _comparison("same", N_("{requested} requested at batch {batch} and at {smaller}, with {allocated} "
                                          "already allocated both times"), before, after,
                               allocated=mib(a.allocated_bytes), **said)
        return _comparison("unknown", N_("{requested} is the caching allocator's block size for small tensors, so "
                                         "equal figures do not show it"), before, after,
                           requested=mib(a.requested_bytes))
    if a.total_bytes is not None and a.requested_bytes > a.total_bytes:
        return _comparison("same", N_("{requested} requested at batch {batch} and at {smaller}, more than the card's "
                                      "{total} in total"), before, after, total=mib(a.total_bytes), **said)
    if (b.allocated_bytes is not None and a.allocated_bytes is not None
            and a.allocated_bytes < b.allocated_bytes and not same_size(b.allocated_bytes, a.allocated_bytes)):
        return _comparison("changed", N_("the same {requested} was requested, but the memory already allocated went "
                                         "from {was} to {now}"), before, after, requested=mib(a.requested_bytes),
                           was=mib(b.allocated_bytes), now=mib(a.allocated_bytes))
    return _comparison("same", N_("{requested} requested at batch {batch} and at {smaller}"), before, after, **said)


__all__ = ["POOLED_BLOCK_BYTES", "REL_TOLERANCE", "Attempt", "Comparison", "compare_attempts", "mib", "same_size"]
