"""The idle policy (autostop): every present signal stayed idle over a whole ``time_window``.

Signals (DESIGN.md "Standard terms"; names from dstack's ``utilization_policy``):

* ``gpu`` — present unless ``gpu_status`` is ABSENT. Idle only when EVERY GPU's utilization
  is below ``min_gpu_utilization`` (unlike dstack, where ANY idle GPU stops the run). A GPU
  reading with ``utilization`` None or an ``error``, a status UNKNOWN/ERROR, or an OK status
  with no readings counts as busy: a metric we cannot read never counts as idle.
* ``cpu`` — present unless ``cpu_status`` is ABSENT; idle when ``cpu_percent`` (percent of one
  core, summed over the watched tree) is below ``min_cpu_utilization``; None/UNKNOWN/ERROR = busy.
* ``ssh`` — present unless ``ssh_status`` is ABSENT; idle when ``ssh_sessions == 0``.
* ``progress`` — a signal only when ``History.progress_source`` is True; a progress point (train
  or eval) whose time lies in the window makes the window busy. Points without a time take no
  part. After the child exits its tree reads idle and it sends no progress, so the instance
  can still be autostopped (``--on-exit guard``).

With no present signal at all, idle never fires: a sample that carries no present signal
counts as busy unless progress is a signal.

Window coverage rule (exact). At evaluation time ``now`` with window ``W`` and nominal sample
interval ``i``, looking only at samples with ``time <= now``, the window ``[now - W, now]`` is
idle when all of these hold:

1. there is an *anchor*: a sample with ``time <= now - W`` (so monitoring began at least W ago);
2. the anchor and every later sample are idle (per the signals above);
3. consecutive samples from the anchor on are at most ``2 * i`` apart;
4. the newest sample is at most ``2 * i`` older than ``now``;
5. when progress is a signal, no progress point has ``now - W <= time <= now``.

Equivalently: an *idle stretch* starts at its first idle sample (after a busy sample, a gap
over ``2 * i``, or the start) — or at the last progress point when that is later — and the
policy fires at the first evaluation at which the stretch has lasted ``W``. The decision key is
``idle:<stretch start>``, so one stretch fires once however often it is evaluated.

After the watched command exited (``History.child_running`` False with ``child_exited_at``
set) the exit is strong evidence that the work is done, so the window is ``exit_window`` (when
shorter than ``time_window``) and the stretch counts from the exit at the earliest: the policy
fires once every present signal stayed idle for ``exit_window`` since ``max(stretch start,
exit)``. A job that is restarted (OOM retry) is running again and gets ``time_window`` back.
The same ``exit_window`` applies when no command is watched (``costctl watch`` guarding the
machine, ``child_running`` None) to a stretch that began as the last SSH session closed while
every other signal was already idle (the sample before it was busy only because of SSH): the
user logged off an idle machine (a notebook left open). SSH sessions must be counted for that.

The policy reads samples incrementally (O(1) work per new sample) and rescans the held window
only when it fires, to gather the evidence.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import ClassVar

from ..clock import ensure_utc
from pydantic import Field

from ..i18n import N_, _
from ..config_types import Action, Percent, Window
from ..records import Decision, SignalStatus, TelemetrySample
from .base import Pending, Policy, PolicyConfig, PolicyContext, iso, progress_texts, register
from .history import History


class IdleConfig(PolicyConfig):
    """``[policies.idle]``: autostop when every present signal stayed idle for ``time_window``.

    Names follow dstack's ``utilization_policy`` (``min_gpu_utilization``, ``time_window``),
    but costctl requires ALL GPUs to be idle (dstack stops when ANY GPU is).
    ``min_cpu_utilization`` is percent of one core, summed over the watched process tree.

    Defaults (measured with ``benchmarks/bench_policies.py``): ``time_window`` 30 min while a
    job runs or the machine is guarded; ``exit_window`` 2 min once the watched command has
    exited, or when guarding the machine the last SSH session closed on an idle machine (strong
    evidence that the work is done; SkyPilot waits 5 min with no job and no SSH); SSH sessions are
    counted (as SkyPilot does): a user logged in over SSH (a notebook over a lunch break) is not
    stopped under — the trade-off is that a session left connected keeps the instance up.
    """

    heading: ClassVar[str] = N_("autostop when every present signal stayed idle for `time_window`.")

    action: Action = Field(default="stop", description=N_("what to do when the instance is idle: advise | stop"))
    time_window: Window = Field(default=timedelta(minutes=30),
                                description=N_("how long every present signal must stay idle, or \"off\""))
    min_gpu_utilization: Percent = Field(default=5.0, description=N_("percent; ALL GPUs must stay below it"))
    min_cpu_utilization: float = Field(default=10.0, ge=0, le=100_000,
                                       description=N_("percent of one core, summed over the watched process tree"))
    count_ssh_sessions: bool = Field(default=True, description=N_("an open SSH session keeps the instance busy"))
    exit_window: Window = Field(default=timedelta(minutes=2),
                                description=N_("after the watched command exited (or, guarding the machine, the last "
                                               "SSH session closed on an idle machine): how long every present signal "
                                               "must stay idle, or \"off\" (time_window then)"))


@dataclass(frozen=True, slots=True)
class SampleVerdict:
    """How one telemetry sample reads for the idle policy.

    Attributes:
        idle: True when every present signal is idle, False when one is busy, None when the
            sample carries no present signal at all.
        signals: the present signals, from ``("gpu", "cpu", "ssh")``.
        busy: which present signals were busy (``"gpu0"``... per GPU, ``"gpu"`` for the
            source as a whole, ``"cpu"``, ``"ssh"``).
    """

    idle: bool | None
    signals: tuple[str, ...]
    busy: tuple[str, ...]


def classify_sample(sample: TelemetrySample, *, min_gpu_utilization: float,
                    min_cpu_utilization: float) -> SampleVerdict:
    """Classify one sample's present signals as idle or busy (see the module docstring).

    Args:
        min_gpu_utilization: percent (0-100); a GPU is idle when strictly below it.
        min_cpu_utilization: percent of one core; the CPU is idle when strictly below it.
    """
    signals: list[str] = []
    busy: list[str] = []
    if sample.gpu_status is not SignalStatus.ABSENT:
        signals.append("gpu")
        if sample.gpu_status is not SignalStatus.OK or not sample.gpus:
            busy.append("gpu")
        else:
            for gpu in sample.gpus:
                if gpu.error is not None or gpu.utilization is None or gpu.utilization >= min_gpu_utilization:
                    busy.append(f"gpu{gpu.index}")
    if sample.cpu_status is not SignalStatus.ABSENT:
        signals.append("cpu")
        if (sample.cpu_status is not SignalStatus.OK or sample.cpu_percent is None
                or sample.cpu_percent >= min_cpu_utilization):
            busy.append("cpu")
    if sample.ssh_status is not SignalStatus.ABSENT:
        signals.append("ssh")
        if sample.ssh_status is not SignalStatus.OK or sample.ssh_sessions is None or sample.ssh_sessions != 0:
            busy.append("ssh")
    idle = None if not signals else not busy
    return SampleVerdict(idle=idle, signals=tuple(signals), busy=tuple(busy))


def fmt_duration(td: timedelta) -> str:
    """``1h30m``-style text for a duration (whole seconds)."""
    secs = int(td.total_seconds())
    h, rest = divmod(secs, 3600)
    m, s = divmod(rest, 60)
    parts = [f"{h}h"] if h else []
    if m:
        parts.append(f"{m}m")
    if s or not parts:
        parts.append(f"{s}s")
    return "".join(parts)


def fmt_span(td: timedelta) -> str:
    """A countdown's coarse duration: whole minutes from one minute on (``25m``, ``1h5m``),
    whole seconds below it (``42s``); a negative span reads ``0s``."""
    secs = max(0, int(td.total_seconds()))
    return fmt_duration(timedelta(seconds=secs - secs % 60 if secs >= 60 else secs))


#: The idle decision's reason, by (why the window is ``exit_window``: False, ``"exited"`` or
#: ``"logoff"``; whether the signals' details follow).
_IDLE_REASONS = {
    (False, False): N_("idle for {window} since {since}: every present signal ({signals}) stayed idle"),
    (False, True): N_("idle for {window} since {since}: every present signal ({signals}) stayed idle — {detail}"),
    ("exited", False): N_("idle for {window} since {since} (exit_window: the command exited at {exited}): every "
                          "present signal ({signals}) stayed idle"),
    ("exited", True): N_("idle for {window} since {since} (exit_window: the command exited at {exited}): every "
                         "present signal ({signals}) stayed idle — {detail}"),
    ("logoff", False): N_("idle for {window} since {since} (exit_window: the last SSH session closed): every present "
                          "signal ({signals}) stayed idle"),
    ("logoff", True): N_("idle for {window} since {since} (exit_window: the last SSH session closed): every present "
                         "signal ({signals}) stayed idle — {detail}"),
}


@register
class IdlePolicy(Policy):
    """Autostop when every present signal stayed idle for ``time_window`` (``[policies.idle]``).

    Args:
        config: the ``[policies.idle]`` section; ``time_window=None`` ("off") never fires.

    Example::

        policy = IdlePolicy(IdleConfig(time_window="30m", min_gpu_utilization=5))
        decision = policy.evaluate(history, now)   # Decision(policy="idle", action="stop", ...)
    """

    name = "idle"
    config_model: ClassVar[type[IdleConfig]] = IdleConfig
    order = 10
    snoozable = True  # `costctl snooze` postpones an idle autostop

    def __init__(self, config: IdleConfig) -> None:
        self.config = config
        self.action = config.action
        self._seen = 0
        self._run_start: datetime | None = None
        self._last_time: datetime | None = None
        self._ssh_only = False  # the newest sample was busy only because of an SSH session
        self._logoff = False  # the current stretch began as the last SSH session closed
        # the decision of the current stretch, once made: its key (idle:<since>) is reported
        # once, so later evaluations of the same stretch return it as it is instead of
        # rebuilding its evidence from the whole window every sample (the engine drops it)
        self._made: Decision | None = None
        self._made_since: datetime | None = None

    @classmethod
    def from_config(cls, config: IdleConfig, context: PolicyContext) -> IdlePolicy | None:
        """None when ``time_window`` is off."""
        return cls(config) if config.time_window is not None else None

    def retention(self, sample_interval: timedelta) -> timedelta:
        """The window plus four sample intervals (the anchor lies at most 2 intervals before it)."""
        window = self.config.time_window
        return window + 4 * sample_interval if window is not None else timedelta(0)

    # -- incremental state --------------------------------------------------------------
    def _consume(self, history: History, now: datetime) -> None:
        new, missed = history.new_samples(self._seen)
        if missed:
            # Samples were trimmed before we read them: continuity cannot be vouched for.
            self._seen += missed
            self._run_start = None
            self._last_time = None
        limit = 2 * history.sample_interval
        for sample in new:
            if sample.time > now:
                break
            self._seen += 1
            verdict = classify_sample(sample, min_gpu_utilization=self.config.min_gpu_utilization,
                                      min_cpu_utilization=self.config.min_cpu_utilization)
            idle = verdict.idle is True or (verdict.idle is None and history.progress_source)
            if not idle:
                self._run_start = None
                self._ssh_only = verdict.busy == ("ssh",)
            else:
                if self._run_start is None or self._last_time is None or sample.time - self._last_time > limit:
                    self._logoff = (self._ssh_only and self._last_time is not None
                                    and sample.time - self._last_time <= limit)
                    self._run_start = sample.time
                self._ssh_only = False
            self._last_time = sample.time

    def idle_since(self, history: History, now: datetime) -> datetime | None:
        """Start of the current idle stretch at ``now`` (None when the newest state is busy,
        stale or uncovered), whether or not it has lasted a whole window yet."""
        now = ensure_utc(now)
        self._consume(history, now)
        if self._run_start is None or self._last_time is None:
            return None
        if now - self._last_time > 2 * history.sample_interval:
            return None
        start = self._run_start
        if history.progress_source and history.last_progress_at is not None:
            if history.last_progress_at > now:
                return None
            if history.last_progress_at > start:
                start = history.last_progress_at
        return start

    def _window(self, history: History, since: datetime) -> tuple[timedelta | None, datetime]:
        """The window in force and where it counts from: ``exit_window`` from ``max(since,
        exit)`` once the watched command exited, or from ``since`` when guarding the machine and
        the stretch began at a logoff (when shorter); else ``time_window`` from ``since``."""
        window = self.config.time_window
        exit_window = self.config.exit_window
        exited = history.child_exited_at
        if window is None or exit_window is None or exit_window >= window:
            return window, since
        if history.child_running is False and exited is not None:
            return exit_window, max(since, ensure_utc(exited))
        if history.child_running is None and self._logoff and since == self._run_start:
            return exit_window, since  # guarding the machine: the last SSH session closed on an idle machine
        return window, since

    def pending(self, history: History, now: datetime) -> Pending | None:
        """While an idle stretch runs: it fires at its start + ``time_window`` (or the exit +
        ``exit_window``; O(1): the stretch is tracked incrementally). Text ``"idle 25m of 30m"``."""
        now = ensure_utc(now)
        since = self.idle_since(history, now)
        if since is None:
            return None
        window, counted_from = self._window(history, since)
        if window is None or counted_from + window <= now:
            return None
        return Pending(policy=self.name, action=self.action, at=counted_from + window,
                       **progress_texts(N_("idle {elapsed} of {window}"), elapsed=fmt_span(now - counted_from),
                                        window=fmt_span(window)))

    def evaluate(self, history: History, now: datetime) -> Decision | None:
        """A ``stop`` (or ``advise``) decision when the window ``[now - W, now]`` is idle."""
        now = ensure_utc(now)
        since = self.idle_since(history, now)
        if since is None:
            return None
        window, counted_from = self._window(history, since)
        if window is None:
            return None
        window_start = now - window
        assert self._run_start is not None
        if self._run_start > window_start or counted_from > window_start:
            return None  # no idle anchor at or before the window's start (or the exit is too recent)
        last_progress = history.last_progress_at if history.progress_source else None
        if last_progress is not None and last_progress >= window_start:
            return None  # progress inside the window
        if self._made is not None and self._made_since == since:
            return self._made  # same stretch, same key: already reported (see __init__)
        self._made = self._decision(history, now, since, window)
        self._made_since = since
        return self._made

    def _decision(self, history: History, now: datetime, since: datetime, window: timedelta) -> Decision:
        window_start = now - window
        anchor = history.last_sample_at_or_before(window_start)
        first = anchor.time if anchor is not None else window_start
        used = history.samples_between(first, now)
        signals: set[str] = set()
        max_gpu: dict[str, float] = {}
        max_cpu: float | None = None
        max_ssh: int | None = None
        for sample in used:
            if sample.gpu_status is not SignalStatus.ABSENT:
                signals.add("gpu")
                for gpu in sample.gpus:
                    if gpu.utilization is not None:
                        key = str(gpu.index)
                        max_gpu[key] = max(max_gpu.get(key, gpu.utilization), gpu.utilization)
            if sample.cpu_status is not SignalStatus.ABSENT:
                signals.add("cpu")
                if sample.cpu_percent is not None:
                    max_cpu = sample.cpu_percent if max_cpu is None else max(max_cpu, sample.cpu_percent)
            if sample.ssh_status is not SignalStatus.ABSENT:
                signals.add("ssh")
                if sample.ssh_sessions is not None:
                    max_ssh = sample.ssh_sessions if max_ssh is None else max(max_ssh, sample.ssh_sessions)
        if history.progress_source:
            signals.add("progress")
        order = ["gpu", "cpu", "ssh", "progress"]
        signal_list = [s for s in order if s in signals]
        evidence = {
            "idle_since": iso(since),
            "window_start": iso(window_start),
            "window_end": iso(now),
            "time_window_s": window.total_seconds(),
            "sample_interval_s": history.sample_interval.total_seconds(),
            "anchor_sample": iso(anchor.time) if anchor is not None else None,
            "samples": len(used),
            "signals": signal_list,
            "min_gpu_utilization": self.config.min_gpu_utilization,
            "min_cpu_utilization": self.config.min_cpu_utilization,
            "max_gpu_utilization": dict(sorted(max_gpu.items(), key=lambda kv: int(kv[0]))),
            "max_cpu_percent": max_cpu,
            "max_ssh_sessions": max_ssh,
            "last_progress_at": iso(history.last_progress_at) if history.last_progress_at else None,
            "child_running": history.child_running,
            "child_exited_at": iso(history.child_exited_at) if history.child_exited_at else None,
            "exit_window": window != self.config.time_window,
        }
        parts = []  # what each present signal showed: one whole clause each
        # measured percentages shown to 1 decimal at most (2.85275 -> 2.9, 0.0 -> 0); the
        # evidence keeps the exact values
        if max_gpu:
            parts.append(_("max GPU utilization {max:g} % (< {min:g} %)").format(
                max=round(max(max_gpu.values()), 1), min=self.config.min_gpu_utilization))
        if max_cpu is not None:
            parts.append(_("max CPU {max:g} % (< {min:g} %)").format(max=round(max_cpu, 1),
                                                                       min=self.config.min_cpu_utilization))
        if max_ssh is not None:
            parts.append(_("no SSH session"))
        if "progress" in signals:
            parts.append(_("no new progress"))
        shape = {"window": fmt_duration(window), "since": self.shown_time(since), "signals": ", ".join(signal_list),
                 "detail": _("; ").join(parts),
                 "exited": self.shown_time(history.child_exited_at) if history.child_exited_at else None}
        reason = _(_IDLE_REASONS[(window != self.config.time_window and (
            "exited" if history.child_exited_at else "logoff"), bool(parts))]).format(**shape)
        return Decision(time=now, policy=self.name, action=self.action, reason=reason,
                        evidence=evidence, key=f"idle:{iso(since)}")


__all__ = ["IdleConfig", "IdlePolicy", "SampleVerdict", "classify_sample", "fmt_duration", "fmt_span"]
