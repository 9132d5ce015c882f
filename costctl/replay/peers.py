"""Peers' autostop rules replayed on a recorded timeline, each as its own documentation defines it.

* **SkyPilot autostop** (``sky autostop -i MINUTES``, default 5; https://docs.skypilot.co/en/latest/reference/auto-stop.html):
  the cluster stops after it has been idle for ``MINUTES``, where idle means no job is running
  and no SSH session is open (the default ``wait_for: jobs_and_ssh``). When the job's own span is
  known (a scenario records it) the job runs exactly over it; a GPU log does not record jobs, so
  there the replay assumes (and says so): a job is running while ANY GPU reads at or above
  ``min_gpu_utilization`` (an unknown reading counts as running) — or, when training progress is
  on the time axis, from the first to the last progress point. A sample with an open SSH
  session (``ssh_sessions > 0``, when recorded) is activity too. The idle timer restarts at
  every activity (at the job's exit time when it exits).
* **dstack utilization_policy** (``min_gpu_utilization``, ``time_window``;
  https://dstack.ai/docs/reference/dstack.yml/task/#utilization_policy, server code
  ``_check_gpu_utilization``): the run is terminated when ANY GPU has ALL its samples in the last
  ``time_window`` below ``min_gpu_utilization``. No decision is taken when the window is not
  covered: there must be samples in it, the oldest within one minute of the window's start.
  Samples without a reading for a GPU are left out of that GPU's window (dstack stores none).

The settings the suite (``benchmarks/bench_policies.py``) and ``costctl analyze --compare``
replay, with where each comes from: :data:`SKYPILOT_DEFAULT_IDLE_MINUTES` (``-i 5``, SkyPilot's
default), :data:`DSTACK_DOCUMENTED_EXAMPLE` (``min_gpu_utilization: 10``, ``time_window: 1h``, the
example of dstack's task / dev-environment / service docs) and :data:`DSTACK_MINIMUM_WINDOW` (the
same threshold with dstack's smallest allowed ``time_window``, ``5m``: dstack's ``UtilizationPolicy``
rejects less). Both dstack fields are required (dstack has no default). Not replayed: what dstack
does after a run's job exits (the fleet's ``idle_duration``), which is not the utilization policy.

Each rule gives at most one stop (after it, the instance is gone).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from ..i18n import N_, _
from ..policies.base import iso
from ..records import SignalStatus, TelemetrySample

#: dstack skips the check while the oldest sample in the window is more than this after its start.
DSTACK_COVERAGE_SLACK = timedelta(minutes=1)
#: SkyPilot's default ``--idle-minutes``.
SKYPILOT_DEFAULT_IDLE_MINUTES = 5.0


def _minutes(td: timedelta) -> str:
    secs = int(td.total_seconds())
    return f"{secs // 3600}h" if secs % 3600 == 0 else f"{secs // 60}m" if secs % 60 == 0 else f"{secs}s"


@dataclass(frozen=True, slots=True)
class DstackSetting:
    """One setting of dstack's ``utilization_policy`` (both fields are required in dstack).

    Attributes:
        key: a short name (``documented-example``, ``minimum-window``).
        min_gpu_utilization: percent.
        time_window: the window.
        source: where the values come from, in words (an English sentence marked with
            :func:`~costctl.i18n.N_`, shown translated).
    """

    key: str
    min_gpu_utilization: float
    time_window: timedelta
    source: str

    def describe(self) -> str:
        """``dstack utilization_policy (min_gpu_utilization=10, time_window=1h, dstack's documented example)``,
        in the current language."""
        said = _("dstack utilization_policy (min_gpu_utilization={threshold:g}, time_window={window}, {source})")
        return said.format(threshold=self.min_gpu_utilization, window=_minutes(self.time_window),
                           source=_(self.source) if self.source else "")


#: the values of dstack's documented example (docs/concepts/tasks.md, dev-environments.md, services.md).
DSTACK_DOCUMENTED_EXAMPLE = DstackSetting("documented-example", 10.0, timedelta(hours=1),
                                          N_("dstack's documented example"))
#: the example's threshold with dstack's minimum ``time_window`` (``Minimum time_window is 5m``).
DSTACK_MINIMUM_WINDOW = DstackSetting("minimum-window", 10.0, timedelta(minutes=5),
                                      N_("dstack's 5-minute minimum window, the example's threshold"))
#: the dstack settings the suite and ``analyze --compare`` replay, in this order.
DSTACK_SETTINGS = (DSTACK_DOCUMENTED_EXAMPLE, DSTACK_MINIMUM_WINDOW)


def skypilot_describe(idle_minutes: float = SKYPILOT_DEFAULT_IDLE_MINUTES) -> str:
    """``SkyPilot autostop (sky autostop -i 5: no running job and no SSH session for 5 min, SkyPilot's default)``,
    in the current language."""
    if idle_minutes == SKYPILOT_DEFAULT_IDLE_MINUTES:
        said = _("SkyPilot autostop (sky autostop -i {minutes:g}: no running job and no SSH session for "
                 "{minutes:g} min, SkyPilot's default)")
    else:
        said = _("SkyPilot autostop (sky autostop -i {minutes:g}: no running job and no SSH session for "
                 "{minutes:g} min)")
    return said.format(minutes=idle_minutes)


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
        settings: the replayed settings and where they come from, in words
            (:meth:`DstackSetting.describe`, :func:`skypilot_describe`).
        variant: which setting (``documented-example``, ``minimum-window``; SkyPilot:
            ``default`` or ``-i N``).
    """

    name: str
    rule: str
    assumption: str | None
    stop_time: datetime | None
    reason: str
    gpu: int | None = None
    settings: str = ""
    variant: str = ""


def _running(sample: TelemetrySample, threshold: float) -> bool:
    if not sample.gpus:
        return True
    return any(g.utilization is None or g.error is not None or g.utilization >= threshold for g in sample.gpus)


def skypilot_autostop(
    samples: list[TelemetrySample],
    *,
    idle_minutes: float = SKYPILOT_DEFAULT_IDLE_MINUTES,
    min_gpu_utilization: float,
    job_span: tuple[datetime, datetime | None] | None = None,
    job_recorded: bool = False,
) -> PeerResult:
    """SkyPilot-style autostop over ``samples`` (see the module docstring).

    Args:
        idle_minutes: ``sky autostop -i`` minutes.
        min_gpu_utilization: percent; without ``job_span`` a job is assumed running while any GPU
            is at or above it.
        job_span: ``(start, exit)`` of the job (exit None: it runs past the end): the job runs
            exactly over it. Without ``job_recorded`` it is taken to be the progress span.
        job_recorded: the span is the job's own (a scenario's record), not the progress span;
            with ``job_span`` None it means that no job ran at all (only SSH sessions count).

    The idle timer starts with the first sample (the cluster comes up) and restarts at every
    sample with a running job or an open SSH session, and at the job's exit. The stop is the
    first sample at which the timer reached ``idle_minutes``.
    """
    idle_for = timedelta(minutes=idle_minutes)
    if job_recorded:
        assumption = None
    elif job_span is not None:
        assumption = _("job running from the first to the last recorded training progress point")
    else:
        assumption = _("a GPU log records no jobs: a job is taken to be running while any GPU is "
                       ">= {threshold:g} %").format(threshold=min_gpu_utilization)
    rule = _("stop after {minutes:g} min with no job running and no SSH session (sky autostop -i {minutes:g})").format(
        minutes=idle_minutes)
    variant = "default" if idle_minutes == SKYPILOT_DEFAULT_IDLE_MINUTES else f"-i {idle_minutes:g}"

    def result(stop: datetime | None, reason: str) -> PeerResult:
        return PeerResult("skypilot-autostop", rule, assumption, stop, reason,
                          settings=skypilot_describe(idle_minutes), variant=variant)

    if not samples:
        return result(None, _("no samples"))
    last_active = samples[0].time  # the idle timer starts when the cluster comes up
    for sample in samples:
        if job_recorded and job_span is None:
            running = False
        elif job_span is not None:
            begin, exit_at = job_span
            running = begin <= sample.time and (exit_at is None or sample.time <= exit_at)
            if not running and exit_at is not None and exit_at <= sample.time:
                last_active = max(last_active, exit_at)
        else:
            running = _running(sample, min_gpu_utilization)
        ssh = sample.ssh_status is SignalStatus.OK and bool(sample.ssh_sessions)
        if running or ssh:
            last_active = sample.time
            continue
        if sample.time - last_active >= idle_for:
            return result(sample.time, _("no job running and no SSH session since {time} ({minutes:g} min)").format(
                time=iso(last_active), minutes=idle_minutes))
    return result(None, _("never idle long enough"))


def dstack_utilization_policy(
    samples: list[TelemetrySample], *, min_gpu_utilization: float, time_window: timedelta,
    setting: DstackSetting | None = None,
) -> PeerResult:
    """dstack's ``utilization_policy`` over ``samples`` (see the module docstring).

    The rule is checked at every sample time ``now``: the window is ``(now - time_window, now]``;
    it is skipped while its oldest sample is more than :data:`DSTACK_COVERAGE_SLACK` after the
    window's start; it terminates when ANY GPU has readings in the window and ALL of them are
    below ``min_gpu_utilization``.

    Args:
        setting: the named setting these values come from (for the report); when None one is
            described from the values.
    """
    if setting is None:
        setting = DstackSetting("custom", min_gpu_utilization, time_window, N_("custom values"))
    rule = _("terminate when any GPU has all samples of the last {minutes:g} min below {threshold:g} % "
             "(dstack utilization_policy)").format(minutes=time_window.total_seconds() / 60,
                                                   threshold=min_gpu_utilization)
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
                    _("GPU {gpu}: all {count} samples since {time} below {threshold:g} %").format(
                        gpu=index, count=len(values[index]), time=iso(after), threshold=min_gpu_utilization),
                    gpu=index, settings=setting.describe(), variant=setting.key,
                )
    return PeerResult("dstack-utilization-policy", rule, None, None,
                      _("no GPU stayed below the threshold for a whole window"),
                      settings=setting.describe(), variant=setting.key)
