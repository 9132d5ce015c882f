"""Plain records that flow between the samplers, parsers, policies and the ledger.

Everything here is immutable and carries aware-UTC times. Units are in the field names:
``*_bytes`` are bytes, utilization and CPU figures are percent, ``power_w`` is watts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from enum import Enum, StrEnum
from typing import Any, Literal


class SignalStatus(str, Enum):
    """How a signal read on one tick.

    * ``OK``: read; the value decides idle/busy.
    * ``UNKNOWN``: present but not readable yet (e.g. psutil's meaningless first
      ``cpu_percent``); counts as busy.
    * ``ERROR``: should be there but failed to read (NVML error, permission denied); counts
      as busy — a metric we cannot read never counts as idle.
    * ``ABSENT``: this machine or replay has no such source; it takes no part in decisions.
    """

    OK = "ok"
    UNKNOWN = "unknown"
    ERROR = "error"
    ABSENT = "absent"


@dataclass(frozen=True, slots=True)
class GpuReading:
    """One GPU at one instant.

    Attributes:
        index: NVML / nvidia-smi device index.
        name: product name as the driver reports it (e.g. ``"NVIDIA GeForce RTX 4090"``).
        uuid: device UUID when known.
        utilization: percent of the sample period a kernel ran (0-100); None = unknown.
        memory_used_bytes / memory_total_bytes: bytes; None = unknown (never 0 for unknown).
        power_w: board power draw in watts; None = unknown/unsupported.
        processes: host PIDs of compute processes on this GPU; None = unknown.
        error: why the utilization could not be read, if it could not (counts as busy).
    """

    index: int
    name: str | None = None
    uuid: str | None = None
    utilization: float | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    power_w: float | None = None
    processes: tuple[int, ...] | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class TelemetrySample:
    """Everything the sampler read on one tick.

    Attributes:
        time: aware UTC.
        gpus: one reading per GPU; never averaged together.
        gpu_status: ABSENT when the machine has no NVIDIA GPU (the CPU stands in), ERROR when
            the GPU source failed as a whole, OK otherwise.
        cpu_percent: CPU of the watched process tree (or of all user processes when guarding
            the machine), in percent of one core (200 = two cores busy); None = unknown.
        cpu_status: status of the CPU signal.
        ssh_sessions: number of open SSH sessions; None unless counted.
        ssh_status: ABSENT unless ``count_ssh_sessions`` is on.
        source: where the sample came from (``"nvml"``, ``"nvidia-smi"``, ``"cpu"``,
            ``"replay"``...), for reports.
        reasons: why a signal is not OK, one line each, prefixed with the signal
            (``"gpu: nvmlDeviceGetCount failed: ..."``, ``"cpu: first reading of PID 42"``);
            evidence for decisions and logs.
        jupyter_status: status of the local Jupyter server signal
            (:mod:`costctl.telemetry.jupyter`): ABSENT when no server runs (or reading it is
            off), ERROR when a server runs but could not be read (counts as busy).
        jupyter_last_activity: the newest activity the Jupyter server(s) reported (aware UTC:
            the later of ``/api/status`` ``last_activity`` and every kernel's); None = unknown.
        jupyter_busy_kernels: kernels whose ``execution_state`` was not ``idle`` (``busy``,
            ``starting``, ``restarting``) when read; None = unknown.
    """

    time: datetime
    gpus: tuple[GpuReading, ...] = ()
    gpu_status: SignalStatus = SignalStatus.ABSENT
    cpu_percent: float | None = None
    cpu_status: SignalStatus = SignalStatus.ABSENT
    ssh_sessions: int | None = None
    ssh_status: SignalStatus = SignalStatus.ABSENT
    source: str = ""
    reasons: tuple[str, ...] = ()
    jupyter_status: SignalStatus = SignalStatus.ABSENT
    jupyter_last_activity: datetime | None = None
    jupyter_busy_kernels: int | None = None


ProgressKind = Literal["train", "eval"]


@dataclass(frozen=True, slots=True)
class ProgressPoint:
    """One loss value reported by the training job.

    Attributes:
        time: when costctl saw it (aware UTC); None for file records without timestamps.
        value: the loss (may be NaN or +/-inf: a divergence, not a parse error).
        kind: ``"train"`` or ``"eval"``; the two are never mixed.
        name: the metric's name in the source (``"loss"``, ``"eval_loss"``, ``"val_loss"``).
        step: global step / iteration when the source gives one.
        epoch: epoch (may be fractional, as Hugging Face reports it).
        total: the run's length in the unit of ``step`` when the source says it (tqdm total,
            max_steps), or in epochs when ``step`` is None (``epoch 3/80``), for "cost of the
            rest of the run".
    """

    time: datetime | None
    value: float
    kind: ProgressKind = "train"
    name: str = "loss"
    step: int | None = None
    epoch: float | None = None
    total: int | None = None

    @property
    def finite(self) -> bool:
        """False for NaN and +/-inf."""
        return math.isfinite(self.value)


class Action(StrEnum):
    """What a decision does. String-valued: ``Action.STOP == "stop"``, and the ledger stores the value.

    * ``ADVISE`` / ``WARN``: a line for the user, nothing else;
    * ``STOP``: end the job and stop the instance (the executor; idempotent);
    * ``DOWNSIZE``: move the rest of the run to a cheaper card (the lifecycle controller);
    * ``CHECKPOINT``: a checkpoint request and its outcome;
    * ``RETRY``: restart the job after CUDA OOM with a halved batch;
    * ``RESUME``: resume the job on another instance from a checkpoint;
    * ``START``: start the (stopped) instance the watch runs on;
    * ``SNOOZE``: ``costctl snooze``: a pending idle autostop postponed (or the snooze lifted),
      or (``--instance``) a patrol's action on one instance held;
    * ``MARK``: ``costctl patrol``: an instance matched a policy and was marked; the policy's
      action follows after its grace period unless the instance is snoozed or no longer matches;
    * ``RELEASE``: ``costctl patrol``: release a stopped instance and its disk (carried through
      the same verified stop: requested, sent, confirmed by the provider's status).
    """

    ADVISE = "advise"
    WARN = "warn"
    STOP = "stop"
    DOWNSIZE = "downsize"
    CHECKPOINT = "checkpoint"
    RETRY = "retry"
    RESUME = "resume"
    START = "start"
    SNOOZE = "snooze"
    MARK = "mark"
    RELEASE = "release"


@dataclass(frozen=True, slots=True)
class RestOfRun:
    """What the rest of a run costs at the current rate (the plateau policy's estimate).

    Attributes:
        total: the run's length in the unit of ``position`` (steps or epochs).
        position: where the run is (step or epoch).
        elapsed_s / remaining_s: seconds so far and estimated seconds left (Decimal).
        cost: what ``remaining_s`` costs at the current rate, in ``currency``.
    """

    total: int | float
    position: int | float
    elapsed_s: Decimal
    remaining_s: Decimal
    cost: Decimal
    currency: str

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RestOfRun:
        """From the JSON form (:func:`costctl.policies.plateau.rest_of_run_cost`: decimal strings)."""
        return cls(total=data["total"], position=data["position"], elapsed_s=Decimal(data["elapsed_s"]),
                   remaining_s=Decimal(data["remaining_s"]), cost=Decimal(data["cost"]), currency=data["currency"])


@dataclass(frozen=True, slots=True)
class BatchPlan:
    """Per-device (micro-)batch size and gradient-accumulation steps.

    ``effective = batch_size × accum_steps`` is the batch one optimizer step sees.
    """

    batch_size: int
    accum_steps: int = 1

    @property
    def effective(self) -> int:
        """Samples per optimizer step."""
        return self.batch_size * self.accum_steps

    def halved(self, min_batch: int = 1) -> BatchPlan | None:
        """Batch halved (rounded down), accumulation doubled; None below ``min_batch``.
        An odd batch cannot keep the effective batch exactly (it shrinks by ``accum_steps``)."""
        half = self.batch_size // 2
        if half < max(1, min_batch):
            return None
        return BatchPlan(half, self.accum_steps * 2)


@dataclass(frozen=True, slots=True)
class Decision:
    """What a policy (or the lifecycle) concluded, with why.

    Attributes:
        time: aware UTC (the evaluation time on the policy's clock).
        policy: ``"idle"``, ``"stall"``, ``"budget"``, ``"plateau"``, ``"divergence"``...
        action: an :class:`Action` (a plain string such as ``"stop"`` is converted; an unknown
            one raises ValueError).
        reason: one human sentence.
        evidence: JSON-serialisable facts behind it (window, readings, values, money as str),
            stored with the decision; nothing reads it back to act.
        key: identifies the event, so the engine records and acts on it once
            (e.g. ``"idle:2026-01-01T03:03:37Z"``).
        rest_of_run: typed data a later action needs (a plateau decision's rest-of-run
            estimate, which sizes a ``downsize``); None when unknown or not applicable.
    """

    time: datetime
    policy: str
    action: Action
    reason: str
    evidence: dict[str, Any] = field(default_factory=dict)
    key: str = ""
    rest_of_run: RestOfRun | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.action, Action):
            object.__setattr__(self, "action", Action(self.action))
