"""The RunPod adapter (USD): GraphQL ``POST https://api.runpod.io/graphql``.

Authentication: ``Authorization: Bearer <RUNPOD_API_KEY>`` — the GraphQL Spec 1.1.0
(https://graphql-spec.runpod.io/) lists "Headers: Authorization: Bearer <RUNPOD_API_KEY>", and
runpod-python sends it; the older "Manage Pods" examples put the key in ``?api_key=``, which
would leak it into URLs and logs, so it is not used.

Operations (Manage Pods, https://docs.runpod.io/sdks/graphql/manage-pods, and the spec):
``myself { pods { ... } }`` (list), ``pod(input: {podId})``, ``podStop``, ``podResume(input:
{podId, gpuCount})``, ``podBidResume(input: {podId, bidPerGpu, gpuCount})`` (start a spot pod),
``podTerminate``, ``podRentInterruptable(input: {bidPerGpu, ...})`` (create spot; never
retried), ``podFindAndDeployOnDemand`` (create on-demand; never retried), ``gpuTypes`` prices,
``myself { clientBalance }``. Arguments travel as GraphQL variables, never spliced into the
query text. A response with an ``errors`` array becomes a typed error carrying the message.

GraphQL errors arrive inside an HTTP 200, so :meth:`RunPodProvider.graphql` classifies them
(by ``extensions.code`` and the message) for the one retry rule of
:mod:`costctl_providers._retry`: about the key (``UNAUTHENTICATED``, ``FORBIDDEN``, "api key")
-> AuthError; "not found" -> NotFoundError; rate limits ("rate limit", "too many requests",
``RATE_LIMITED``) -> transient RateLimitedError; server trouble (``INTERNAL_SERVER_ERROR``,
"internal error", "timed out", "temporarily unavailable", "try again")
-> transient ProviderUnavailableError; anything else (validation, bad input, no capacity) is a
permanent ProviderResponseError. Transient ones are retried on idempotent operations (reads,
``podStop``, ``podResume``, ``podTerminate``), never on a create.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from decimal import Decimal
from typing import Any, ClassVar, Literal

from costctl.errors import ProviderError
from costctl.i18n import _
from costctl.money import Money

from costctl_providers._adapter import HttpProvider
from costctl_providers.errors import AuthError, NotFoundError, ProviderResponseError
from costctl_providers.base import BillingMode, Capabilities, Instance, Offer, Status
from costctl_providers.preset import ConfigPreset
from costctl_providers.capabilities import NO_MOVE, Storage, StoragePath, no, yes

from .config import RunPodConfig
from .preset import RUNPOD_PRESET
from .normalize import (
    CURRENCY,
    PROVIDER,
    bid_per_instance_hour,
    dollars,
    instance_from_pod,
    offers_from_gpu_type,
)

POD_FIELDS = """
      id name desiredStatus costPerHr gpuCount podType uptimeSeconds lastStatusChange machineId
      volumeInGb containerDiskInGb
      machine { gpuDisplayName }
      runtime { uptimeInSeconds gpus { id gpuUtilPercent memoryUtilPercent } container { cpuPercent memoryPercent } }
"""

Q_PODS = "query Pods { myself { pods {" + POD_FIELDS + "} } }"
Q_POD = "query Pod($podId: String!) { pod(input: {podId: $podId}) {" + POD_FIELDS + "} }"
M_STOP = "mutation Stop($podId: String!) { podStop(input: {podId: $podId}) { id desiredStatus } }"
M_RESUME = (
    "mutation Resume($podId: String!, $gpuCount: Int!) "
    "{ podResume(input: {podId: $podId, gpuCount: $gpuCount}) { id desiredStatus costPerHr } }"
)
M_BID_RESUME = (
    "mutation BidResume($podId: String!, $bidPerGpu: Float!, $gpuCount: Int!) "
    "{ podBidResume(input: {podId: $podId, bidPerGpu: $bidPerGpu, gpuCount: $gpuCount}) { id desiredStatus costPerHr } }"
)
M_TERMINATE = "mutation Terminate($podId: String!) { podTerminate(input: {podId: $podId}) }"
M_RENT_SPOT = (
    "mutation RentSpot($bidPerGpu: Float!, $gpuCount: Int!, $gpuTypeId: String!, $imageName: String!, "
    "$name: String!, $volumeInGb: Int!, $containerDiskInGb: Int!) { podRentInterruptable(input: {"
    "bidPerGpu: $bidPerGpu, cloudType: %s, gpuCount: $gpuCount, gpuTypeId: $gpuTypeId, imageName: $imageName, "
    "name: $name, volumeInGb: $volumeInGb, containerDiskInGb: $containerDiskInGb}) {" + POD_FIELDS + "} }"
)
M_DEPLOY = (
    "mutation Deploy($gpuCount: Int!, $gpuTypeId: String!, $imageName: String!, $name: String!, "
    "$volumeInGb: Int!, $containerDiskInGb: Int!) { podFindAndDeployOnDemand(input: {cloudType: %s, "
    "gpuCount: $gpuCount, gpuTypeId: $gpuTypeId, imageName: $imageName, name: $name, volumeInGb: $volumeInGb, "
    "containerDiskInGb: $containerDiskInGb}) {" + POD_FIELDS + "} }"
)
Q_GPU_TYPES = (
    "query GpuTypes { gpuTypes { id displayName memoryInGb securePrice communityPrice secureSpotPrice "
    "communitySpotPrice lowestPrice(input: {gpuCount: 1}) { minimumBidPrice uninterruptablePrice } } }"
)
Q_BALANCE = "query Balance { myself { clientBalance currentSpendPerHr } }"

CloudType = Literal["ALL", "SECURE", "COMMUNITY"]

_NOT_FOUND = re.compile(r"not found|does not exist|no pod|unknown pod", re.I)
_AUTH = re.compile(r"unauthori[sz]ed|unauthenticated|forbidden|api key|permission", re.I)
#: GraphQL errors (code or message) that mean "rate limited": transient.
RATE_LIMITED = re.compile(r"rate.?limit|too many requests|throttl", re.I)
#: GraphQL errors (code or message) that mean "the server failed, try again": transient.
TRANSIENT = re.compile(
    r"internal.?(server.?)?error|timed? ?out|timeout|temporar|unavailable|try again"
    r"|bad gateway|service_unavailable", re.I,
)


class RunPodProvider(HttpProvider):
    """RunPod (USD). Constructed as ``RunPodProvider(config, data_dir=..., clock=..., env=...,
    sleep=...)`` (see :class:`~costctl_providers._adapter.HttpProvider`; the clock also dates
    ``started_at``); ``config`` is the ``[providers.runpod]`` table (:class:`~.config.RunPodConfig`).
    The API key (``RUNPOD_API_KEY`` or the credentials file's ``[runpod] api_key``) is sent as
    ``Authorization: Bearer <key>``.
    """

    name: ClassVar[str] = PROVIDER
    capabilities: ClassVar[Capabilities] = Capabilities(
        stop=True, start=True, release=True, list_offers=True,
        create=no(_("this adapter does not rent pods (deploy them with RunPod's console or runpodctl)")),
        move_job=no(NO_MOVE),
        self_stop=no(_("this adapter stops pods through the API (it needs RUNPOD_API_KEY inside the pod too)")),
        spot=True, change_gpu=True, balance=True,
        billing_records=no(_("this adapter does not read RunPod's billing history")),
        preemption_notice=no(_("RunPod gives no warning inside the pod before taking a spot pod")),
        price_list=True,
        gpu_utilization=yes(), cpu_utilization=yes(),  # the pod runtime's gpuUtilPercent and cpuPercent
    )
    credential_env: ClassVar[tuple[str, ...]] = ("RUNPOD_API_KEY",)
    storage: ClassVar[Storage] = Storage(
        paths=(StoragePath("/workspace", survives=True, note=_("the pod's volume")),),
        env_markers=("RUNPOD_POD_ID",),
        others_survive=False,
        others_note=_("a RunPod pod's container disk is reset when the pod stops; keep checkpoints "
                      "on the /workspace volume"),
    )
    config_model = RunPodConfig
    config: RunPodConfig
    config_preset: ClassVar[ConfigPreset] = RUNPOD_PRESET
    extra_headers = {"Content-Type": "application/json"}

    def graphql(self, query: str, variables: dict[str, Any] | None = None, *, idempotent: bool) -> dict[str, Any]:
        """Run one GraphQL operation and return its ``data``.

        Raises:
            AuthError: HTTP 401/403, or a GraphQL error about the key (names the credential).
            NotFoundError: a GraphQL error saying the pod does not exist.
            RateLimitedError / ProviderUnavailableError: HTTP 429/5xx, timeouts, resets, or a
                transient GraphQL error, after the retries (``idempotent`` operations only).
            ProviderResponseError: any other GraphQL ``errors`` entry (its ``message``), or no ``data``.

        Every message names the operation and the attempts (``runpod: podStop failed after 4
        attempts: ...``).
        """
        body: dict[str, Any] = {"query": query}
        if variables:
            body["variables"] = variables
        return self.http.json("POST", "/graphql", json=body, idempotent=idempotent,
                              unwrap=self._unwrap, operation=_operation_name(query))

    def _unwrap(self, answer: Any) -> dict[str, Any]:
        """``data`` of a GraphQL answer, or the typed error its first ``errors`` entry means
        (module docstring: transient for rate limits and server trouble, else permanent)."""
        if not isinstance(answer, dict):
            raise self.http.response_error(_("GraphQL answer is not an object"))
        errors = answer.get("errors")
        if errors:
            first = errors[0] if isinstance(errors, list) and errors else {}
            message = str(first.get("message") if isinstance(first, Mapping) else first) or _("unknown GraphQL error")
            ext = first.get("extensions") if isinstance(first, Mapping) else None
            code = str(ext.get("code") or "") if isinstance(ext, Mapping) else ""
            both = f"{code} {message}"
            if _AUTH.search(both):
                if self._cred:
                    rejected = _("runpod: {credential} was rejected: {message}")
                else:
                    rejected = _("runpod: the API key was rejected: {message}")
                raise AuthError(self.http.redact(rejected.format(
                    credential=self._cred.name if self._cred else None, message=message)))
            if _NOT_FOUND.search(message):
                raise NotFoundError(self.http.redact(_("runpod: {message}").format(message=message)))
            said = _("GraphQL error: {message}").format(message=message)
            if RATE_LIMITED.search(both):
                raise self.http.transient_error(said, rate_limited=True)
            if TRANSIENT.search(both):
                raise self.http.transient_error(said)
            raise self.http.response_error(said)
        data = answer.get("data")
        if not isinstance(data, dict):
            raise self.http.response_error(_("GraphQL answer has no data"))
        return data

    # -- reading --------------------------------------------------------------------------

    def list_instances(self) -> list[Instance]:
        """All pods (``myself { pods }``), USD per pod-hour."""
        data = self.graphql(Q_PODS, idempotent=True)
        myself = data.get("myself")
        pods = myself.get("pods") if isinstance(myself, Mapping) else None
        if (myself is not None and not isinstance(myself, Mapping)) or (pods is not None and not isinstance(pods, list)):
            raise ProviderResponseError(_("runpod: the pods query answered without a list of pods"))
        pods = pods or []
        now = self.clock.now()
        return [instance_from_pod(p, now=now) for p in pods if isinstance(p, Mapping)]

    def get_instance(self, instance_id: str) -> Instance:
        """One pod (``pod(input: {podId})``). Raises NotFoundError when RunPod returns null."""
        data = self.graphql(Q_POD, {"podId": instance_id}, idempotent=True)
        pod = data.get("pod")
        if not isinstance(pod, Mapping):
            raise NotFoundError(_("runpod: no pod {id!r} in this account").format(id=instance_id))
        return instance_from_pod(pod, now=self.clock.now())

    # -- lifecycle ---------------------------------------------------------------------------

    def stop_instance(self, instance_id: str, *, wait: bool = True) -> Instance:
        """``podStop``; a no-op on a stopped pod. GPU billing ends, volume storage still bills.
        With ``wait``, polls until the pod is EXITED with no runtime.

        Raises:
            StatusWaitError: not stopped within ``stop_timeout``.
        """
        current = self.get_instance(instance_id)
        if current.status in (Status.STOPPED, Status.TERMINATED):
            return current
        if current.status is not Status.STOPPING:
            self.graphql(M_STOP, {"podId": instance_id}, idempotent=True)
        if not wait:
            return self.get_instance(instance_id)
        return self._wait(instance_id, {Status.STOPPED, Status.TERMINATED})

    def start_instance(self, instance_id: str) -> Instance:
        """``podResume(input: {podId, gpuCount})`` for an on-demand pod; for a spot pod,
        ``podBidResume`` with its last per-GPU price as the bid (see :meth:`start_spot`). A no-op
        on a running or starting pod."""
        current = self.get_instance(instance_id)
        if current.status in (Status.RUNNING, Status.STARTING, Status.PROVISIONING):
            return current
        if current.status is Status.TERMINATED:
            raise ProviderError(_("runpod: pod {id} was terminated; it cannot be started").format(id=instance_id))
        if current.billing is BillingMode.SPOT:
            if not current.price_per_hour or current.gpu_count < 1:
                raise ProviderError(_("runpod: pod {id} is a spot pod with no known price; use start_spot() with a bid")
                                    .format(id=instance_id))
            return self.start_spot(instance_id, current.price_per_hour / current.gpu_count, gpu_count=current.gpu_count)
        self.graphql(M_RESUME, {"podId": instance_id, "gpuCount": max(1, current.gpu_count)}, idempotent=True)
        return self.get_instance(instance_id)

    def start_spot(self, instance_id: str, bid_per_gpu: Decimal, *, gpu_count: int) -> Instance:
        """Resume a spot pod with ``podBidResume``; ``bid_per_gpu`` is USD per GPU-hour (the pod
        then bids ``bid_per_gpu × gpu_count`` per hour)."""
        self.graphql(M_BID_RESUME, {"podId": instance_id, "bidPerGpu": float(bid_per_gpu), "gpuCount": gpu_count},
                     idempotent=True)
        inst = self.get_instance(instance_id)
        return replace(inst, bid_per_hour=bid_per_instance_hour(bid_per_gpu, gpu_count))

    def release_instance(self, instance_id: str) -> Instance:
        """``podTerminate``: the pod and its volume are deleted (irreversible). A pod already gone
        counts as terminated."""
        try:
            last: Instance | None = self.get_instance(instance_id)
        except NotFoundError:
            last = None
        try:
            self.graphql(M_TERMINATE, {"podId": instance_id}, idempotent=True)
        except NotFoundError:
            pass
        if last is None:
            raise NotFoundError(_("runpod: no pod {id!r} in this account").format(id=instance_id))
        return replace(last, status=Status.TERMINATED, status_raw="TERMINATED")

    def create_spot(
        self,
        *,
        gpu_type_id: str,
        bid_per_gpu: Decimal,
        gpu_count: int = 1,
        image_name: str,
        name: str = "costctl",
        cloud_type: CloudType = "ALL",
        volume_gb: int = 40,
        container_disk_gb: int = 40,
    ) -> Instance:
        """Rent an interruptible pod (``podRentInterruptable``), bidding ``bid_per_gpu`` USD per
        GPU-hour. Sent exactly once (never retried). The returned Instance's ``bid_per_hour`` is
        ``bid_per_gpu × gpu_count``; ``price_per_hour`` is RunPod's ``costPerHr`` when given, else
        that same product."""
        query = M_RENT_SPOT % _cloud(cloud_type)
        variables = {"bidPerGpu": float(bid_per_gpu), "gpuCount": gpu_count, "gpuTypeId": gpu_type_id,
                     "imageName": image_name, "name": name, "volumeInGb": volume_gb,
                     "containerDiskInGb": container_disk_gb}
        data = self.graphql(query, variables, idempotent=False)
        pod = data.get("podRentInterruptable")
        if not isinstance(pod, Mapping):
            raise ProviderResponseError(_("runpod: podRentInterruptable returned no pod"))
        bid = bid_per_instance_hour(bid_per_gpu, gpu_count)
        inst = instance_from_pod({"gpuCount": gpu_count, "podType": "INTERRUPTABLE", **pod}, now=self.clock.now())
        return replace(inst, billing=BillingMode.SPOT, bid_per_hour=bid,
                       price_per_hour=inst.price_per_hour if inst.price_per_hour else bid)

    def create_on_demand(
        self,
        *,
        gpu_type_id: str,
        gpu_count: int = 1,
        image_name: str,
        name: str = "costctl",
        cloud_type: CloudType = "ALL",
        volume_gb: int = 40,
        container_disk_gb: int = 40,
    ) -> Instance:
        """Rent an on-demand pod (``podFindAndDeployOnDemand``). Sent exactly once (never retried)."""
        query = M_DEPLOY % _cloud(cloud_type)
        variables = {"gpuCount": gpu_count, "gpuTypeId": gpu_type_id, "imageName": image_name, "name": name,
                     "volumeInGb": volume_gb, "containerDiskInGb": container_disk_gb}
        data = self.graphql(query, variables, idempotent=False)
        pod = data.get("podFindAndDeployOnDemand")
        if not isinstance(pod, Mapping):
            raise ProviderResponseError(_("runpod: podFindAndDeployOnDemand returned no pod"))
        return instance_from_pod({"gpuCount": gpu_count, **pod}, now=self.clock.now())

    # -- prices and account ----------------------------------------------------------------------

    def list_offers(self, gpu: str | None = None) -> list[Offer]:
        """On-demand and spot prices per GPU type (``gpuTypes``), for one GPU, USD per hour.
        ``gpu`` matches the GPU type id or display name (case-insensitive substring)."""
        data = self.graphql(Q_GPU_TYPES, idempotent=True)
        offers: list[Offer] = []
        needle = gpu.lower() if gpu else None
        for gpu_type in data.get("gpuTypes") or []:
            if not isinstance(gpu_type, Mapping):
                continue
            if needle and needle not in str(gpu_type.get("id", "")).lower() \
                    and needle not in str(gpu_type.get("displayName", "")).lower():
                continue
            offers.extend(offers_from_gpu_type(gpu_type))
        return offers

    def balance(self) -> Money:
        """``myself { clientBalance }`` in USD."""
        data = self.graphql(Q_BALANCE, idempotent=True)
        amount = dollars((data.get("myself") or {}).get("clientBalance"))
        if amount is None:
            raise ProviderResponseError(_("runpod: myself answered without clientBalance"))
        return Money(amount, CURRENCY)


_OP_NAME = re.compile(r"\{\s*(\w+)")


def _operation_name(query: str) -> str:
    """The first field a GraphQL document selects (``podStop``, ``pod``, ``myself``), for messages."""
    m = _OP_NAME.search(query)
    return m.group(1) if m else "graphql"


def _cloud(cloud_type: str) -> str:
    value = str(cloud_type).upper()
    if value not in ("ALL", "SECURE", "COMMUNITY"):
        raise ProviderError(_("runpod: cloud_type {value!r} is not one of ALL, SECURE, COMMUNITY").format(
            value=cloud_type))
    return value
