"""Idle over a window, from the patrol's stored observations.

A provider's utilization is one instantaneous reading per listing, so the patrol stores each
reading (:mod:`costctl.ledger.patrol_store`) and judges a window of them with the watch's own
idle rule: each observation becomes a :class:`~costctl.records.TelemetrySample` and
:class:`~costctl.policies.idle.IdlePolicy` evaluates the window over them, with the patrol's
nominal ``interval`` as the sample interval. So the same coverage rule holds (an observation at
or before the window's start, none more than two intervals apart, the newest at most two
intervals old), every present signal must be below its threshold, and:

* a signal is present when the adapter declares it can read it
  (``capabilities.gpu_utilization`` / ``cpu_utilization``): where CPU can be read, the GPU alone
  never makes an instance idle;
* a present signal without a reading (the provider left it out, the instance was not running)
  counts as busy (:attr:`~costctl.records.SignalStatus.ERROR`);
* with no present signal at all, idle never holds.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from ..clock import ensure_utc
from ..ledger.patrol_store import Observation
from ..policies.history import History
from ..policies.idle import IdleConfig, IdlePolicy
from ..records import Decision, GpuReading, SignalStatus, TelemetrySample


def sample_of(obs: Observation, *, gpu_readable: bool, cpu_readable: bool) -> TelemetrySample:
    """An observation as a telemetry sample: a readable signal with a reading is OK, without
    one ERROR (busy); an unreadable one ABSENT. The GPU reading is the provider's one figure
    for the instance (Vast's, or RunPod's busiest GPU: below a threshold means every GPU is)."""
    if not gpu_readable:
        gpu_status, gpus = SignalStatus.ABSENT, ()
    elif obs.gpu_utilization is None:
        gpu_status, gpus = SignalStatus.ERROR, ()
    else:
        gpu_status, gpus = SignalStatus.OK, (GpuReading(index=0, utilization=obs.gpu_utilization),)
    if not cpu_readable:
        cpu_status, cpu = SignalStatus.ABSENT, None
    elif obs.cpu_utilization is None:
        cpu_status, cpu = SignalStatus.ERROR, None
    else:
        cpu_status, cpu = SignalStatus.OK, obs.cpu_utilization
    return TelemetrySample(time=ensure_utc(obs.time), gpus=gpus, gpu_status=gpu_status, cpu_percent=cpu,
                           cpu_status=cpu_status, source="provider")


def idle_over(observations: Sequence[Observation], *, now: datetime, window: timedelta, interval: timedelta,
              min_gpu_utilization: float, min_cpu_utilization: float, gpu_readable: bool,
              cpu_readable: bool) -> Decision | None:
    """The idle policy's decision when every present signal stayed idle over ``[now - window,
    now]`` by ``observations`` (oldest first; a second one at the same time as the one before
    it, as two patrols may store, is skipped), else None.

    Args:
        window: the filter's window (positive).
        interval: the patrol's nominal interval between observations (positive).
        min_gpu_utilization / min_cpu_utilization: percent; a reading strictly below is idle.
        gpu_readable / cpu_readable: the adapter reads that signal.

    Returns:
        the decision (its evidence: ``idle_since``, ``window_start``, ``samples``, ``signals``,
        the maxima...), whose ``action`` is ``advise``: the patrol decides what to do.
    """
    history = History(sample_interval=interval, retention=window + 4 * interval)
    for obs in observations:
        if obs.time > now:
            break
        if history.samples and ensure_utc(obs.time) <= history.samples[-1].time:
            continue
        history.add_sample(sample_of(obs, gpu_readable=gpu_readable, cpu_readable=cpu_readable))
    policy = IdlePolicy(IdleConfig(action="advise", time_window=window, min_gpu_utilization=min_gpu_utilization,
                                   min_cpu_utilization=min_cpu_utilization, count_ssh_sessions=False,
                                   exit_window=None))
    return policy.evaluate(history, now)


__all__ = ["idle_over", "sample_of"]
