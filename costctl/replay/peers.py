"""Peers' autostop rules replayed on a recorded timeline, each as its own documentation defines it.

* **SkyPilot autostop** (``sky autostop -i MINUTES``, default 5; https://docs.skypilot.co
  "Autostop"): the cluster stops after it has been idle for ``MINUTES``, where idle means no job
  is running (and no SSH session). A GPU log does not record jobs, so the replay assumes
  (and says so): a job is running while ANY GPU reads at or above ``min_gpu_utilization`` (an
  unknown reading counts as running) — or, when training progress is on the time axis, from the
  first to the last progress point. The idle timer restarts whenever a job runs.
* **dstack utilization_policy** (``min_gpu_utilization``, ``time_window``;
  https://dstack.ai/docs/reference/dstack.yml/task/#utilization_policy, server code
  ``_check_gpu_utilization``): the run is terminated when ANY GPU has ALL its samples in the last
  ``time_window`` below ``min_gpu_utilization``. No decision is taken when the window is not
  covered: there must be samples in it, the oldest within one minute of the window's start.
  Samples without a reading for a GPU are left out of that GPU's window (dstack stores none).

Each rule gives at most one stop (after it, the instance is gone).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from ..policies.base import iso
from ..records import TelemetrySample

#: dstack skips the check while the oldest sample in the window is more than this after its start.
DSTACK_COVERAGE_SLACK = timedelta(minutes=1)
#: SkyPilot's default ``--idle-minutes``.
SKYPILOT_DEFAULT_IDLE_MINUTES = 5.0


@dataclass(frozen=True, slots=True)
class PeerResult:
    """One peer rule's verdict on the timeline.

    Attributes:
        name: ``"skypilot-autostop"`` or ``"dstack-utilization-policy"``.
        rule: the rule in one line, with its parameters.
        assumption: what the replay had to assume (None when nothing).
        stop_time: when it would have stopped / terminated (None: never).
        reason: why, in one line.
        gpu: the GPU that triggered a dstack termination.
    """

    name: str
    rule: str
    assumption: str | None
    stop_time: datetime | None
    reason: str
    gpu: int | None = None


def _running(sample: TelemetrySample, threshold: float) -> bool:
    if not sample.gpus:
        return True
    return any(g.utilization is None or g.error is not None or g.utilization >= threshold for g in sample.gpus)


def skypilot_autostop(
    samples: list[TelemetrySample],
    *,
    idle_minutes: float = SKYPILOT_DEFAULT_IDLE_MINUTES,
    min_gpu_utilization: float,
    job_span: tuple[datetime, datetime] | None = None,
) -> PeerResult:
    """SkyPilot-style autostop over ``samples`` (see the module docstring for the assumption).

    Args:
        idle_minutes: ``sky autostop -i`` minutes.
        min_gpu_utilization: percent; a job is assumed running while any GPU is at or above it.
        job_span: ``(first, last)`` progress times, when progress is on the time axis: the job is
            then taken to run exactly over that span instead.
    """
    idle_for = timedelta(minutes=idle_minutes)
    if job_span is not None:
        assumption = "job running from the first to the last recorded training progress point"
    else:
        assumption = (f"a GPU log records no jobs: a job is taken to be running while any GPU is "
                      f">= {min_gpu_utilization:g} %")
    rule = f"stop after {idle_minutes:g} min with no job running (sky autostop -i {idle_minutes:g})"
    if not samples:
        return PeerResult("skypilot-autostop", rule, assumption, None, "no samples")
    last_job = samples[0].time  # the idle timer starts when the cluster comes up
    for sample in samples:
        if job_span is not None:
            running = job_span[0] <= sample.time <= job_span[1]
        else:
            running = _running(sample, min_gpu_utilization)
        if running:
            last_job = sample.time
            continue
        if sample.time - last_job >= idle_for:
            return PeerResult(
                "skypilot-autostop", rule, assumption, sample.time,
                f"no job running since {iso(last_job)} ({idle_minutes:g} min)",
            )
    return PeerResult("skypilot-autostop", rule, assumption, None, "never idle long enough")


def dstack_utilization_policy(
    samples: list[TelemetrySample], *, min_gpu_utilization: float, time_window: timedelta
) -> PeerResult:
    """dstack's ``utilization_policy`` over ``samples`` (see the module docstring)."""
    rule = (f"terminate when any GPU has all samples of the last {time_window.total_seconds() / 60:g} min "
            f"below {min_gpu_utilization:g} % (dstack utilization_policy)")
    lo = 0
    for hi, sample in enumerate(samples):
        now = sample.time
        after = now - time_window
        while lo < hi and samples[lo].time <= after:
            lo += 1
        window = samples[lo : hi + 1]
        if not window or window[0].time > after + DSTACK_COVERAGE_SLACK:
            continue  # not enough samples: no decision
        values: dict[int, list[float]] = {}
        for s in window:
            for g in s.gpus:
                if g.utilization is not None and g.error is None:
                    values.setdefault(g.index, []).append(g.utilization)
        for index in sorted(values):
            if values[index] and all(u < min_gpu_utilization for u in values[index]):
                return PeerResult(
                    "dstack-utilization-policy", rule, None, now,
                    f"GPU {index}: all {len(values[index])} samples since {iso(after)} "
                    f"below {min_gpu_utilization:g} %",
                    gpu=index,
                )
    return PeerResult("dstack-utilization-policy", rule, None, None, "no GPU stayed below the threshold for a whole window")
