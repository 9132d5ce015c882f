"""The simulated provider's built-in price table.

Illustrative prices, NOT quotes from any provider: round figures in the range that GPU
marketplaces advertised in 2024-2025 for these cards, so that ``costctl offers`` and the
downsizing advice have something realistic to sort. Prices are per GPU-hour; an offer for
``n`` GPUs costs ``n`` × that per instance-hour. Region ``sim-cn`` is priced in CNY and, like
AutoDL, has no spot market.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal


@dataclass(frozen=True)
class SimPrice:
    """One row: a GPU model in a region.

    Attributes:
        gpu: GPU model name.
        memory_gib: memory per GPU in GiB (1 GiB = 2**30 bytes).
        region, currency: where and in what it is priced.
        on_demand: Decimal per GPU-hour.
        spot: Decimal per GPU-hour (minimum bid), or None where there is no spot market.
    """

    gpu: str
    memory_gib: int
    region: str
    currency: str
    on_demand: Decimal
    spot: Decimal | None


def _p(gpu: str, mem: int, region: str, currency: str, od: str, spot: str | None) -> SimPrice:
    return SimPrice(gpu, mem, region, currency, Decimal(od), Decimal(spot) if spot else None)


PRICE_TABLE: tuple[SimPrice, ...] = (
    _p("RTX 3090", 24, "sim-us", "USD", "0.44", "0.22"),
    _p("RTX 4090", 24, "sim-us", "USD", "0.69", "0.35"),
    _p("L40S", 48, "sim-us", "USD", "1.03", "0.52"),
    _p("A100 80GB", 80, "sim-us", "USD", "1.89", "1.05"),
    _p("H100 80GB", 80, "sim-us", "USD", "2.99", "1.65"),
    _p("RTX 3090", 24, "sim-cn", "CNY", "1.32", None),
    _p("RTX 4090", 24, "sim-cn", "CNY", "1.98", None),
    _p("A100 80GB", 80, "sim-cn", "CNY", "5.98", None),
)

#: GPU counts offered per row.
GPU_COUNTS: tuple[int, ...] = (1, 2, 4, 8)


def normalize_gpu(name: str) -> str:
    """Lower-case alphanumerics only: ``"RTX-4090"`` and ``"rtx 4090"`` compare equal."""
    return "".join(ch for ch in name.lower() if ch.isalnum())


def find_price(gpu: str, currency: str) -> SimPrice | None:
    """The table row for ``gpu`` (exact model, normalized) in ``currency``, or None."""
    key = normalize_gpu(gpu)
    for row in PRICE_TABLE:
        if normalize_gpu(row.gpu) == key and row.currency == currency.upper():
            return row
    return None


def matches(query: str, gpu: str) -> bool:
    """Whether a user's GPU query (``"4090"``, ``"a100"``) names ``gpu``: the normalized query
    is contained in the normalized model name."""
    return normalize_gpu(query) in normalize_gpu(gpu)
