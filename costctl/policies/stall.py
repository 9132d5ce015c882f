"""The stall policy: the job is alive but no new progress arrived for ``stall_window``.

This is the hung-NCCL case, where GPU utilization can even read 100 % while nothing moves, so
the stall policy looks at progress alone. It needs progress to have been seen once (a job that
never printed a loss is not "stalled", its format may just be unknown) and the child to be
running (``History.child_running is True``); after the child exits the idle policy takes over.

Fires when ``now - last_progress_at >= stall_window``; the key is ``stall:<last progress time>``
so each silent stretch fires once.

**The hung-job stop** (``stop_after``, on by default): the advice above is only advice,
because a job may legitimately be quiet for a while (a long evaluation, a checkpoint save).
A job is *hung* — and stopped, as any stop: hook, job end, instance stop, confirmed — only
when all of these hold:

* it reported progress at least ``min_reports`` times (its cadence is known);
* it has been silent for ``max(stop_after, cadence_factor × the longest gap between two of
  its reports so far)`` (a job that logs once per 40-minute epoch gets 160 minutes);
* it wrote **no output at all** for that long either, when the watch sees its output (an
  evaluation progress bar, a warning, anything, is a sign of life).

``stop_after = "off"`` keeps the stall policy advice-only. The defaults (2 h, 4×, 10 reports)
are costctl's own: the hung-job scenario of ``benchmarks/bench_policies.py`` and the jobs that
are quiet for a while (long setup, long evaluation) of its suite; no peer has a hung-job rule.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import ClassVar

from pydantic import Field

from ..clock import ensure_utc
from ..config_types import Action, Window
from ..i18n import N_, _
from ..records import Decision
from .base import Pending, Policy, PolicyConfig, PolicyContext, iso, progress_texts, register
from .history import History, finite_or_text
from .idle import fmt_duration, fmt_span


class StallConfig(PolicyConfig):
    """``[policies.stall]``: the job is alive but reported no progress for ``stall_window``."""

    heading: ClassVar[str] = N_("the job is alive but reported no progress for `stall_window`.")

    action: Action = Field(default="advise", description=N_("what to do when the job stalls: advise | stop"))
    stall_window: Window = Field(default=timedelta(minutes=30),
                                 description=N_("how long without new progress counts as a stall, or \"off\""))
    stop_after: Window = Field(
        default=timedelta(hours=2),
        description=N_("stop a hung job: silent (no progress, no output) for this long and for cadence_factor x "
                       "its longest gap between reports, after min_reports reports; \"off\": advise only"))
    cadence_factor: float = Field(default=4.0, ge=1.0, le=100.0,
                                  description=N_("the hung-job stop waits this many times the job's longest gap "
                                                 "between two progress reports (when longer than stop_after)"))
    min_reports: int = Field(default=10, ge=2, le=100_000,
                             description=N_("progress reports needed before the hung-job stop can fire"))


@register
class StallPolicy(Policy):
    """Advise (or stop) when a running job stopped reporting progress (``[policies.stall]``).

    Args:
        config: the ``[policies.stall]`` section; ``stall_window=None`` ("off") never fires.
    """

    name = "stall"
    config_model: ClassVar[type[StallConfig]] = StallConfig
    order = 20

    def __init__(self, config: StallConfig) -> None:
        self.config = config
        self.action = config.action

    @classmethod
    def from_config(cls, config: StallConfig, context: PolicyContext) -> StallPolicy | None:
        """None when both ``stall_window`` and ``stop_after`` are off."""
        return cls(config) if config.stall_window is not None or config.stop_after is not None else None

    def hung_at(self, history: History) -> datetime | None:
        """When the running job counts as hung if it stays silent (see the module docstring),
        or None: no stop_after, too few reports, or the job is not running."""
        cfg = self.config
        last_at = history.last_progress_at
        if (cfg.stop_after is None or history.child_running is not True or last_at is None
                or history.progress_reports < cfg.min_reports):
            return None
        wait = max(cfg.stop_after, history.longest_progress_gap * cfg.cadence_factor)
        start = last_at
        if history.last_output_at is not None and history.last_output_at > start:
            start = history.last_output_at
        return start + wait

    def pending(self, history: History, now: datetime) -> Pending | None:
        """Once the running job has been silent for half of ``stall_window`` (sooner it is just
        between two log lines): it fires at its last progress + ``stall_window``. Text
        ``"no progress for 16m of 30m"``. Past that, while a hung-job stop is due (and at least
        half of its wait is over), the stop's countdown: ``"silent for 1h10m of 2h (hung job)"``."""
        now = ensure_utc(now)
        window = self.config.stall_window
        last_at = history.last_progress_at
        if history.child_running is not True or last_at is None or last_at > now:
            return None
        if window is not None:
            at = last_at + window
            if now - last_at < window / 2:
                return None
            if at > now:
                return Pending(policy=self.name, action=self.action, at=at,
                               **progress_texts(N_("no progress for {elapsed} of {window}"),
                                                elapsed=fmt_span(now - last_at), window=fmt_span(window)))
        hung = self.hung_at(history)
        if hung is None or hung <= now:
            return None
        start = max(last_at, history.last_output_at or last_at)
        if now - start < (hung - start) / 2:
            return None
        return Pending(policy=self.name, action="stop", at=hung,
                       **progress_texts(N_("silent for {elapsed} of {wait} (hung job)"),
                                        elapsed=fmt_span(now - start), wait=fmt_span(hung - start)))

    def due_at(self, history: History, now: datetime) -> datetime | None:
        """The next of the stall advice's deadline (last progress + ``stall_window``) and the
        hung-job stop's (:meth:`hung_at`) after ``now``, while the job runs; None otherwise."""
        last_at = history.last_progress_at
        if history.child_running is not True or last_at is None:
            return None
        now = ensure_utc(now)
        found = [at for at in (last_at + self.config.stall_window if self.config.stall_window is not None else None,
                               self.hung_at(history)) if at is not None and at > now]
        return min(found, default=None)

    def evaluate(self, history: History, now: datetime) -> Decision | None:
        """A stop when the running job is hung (:meth:`hung_at` reached), else a decision
        (``action``) when its last progress is ``stall_window`` old or older."""
        now = ensure_utc(now)
        window = self.config.stall_window
        last_at = history.last_progress_at
        if history.child_running is not True or last_at is None:
            return None
        hung = self.hung_at(history)
        if hung is not None and now >= hung:
            return self._hung_stop(history, now, hung)
        if window is None:
            return None
        silent = now - last_at
        if silent < window:
            return None
        last = history.last_progress()
        evidence = {
            "last_progress_at": iso(last_at),
            "silent_for_s": silent.total_seconds(),
            "stall_window_s": window.total_seconds(),
            "last_value": finite_or_text(last.value) if last is not None else None,
            "last_kind": last.kind if last is not None else None,
            "last_step": last.step if last is not None else None,
            "last_epoch": last.epoch if last is not None else None,
        }
        reason = _("no new progress for {silent} (stall_window {window}) while the job is still running; last "
                   "progress at {last}").format(silent=fmt_duration(silent), window=fmt_duration(window),
                                                 last=self.shown_time(last_at))
        return Decision(time=now, policy=self.name, action=self.action, reason=reason,
                        evidence=evidence, key=f"stall:{iso(last_at)}")

    def _hung_stop(self, history: History, now: datetime, hung: datetime) -> Decision:
        cfg = self.config
        last_at = history.last_progress_at
        assert last_at is not None and cfg.stop_after is not None
        start = max(last_at, history.last_output_at or last_at)
        last = history.last_progress()
        evidence = {
            "last_progress_at": iso(last_at),
            "last_output_at": iso(history.last_output_at) if history.last_output_at else None,
            "silent_for_s": (now - start).total_seconds(),
            "wait_s": (hung - start).total_seconds(),
            "stop_after_s": cfg.stop_after.total_seconds(),
            "longest_gap_s": history.longest_progress_gap.total_seconds(),
            "cadence_factor": cfg.cadence_factor,
            "reports": history.progress_reports,
            "last_value": finite_or_text(last.value) if last is not None else None,
            "last_step": last.step if last is not None else None,
        }
        if history.last_output_at is not None:
            hung_text = _("the job looks hung: no progress and no output at all for {silent} (max of stop_after "
                          "{stop_after} and {factor:g}x its longest gap between reports, {gap}, over {reports} "
                          "reports) while it is still running; last progress at {last}")
        else:
            hung_text = _("the job looks hung: no progress (its output is not watched) for {silent} (max of "
                          "stop_after {stop_after} and {factor:g}x its longest gap between reports, {gap}, over "
                          "{reports} reports) while it is still running; last progress at {last}")
        reason = hung_text.format(silent=fmt_duration(now - start), stop_after=fmt_duration(cfg.stop_after),
                                  factor=cfg.cadence_factor, gap=_gap_text(history.longest_progress_gap),
                                  reports=history.progress_reports, last=self.shown_time(last_at))
        return Decision(time=now, policy=self.name, action="stop", reason=reason,
                        evidence=evidence, key=f"stall-stop:{iso(last_at)}")


def _gap_text(gap: timedelta) -> str:
    """A gap between reports as text: ``fmt_duration`` from a second up, ``"0.5s"`` below."""
    seconds = gap.total_seconds()
    return fmt_duration(gap) if seconds >= 1 else f"{seconds:.2g}s"


__all__ = ["StallConfig", "StallPolicy"]
