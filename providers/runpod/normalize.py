"""RunPod GraphQL payloads -> normalized :class:`Instance` / :class:`Offer` records (pure functions).

Sources (the fake in ``tests/fakes/runpod.py`` quotes the payloads):

* GraphQL Spec, https://graphql-spec.runpod.io/ — ``Pod`` fields ``id name desiredStatus
  costPerHr gpuCount podType machine { gpuDisplayName } runtime { uptimeInSeconds }``
  (``runtime`` is null while the container is not running); ``PodStatus`` values
  ``CREATED RUNNING RESTARTING EXITED PAUSED DEAD TERMINATED``; ``GpuType`` prices
  ``securePrice communityPrice secureSpotPrice communitySpotPrice`` and
  ``lowestPrice(input: {gpuCount}) { minimumBidPrice uninterruptablePrice }`` — all per GPU-hour.
* Manage Pods, https://docs.runpod.io/sdks/graphql/manage-pods — ``podRentInterruptable(input:
  {bidPerGpu: 0.2, gpuCount: 1, ...})``: the bid is per GPU, so an instance's bid per hour is
  ``bidPerGpu × gpuCount``.

* Pod runtime (the GraphQL Spec's ``PodRuntime``, as runpod-python's and RunPod's examples
  query it): ``runtime { gpus { id gpuUtilPercent memoryUtilPercent } container { cpuPercent
  memoryPercent } }``, percentages, null while the container does not run.
* Storage, https://docs.runpod.io/pods/storage/types — a pod's volume disk (``volumeInGb``,
  kept until the pod is terminated) costs "$0.10/GB/month (running)" and "$0.20/GB/month
  (stopped)"; the container disk (``containerDiskInGb``) is "lost on stop" and not billed then.

``costPerHr`` is the pod's price per hour for all its GPUs together (USD).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, Mapping

from costctl_providers._normalize import decimal_from_json as dollars
from costctl_providers._normalize import int_field, percent_from_json, refused_amount, refused_percent
from costctl_providers.base import BillingMode, Instance, Offer, Status

PROVIDER = "runpod"
CURRENCY = "USD"
GIB = 1024**3

STATUS_TABLE: dict[str, Status] = {
    "CREATED": Status.PROVISIONING,
    "RESTARTING": Status.STARTING,
    "RUNNING": Status.RUNNING,
    "EXITED": Status.STOPPED,
    "PAUSED": Status.STOPPED,
    "DEAD": Status.ERROR,
    "TERMINATED": Status.TERMINATED,
}
"""RunPod ``desiredStatus`` -> :class:`Status`; anything else -> UNKNOWN."""

STOPPED_VOLUME_PER_GB_MONTH = Decimal("0.20")
"""USD per GB-month of a stopped pod's volume disk (docs.runpod.io/pods/storage/types, read 2026)."""

HOURS_PER_MONTH = Decimal(730)
"""Hours in the month a per-month storage price is spread over (365 × 24 / 12)."""

SPOT_POD_TYPES = frozenset({"INTERRUPTABLE", "INTERRUPTIBLE", "BID"})
"""``podType`` values of interruptible (spot) pods; others (``RESERVED``) are on-demand."""


def map_status(raw: Any, *, has_runtime: bool | None = None) -> Status:
    """RunPod ``desiredStatus`` -> :class:`Status` (unknown or missing -> UNKNOWN).

    ``desiredStatus`` is what the pod was asked to be; ``runtime`` is null until its container
    runs and again once it has stopped. When ``has_runtime`` is known: RUNNING without a
    runtime is still STARTING, and EXITED with a runtime is still STOPPING.
    """
    if not isinstance(raw, str):
        return Status.UNKNOWN
    status = STATUS_TABLE.get(raw.strip().upper(), Status.UNKNOWN)
    if has_runtime is False and status is Status.RUNNING:
        return Status.STARTING
    if has_runtime is True and status is Status.STOPPED:
        return Status.STOPPING
    return status


def bid_per_instance_hour(bid_per_gpu: Decimal, gpu_count: int) -> Decimal:
    """RunPod's bid is per GPU-hour (``bidPerGpu``); the instance pays ``bid × gpuCount`` per hour."""
    return bid_per_gpu * Decimal(gpu_count)


def gpu_utilization(runtime: Any, gpu_count: int) -> float | None:
    """The busiest GPU's ``gpuUtilPercent`` of a pod's ``runtime`` (percent), or None unless
    every one of its ``gpu_count`` GPUs has a reading from 0 to 100 (a GPU not read may be the
    busy one: no reading at all, rather than an idle-looking part of one)."""
    gpus = runtime.get("gpus") if isinstance(runtime, Mapping) else None
    if not isinstance(gpus, list) or not gpus or len(gpus) < max(gpu_count, 1):
        return None
    readings = [percent_from_json(g.get("gpuUtilPercent")) if isinstance(g, Mapping) else None for g in gpus]
    if any(r is None for r in readings):
        return None
    return max(r for r in readings if r is not None)


def cpu_utilization(runtime: Any) -> float | None:
    """``runtime.container.cpuPercent`` (percent, not capped at 100), or None when unreported."""
    container = runtime.get("container") if isinstance(runtime, Mapping) else None
    return percent_from_json(container.get("cpuPercent"), upper=None) if isinstance(container, Mapping) else None


def stopped_price_per_hour(pod: Mapping[str, Any]) -> Decimal | None:
    """What a stopped pod's volume disk costs per hour: ``volumeInGb`` × RunPod's published
    :data:`STOPPED_VOLUME_PER_GB_MONTH` / :data:`HOURS_PER_MONTH` (USD); None without a volume
    size. A network volume is billed on its own, not per pod."""
    size = dollars(pod.get("volumeInGb"))
    if size is None or size < 0:
        return None
    return size * STOPPED_VOLUME_PER_GB_MONTH / HOURS_PER_MONTH


def instance_from_pod(pod: Mapping[str, Any], *, now: datetime | None = None) -> Instance:
    """One ``Pod`` object as an :class:`Instance`.

    ``price_per_hour`` = ``costPerHr`` (USD per pod-hour, all GPUs). ``started_at`` =
    ``now - runtime.uptimeInSeconds`` for a running pod when ``now`` is given. The pod's ``env`` (which
    may hold passwords) is never kept in ``raw``. A running pod's ``gpu_utilization`` and
    ``cpu_utilization`` come from its runtime (:func:`gpu_utilization`, :func:`cpu_utilization`);
    ``stopped_price_per_hour`` from its volume (:func:`stopped_price_per_hour`).
    """
    pod_type = str(pod.get("podType") or "").upper()
    machine = pod.get("machine") if isinstance(pod.get("machine"), Mapping) else {}
    gpu_raw = machine.get("gpuDisplayName") or pod.get("gpuTypeId")
    count = pod.get("gpuCount")
    status_raw = pod.get("desiredStatus")
    runtime = pod.get("runtime")
    status = map_status(status_raw, has_runtime=(runtime is not None) if "runtime" in pod else None)
    started_at = None
    uptime = runtime.get("uptimeInSeconds") if isinstance(runtime, Mapping) else pod.get("uptimeSeconds")
    if now is not None and status is Status.RUNNING and isinstance(uptime, (int, float)) and uptime > 0:
        started_at = now - timedelta(seconds=float(uptime))
    raw = {k: v for k, v in pod.items() if k not in ("env", "dockerArgs")}
    gpus = 1 if count is None else int_field(PROVIDER, "gpuCount", count)
    live = status is Status.RUNNING
    notes = [refused_amount(PROVIDER, str(pod.get("id")), "costPerHr", pod.get("costPerHr"))]
    if live and isinstance(runtime, Mapping):
        notes += [refused_percent(PROVIDER, str(pod.get("id")), "gpuUtilPercent", g.get("gpuUtilPercent"))
                  for g in runtime.get("gpus") or () if isinstance(g, Mapping)]
        container = runtime.get("container")
        if isinstance(container, Mapping):
            notes.append(refused_percent(PROVIDER, str(pod.get("id")), "cpuPercent", container.get("cpuPercent"),
                                         upper=None))
    return Instance(
        provider=PROVIDER,
        id=str(pod.get("id")),
        gpu=gpu_raw,
        gpu_raw=gpu_raw,
        gpu_count=gpus,
        billing=BillingMode.SPOT if pod_type in SPOT_POD_TYPES else BillingMode.ON_DEMAND,
        price_per_hour=dollars(pod.get("costPerHr")),
        currency=CURRENCY,
        status=status,
        status_raw=status_raw if isinstance(status_raw, str) else None,
        started_at=started_at,
        region=machine.get("location") if isinstance(machine.get("location"), str) else None,
        raw=raw,
        gpu_utilization=gpu_utilization(runtime, gpus) if live else None,
        cpu_utilization=cpu_utilization(runtime) if live else None,
        stopped_price_per_hour=stopped_price_per_hour(pod),
        label=pod.get("name").strip() or None if isinstance(pod.get("name"), str) else None,
        refused=tuple(note for note in notes if note is not None),
    )


def offers_from_gpu_type(gpu_type: Mapping[str, Any], *, gpu_count: int = 1) -> list[Offer]:
    """One ``GpuType`` as offers for ``gpu_count`` GPUs, RunPod's four prices each labelled by
    billing mode and tier: ``securePrice`` on-demand/secure, ``communityPrice``
    on-demand/community, ``secureSpotPrice`` spot/secure, ``communitySpotPrice``
    spot/community (the spot price is the lowest bid; ``lowestPrice.minimumBidPrice``, tier
    None, is used when neither per-cloud spot price is given). Prices are per GPU-hour in the payload and are
    multiplied by ``gpu_count`` into per-instance-hour. Zero or missing prices are skipped
    (that cloud does not have the card)."""
    gid = str(gpu_type.get("id"))
    name = gpu_type.get("displayName") or gid
    memory = gpu_type.get("memoryInGb")
    mem_bytes = int(memory) * GIB if isinstance(memory, (int, float)) and not isinstance(memory, bool) else None
    lowest = gpu_type.get("lowestPrice") if isinstance(gpu_type.get("lowestPrice"), Mapping) else {}
    candidates = [
        ("secure", BillingMode.ON_DEMAND, gpu_type.get("securePrice")),
        ("community", BillingMode.ON_DEMAND, gpu_type.get("communityPrice")),
        ("secure", BillingMode.SPOT, gpu_type.get("secureSpotPrice")),
        ("community", BillingMode.SPOT, gpu_type.get("communitySpotPrice")),
    ]
    if not any(b is BillingMode.SPOT and dollars(p) for _, b, p in candidates):
        candidates.append(("any", BillingMode.SPOT, lowest.get("minimumBidPrice")))
    offers = []
    for cloud, billing, per_gpu in candidates:
        price = dollars(per_gpu)
        if not price or price <= 0:
            continue
        offers.append(
            Offer(
                provider=PROVIDER,
                id=f"{gid}:{cloud}:{billing.value}",
                gpu=name,
                gpu_raw=gid,
                gpu_count=gpu_count,
                billing=billing,
                price_per_hour=price * gpu_count,
                currency=CURRENCY,
                gpu_memory_bytes=mem_bytes,
                region=f"{cloud} cloud",
                raw=dict(gpu_type),
                tier=cloud if cloud in ("secure", "community") else None,
            )
        )
    return offers
