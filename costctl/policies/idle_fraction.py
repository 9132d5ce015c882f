"""The idle-fraction policy: idle almost all of a longer window, brief spikes allowed.

The idle policy waits for a window with no busy sample at all. A notebook left open on a card
(the kernel holds the model; something wakes the GPU for a few seconds every few minutes) never
gives one: 94.5 % of 4,561 samples of such an H200 under 5 % still left 2 h 23 m of 2 h 32 m
idle and called idle by no window (issue 15). This rule calls a machine idle when it was idle
almost all of a window: the share of the window's time that was busy is at most
``busy_fraction`` — equivalently, the (1 − ``busy_fraction``) time-quantile of each sample's
busiest reading is under the thresholds. Precedent: SageMaker Debugger's ``LowGPUUtilization``
rule (GPU-utilization percentiles over a ``window`` of datapoints, after ``patience``
datapoints); here the window is a time (``time_window``) and no decision is made before one
whole window is covered, which plays the part of ``patience``.

Per sample, every present signal as the idle policy reads it (:func:`.idle.classify_sample`):
ALL GPUs under ``min_gpu_utilization`` (a reading that is missing, None or an error counts as
busy), the CPU (the watched process tree, or every user process when guarding the machine)
under ``min_cpu_utilization`` percent of one core, no SSH session where they are counted
(``[policies.idle] count_ssh_sessions``: the sampler reads them only then), and a Jupyter server
that could be read (``jupyter_status`` ERROR counts as busy). A sample with no present signal is
busy. A sample is busy when any of them is: a GPU spike that comes with a CPU spike is one busy
stretch, and a CPU busy for more than ``busy_fraction`` of the window (a data-loading job whose
GPU idles between bursts) keeps the window busy.

Over the whole window, in conjunction (any one of them makes the window busy):

* **progress**: a progress point (train or eval loss) whose time lies in the window, when a
  progress source exists (``History.progress_source``);
* **Jupyter activity**: a Jupyter server's ``last_activity`` (its own or a kernel's) in the
  window, or a kernel whose ``execution_state`` read busy (or starting, restarting) in a sample
  of the window — a person working in the notebook (:mod:`costctl.telemetry.jupyter`);
* **the busy time**: at most ``busy_fraction`` of the window.

Busy time (exact). A sample's state holds from its time to the next sample's (the newest's to
``now``). Over the window ``[now - W, now]`` the busy time is the sum of those spans of busy
samples, clipped to the window.

Coverage, as the idle policy's: the window counts only when samples cover it — a sample at or
before ``now - W`` (the anchor), no gap over ``2 x`` the sample interval from it on, and a newest
sample at most ``2 x`` the interval old. A gap breaks the window; the count starts again after it.

Episodes: the rule fires at the first evaluation at which the window is idle, and its decision
(key ``idle_fraction:<window start>``) is reported once. The episode lasts until the window has
not been idle at any evaluation for a whole ``time_window`` (work that lasted that long, or a
monitoring gap: the coverage starts again after it); a window that only flickers around
``busy_fraction`` as a spike enters and leaves it stays one episode. The next idle window then
starts a new one.

Default action: ``advise``; ``action = "stop"`` opts in to the stop, which goes through the
executor's verified stop path like the idle policy's (before_stop hook, the job ended, the
instance stopped and confirmed by the provider's status, ``--dry-run`` and ``--advise-only``
honoured). Defaults: a 1 h window (dstack's documented ``utilization_policy`` example uses 1 h),
at most 10 % busy: the scenario suite of ``benchmarks/bench_policies.py`` and the open-notebook
trace of ``tests/test_policies_idle_fraction.py``.

The policy reads samples incrementally (O(1) amortized work per sample: a queue of the window's
samples with a running busy-time sum) and rescans the held window only when it fires.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import ClassVar

from pydantic import Field, SecretStr, field_validator

from ..clock import ensure_utc
from ..config_types import Action, Percent, Window
from ..i18n import N_, _
from ..records import Decision, SignalStatus, TelemetrySample
from .base import Policy, PolicyConfig, PolicyContext, iso, register
from .history import History
from .idle import classify_sample, fmt_duration


class IdleFractionConfig(PolicyConfig):
    """``[policies.idle_fraction]``: idle for all but ``busy_fraction`` of ``time_window`` (brief spikes allowed).

    A sample is busy when a GPU reaches ``min_gpu_utilization``, the CPU reaches
    ``min_cpu_utilization`` (percent of one core), an SSH session is open (when
    ``[policies.idle] count_ssh_sessions``) or a Jupyter server cannot be read; the window is
    busy when more than ``busy_fraction`` of its time was, or a progress point or Jupyter
    activity lies in it. ``jupyter_url``: ``"auto"`` finds local servers through their runtime
    files, ``"off"`` reads none, or one server's base URL; ``jupyter_token`` (else
    ``$JUPYTER_TOKEN``, else the runtime file's token) is sent to it and never shown.
    """

    heading: ClassVar[str] = N_("idle for all but `busy_fraction` of `time_window` (brief spikes allowed).")

    action: Action = Field(default="advise",
                           description=N_("what to do when the window is idle all but busy_fraction: advise | stop"))
    time_window: Window = Field(default=timedelta(hours=1),
                                description=N_("the window the busy fraction is measured over, or \"off\""))
    busy_fraction: float = Field(default=0.1, ge=0.0, lt=0.5,
                                 description=N_("the largest share of the window's time that may be busy"))
    min_gpu_utilization: Percent = Field(default=5.0,
                                         description=N_("percent; a sample is idle when ALL GPUs are below it"))
    min_cpu_utilization: float = Field(default=10.0, ge=0, le=100_000,
                                       description=N_("percent of one core, summed over the watched process tree"))
    jupyter_url: str = Field(default="auto",
                             description=N_("a local Jupyter server's activity is a signal: \"auto\" (its runtime "
                                            "files), \"off\", or its base URL"))
    jupyter_token: SecretStr | None = Field(default=None,
                                            description=N_("the Jupyter API token (default: $JUPYTER_TOKEN, else the "
                                                           "server's runtime file)"))

    @field_validator("jupyter_url")
    @classmethod
    def _url(cls, value: str) -> str:
        text = value.strip()
        if text in ("auto", "off") or text.startswith(("http://", "https://")):
            return text
        raise ValueError(_("jupyter_url {value!r} is not allowed: use \"auto\", \"off\" or an http(s):// base "
                           "URL").format(value=value))


@dataclass(slots=True)
class _Held:
    """One sample of the window queue: its time and whether it was busy."""

    time: datetime
    busy: bool


@register
class IdleFractionPolicy(Policy):
    """Advise (or stop) when the machine was idle all but ``busy_fraction`` of ``time_window``.

    Args:
        config: the ``[policies.idle_fraction]`` section; ``time_window=None`` ("off") never fires.

    Example::

        policy = IdleFractionPolicy(IdleFractionConfig(time_window="1h", busy_fraction=0.1))
        decision = policy.evaluate(history, now)   # Decision(policy="idle_fraction", action="advise", ...)
    """

    name = "idle_fraction"
    snoozable = True  # `costctl snooze` postpones its stop as the idle autostop's (it returns its decision while idle)
    config_model: ClassVar[type[IdleFractionConfig]] = IdleFractionConfig
    order = 11

    def __init__(self, config: IdleFractionConfig) -> None:
        self.config = config
        self.action = config.action
        self._seen = 0
        self._held: deque[_Held] = deque()  # the anchor and every later sample, oldest first
        self._busy_s = 0.0  # busy seconds between consecutive held samples (each held[k] busy for held[k+1]-held[k])
        self._jupyter_at: datetime | None = None  # the newest Jupyter activity seen
        self._made: Decision | None = None  # the current episode's decision
        self._not_idle_since: datetime | None = None  # in an episode: first evaluation since that was not idle

    @classmethod
    def from_config(cls, config: IdleFractionConfig, context: PolicyContext) -> IdleFractionPolicy | None:
        """None when ``time_window`` is off."""
        return cls(config) if config.time_window is not None else None

    def retention(self, sample_interval: timedelta) -> timedelta:
        """The window plus four sample intervals (its evidence rescans the held window)."""
        window = self.config.time_window
        return window + 4 * sample_interval if window is not None else timedelta(0)

    # -- incremental state --------------------------------------------------------------
    def _busy(self, sample: TelemetrySample) -> bool:
        verdict = classify_sample(sample, min_gpu_utilization=self.config.min_gpu_utilization,
                                  min_cpu_utilization=self.config.min_cpu_utilization)
        if sample.jupyter_status not in (SignalStatus.ABSENT, SignalStatus.OK):
            return True  # a Jupyter server runs and cannot be read: a person may be working in it
        if verdict.idle is None:
            return True  # no present signal in this sample
        return not verdict.idle

    def _reset(self) -> None:
        self._held.clear()
        self._busy_s = 0.0

    def _consume(self, history: History, now: datetime) -> None:
        new, missed = history.new_samples(self._seen)
        if missed:
            self._seen += missed  # samples trimmed before we read them: continuity cannot be vouched for
            self._reset()
        limit = 2 * history.sample_interval
        for sample in new:
            if sample.time > now:
                break
            self._seen += 1
            held = self._held
            if held and sample.time - held[-1].time > limit:
                self._reset()  # a gap breaks the window
            if held and held[-1].busy:
                self._busy_s += (sample.time - held[-1].time).total_seconds()
            held.append(_Held(sample.time, self._busy(sample)))
            if sample.jupyter_status is SignalStatus.OK:
                activity = sample.jupyter_last_activity
                if sample.jupyter_busy_kernels:
                    activity = sample.time if activity is None else max(activity, sample.time)
                if activity is not None and (self._jupyter_at is None or activity > self._jupyter_at):
                    self._jupyter_at = ensure_utc(activity)
        window = self.config.time_window
        if window is None:
            return
        start = now - window
        held = self._held
        while len(held) > 1 and held[1].time <= start:  # keep one anchor at or before the window's start
            first = held.popleft()
            if first.busy:
                self._busy_s -= (held[0].time - first.time).total_seconds()

    def busy_seconds(self, history: History, now: datetime) -> float | None:
        """Busy seconds in ``[now - time_window, now]``, or None while the window is not
        covered (no anchor, a gap, a stale newest sample) or the policy is off."""
        now = ensure_utc(now)
        self._consume(history, now)
        window = self.config.time_window
        held = self._held
        if window is None or not held:
            return None
        start = now - window
        anchor, newest = held[0], held[-1]
        if anchor.time > start or now - newest.time > 2 * history.sample_interval or newest.time > now:
            return None
        busy = self._busy_s
        if anchor.busy:
            busy -= (start - anchor.time).total_seconds()
        if newest.busy:
            busy += (now - newest.time).total_seconds()
        return max(0.0, busy)

    def _idle(self, history: History, now: datetime) -> tuple[bool, float | None]:
        """(is the window idle, its busy seconds)."""
        busy = self.busy_seconds(history, now)
        window = self.config.time_window
        if busy is None or window is None:
            return False, busy
        start = now - window
        if history.progress_source and history.last_progress_at is not None and history.last_progress_at >= start:
            return False, busy
        if self._jupyter_at is not None and self._jupyter_at >= start:
            return False, busy
        return busy <= self.config.busy_fraction * window.total_seconds(), busy

    def evaluate(self, history: History, now: datetime) -> Decision | None:
        """The episode's decision while the window ``[now - W, now]`` is idle (see the module
        docstring), else None."""
        now = ensure_utc(now)
        idle, busy = self._idle(history, now)
        window = self.config.time_window
        if window is None:
            return None
        if not idle or busy is None:
            if self._made is not None:
                if self._not_idle_since is None:
                    self._not_idle_since = now
                elif now - self._not_idle_since >= window:
                    self._made = self._not_idle_since = None  # a whole window not idle: the episode is over
            return None
        self._not_idle_since = None
        if self._made is None:
            self._made = self._decision(history, now, now - window, busy)
        return self._made

    def _decision(self, history: History, now: datetime, start: datetime, busy: float) -> Decision:
        window = self.config.time_window
        assert window is not None
        anchor = history.last_sample_at_or_before(start)
        used = history.samples_between(anchor.time if anchor is not None else start, now)
        signals: set[str] = set()
        busy_samples = 0
        max_gpu: float | None = None
        max_cpu: float | None = None
        jupyter_errors = 0
        for sample in used:
            if self._busy(sample):
                busy_samples += 1
            if sample.gpu_status is not SignalStatus.ABSENT:
                signals.add("gpu")
                for gpu in sample.gpus:
                    if gpu.utilization is not None:
                        max_gpu = gpu.utilization if max_gpu is None else max(max_gpu, gpu.utilization)
            if sample.cpu_status is not SignalStatus.ABSENT:
                signals.add("cpu")
                if sample.cpu_percent is not None:
                    max_cpu = sample.cpu_percent if max_cpu is None else max(max_cpu, sample.cpu_percent)
            if sample.ssh_status is not SignalStatus.ABSENT:
                signals.add("ssh")
            if sample.jupyter_status is not SignalStatus.ABSENT:
                signals.add("jupyter")
                jupyter_errors += sample.jupyter_status is not SignalStatus.OK
        if history.progress_source:
            signals.add("progress")
        signal_list = [s for s in ("gpu", "cpu", "ssh", "jupyter", "progress") if s in signals]
        fraction = busy / window.total_seconds()
        evidence = {
            # the bill's waste runs from here to the stop (costctl.ledger.outcomes): the window was
            # idle for all but busy_fraction of it
            "idle_since": iso(start),
            "window_start": iso(start),
            "window_end": iso(now),
            "time_window_s": window.total_seconds(),
            "sample_interval_s": history.sample_interval.total_seconds(),
            "busy_s": round(busy, 3),
            "busy_fraction": round(fraction, 6),
            "max_busy_fraction": self.config.busy_fraction,
            "samples": len(used),
            "busy_samples": busy_samples,
            "signals": signal_list,
            "min_gpu_utilization": self.config.min_gpu_utilization,
            "min_cpu_utilization": self.config.min_cpu_utilization,
            "max_gpu_utilization": max_gpu,
            "max_cpu_percent": max_cpu,
            "last_progress_at": iso(history.last_progress_at) if history.last_progress_at else None,
            "jupyter_last_activity": iso(self._jupyter_at) if self._jupyter_at else None,
            "jupyter_unreadable_samples": jupyter_errors,
            "child_running": history.child_running,
        }
        # the shares carry their "%" (a "% o" in the message would read as a printf conversion)
        reason = _("idle for all but {busy} of the last {window} ({share} of the time busy, at most {allowed} "
                   "allowed), with no progress and no notebook activity in it; signals: {signals}").format(
            busy=fmt_duration(timedelta(seconds=round(busy))), window=fmt_duration(window),
            share=f"{100 * fraction:.1f} %", allowed=f"{100 * self.config.busy_fraction:g} %",
            signals=", ".join(signal_list))
        return Decision(time=now, policy=self.name, action=self.action, reason=reason, evidence=evidence,
                        key=f"{self.name}:{iso(start)}")


__all__ = ["IdleFractionConfig", "IdleFractionPolicy"]
