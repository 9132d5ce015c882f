"""Vast.ai payloads -> normalized :class:`Instance` / :class:`Offer` records (pure functions).

Sources (docs.vast.ai; the fake in ``tests/fakes/vastai.py`` quotes the payloads):

* "show instances" (https://docs.vast.ai/api-reference/instances/show-instances and the CLI
  page https://docs.vast.ai/cli/reference/show-instances): ``actual_status`` is the container
  state — ``null`` "being provisioned", ``loading``, ``running`` "GPU charges apply",
  ``stopped`` "Disk charges continue; no GPU charges", ``frozen`` "paused with memory
  preserved. GPU charges apply", ``exited``, ``rebooting``, ``unknown``, ``offline``;
  ``intended_status`` is "user's desired target state: running, stopped, or frozen".
  Prices: ``dph_total`` is dollars per hour for the whole instance (all its GPUs).
* "search offers" (``POST /api/v0/bundles/``): ``dph_total`` $/h, ``min_bid`` $/h (the lowest
  accepted bid for the machine), ``gpu_ram`` "GPU memory in MB" (per GPU), ``num_gpus``,
  ``reliability`` 0..1, ``geolocation``.
* utilization and storage (Vast's OpenAPI, ``api-reference/openapi/yaml/show_instance.yaml`` in
  github.com/vast-ai/docs, and the CLI's ``show instances`` table in github.com/vast-ai/vast-cli):
  ``gpu_util`` "GPU utilization as a fraction" per the OpenAPI (example ``0.75``), which the CLI
  prints as a percentage (``{:0.1f}`` under "Util. %"), so both scales occur; ``null`` or
  negative is "not measured". Storage: ``instance.diskHour`` (dollars per hour of the
  instance's disk, also billed while the instance is stopped) and ``storage_total_cost`` (the
  same figure at the top level); ``storage_cost`` is dollars per GB-month.
* "change bid" (https://docs.vast.ai/cli/reference/change-bid): ``--price`` is the "per machine
  bid price in $/hour", so a Vast bid is already per instance-hour.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any, Mapping

from costctl_providers._normalize import decimal_from_json as dollars
from costctl_providers._normalize import int_field, percent_from_json, refused_amount, refused_percent, strip_keys
from costctl_providers.base import BillingMode, Instance, Offer, Status

PROVIDER = "vastai"
CURRENCY = "USD"
MIB = 1024 * 1024

ACTUAL_STATUS_TABLE: dict[str | None, Status] = {
    None: Status.PROVISIONING,
    "created": Status.PROVISIONING,
    "scheduling": Status.STARTING,
    "loading": Status.STARTING,
    "rebooting": Status.STARTING,
    "running": Status.RUNNING,
    "frozen": Status.RUNNING,
    "stopped": Status.STOPPED,
    "exited": Status.ERROR,
    "unknown": Status.UNKNOWN,
    "offline": Status.UNKNOWN,
}
"""Vast ``actual_status`` -> :class:`Status`. ``frozen`` maps to RUNNING on purpose: the docs say
"GPU charges apply", and costctl's statuses are about what is billed. Unlisted values map to
UNKNOWN. :func:`map_status` then applies ``intended_status`` (see there)."""

_SECRET_KEY = re.compile(r"password|passwd|token|secret|api_key|credential|extra_env|onstart", re.I)


def map_status(actual: Any, intended: Any = None, *, is_bid: bool = False) -> tuple[Status, bool]:
    """Normalized status of a Vast instance, and whether it was preempted.

    Rules, in order:

    1. ``actual_status`` through :data:`ACTUAL_STATUS_TABLE` (unknown words -> UNKNOWN).
    2. Asked to stop but still running (``intended stopped``, actual running/loading) -> STOPPING;
       asked to stop and its container ``exited`` -> STOPPED.
    3. Asked to run but stopped: an interruptible (``is_bid``) instance was outbid ->
       STOPPED and ``preempted`` True (its storage keeps billing); an on-demand one is waiting
       to be scheduled -> STARTING.

    Returns:
        ``(status, preempted)``.
    """
    key = actual.strip().lower() if isinstance(actual, str) else None
    if isinstance(actual, str) and key not in ACTUAL_STATUS_TABLE:
        return Status.UNKNOWN, False
    status = ACTUAL_STATUS_TABLE[key]
    want = intended.strip().lower() if isinstance(intended, str) else None
    if want == "stopped" and status in (Status.RUNNING, Status.STARTING):
        return Status.STOPPING, False
    if want == "stopped" and status is Status.ERROR:
        return Status.STOPPED, False
    if want == "running" and status is Status.STOPPED:
        if is_bid:
            return Status.STOPPED, True
        return Status.STARTING, False
    return status, False


def from_unix(value: Any) -> datetime | None:
    """Unix seconds (int or float) -> aware UTC datetime; None for missing or invalid."""
    if value is None or isinstance(value, bool):
        return None
    try:
        return datetime.fromtimestamp(float(value), tz=timezone.utc)
    except (TypeError, ValueError, OverflowError, OSError):
        return None


def utilization_percent(value: Any) -> float | None:
    """Vast's ``gpu_util`` as a percentage (0..100), or None when it is not a reading.

    The OpenAPI calls it a fraction and the CLI prints it as a percentage, so a value from 0 to
    1 is taken as a fraction (× 100) and one above 1 up to 100 as a percentage. Read as the
    higher of its two meanings, a value never looks idler than it is: a truly idle GPU reads 0
    either way, and a busy one read on the wrong scale reads busier, never idle. Null, negative,
    non-numeric or above 100: None (unreported, which never means idle)."""
    number = percent_from_json(value)
    if number is None:
        return None
    return number * 100.0 if number <= 1.0 else number


def disk_price_per_hour(item: Mapping[str, Any]) -> Decimal | None:
    """Dollars per hour of the instance's disk, billed while it is stopped too: the instance's
    own ``instance.diskHour``, else ``storage_total_cost``; None when neither is a
    non-negative number."""
    pricing = item.get("instance")
    for value in (pricing.get("diskHour") if isinstance(pricing, Mapping) else None, item.get("storage_total_cost")):
        amount = dollars(value)
        if amount is not None and amount >= 0:
            return amount
    return None


def _label(value: Any) -> str | None:
    """The instance's ``label`` (set by its owner), None when absent or empty."""
    return value.strip() or None if isinstance(value, str) else None


def strip_secrets(payload: Any) -> Any:
    """A copy of ``payload`` without credential-like keys (``jupyter_token``, ``extra_env``...)."""
    return strip_keys(payload, _SECRET_KEY)


def _id_text(value: Any) -> str:
    """An item's ``id`` as text; ``""`` when Vast left it out (or null, or blank): never ``"None"``,
    an id costctl could then address (the fleet skips and counts such items)."""
    if value is None or isinstance(value, bool) or not str(value).strip():
        return ""
    return str(value).strip()


def instance_from_payload(item: Mapping[str, Any]) -> Instance:
    """One element of ``GET /instances/`` (or the object of ``GET /instances/{id}/``) as an
    :class:`Instance`.

    ``price_per_hour`` is ``dph_total`` in USD per instance-hour; for an interruptible
    (``is_bid``) instance the bid is that same per-machine rate, so ``bid_per_hour`` equals it.
    A preempted instance has ``raw["preempted"]`` True as well as ``Instance.preempted``.
    ``gpu_utilization`` is ``gpu_util`` (:func:`utilization_percent`) of a running instance
    (None otherwise); ``stopped_price_per_hour`` is its disk's price
    (:func:`disk_price_per_hour`). Vast's ``cpu_util`` is left out: its scale (a fraction of
    one core or of the instance's cores) is not documented.
    """
    is_bid = bool(item.get("is_bid"))
    status, preempted = map_status(item.get("actual_status"), item.get("intended_status"), is_bid=is_bid)
    price = dollars(item.get("dph_total"))
    raw = strip_secrets(dict(item))
    raw["preempted"] = preempted
    gpu_raw = item.get("gpu_name")
    count = item.get("num_gpus")
    iid = _id_text(item.get("id"))
    notes = (refused_amount(PROVIDER, iid, "dph_total", item.get("dph_total")),
             refused_percent(PROVIDER, iid, "gpu_util", item.get("gpu_util")) if status is Status.RUNNING else None)
    return Instance(
        provider=PROVIDER,
        id=iid,
        gpu=gpu_raw,
        gpu_raw=gpu_raw,
        gpu_count=1 if count is None else int_field(PROVIDER, "num_gpus", count),
        billing=BillingMode.SPOT if is_bid else BillingMode.ON_DEMAND,
        price_per_hour=price,
        currency=CURRENCY,
        status=status,
        status_raw=item.get("actual_status") if isinstance(item.get("actual_status"), str) else None,
        bid_per_hour=price if is_bid else None,
        created_at=None,
        started_at=from_unix(item.get("start_date")),
        stopped_at=None,
        region=item.get("geolocation"),
        raw=raw,
        preempted=preempted,
        gpu_utilization=utilization_percent(item.get("gpu_util")) if status is Status.RUNNING else None,
        stopped_price_per_hour=disk_price_per_hour(item),
        label=_label(item.get("label")),
        refused=tuple(note for note in notes if note is not None),
    )


def offer_from_payload(item: Mapping[str, Any], *, bid: bool) -> Offer | None:
    """One element of ``POST /bundles/``'s ``offers`` as an :class:`Offer`, or None without a price.

    On-demand: ``price_per_hour`` = ``dph_total``. Bid (interruptible): the minimum bid,
    ``min_bid``, per machine-hour. ``gpu_memory_bytes`` = ``gpu_ram`` MiB × 2**20.
    """
    price = dollars(item.get("min_bid") if bid else item.get("dph_total"))
    if price is None:
        return None
    count = item.get("num_gpus")
    ram = item.get("gpu_ram")
    reliability = item.get("reliability", item.get("reliability2"))
    return Offer(
        provider=PROVIDER,
        id=str(item.get("id") or item.get("ask_contract_id")),
        gpu=item.get("gpu_name"),
        gpu_raw=item.get("gpu_name"),
        gpu_count=int(count) if isinstance(count, (int, float)) and count else 1,
        billing=BillingMode.SPOT if bid else BillingMode.ON_DEMAND,
        price_per_hour=price,
        currency=CURRENCY,
        gpu_memory_bytes=int(ram * MIB) if isinstance(ram, (int, float)) and not isinstance(ram, bool) else None,
        region=item.get("geolocation"),
        reliability=float(reliability) if isinstance(reliability, (int, float)) else None,
        available=1,
        raw=strip_secrets(dict(item)),
    )
