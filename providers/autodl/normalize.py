"""AutoDL payloads -> normalized :class:`Instance` records and GPU stock (pure functions).

Sources (checked against the docs; see ``tests/fakes/autodl.py`` for the quoted payloads):

* 容器实例 Pro API, https://www.autodl.com/docs/instance_pro_api/ — list items carry ``uuid``,
  ``region_sign``, ``region_name``, ``status``, ``charge_type``, ``req_gpu_amount``,
  ``gpu_spec_uuid``, ``started_at`` / ``stopped_at`` as ``{"Time": ..., "Valid": bool}``; the
  snapshot adds ``payg_price`` and ``snapshot_gpu_alias_name`` plus connection secrets
  (``root_password``, ``jupyter_token``) that are never kept.
* 通用 API, https://www.autodl.com/docs/common_api/ — "money-like integer fields are yuan × 1000"
  (厘): ``payg_price`` 1880 means ¥1.88 per instance-hour; wallet ``assets`` likewise.
* Web console ``POST /api/v1/instance`` (unofficial): the same fields, plus ``start_mode``
  ``gpu | non_gpu`` and ``charge_type payg | daily | weekly | monthly | yearly``.

Times without an offset are China Standard Time (UTC+8), the zone AutoDL's console shows.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Any, Mapping

from costctl_providers._normalize import decimal_from_json, int_field, strip_keys
from costctl_providers.base import BillingMode, Instance, Status

PROVIDER = "autodl"
CURRENCY = "CNY"
MILLI_YUAN = Decimal(1000)
"""厘 per yuan: AutoDL money integers are 1/1000 yuan (common_api: "divide by 1000 for yuan")."""

NON_GPU_PRICE_PER_HOUR = Decimal("0.10")
"""No-GPU mode (无卡模式) rate in yuan per hour, as AutoDL's console shows it (DESIGN.md pitfalls)."""

CHINA_TZ = timezone(timedelta(hours=8))

STATUS_TABLE: dict[str, Status] = {
    "creating": Status.PROVISIONING,
    "initializing": Status.PROVISIONING,
    "starting": Status.STARTING,
    "re_initializing": Status.STARTING,
    "running": Status.RUNNING,
    "shutting_down": Status.STOPPING,
    "shutdown": Status.STOPPED,
    "releasing": Status.STOPPING,
    "released": Status.TERMINATED,
}
"""AutoDL instance ``status`` -> :class:`Status`. Pro ``GET .../pro/status`` documents
``starting | running | shutting_down | shutdown``; the console list also shows ``creating``,
``re_initializing``; ``releasing``/``released`` were reported by API users. Anything else maps to
``Status.UNKNOWN``."""

CHARGE_TYPES: dict[str, BillingMode] = {
    "payg": BillingMode.ON_DEMAND,
    "daily": BillingMode.PREPAID,
    "weekly": BillingMode.PREPAID,
    "monthly": BillingMode.PREPAID,
    "yearly": BillingMode.PREPAID,
}
"""AutoDL ``charge_type`` -> :class:`BillingMode` (pay-as-you-go or prepaid; AutoDL has no spot)."""

_SECRET_KEY = re.compile(r"password|passwd|token|secret|ssh_command|api_key|credential", re.I)


def map_status(raw: str | None) -> Status:
    """The normalized status of AutoDL's ``status`` word; unknown or missing -> UNKNOWN."""
    if not isinstance(raw, str):
        return Status.UNKNOWN
    return STATUS_TABLE.get(raw.strip().lower(), Status.UNKNOWN)


def yuan_from_milli(value: Any) -> Decimal | None:
    """厘 (integer 1/1000 yuan) -> Decimal yuan; None for a missing or non-numeric value.

    >>> yuan_from_milli(1880)
    Decimal('1.88')
    """
    amount = decimal_from_json(value)
    if amount is None:
        return None
    return (amount / MILLI_YUAN).normalize() if amount else Decimal(0)


def parse_time(value: Any) -> datetime | None:
    """AutoDL time -> aware UTC datetime.

    Accepts ``{"Time": "...", "Valid": true}`` (Go ``sql.NullTime``; ``Valid: false`` -> None),
    an ISO 8601 string (with or without offset; none means UTC+8), or None.
    """
    if isinstance(value, Mapping):
        if not value.get("Valid", True):
            return None
        value = value.get("Time") or value.get("time")
    if not isinstance(value, str) or not value.strip():
        return None
    text = value.strip().replace("Z", "+00:00")
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        return None
    if when.year <= 1:  # Go's zero time "0001-01-01T00:00:00Z"
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=CHINA_TZ)
    return when.astimezone(timezone.utc)


def strip_secrets(payload: Any) -> Any:
    """A copy of ``payload`` without keys that hold credentials (passwords, tokens, ssh commands)."""
    return strip_keys(payload, _SECRET_KEY)


def billing_mode(charge_type: Any) -> BillingMode:
    """``charge_type`` -> billing mode; missing means pay-as-you-go (API-created Pro instances)."""
    if isinstance(charge_type, str):
        return CHARGE_TYPES.get(charge_type.strip().lower(), BillingMode.ON_DEMAND)
    return BillingMode.ON_DEMAND


def instance_from_payload(item: Mapping[str, Any], snapshot: Mapping[str, Any] | None = None) -> Instance:
    """One AutoDL instance (a Pro list item or a console list item), optionally merged with its
    Pro snapshot, as an :class:`Instance`.

    Price: ``payg_price`` (厘 per instance-hour) -> Decimal yuan per instance-hour, CNY. A
    prepaid instance has no hourly price (None: its hours are already paid for). A running
    instance in no-GPU mode (``start_mode == "non_gpu"``) has 0 GPUs and costs
    :data:`NON_GPU_PRICE_PER_HOUR`. ``raw`` is the merged payload without secrets.
    """
    merged: dict[str, Any] = dict(item)
    if snapshot:
        merged.update({k: v for k, v in snapshot.items() if k not in merged or merged[k] in (None, "")})
    uuid = str(merged.get("uuid") or merged.get("instance_uuid") or "")
    status_raw = merged.get("status")
    status = map_status(status_raw)
    billing = billing_mode(merged.get("charge_type"))
    gpu_raw = merged.get("snapshot_gpu_alias_name") or merged.get("gpu_alias_name") or merged.get("gpu_spec_uuid")
    amount = merged.get("req_gpu_amount")
    gpu_count = 1 if amount is None or amount == "" else int_field(PROVIDER, "req_gpu_amount", amount)
    price = yuan_from_milli(merged.get("payg_price")) if billing is BillingMode.ON_DEMAND else None
    if str(merged.get("start_mode") or "").lower() == "non_gpu" and status in (Status.RUNNING, Status.STARTING):
        gpu_count = 0
        price = NON_GPU_PRICE_PER_HOUR
    return Instance(
        provider=PROVIDER,
        id=uuid,
        gpu=gpu_raw,
        gpu_raw=gpu_raw,
        gpu_count=gpu_count,
        billing=billing,
        price_per_hour=price,
        currency=CURRENCY,
        status=status,
        status_raw=status_raw if isinstance(status_raw, str) else None,
        created_at=parse_time(merged.get("created_at")),
        started_at=parse_time(merged.get("started_at")),
        stopped_at=parse_time(merged.get("stopped_at")),
        region=merged.get("region_name") or merged.get("region_sign"),
        raw=strip_secrets(merged),
        label=merged.get("name").strip() or None if isinstance(merged.get("name"), str) else None,
    )


@dataclass(frozen=True)
class GpuStock:
    """Free and total GPUs of one model in one AutoDL region.

    Attributes:
        gpu: the GPU model as AutoDL names it (e.g. ``"RTX 4090"``).
        idle: GPUs free to rent now (``idle_gpu_num``).
        total: GPUs of this model in the region (``total_gpu_num``).
        region: the ``region_sign`` asked for (e.g. ``"westDC2"``), or None for all regions.
    """

    gpu: str
    idle: int
    total: int
    region: str | None = None


def stock_from_payload(data: Any, *, region: str | None = None) -> list[GpuStock]:
    """``POST /api/v1/dev/machine/region/gpu_stock`` data -> :class:`GpuStock` records.

    The endpoint returns one single-key object per model,
    ``[{"RTX 4090": {"idle_gpu_num": 3, "total_gpu_num": 9}}, ...]`` (esd_api_doc, 获取地区GPU库存);
    it carries no price, which is why AutoDL does not offer :meth:`list_offers`.
    """
    stock: list[GpuStock] = []
    entries = data if isinstance(data, list) else [data] if isinstance(data, Mapping) else []
    for entry in entries:
        if not isinstance(entry, Mapping):
            continue
        for name, counts in entry.items():
            counts = counts if isinstance(counts, Mapping) else {}
            stock.append(
                GpuStock(
                    gpu=str(name),
                    idle=_int(counts.get("idle_gpu_num"), default=0),
                    total=_int(counts.get("total_gpu_num"), default=0),
                    region=region,
                )
            )
    return stock


def _int(value: Any, *, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default
