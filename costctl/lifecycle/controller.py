"""The lifecycle controller: checkpoint requests, preemption, periodic checkpoints, downsizing
and OOM retries for one watch.

The watcher owns the child process, the ledger run and the executor, and hands them to
:class:`Lifecycle` as the small interfaces of :mod:`costctl.protocols`; :class:`Lifecycle` decides and sequences the multi-step actions, each step a recorded decision:

* **Preemption notice** (:meth:`Lifecycle.on_notice`): request a checkpoint at once with a
  deadline ``[preemption] margin + [watch] grace_period`` before the notice's; when it is saved
  (or the request times out, or the job exits) end the job and stop the instance through the
  executor — before the provider's deadline — and record as *waste* the paid time from the
  last checkpoint (or the run's start) to the stop. A spot instance taken without notice
  (:meth:`Lifecycle.check_preempted`, the provider reports it after the fact) ends the same
  way, its waste running to the provider's preemption time.
* **Periodic checkpoints** on spot/interruptible instances (``[checkpoint] periodic``): a
  request every Young/Daly interval (:mod:`.periodic`) after the last checkpoint. The MTBF is
  ``(configured mtbf + spot seconds charged in the ledger) / (1 + preemptions recorded)``: the
  configured figure counts as one prior observation, so a first preemption does not swing it.
* **Downsize** (plateau decision with action ``downsize``, via the executor): size the cards
  (:mod:`.sizing`); if the best fitting one saves at least ``[downsize] min_saving_per_hour``,
  on the simulated provider request a checkpoint, end the job, rent the target, stop this
  instance and resume the command there from the checkpoint (a new ledger run on the new
  instance); on real providers — where the job cannot be moved to another machine from
  here — advise with the saving per hour and the resume command.
* **OOM** (:meth:`Lifecycle.child_exited`): a job that died of CUDA out of memory is restarted
  with the batch halved and accumulation doubled (``--on-oom retry``), else the advice with
  the numbers is printed and recorded. A halved batch that fails on the same allocation
  (:mod:`.oom_compare`) stops the retries: the memory does not depend on the batch.
"""

from __future__ import annotations

import shlex
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..checkpoint import (
    CheckpointAttempt,
    CheckpointRequester,
    Outcome,
    ephemeral_storage_warning,
    newest_intact_checkpoint,
    resolve_pattern,
    under_pattern,
)
from ..clock import Clock
from ..config import Settings
from ..errors import CostctlError
from ..catalog import normalize_gpu_name
from ..i18n import N_, _, format_amount, format_time
from ..money import Money
from ..protocols import DecisionLog, InstanceControl, JobControl, LifecycleLedger, RunControl, Stopper
from ..records import Action, Decision
from ..summary import RunSummary
from ..checkpoint_integrity import check_checkpoint
from .oom_compare import Attempt, compare_attempts
from .own_saves import SaveReport, SavesFollower
from .oom_retry import BatchPlan, OomScanner, advice, fixed_memory_advice
from .periodic import PeriodicSchedule
from .sizing import CardOption, PriceOption, best_fit, options_from_offers, options_from_price_table, rank_cards

if TYPE_CHECKING:
    from costctl_providers.notices import Notice



def _money(amount: Decimal | None, currency: str) -> str:
    """``amount`` in ``currency`` as the current language writes money
    (:func:`costctl.i18n.format_amount`: ``$0.0123``, ``¥1,008.00``); ``?`` for None."""
    return "?" if amount is None else format_amount(amount, currency)


#: Why a checkpoint is requested (the ledger's word, :meth:`Lifecycle.request_checkpoint`'s
#: ``reason``) as said to people; another reason is said as it is.
CHECKPOINT_REASONS = {"periodic": N_("periodic"), "preemption": N_("preemption"), "downsize": N_("downsize")}
#: A checkpoint request's outcome (the ledger's word, :class:`~costctl.checkpoint.Outcome`) as said to people.
OUTCOME_WORDS = {"saved": N_("saved"), "acknowledged": N_("acknowledged"), "timed-out": N_("timed-out"),
                 "job-exited": N_("job-exited"), "failed": N_("failed"), "unknown": N_("unknown")}
#: A checkpoint request's end, by (its save time known, its checkpoint known).
_REQUEST_ENDED = {
    (False, False): N_("checkpoint request ({reason}) {outcome}"),
    (True, False): N_("checkpoint request ({reason}) {outcome} in {seconds:.1f}s"),
    (False, True): N_("checkpoint request ({reason}) {outcome}: {path}"),
    (True, True): N_("checkpoint request ({reason}) {outcome} in {seconds:.1f}s: {path}"),
}
#: A save the job reported on its own, said, by (its step known, its duration known).
_OWN_SAVE_SAID = {
    (False, False): N_("costctl: checkpoint saved by the job on its own: {path}; a preemption now loses only the "
                       "work since it (said at most every 10 minutes)"),
    (True, False): N_("costctl: checkpoint saved by the job on its own: {path} (step {step}); a preemption now loses "
                      "only the work since it (said at most every 10 minutes)"),
    (False, True): N_("costctl: checkpoint saved by the job on its own: {path}, the save took {seconds:.1f}s; a "
                      "preemption now loses only the work since it (said at most every 10 minutes)"),
    (True, True): N_("costctl: checkpoint saved by the job on its own: {path} (step {step}), the save took "
                     "{seconds:.1f}s; a preemption now loses only the work since it (said at most every 10 minutes)"),
}
#: A preemption's lost work (the waste row's detail), by (a checkpoint known, the watch stopped the instance).
_WASTE_DETAIL = {
    (True, True): N_("work since the last checkpoint ({start}) lost at the stop ({end})"),
    (True, False): N_("work since the last checkpoint ({start}) lost at the preemption ({end})"),
    (False, True): N_("work since the start of the run ({start}) lost at the stop ({end})"),
    (False, False): N_("work since the start of the run ({start}) lost at the preemption ({end})"),
}

#: How many checkpoint times a watch keeps (the newest), for a preemption's restart point.
SAVE_TIMES_KEPT = 64
#: Seconds between two lines saying a save the job reported on its own (the first is said at once).
REPORTED_SAY_EVERY_S = 600.0


def _size_bytes(path: Path) -> int | None:
    """Bytes of checkpoint ``path`` (a file, or a directory's files), or None when unreadable."""
    try:
        if not path.is_dir():
            return path.stat().st_size
        return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    except OSError:
        return None


class Lifecycle:
    """Lifecycle actions of one watch (see the module docstring).

    It acts only through the interfaces of :mod:`costctl.protocols`; the watcher wires them.

    Args:
        settings: validated configuration (``[checkpoint]``, ``[preemption]``, ``[downsize]``...).
        clock: time source.
        run: the watch's run (where the job runs, stopping, moving).
        job: the watched command.
        instances: the provider adapter.
        log: records every decision (the decision recorder).
        stopper: the executor (a preemption ends like a policy stop).
        ledger: checkpoint and waste rows.
        summary: the watch's running figures (peak memory, utilization; waste is added to it).
        say: prints one of costctl's own lines.
        request_path: the job's ``$COSTCTL_CHECKPOINT_REQUEST`` file.
        command: the watched argv (for the resume command in advice); None guards the machine.
        dry_run: move nothing, record what would happen.
        started_wall: the watch's start, in wall-clock seconds (checkpoints older than it are
            not resume points).
        on_oom: ``"retry"`` or ``"advise"``.
        mtbf_s / mtbf_source: mean time between preemptions for the periodic interval, and where
            it comes from (English, for the evidence: ``"configured"``, or what was observed).
        mtbf_shown: ``mtbf_source`` as said to people, in the current language (default: its
            translation).
        earlier_saves_s / earlier_saves_source: save durations (seconds) the earlier runs of this
            run's chain measured, and where they were read (the periodic cost starts from them).
    """

    def __init__(self, settings: Settings, *, clock: Clock, run: RunControl, job: JobControl,
                 instances: InstanceControl, log: DecisionLog, stopper: Stopper, ledger: LifecycleLedger,
                 summary: RunSummary, say: Callable[[str], None], request_path: Path,
                 command: Sequence[str] | None = None, dry_run: bool = False, started_wall: float = 0.0,
                 on_oom: str = "advise", mtbf_s: float | None = None, mtbf_source: str = "configured",
                 earlier_saves_s: Sequence[float] = (), earlier_saves_source: str = "ledger",
                 saves_path: Path | None = None, mtbf_shown: str | None = None) -> None:
        s = settings
        self._mtbf_shown = mtbf_shown if mtbf_shown is not None else _(mtbf_source)
        self.tz = s.watch.tz  # times are said in [watch] timezone
        self.settings = s
        self.clock = clock
        self.run = run
        self.job = job
        self.instances = instances
        self.log = log
        self.stopper = stopper
        self.ledger = ledger
        self.summary = summary
        self.say = say
        self.command = list(command) if command else None
        self.dry_run = dry_run
        self.started_wall = started_wall
        self.pattern = resolve_pattern(s.checkpoint.path) if s.checkpoint.path else None
        self.requester = CheckpointRequester(request_path, self.pattern, clock, signal=s.checkpoint.signal,
                                             job_pid=lambda: job.pid)
        self.on_oom = on_oom
        self.oom = OomScanner()
        self.oom_retries = 0
        self._oom_attempt: Attempt | None = None  # the batch and OOM event the last retry answered
        self._then: list[Callable[[CheckpointAttempt], None]] = []
        self.last_checkpoint_at: datetime | None = None
        #: the times (watch clock) of the newest checkpoints known, requested, on disk or
        #: reported: a preemption's waste runs from the newest one before the instance was taken
        self._save_times: deque[datetime] = deque(maxlen=SAVE_TIMES_KEPT)
        self.checkpoints: list[CheckpointAttempt] = []
        self.preempted = False
        self._notice_keys: set[str] = set()
        #: the card a downsize is moving the job to while its checkpoint request is pending: later
        #: plateau decisions advise only (one move at a time, planned from the card the job is on)
        self._moving_to: str | None = None
        self.periodic: PeriodicSchedule | None = None
        periodic = s.checkpoint.periodic
        if periodic == "on" or (periodic == "auto" and run.state.billing == "spot"):
            self.periodic = PeriodicSchedule(
                save_time_s=s.checkpoint.save_time.total_seconds(),
                mtbf_s=mtbf_s or s.checkpoint.mtbf.total_seconds(),
                min_s=s.checkpoint.min_interval.total_seconds(),
                max_s=s.checkpoint.max_interval.total_seconds(),
                mtbf_source=mtbf_source,
                earlier=[float(x) for x in earlier_saves_s if x > 0],
                earlier_source=earlier_saves_source,
            )
        self._interval_said: float | None = None  # the periodic interval last printed (seconds)
        #: the newest checkpoint file known (requested or seen on disk): (mtime_ns, path) and its
        #: time on the watch's clock, mapped once, when first known (a simulated clock and the
        #: wall clock drift apart: a file mapped later would look newer than it is)
        self._newest_file: tuple[int, str] | None = None
        self._elsewhere_said: set[str] = set()  # directories of saves outside [checkpoint] path, said once
        #: the job's own saves, reported in $COSTCTL_CHECKPOINT_SAVES (costctl.job.report_checkpoint)
        self.saves = SavesFollower(saves_path) if saves_path is not None else None
        #: the newest reported save that passed the check: (its time on the watch's clock, its path)
        self._reported: tuple[datetime, Path] | None = None
        self._reported_said_at: datetime | None = None  # when a reported save was last said
        self._disk_said_at: datetime | None = None  # when a checkpoint found on disk was last said
        #: on a spot instance (or with periodic checkpoints) the disk is looked at on every poll, so
        #: that each save is timed when it appears: a preemption's restart point is the newest
        #: checkpoint saved by the take (one found only at the waste's reckoning would be timed then)
        self._follow_disk = bool(self.pattern) and (run.state.billing == "spot" or self.periodic is not None)

    # ------------------------------------------------------------------ checkpoints
    def request_checkpoint(self, reason: str, deadline: datetime,
                           then: Callable[[CheckpointAttempt], None] | None = None) -> CheckpointAttempt | None:
        """Ask the job for a checkpoint by ``deadline``; ``then(attempt)`` runs when it ends.
        Returns None (and records why) when the request file cannot be written."""
        merged = self.requester.pending is not None
        try:
            attempt = self.requester.request(reason, deadline)
        except OSError as exc:
            self.log.record(Decision(time=self.clock.now(), policy="checkpoint", action=Action.ADVISE,
                                     reason=_("cannot write the checkpoint request {path}: {error}").format(
                                         path=self.requester.request_path, error=exc.strerror or exc),
                                     key=f"checkpoint-error:{reason}:{deadline}"),
                            "request not written")
            if then is not None:
                then(CheckpointAttempt(reason=reason, requested_at=self.clock.now(), deadline=deadline,
                                       outcome=Outcome.TIMED_OUT, completed_at=self.clock.now()))
            return None
        if merged:
            if then is not None:
                self._then.append(then)
            self.say(_("costctl: checkpoint request now due by {time} ({reason})").format(
                time=format_time(attempt.deadline, self.tz), reason=_(CHECKPOINT_REASONS.get(attempt.reason,
                                                                                            attempt.reason))))
            return attempt
        self._then = [then] if then is not None else []
        attempt.ledger_id = self.ledger.record_checkpoint_request(
            self.run.state.run_id, reason=reason, requested_at=attempt.requested_at, deadline=attempt.deadline,
            signal=attempt.signal)
        left = (attempt.deadline - attempt.requested_at).total_seconds()
        shape = {"reason": _(CHECKPOINT_REASONS.get(reason, reason)), "file": self.requester.request_path.name,
                 "signal": attempt.signal, "pids": ", ".join(map(str, attempt.signalled_pids)) or _("none"),
                 "seconds": max(0.0, left)}
        if attempt.signal:
            said = _("costctl: checkpoint requested ({reason}) through {file} and {signal} to pid {pids}; waiting up "
                     "to {seconds:.0f}s")
        else:
            said = _("costctl: checkpoint requested ({reason}) through {file}; waiting up to {seconds:.0f}s")
        self.say(said.format(**shape))
        return attempt

    def poll(self) -> None:
        """Follow a pending checkpoint request and start periodic ones when due; take the saves
        the job reported on its own (:meth:`note_reported_saves`) and, where a preemption's waste
        or the Young/Daly count needs them, the checkpoints on disk (:meth:`note_disk_checkpoint`)."""
        self.note_reported_saves()
        if self._follow_disk and self.job.running:
            self.note_disk_checkpoint()
        done = self.requester.poll(job_running=self.job.running)
        if done is not None:
            self._finish_attempt(done)
        if self.periodic is not None and self.requester.pending is None and self.job.running \
                and not self.preempted and self.run.stopped_at is None:
            self.say_interval()
            now = self.clock.now()
            since = max(self.last_checkpoint_at or self.run.state.run_started_at, self.run.state.run_started_at)
            if now >= self.periodic.due_at(since):
                # A checkpoint the job saved on its own schedule since then restarts the count:
                # a job that saves often enough on its own gets no extra request.
                since = max(since, self.note_disk_checkpoint() or since)
            if now >= self.periodic.due_at(since):
                deadline = now + self.settings.checkpoint.deadline
                attempt = self.request_checkpoint("periodic", deadline, then=self._after_periodic)
                if attempt is not None:
                    self.log.record(Decision(
                        time=now, policy="checkpoint", action=Action.CHECKPOINT,
                        reason=_("periodic checkpoint on a {billing} instance: Young/Daly interval {interval:.0f}s "
                                 "since {since}").format(billing=self.run.state.billing,
                                                         interval=self.periodic.interval_s,
                                                         since=format_time(since, self.tz)),
                        evidence=self.periodic.evidence(), key=f"checkpoint-periodic:{now.isoformat()}"),
                        "requested", say=False)

    def say_interval(self) -> None:
        """Print the periodic checkpoint interval with its inputs, at the start and whenever it
        changes (by a second or more)."""
        p = self.periodic
        if p is None:
            return
        interval = p.interval_s
        if self._interval_said is not None and abs(interval - self._interval_said) < 1.0:
            return
        first = self._interval_said is None
        self._interval_said = interval
        ev = p.evidence()
        if first:
            said = _("costctl: periodic checkpoints every {interval:.0f}s (Young/Daly sqrt(2 x save {save:g}s "
                     "{save_source} x MTBF {mtbf:g}s {mtbf_source}), clamped to [{min:g}s, {max:g}s]; a checkpoint "
                     "the job saves on its own restarts the count)")
        else:
            said = _("costctl: periodic checkpoints now every {interval:.0f}s (Young/Daly sqrt(2 x save {save:g}s "
                     "{save_source} x MTBF {mtbf:g}s {mtbf_source}), clamped to [{min:g}s, {max:g}s]; a checkpoint "
                     "the job saves on its own restarts the count)")
        self.say(said.format(interval=interval, save=ev["save_s"], save_source=p.save_source_text,
                             mtbf=ev["mtbf_s"], mtbf_source=self._mtbf_shown, min=p.min_s, max=p.max_s))

    def note_disk_checkpoint(self) -> datetime | None:
        """The newest complete checkpoint on disk written since this watch started, whoever
        wrote it (the job on its own schedule — HF ``save_steps``, Lightning's ModelCheckpoint —
        or on request), on the watch's clock; it becomes :attr:`last_checkpoint_at` when newer.
        A checkpoint inherited through ``--resume`` is older than the watch: not a fresh save.
        None without ``[checkpoint] path`` or such a checkpoint."""
        if not self.pattern:
            return None
        newest = newest_intact_checkpoint(self.pattern, newer_than_s=self.started_wall)
        if newest is None:
            return None
        key = (newest.mtime_ns, str(newest.path))
        known = self._newest_file
        if known is not None and (key == known or newest.mtime_ns <= known[0]):
            return self.last_checkpoint_at  # nothing newer than what is known
        self._newest_file = key
        at = max(self.requester.on_clock(newest.mtime_ns, self.clock.now()), self.run.state.run_started_at)
        self._save_times.append(at)
        if self.last_checkpoint_at is None or at > self.last_checkpoint_at:
            self.last_checkpoint_at = at
            now = self.clock.now()
            if self._disk_said_at is None or (now - self._disk_said_at).total_seconds() >= REPORTED_SAY_EVERY_S:
                self._disk_said_at = now
                self.say(_("costctl: checkpoint on disk: {path} (saved by the job at {time}; said at most every "
                           "10 minutes)").format(path=newest.path, time=format_time(at, self.tz)))
        return self.last_checkpoint_at

    def note_reported_saves(self) -> None:
        """Count the checkpoints the job reported saving on its own (the saves file,
        :mod:`.own_saves`) as requested ones are counted: each that passes the format check
        (:func:`~costctl.checkpoint_integrity.check_checkpoint`; one without a path is looked
        for under ``[checkpoint] path``) moves :attr:`last_checkpoint_at` (the restart point of
        a preemption's waste and of the Young/Daly count), gives the interval its save time (the
        save's own start to end), and gets a ``saved`` checkpoint row in the ledger with its path
        (where ``--resume`` looks, wherever it lies; one outside ``[checkpoint] path`` is said
        once). Cheap when nothing was reported: one ``stat``."""
        if self.saves is None:
            return
        for report in self.saves.take():
            if report.checkpoint is None:
                self.note_disk_checkpoint()
                continue
            ok, why = check_checkpoint(report.checkpoint)
            if not ok:
                self.say(_("costctl: the job reported checkpoint {path} saved, but it is not whole ({why}): not "
                           "counted").format(path=report.checkpoint, why=why))
                continue
            self._reported_save(report)

    def _reported_save(self, report: SaveReport) -> None:
        now = self.clock.now()
        at = max(min(self.requester.on_clock(int(report.ended_at.timestamp() * 1e9), now), now),
                 self.run.state.run_started_at)
        path = report.checkpoint
        assert path is not None
        own = report.duration_s
        self._save_times.append(at)
        if self.last_checkpoint_at is None or at > self.last_checkpoint_at:
            self.last_checkpoint_at = at
        if self._reported is None or at >= self._reported[0]:
            self._reported = (at, path)
        if self.periodic is not None and own is not None:
            self.periodic.note_save(own)
            self.say_interval()
        started = at - timedelta(seconds=own) if own is not None else at
        ledger_id = self.ledger.record_checkpoint_request(self.run.state.run_id, reason="the job's own save",
                                                          requested_at=started, deadline=at)
        size = _size_bytes(path)
        self.ledger.complete_checkpoint(ledger_id, outcome=Outcome.SAVED.value, completed_at=at, saved_at=at,
                                        save_s=own, path=str(path), size_bytes=size, save_duration_s=own)
        if not under_pattern(path, self.pattern):
            self._saved_elsewhere(path, at)
        if self._reported_said_at is None or (now - self._reported_said_at).total_seconds() >= REPORTED_SAY_EVERY_S:
            self._reported_said_at = now
            self.say(_(_OWN_SAVE_SAID[(report.step is not None, own is not None)]).format(
                path=path, step=report.step, seconds=own))

    def _finish_attempt(self, attempt: CheckpointAttempt) -> None:
        self.checkpoints.append(attempt)
        own = (attempt.save_ended_at - attempt.save_started_at).total_seconds() \
            if attempt.save_started_at is not None and attempt.save_ended_at is not None else None
        own = own if own is not None and own > 0 else None  # the save's own duration (the job's record)
        if attempt.outcome is Outcome.SAVED and attempt.saved_at is not None:
            self.last_checkpoint_at = max(attempt.saved_at, self.last_checkpoint_at or attempt.saved_at)
            self._save_times.append(attempt.saved_at)
            cp = attempt.checkpoint
            if cp is not None and not under_pattern(cp.path, self.pattern):
                self._saved_elsewhere(cp.path, attempt.completed_at or self.clock.now())
            if cp is not None and (self._newest_file is None or cp.mtime_ns >= self._newest_file[0]):
                self._newest_file = (cp.mtime_ns, str(cp.path))
            if self.periodic is not None:
                # C is the save itself (the acknowledgement's start to end); without a record,
                # request to checkpoint (which includes the wait for the job's safe point).
                self.periodic.note_save(own if own is not None else attempt.save_s)
                self.say_interval()
        if attempt.ledger_id is not None:
            cp = attempt.checkpoint
            self.ledger.complete_checkpoint(
                attempt.ledger_id, outcome=attempt.outcome.value if attempt.outcome else "unknown",
                completed_at=attempt.completed_at or self.clock.now(), reason=attempt.reason,
                deadline=attempt.deadline, saved_at=attempt.saved_at, save_s=attempt.save_s,
                path=str(cp.path) if cp else None, size_bytes=cp.size if cp else None,
                save_duration_s=own)
        outcome = attempt.outcome.value if attempt.outcome else "unknown"  # the ledger's word: untranslated
        shape = {"reason": _(CHECKPOINT_REASONS.get(attempt.reason, attempt.reason)),
                 "outcome": _(OUTCOME_WORDS.get(outcome, outcome)), "seconds": attempt.save_s,
                 "path": attempt.checkpoint.path if attempt.checkpoint else None}
        self.log.record(Decision(
            time=attempt.completed_at or self.clock.now(), policy="checkpoint", action=Action.CHECKPOINT,
            reason=_(_REQUEST_ENDED[(attempt.save_s is not None, attempt.checkpoint is not None)]).format(**shape),
            evidence=attempt.evidence(), key=f"checkpoint:{attempt.requested_at.isoformat()}"), outcome)
        callbacks, self._then = self._then, []
        for then in callbacks:
            then(attempt)

    def _saved_elsewhere(self, path: Path, when: datetime) -> None:
        """The job saved (and acknowledged) a checkpoint that ``[checkpoint] path`` does not
        match: said once per directory, with whether that storage survives a stop. The ledger's
        checkpoint row keeps the path: ``--resume`` looks there too
        (:func:`costctl.checkpoint.known_patterns`)."""
        where = str(path.parent)
        if where in self._elsewhere_said:
            return
        self._elsewhere_said.add(where)
        shape = {"path": path, "configured": self.settings.checkpoint.path, "pattern": path.parent / "*"}
        if self.settings.checkpoint.path:
            text = _("checkpoint {path} was saved outside [checkpoint] path {configured!r}: costctl watch --resume "
                     "will still find it (recorded in the ledger for this job's chain); to make it the configured "
                     "place, set [checkpoint] path = \"{pattern}\"").format(**shape)
        else:
            text = _("checkpoint {path} was saved with no [checkpoint] path configured: costctl watch --resume will "
                     "still find it (recorded in the ledger for this job's chain); to make it the configured place, "
                     "set [checkpoint] path = \"{pattern}\"").format(**shape)
        storage = ephemeral_storage_warning(str(path))
        if storage:
            text = _("{warning}; and {storage}").format(warning=text, storage=storage)
        self.log.record(Decision(time=when, policy="checkpoint",
                                 action=Action.WARN, reason=text,
                                 evidence={"checkpoint": str(path), "configured": self.settings.checkpoint.path,
                                           "storage": storage},
                                 key=f"checkpoint-elsewhere:{where}"), "warned")

    def _after_periodic(self, attempt: CheckpointAttempt) -> None:
        """Nothing more to do: the outcome is recorded and the schedule moves on."""

    def resume_point(self) -> str | None:
        """The newest intact checkpoint written since this watch started: under ``[checkpoint]
        path`` (:func:`~costctl.checkpoint.newest_intact_checkpoint`; each newer one passed over
        is named), or the newest the job reported saving on its own, wherever it lies
        (:meth:`note_reported_saves`), whichever is newer; None without either."""
        self.note_reported_saves()
        newest = newest_intact_checkpoint(
            self.pattern, newer_than_s=self.started_wall,
            on_skip=lambda cp, why: self.say(_("costctl: skipped checkpoint {path} ({why})").format(
                path=cp.path, why=why))) if self.pattern else None
        reported = self._reported
        if reported is not None and check_checkpoint(reported[1])[0]:
            if newest is None or reported[0] >= self.requester.on_clock(newest.mtime_ns, self.clock.now()):
                return str(reported[1])
        return str(newest.path) if newest is not None else None

    # ------------------------------------------------------------------ preemption
    def on_notice(self, notice: Notice) -> None:
        """A preemption notice arrived: request a checkpoint and stop before the deadline."""
        key = f"preemption:{notice.deadline.isoformat()}"
        if key in self._notice_keys or self.run.stopped_at is not None:
            return
        self._notice_keys.add(key)
        now = self.clock.now()
        left = notice.seconds_left(now)
        reserve = self.settings.watch.grace_period + self.settings.preemption.margin
        stop_by = notice.deadline - reserve
        # A notice so short that the reserve (grace period + margin) leaves the checkpoint less
        # than a third of it (none at all, below the reserve): the checkpoint gets half of what
        # is left, the job's end the rest.
        short = stop_by < now + timedelta(seconds=left / 3)
        if short:
            stop_by = now + timedelta(seconds=max(0.0, left) / 2)
        evidence = {"source": notice.source, "action": notice.action, "deadline": notice.deadline.isoformat(),
                    "seconds_left": round(left, 3), "stop_by": stop_by.isoformat(), "raw": notice.raw,
                    "short_notice": short}
        job = self.job.running
        shape = {"source": notice.source, "action": notice.action, "deadline": format_time(notice.deadline, self.tz),
                 "seconds": left, "stop_by": format_time(stop_by, self.tz), "reserve": reserve.total_seconds()}
        if not job:
            reason = _("{source} preemption notice: {action} at {deadline} ({seconds:.0f}s from now); no job to "
                       "checkpoint; stopping the instance now")
        elif short:
            reason = _("{source} preemption notice: {action} at {deadline} ({seconds:.0f}s from now); requesting a "
                       "checkpoint, the job ends by {stop_by} (a short notice: half of it for the checkpoint, the "
                       "rest to end the job, less than [watch] grace_period + [preemption] margin = {reserve:g}s)")
        else:
            reason = _("{source} preemption notice: {action} at {deadline} ({seconds:.0f}s from now); requesting a "
                       "checkpoint, the job ends by {stop_by}")
        reason = reason.format(**shape)
        self.log.record(Decision(time=now, policy="preemption", action=Action.CHECKPOINT if job else Action.STOP,
                             reason=reason, evidence=evidence, key=key), "notice received")
        if job:
            attempt = self.request_checkpoint("preemption", max(now, stop_by),
                                              then=lambda a: self._stop_for_preemption(notice, a))
            if attempt is not None:
                return
        self._stop_for_preemption(notice, None)

    def _stop_for_preemption(self, notice: Notice | None, attempt: CheckpointAttempt | None,
                             preempted_at: datetime | None = None) -> None:
        if self.run.stopped_at is not None:
            return
        self.preempted = True
        now = self.clock.now()
        if notice is not None:
            why = _("preemption at {time}").format(time=format_time(notice.deadline, self.tz))
            key = f"preemption-stop:{notice.deadline.isoformat()}"
        else:
            why = _("the provider took the spot instance at {time} without notice").format(
                time=format_time(preempted_at or now, self.tz))
            key = f"preempted:{(preempted_at or now).isoformat()}"
        if attempt and attempt.outcome:
            cp = _("checkpoint {outcome}").format(outcome=_(OUTCOME_WORDS.get(attempt.outcome.value,
                                                                              attempt.outcome.value)))
        elif self.last_checkpoint_at:
            cp = _("no checkpoint requested (the newest known: {time})").format(
                time=format_time(self.last_checkpoint_at, self.tz))
        else:
            cp = _("no checkpoint")
        decision = Decision(
            time=now, policy="preemption", action=Action.STOP,
            reason=_("{why}: {checkpoint}; ending the job and stopping the instance").format(why=why, checkpoint=cp),
            evidence={"notice_deadline": notice.deadline.isoformat() if notice else None,
                      "preempted_at": preempted_at.isoformat() if preempted_at else None,
                      "checkpoint": attempt.evidence() if attempt else None,
                      "last_checkpoint_at": self.last_checkpoint_at.isoformat() if self.last_checkpoint_at else None},
            key=key)
        self.stopper.handle(decision)
        stop = self.stopper.stop
        if stop is not None and not stop.done and preempted_at is None:
            # The paid time is lost until the stop ends (the instance bills until it is stopped).
            self.stopper.after_stop(lambda ended: self._record_preemption_waste(notice, ended.ended_at or ended.time,
                                                                                 stopped=True))
        else:
            end = preempted_at or (stop.ended_at or stop.time if stop is not None
                                   else (notice.deadline if notice else now))
            self._record_preemption_waste(notice, end, stopped=stop is not None)
        if stop is not None:
            self.run.mark_stopped(stop.time)

    def _record_preemption_waste(self, notice: Notice | None, end: datetime, *, stopped: bool) -> None:
        """Paid time whose work was lost: the newest checkpoint — requested, or on disk written
        by this run whoever wrote it (:meth:`note_disk_checkpoint`), or reported by the job
        (:meth:`note_reported_saves`) — or the run's start, to ``end``."""
        self.note_reported_saves()
        self.note_disk_checkpoint()
        # the newest checkpoint saved by the time the instance was taken: one the job saved after
        # that (the watch learns of a preemption up to a poll late) would not exist on a real cloud
        before = [t for t in self._save_times if t <= end]
        saved_at = max(before) if before else None
        start = max(saved_at or self.run.state.run_started_at, self.run.state.run_started_at)
        start = min(start, end)
        reason = "preemption" if notice is not None else "preempted"
        detail = _(_WASTE_DETAIL[(saved_at is not None, stopped)]).format(start=format_time(start, self.tz),
                                                                            end=format_time(end, self.tz))
        self.ledger.record_waste(self.run.state.run_id, start_at=start, end_at=end, rate_per_hour=self.run.state.rate.amount,
                                 currency=self.run.state.rate.currency, reason=reason, detail=detail)
        self.summary.add_waste(Money(self.run.state.rate.amount * Decimal(repr((end - start).total_seconds())) / 3600,
                             self.run.state.rate.currency), (end - start).total_seconds())

    def check_preempted(self) -> None:
        """Ask the provider whether it took the (spot) instance already; if so, end like a notice."""
        if self.run.stopped_at is not None or self.preempted:
            return
        try:
            inst = self.instances.get_instance(self.run.state.instance_id)
        except CostctlError:
            return
        if inst.preempted:
            self._stop_for_preemption(None, None, preempted_at=inst.stopped_at or self.clock.now())

    # ------------------------------------------------------------------ downsize
    def price_options(self) -> list[PriceOption]:
        """Cards one could rent instead, same GPU count, billing mode and currency: the
        provider's live offers when it lists them, else the price table."""
        count = self.run.state.gpu_count
        billing = "spot" if self.run.state.billing == "spot" else "on-demand"
        if self.instances.capabilities.offers:
            try:
                return options_from_offers(self.instances.list_offers(), gpu_count=count, billing=billing,
                                           currency=self.run.state.rate.currency)
            except CostctlError as exc:
                self.say(_("costctl: cannot list {provider} offers ({error}); using the price table").format(
                    provider=self.instances.name, error=exc.message))
        from ..catalog import load_price_table

        return options_from_price_table(load_price_table(self.settings), provider=self.instances.name,
                                        gpu_count=count, billing=billing, currency=self.run.state.rate.currency)

    def peak_memory(self) -> tuple[int | None, str]:
        """Peak GPU memory (bytes, on any one GPU) and where it came from."""
        peak = self.summary.peak_gpu_memory_bytes
        if peak:  # the source is evidence: English
            return peak, "GPU telemetry"
        configured = self.settings.downsize.peak_memory
        if configured:
            return int(configured), "[downsize] peak_memory (no GPU telemetry on this machine)"
        return None, "unknown"

    def plan(self, remaining_s: Decimal | None) -> tuple[CardOption | None, list[CardOption], dict[str, Any]]:
        """``(target, candidates, evidence)`` for moving the rest of the run to a cheaper card."""
        cfg = self.settings.downsize
        peak, source = self.peak_memory()
        evidence: dict[str, Any] = {
            "current_gpu": self.run.state.gpu_name, "current_price_per_hour": str(self.run.state.rate.amount),
            "currency": self.run.state.rate.currency, "gpu_count": self.run.state.gpu_count, "billing": self.run.state.billing,
            "peak_memory_bytes": peak, "peak_memory_source": source, "headroom": cfg.headroom,
            "mean_gpu_utilization": self.summary.mean_gpu_utilization,
            "remaining_s": str(remaining_s) if remaining_s is not None else None,
            "min_saving_per_hour": str(cfg.min_saving_per_hour),
        }
        if peak is None:
            return None, [], evidence
        util = self.summary.busiest_gpu_utilization
        cards = rank_cards(current_gpu=self.run.state.gpu_name, current_rate=self.run.state.rate, peak_bytes=peak, headroom=cfg.headroom,
                           options=self.price_options(), utilization=util / 100 if util is not None else None,
                           remaining_s=remaining_s, compute_dtype=cfg.compute_dtype)
        target = best_fit(cards)
        evidence["candidates"] = [c.to_dict() for c in cards]
        evidence["target"] = target.to_dict() if target else None
        return target, cards, evidence

    def downsize(self, decision: Decision) -> tuple[Decision, str]:
        """Act on a plateau decision whose action is ``downsize``; returns the decision to record
        (reason and evidence extended with the plan) and its outcome."""
        cfg = self.settings.downsize
        remaining = decision.rest_of_run.remaining_s if decision.rest_of_run is not None else None
        target, _cards, plan = self.plan(remaining)
        cur = self.run.state.rate.currency
        evidence = {**decision.evidence, "downsize": plan}
        if target is None:
            if plan["peak_memory_bytes"] is None:
                why = _("no GPU memory reading: set [downsize] peak_memory to size a cheaper card")
            else:
                why = _("no cheaper card fits the peak GPU memory with headroom")
            return (replace(decision, evidence=evidence,
                            reason=_("{reason}; downsize: {why}").format(reason=decision.reason, why=why)),
                    _("advised: {why}").format(why=why))
        peak = plan["peak_memory_bytes"]
        shape = {"gpu": target.option.gpu, "price": _money(target.option.price_per_hour, cur),
                 "peak": peak / 2**30, "headroom": cfg.headroom, "memory": (target.memory_bytes or 0) / 2**30,
                 "saving": _money(target.saving_per_hour, cur), "total": _money(target.rest_saving, cur)}
        if target.rest_saving is not None:
            summary = _("downsize to {gpu} at {price}/h ({peak:.1f} GiB peak + {headroom:.0%} headroom "
                        "fits its {memory:.0f} GiB): saves {saving}/h, about {total} over the rest of the run")
        else:
            summary = _("downsize to {gpu} at {price}/h ({peak:.1f} GiB peak + {headroom:.0%} headroom "
                        "fits its {memory:.0f} GiB): saves {saving}/h")
        recorded = replace(decision, evidence=evidence, reason=_("{reason}; {downsize}").format(
            reason=decision.reason, downsize=summary.format(**shape)))
        if target.saving_per_hour < cfg.min_saving_per_hour:
            return recorded, _("advised: saving {saving}/h is below [downsize] min_saving_per_hour {min}").format(
                saving=shape["saving"], min=_money(cfg.min_saving_per_hour, cur))
        command = shlex.join(self.command) if self.command else "COMMAND"
        resume = f"costctl watch --resume -- {command}"
        if not self.instances.capabilities.move_job or not self.job.exists:  # else: advise
            return recorded, _("advised: rent a {gpu} instance ({provider}, {billing}), copy the checkpoints and run "
                               "`{resume}` there").format(gpu=target.option.gpu, provider=target.option.provider,
                                                          billing=target.option.billing, resume=resume)
        if not self.pattern:
            return recorded, _("advised: set [checkpoint] path so costctl can resume the job; then `{resume}`").format(
                resume=resume)
        if self.dry_run:
            return recorded, _("dry-run: would checkpoint, end the job, move to {gpu} and resume").format(
                gpu=target.option.gpu)
        if self._moving_to is not None:
            return recorded, _("advised: a move to {gpu} is already under way").format(gpu=self._moving_to)
        now = self.clock.now()
        self._moving_to = target.option.gpu
        attempt = self.request_checkpoint("downsize", now + self.settings.checkpoint.deadline,
                                          then=lambda a: self._move(a, target))
        if attempt is None:
            self._moving_to = None
            return recorded, _("advised: the checkpoint request could not be written")
        return recorded, _("checkpoint requested to move to {gpu}").format(gpu=target.option.gpu)

    def _move(self, attempt: CheckpointAttempt, target: CardOption) -> None:
        try:
            self._move_now(attempt, target)
        finally:
            self._moving_to = None

    def _move_now(self, attempt: CheckpointAttempt, target: CardOption) -> None:
        now = self.clock.now()
        current = self.run.state.gpu_name
        if current and normalize_gpu_name(current)[0] == normalize_gpu_name(target.option.gpu)[0]:
            self.log.record(Decision(time=now, policy="downsize", action=Action.ADVISE,
                                     reason=_("not moving to {gpu}: the job already runs on one").format(
                                         gpu=target.option.gpu),
                                     evidence=attempt.evidence(), key=f"downsize-same:{now.isoformat()}"), "stayed")
            return
        cp = attempt.checkpoint.path if attempt.checkpoint else None
        if cp is None and attempt.outcome is Outcome.ACKNOWLEDGED and self.pattern:
            newest = newest_intact_checkpoint(self.pattern)
            cp = newest.path if newest else None
        if cp is None or self.run.stopped_at is not None or self._notice_keys:
            ended = attempt.outcome.value if attempt.outcome else "failed"
            self.log.record(Decision(time=now, policy="downsize", action=Action.ADVISE,
                                     reason=_("not moving to {gpu}: the checkpoint request {outcome}; the job goes on "
                                              "here").format(gpu=target.option.gpu,
                                                             outcome=_(OUTCOME_WORDS.get(ended, ended))),
                                 evidence=attempt.evidence(), key=f"downsize-abandoned:{now.isoformat()}"),
                        "stayed")
            return
        old_id, old_gpu = self.run.state.instance_id, self.run.state.gpu_name
        status = self.job.end()
        self.log.record(Decision(time=now, policy="downsize", action=Action.STOP,
                                 reason=_("checkpoint {path} saved; ended the job (exit status {status}) to move "
                                          "from {old} to {new}").format(path=cp, status=status, old=old_gpu,
                                                                        new=target.option.gpu),
                             evidence=attempt.evidence(), key=f"downsize-stop:{now.isoformat()}"), "job ended")
        try:
            new = self.instances.create_instance(target.option.gpu, gpu_count=target.option.gpu_count,
                                                billing=target.option.billing, currency=target.option.currency)
        except CostctlError as exc:
            self.log.record(Decision(time=now, policy="downsize", action=Action.ADVISE,
                                     reason=_("could not rent a {gpu}: {error}; resuming here from {path}").format(
                                         gpu=target.option.gpu, error=exc.message, path=cp),
                                 key=f"downsize-failed:{now.isoformat()}"), "resumed on the same instance")
            self.job.restart(resume_from=str(cp))
            return
        try:
            stopped = self.instances.stop_instance(old_id)
            stop_text = _("instance {instance} is {status}").format(instance=old_id, status=stopped.status.value)
        except CostctlError as exc:
            stop_text = _("could not stop {instance}: {error}").format(instance=old_id, error=exc.message)
        self.run.move_to(new)
        self.log.record(Decision(time=now, policy="downsize", action=Action.RESUME,
                                 reason=_("moved from {old_gpu} ({old_id}) to {new_gpu} ({new_id}, {price}/h); "
                                          "{stopped}; resuming from {path}").format(
                                     old_gpu=old_gpu, old_id=old_id, new_gpu=new.gpu, new_id=new.id,
                                     price=_money(new.price_per_hour, new.currency), stopped=stop_text, path=cp),
                             evidence={"from_instance": old_id, "to_instance": new.id, "checkpoint": str(cp),
                                       "target": target.to_dict()},
                             key=f"downsize-resume:{now.isoformat()}"), "resumed")
        self.job.restart(resume_from=str(cp))

    # ------------------------------------------------------------------ OOM
    def on_text(self, stream: str, text: str) -> None:
        """Scan the job's output for out-of-memory errors."""
        self.oom.feed(stream, text)

    def child_exited(self, status: int) -> bool:
        """The job exited with ``status``: on a CUDA OOM, retry with a halved batch (True when
        restarted) or record the advice. Any other exit: False."""
        event = self.oom.finish()
        self.oom.reset()
        if status == 0 or event is None:
            self._oom_attempt = None  # a later OOM is not the answer to a retry
            return False
        now = self.clock.now()
        plan: BatchPlan | None = self.job.batch
        min_batch = self.settings.oom.min_batch
        nxt = plan.halved(min_batch) if plan else None
        evidence: dict[str, Any] = {
            "exit_status": status, "message": event.message[:500], "exception": event.exception,
            "requested_bytes": event.requested_bytes, "total_bytes": event.total_bytes,
            "allocated_bytes": event.allocated_bytes, "reserved_bytes": event.reserved_bytes,
            "batch_size": plan.batch_size if plan else None, "accum_steps": plan.accum_steps if plan else None,
            "min_batch": min_batch, "retries_before": self.oom_retries,
        }
        from .oom_retry import BATCH, uses

        in_argv = uses(self.command, BATCH)
        compared = None
        if self.on_oom == "retry" and plan is not None and self._oom_attempt is not None:
            # Did the halved batch change what failed? Only a figure (the requested allocation)
            # can show it: without one the comparison is "unknown" and the halving goes on.
            before = self._oom_attempt
            compared = compare_attempts(before, Attempt(plan.batch_size, event))
            evidence.update(batch_in_command=in_argv, comparison=compared.evidence())
            if not in_argv and compared.verdict == "same" and before.event.exception == event.exception:
                # The retry died of the very same OOM, and only the environment carried the batch.
                text = _("the retry at batch {batch} died of the same CUDA out of memory ({why}): either the job did "
                         "not take the batch costctl passed through $COSTCTL_BATCH_SIZE, or what runs out of memory "
                         "does not depend on the batch; retrying again would likely fail the same way, so costctl "
                         "stopped retrying. To pass the batch through, put {{batch_size}} (and {{accum_steps}}) in the "
                         "command, e.g. --batch-size {{batch_size}}, or read costctl.job.batch_size(default=N) / "
                         "$COSTCTL_BATCH_SIZE in the script").format(batch=plan.batch_size,
                                                                     why=compared.why_text or compared.why)
                evidence.update(same_oom=True, batch_heard=False)
                self._oom_attempt = None
                self.log.record(Decision(time=now, policy="oom", action=Action.ADVISE, reason=text,
                                         evidence=evidence, key=f"oom-unheard:{self.oom_retries}"),
                                "stopped retrying")
                return False
            if in_argv and compared.verdict == "same":
                # costctl wrote the batch into the command: the memory does not depend on it
                evidence.update(same_oom=True, batch_dependent=False, effective_batch=plan.effective)
                self._oom_attempt = None
                self.log.record(Decision(time=now, policy="oom", action=Action.ADVISE,
                                         reason=fixed_memory_advice(plan, compared.why_text or compared.why),
                                         evidence=evidence,
                                         key=f"oom-fixed:{self.oom_retries}"), "stopped retrying")
                return False
        # no figure to compare now or at the next OOM: retry as before, and say so
        unknown = (compared.why_text or compared.why) if compared is not None and compared.verdict == "unknown" else (
            _("the OOM message gives no allocation size") if event.requested_bytes is None else None)
        if unknown:
            evidence.update(comparison_possible=False)
        if self.on_oom == "retry" and plan is not None and nxt is not None and not self.dry_run:
            self.oom_retries += 1
            self._oom_attempt = Attempt(plan.batch_size, event)
            resume = self.resume_point() or self.job.resume_from
            evidence.update(new_batch_size=nxt.batch_size, new_accum_steps=nxt.accum_steps,
                            effective_batch=nxt.effective, resume_from=resume)
            shape = {"batch": plan.batch_size, "accum": plan.accum_steps, "new_batch": nxt.batch_size,
                     "new_accum": nxt.accum_steps, "effective": plan.effective, "new_effective": nxt.effective}
            if not in_argv:  # only the environment carries it: the effective batch is the job's to confirm
                retry = _("CUDA out of memory at batch {batch} x accumulation {accum}: retrying at batch {new_batch} x "
                          "accumulation {new_accum} through COSTCTL_BATCH_SIZE={new_batch} "
                          "COSTCTL_ACCUM_STEPS={new_accum} (the command has no {{batch_size}} placeholder: the "
                          "effective batch is unconfirmed until the job reads them)")
            elif nxt.effective == plan.effective:  # costctl writes the batch into the command: the job is told it
                retry = _("CUDA out of memory at batch {batch} x accumulation {accum}: retrying at batch {new_batch} x "
                          "accumulation {new_accum} (effective batch {new_effective})")
            else:
                retry = _("CUDA out of memory at batch {batch} x accumulation {accum}: retrying at batch {new_batch} x "
                          "accumulation {new_accum} (effective batch {new_effective}) (the odd batch changes the "
                          "effective batch from {effective} to {new_effective})")
            reason = retry.format(**shape)
            if resume:
                reason = _("{retry}, resuming from {path}").format(retry=reason, path=resume)
            if unknown:
                reason = _("{advice} ({unknown}: costctl cannot tell whether the memory depends on the batch)").format(
                    advice=reason, unknown=unknown)
            evidence.update(batch_in_command=in_argv)
            self.log.record(Decision(
                time=now, policy="oom", action=Action.RETRY,
                reason=reason,
                evidence=evidence, key=f"oom:{self.oom_retries}"), f"retry {self.oom_retries}")
            self.job.restart(batch=nxt, resume_from=resume)
            return True
        text = advice(plan, event, min_batch)
        if unknown and self.on_oom == "retry":
            text = _("{advice} ({unknown}: costctl cannot tell whether the memory depends on the batch)").format(
                advice=text, unknown=unknown)
        if self.on_oom == "retry" and plan is None:
            text = _("{advice} (--on-oom retry needs the batch size: --batch-size N or COSTCTL_BATCH_SIZE)").format(
                advice=text)
        self.log.record(Decision(time=now, policy="oom", action=Action.ADVISE, reason=text, evidence=evidence,
                             key=f"oom-advice:{self.oom_retries}"), "advised")
        return False


__all__ = ["Lifecycle"]
