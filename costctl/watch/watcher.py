"""The :class:`Watcher`: the coordinator of one ``costctl watch``.

It builds the parts and wires them, then drives them:

* start-up (:meth:`Watcher.start`): resolve the instance and its price (:mod:`.instance`) and
  prepare the command (:mod:`.command`) before the ledger is touched; then open the ledger run,
  and build the :class:`~costctl.decisions.DecisionRecorder` (the one way decisions are
  recorded), the :class:`~.job.Job` (the command), the policy engine, the
  :class:`~costctl.executor.Executor` and the :class:`~costctl.lifecycle.controller.Lifecycle`
  — the last two get the small interfaces of :mod:`costctl.protocols`, not the watcher;
* one evaluation (:meth:`Watcher.tick`): sample → progress → ledger → accrual → spend →
  policies → each new decision to the executor (a ``downsize`` to the lifecycle controller);
* the main loop (:meth:`Watcher.run`, :meth:`Watcher.step`): signals, the lifecycle's
  checkpoint requests, the command's exit (``--on-exit``);
* spot instances (:meth:`Watcher.poll_notices`): the preemption-notice source;
* the end (:meth:`Watcher.finish`): final accrual, underuse advice, closing the run, the summary.

Where the job runs (instance, price, ledger run) is one immutable :class:`~costctl.protocols.RunState`
(:attr:`Watcher.state`), replaced whole when the job moves to another instance.
"""

from __future__ import annotations

import os
from pathlib import Path
import queue
import shlex
import signal
import socket
import sys
import threading
import time
import traceback
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import psutil

from .. import paths
from ..checkpoint import ephemeral_storage_warning, resolve_pattern
from ..child import OutputMux
from ..clock import Clock, RealClock
from ..cloud import PriceRefused, checked_price, open_provider
from ..config import Settings
from ..decisions import DecisionRecorder
from ..errors import ConfigError, CostctlError, LedgerError, UsageError
from ..i18n import N_, _, ngettext
from ..executor import Executor
from ..ledger.db import Ledger
from ..ledger.lifecycle import spot_exposure
from ..ledger.progress_store import ProgressStore
from ..ledger.spend import SpendTracker
from ..ledger.tables import ADVISE_ONLY, DRY_RUN
from ..ledger.sync import CentralSync, central_target
from ..ledger.writer import LedgerWriter, Ticket
from ..lifecycle.controller import Lifecycle
from ..notify.dispatch import Notifier
from ..notify.events import Context, Event
from ..notify.pending import StopWarnings
from ..lifecycle.underuse import underuse_advice
from ..money import Money
from ..policies.engine import PolicyEngine
from ..policies.history import History
from ..progress.batch import PointBatch
from ..replay.oom import oom_in
from ..progress.lines import MAX_LINE_CHARS
from ..progress.output import OutputProgress
from ..job import ENV_CHECKPOINT_SAVES, ENV_METRICS_FILE
from ..progress.metrics_file import MetricsFileFollower
from ..progress.series import MISSING_AFTER_POINTS
from ..protocols import RunState
from ..records import Action, BatchPlan, Decision, TelemetrySample
from ..statusline import StatusLine, countdown
from ..summary import RunSummary
from ..telemetry.cpu import ExitedTreeCpu, MachineCpu, ProcessTreeCpu
from ..telemetry.jupyter import JupyterActivity
from ..telemetry.sampler import Sampler, detect_gpu_source
from ..user_regex import LINE_BUDGET_S, MAX_TIMEOUTS, UserRegex
from .chainlock import HEARTBEAT_STALE_S, ChainLock, blocking_run, lock_dir, refusal
from .command import prepare_command
from ..stopping import EXIT_STOP_FAILED, StopProcess, StopRoute, StopRunner
from .instance import bring_up, resolve_instance
from .attach import AttachTarget, find_target, on_exit_argv
from .job import Job
from .pump import INLINE_MAX_BYTES, ParsePump
from .snoozing import SnoozeControl
from .wakeup import Wakeup
from .options import WatchOptions
from ..relay.client import RelayChild, shares_one_terminal, terminal_size
from ..relay.protocol import job_running, relay_running

from costctl_providers.base import Instance, Provider
if TYPE_CHECKING:  # spot instances only: imported where a notice source is looked for
    from costctl_providers.notices import Notice, NoticePoller
if TYPE_CHECKING:  # imported by run() once the job runs (not on the way to its start)
    from .scheduler import LoopScheduler


#: Seconds a watch waits for its ledger writes before it runs a self-stop (the machine may power
#: off at once; a ledger that is down then does not hold the stop up for longer).
SELF_STOP_FLUSH_S = 10.0


#: The interpreter's thread switch interval in a live watch (seconds; Python's default 5 ms
#: makes the output thread wait behind the parser thread at every read: a GIL convoy).
SWITCH_INTERVAL_S = 0.0005

#: Seconds of the sample interval after the job's exit kept for the last tick, closing the run,
#: the summary and the process's exit; the parser gets the rest (:meth:`Watcher._finish_parsing`),
#: so the watch ends within one sample interval of its job, whatever the job printed.
END_RESERVE_S = 0.6

#: Seconds between the ticks that feed the policies what the parser finishes after the job's
#: exit (:meth:`Watcher._finish_parsing`), so the last tick does not meet all of it at once.
FINAL_TICK_EVERY_S = 0.1

#: Characters of the previous chunk searched with the next one for an OOM message.
OOM_CONTEXT_CHARS = 512

#: Seconds a watch lets telemetry and charges gather before one write transaction, at most
#: :data:`WRITE_EVERY_TICKS` sample intervals (decisions, a run's first charge and its end are
#: written at once; the spend the policies and the budget cap see is in memory). A watch killed
#: outright (kill -9) leaves its charges up to its last transaction: at most this much unbilled.
WRITE_EVERY_S = 10.0
#: The most sample intervals of telemetry and charges gathered into one write transaction.
WRITE_EVERY_TICKS = 10

#: Seconds between two looks of the main loop while it follows something by polling: a pending
#: checkpoint request (its file), a stop being carried through (its thread's end). Otherwise the
#: loop sleeps until woken (:class:`~.wakeup.Wakeup`: a tick, a signal, the job's exit, a stop
#: decided elsewhere) or until the end of the job's grace period.
BUSY_POLL_S = 0.1

#: Seconds between two sample-retention passes the watch queues (``[ledger] sample_retention``:
#: raw telemetry older than it rolled up per minute; :meth:`~costctl.ledger.writer.LedgerWriter.compact`),
#: and between two while the last pass left work behind (each pass is bounded: a short transaction).
#: The first pass comes :data:`COMPACT_BACKLOG_EVERY_S` after the start.
COMPACT_EVERY_S = 600.0
COMPACT_BACKLOG_EVERY_S = 60.0

#: Seconds after a policy deadline that its one-off tick runs (so the clock has passed it).
DEADLINE_SLACK_S = 0.005

#: The longest the main loop sleeps with nothing to follow (seconds): a safety net only, every
#: event it reacts to wakes it (each tick does, so it also looks once per sample interval).
IDLE_WAIT_MAX_S = 60.0


def watch_alive(pid: int) -> bool:
    """Whether process ``pid`` on this host may still be a costctl watch (unsure counts as alive).

    A pid that no longer exists is gone; one that exists but runs something other than
    Python/costctl was reused by another program, so the watch is gone too.
    """
    try:
        proc = psutil.Process(pid)
        cmdline = " ".join(proc.cmdline()).lower()
    except psutil.NoSuchProcess:
        return False
    except (psutil.AccessDenied, psutil.ZombieProcess):
        return True
    return "costctl" in cmdline or "python" in cmdline


def run_unguarded(run: Any) -> bool:
    """Whether ledger run ``run`` (a :class:`~costctl.ledger.schema.Run`) is unguarded: recorded
    on this host, its watch gone, its job still running (its relay's state file says so)."""
    if run.ended_at is not None or run.host != socket.gethostname() or run.pid is None:
        return False
    return not watch_alive(run.pid) and job_running(run.log_path)


def _isatty(fd: int) -> bool:
    try:
        return os.isatty(fd)
    except OSError:
        return False


def _job_cpu(pid: int) -> ProcessTreeCpu | ExitedTreeCpu:
    """CPU use of the job's process tree; idle when the job already exited (it is the relay's
    child, reaped at once, so a short job may be gone before its tree is looked up)."""
    try:
        return ProcessTreeCpu(pid)
    except UsageError:
        return ExitedTreeCpu(pid)


def jupyter_source(settings: Settings) -> JupyterActivity | None:
    """The local Jupyter server reader for ``[policies.idle_fraction]`` (its ``jupyter_url`` and
    ``jupyter_token``), or None when that policy is off or ``jupyter_url = "off"``: the only
    policy that reads the signal."""
    section = getattr(settings.policies, "idle_fraction", None)
    if section is None or section.time_window is None or section.jupyter_url == "off":
        return None
    token = section.jupyter_token.get_secret_value() if section.jupyter_token is not None else None
    return JupyterActivity(section.jupyter_url, token=token)


#: The watch's first line, by (what it does: ``running`` a command, ``guarding`` the machine or
#: ``attached`` to a run's job; whether the instance is spot).
_STARTED = {
    ("running", False): N_("costctl: run {run} running {command} on {provider} instance {instance} ({gpu}, "
                           "{price}/h); config {config}; log {log}"),
    ("running", True): N_("costctl: run {run} running {command} on {provider} instance {instance} ({gpu}, "
                          "{price}/h, spot); config {config}; log {log}"),
    ("guarding", False): N_("costctl: run {run} guarding this machine on {provider} instance {instance} ({gpu}, "
                            "{price}/h); config {config}; log {log}"),
    ("guarding", True): N_("costctl: run {run} guarding this machine on {provider} instance {instance} ({gpu}, "
                           "{price}/h, spot); config {config}; log {log}"),
    ("attached", False): N_("costctl: run {run} attached (from log offset {offset}) to {command} on {provider} "
                            "instance {instance} ({gpu}, {price}/h); config {config}; log {log}"),
    ("attached", True): N_("costctl: run {run} attached (from log offset {offset}) to {command} on {provider} "
                           "instance {instance} ({gpu}, {price}/h, spot); config {config}; log {log}"),
}


class Watcher:
    """One ``costctl watch`` (see the module docstring).

    Args:
        settings: validated configuration.
        options: command-line choices.
        clock: time source (RealClock live; SimClock in tests).
        sampler: telemetry sampler; built from the machine (NVML → nvidia-smi → CPU) when None.
        provider: the provider adapter; opened from the configuration when None.
        stdout_fd / stderr_fd: where the command's output goes (besides the run log).

    Raises:
        ConfigError, LedgerError, ProviderError, UsageError: at :meth:`start`, one line each,
            before anything is recorded or any process is started.
    """

    def __init__(
        self,
        settings: Settings,
        options: WatchOptions,
        *,
        clock: Clock | None = None,
        sampler: Sampler | None = None,
        provider: Provider | None = None,
        stdout_fd: int = 1,
        stderr_fd: int = 2,
    ) -> None:
        self.settings = settings
        self.options = options
        self.clock = clock or RealClock()
        self.status = StatusLine(False if options.quiet else options.status_line)
        self.summary = RunSummary(dry_run=options.dry_run)
        #: one bounded progress store per ledger run (costctl.ledger.progress_store)
        self._progress_stores: dict[str, ProgressStore] = {}
        self._sampler = sampler
        self._provider = provider
        self._fds = (stdout_fd, stderr_fd)
        # Threads: the output threads feed _progress_q; the scheduler's tick and notice poll and
        # the main loop's step() take _lock; the signal handler only sets _signal.
        self._progress_q: queue.SimpleQueue[PointBatch] = queue.SimpleQueue()
        self._lock = threading.RLock()
        self._done = threading.Event()
        self._wakeup: Wakeup | None = None  # what run()'s main loop sleeps on (None outside run())
        self._scheduler: LoopScheduler | None = None  # run()'s periodic driver (None outside run())
        #: The policies' next deadline when it falls before the next periodic tick (a tick is
        #: scheduled at it in run(); simulated-clock drivers tick at it themselves), else None.
        self.next_deadline: datetime | None = None
        self._deadline_queued: datetime | None = None  # the deadline a one-off tick is scheduled for
        self._compact_ticket: Ticket | None = None  # the last retention pass queued (see _queue_compaction)
        self._compact_at: datetime | None = None  # when it was queued (the start, before the first)
        self._signal: int | None = None  # the latest SIGINT/SIGTERM received
        self._signals = 0  # how many were received (a second one while the job ends kills it)
        # (signal, self._signals when it was passed to the job, monotonic deadline) while the job ends:
        self._ending: tuple[int, int, float] | None = None
        # Set by start():
        self._state: RunState | None = None
        self._stopped_at: datetime | None = None
        self.provider: Provider | None = None
        self.route: StopRoute | None = None
        self.ledger: Ledger | None = None
        self._chain_lock: ChainLock | None = None  # the checkpoint directory's lock (.chainlock)
        self.writer: LedgerWriter | None = None  # every write after start-up goes through it
        self.central: CentralSync | None = None  # fleet mode: sends the ledger's outbox to the central ledger
        self._spend: SpendTracker | None = None  # the current run's spend, from memory
        self.recorder: DecisionRecorder | None = None
        self.job: Job | None = None
        self.executor: Executor | None = None
        self.lifecycle: Lifecycle | None = None
        self.notice_poller: NoticePoller | None = None
        self._metrics: MetricsFileFollower | None = None
        self._auto_metrics: Path | None = None
        self._auto_seen = False  # the output thread saw the job's metrics file
        self._auto_checked = float("-inf")  # when it last looked (monotonic seconds)
        self._output: OutputProgress | None = None  # the output's parsers (costctl.progress.output)
        self._pump: ParsePump | None = None  # parses the job's output off the output thread
        self._oom_ctx: dict[str, str] = {}  # the end of each stream's previous chunk (OOM scan)
        self._child_done = True
        self._own_cpu = False
        self._spend_before = Decimal(0)  # spend of earlier ledger runs of this watch (same currency)
        self._tick_error_reported = False
        #: per thread or reader (:meth:`_thread_failed`): how many unexpected exceptions it raised
        self.thread_errors: dict[str, int] = {}
        self._errors_lock = threading.Lock()  # its own: the output thread never waits on a tick
        self._progress_due = False  # the parser asked for its points to be taken (_progress_backlog)
        self._threaded = False  # run(): the stop runs in a StopRunner thread; else step() steps it
        self._summary_from: datetime | None = None  # the first ledger run's start (earlier when attached)
        self._stop_runner: StopRunner | None = None
        self.notifier: Notifier | None = None  # [notify] urls: costctl.notify
        self._stop_warnings: StopWarnings | None = None  # [notify] warn_before
        self._control: Any = None  # the control socket costctl snooze reaches (costctl.snooze)
        self._hangup = False  # the terminal went away (SIGHUP or EIO)
        # costctl's own fds that are a terminal (redirected to /dev/null once it went away):
        self._terminal_fds: list[int] | None = [fd for fd in (1, 2) if _isatty(fd)]

    # ------------------------------------------------------------------ the run (RunControl)
    @property
    def state(self) -> RunState:
        """Where the job runs now (after :meth:`start`)."""
        assert self._state is not None, "the watch has not started"
        return self._state

    @property
    def stopped_at(self) -> datetime | None:
        """When a stop decision ended the watch (None while it runs)."""
        return self._stopped_at

    def mark_stopped(self, when: datetime) -> None:
        """A stop ended the watch at ``when``. While the executor still carries a stop through
        (:attr:`stopping`), the watch ends when that stop ends, not now (see :meth:`step`)."""
        if self.stopping is not None:
            return
        self._stopped_at = when
        self._done.set()
        self._wake()

    @property
    def stopping(self) -> StopProcess | None:
        """The stop being carried through (None when there is none, or once it ended)."""
        proc = self.executor.stopping if self.executor is not None else None
        return proc if proc is not None and not proc.done else None

    @property
    def stops_nothing(self) -> bool:
        """This watch stops nothing: ``--dry-run``, or a stop route of ``none`` (``--advise-only``)."""
        return self.options.dry_run or (self.route is not None and not self.route.stops)

    def _run_mode(self, route: StopRoute) -> str | None:
        """The run's ``runs.mode`` in the ledger: ``dry-run`` (``--dry-run``), ``advise-only``
        (a stop route of ``none``), else None (this watch stops the instance when told to)."""
        return DRY_RUN if self.options.dry_run else None if route.stops else ADVISE_ONLY

    def _before_self_stop(self) -> None:
        """A self-stop is about to run (the machine may power off under this process): charge up
        to now, record the run as ended by the stop, and wait (up to :data:`SELF_STOP_FLUSH_S`)
        for the ledger to have it all. If the self-stop fails, :meth:`finish` records the end
        again, with the real status."""
        writer = self.writer
        if writer is None or self._state is None:
            return
        run, now = self.state, self.clock.now()
        writer.accrue(run.run_id, now, run.rate.amount, run.rate.currency)
        writer.finish_run(run.run_id, ended_at=now, exit_code=self.child_status, status="self-stop sent")
        writer.flush(SELF_STOP_FLUSH_S)
        if self.central is not None:  # the team ledger sees the end too, if it answers at once
            self.central.sync_now(SELF_STOP_FLUSH_S)

    @property
    def run_id(self) -> str | None:
        """The current ledger run (None before :meth:`start`)."""
        return self._state.run_id if self._state is not None else None

    @property
    def instance_id(self) -> str:
        """The provider's id of the instance the job runs on."""
        return self.state.instance_id

    @property
    def rate(self) -> Money:
        """Its price per hour."""
        return self.state.rate

    @property
    def child(self) -> RelayChild | None:
        """The command's current process (None before it started, or without a command)."""
        return self.job.child if self.job is not None else None

    @property
    def child_status(self) -> int | None:
        """The command's exit status once it ended."""
        return self.job.status if self.job is not None else None

    @property
    def batch(self) -> BatchPlan | None:
        """The command's batch plan (None when unknown)."""
        return self.job.batch if self.job is not None else None

    @property
    def resume_from(self) -> str | None:
        """The checkpoint the command (re)started from."""
        return self.job.resume_from if self.job is not None else None

    def say(self, text: str) -> None:
        """Print one of costctl's own lines (suppressed by --quiet)."""
        if not self.options.quiet:
            self.status.message(text)

    def start(self) -> None:
        """Start the watch (:meth:`_start`); a start that fails lets the chain lock go."""
        try:
            self._start()
        except BaseException:
            if self._chain_lock is not None:
                self._chain_lock.release()
            raise

    def _take_chain_lock(self, s: Settings) -> Path | None:
        """Take the checkpoint directory's lock (:mod:`.chainlock`) for a watch of a command
        with ``[checkpoint] path``; returns the directory when another watch holds it (a
        ``--resume`` is then refused, a fresh start goes on without it), else None. A directory
        that does not exist yet or cannot be locked: no lock (the ledger check still applies)."""
        if not s.checkpoint.path or not self.options.command or self.options.attach is not None:
            return None
        lock = ChainLock(lock_dir(resolve_pattern(s.checkpoint.path)))
        try:
            taken = lock.acquire()
        except OSError:
            return None
        if taken:
            self._chain_lock = lock
            return None
        return lock.path

    def _resume_sources(self, url: str) -> tuple[list[str], Ledger | None]:
        """For ``--resume``: the checkpoints this command's chains saved (paths, newest first;
        :func:`costctl.ledger.chains.saved_checkpoint_paths`), read from the existing ledger,
        which is returned open (None, and no paths, when there is none yet or without --resume)."""
        if not self.options.resume or self.options.attach is not None:
            return [], None
        from ..ledger.chains import saved_checkpoint_paths
        from ..ledger.engine import MissingLedgerError

        try:
            ledger = Ledger.open(url, create=False, isolated_migration=True)
        except MissingLedgerError:
            return [], None
        try:
            with ledger.session() as session:
                return saved_checkpoint_paths(session, self.options.command), ledger
        except BaseException:
            ledger.close()
            raise

    def _refuse_a_watched_chain(self, resume_from: str | None, locked: Path | None) -> None:
        """``--resume`` while a run of this job's chain is still watched — here or on another
        host sharing the ledger (:func:`.chainlock.blocking_run`, on the ledger already open,
        if any) — or while another watch holds the checkpoint directory's lock (``locked``):
        refused before anything is written.

        Raises:
            UsageError: one line naming the run, its watch's pid and host (or the directory).
        """
        if not self.options.resume:
            return
        if self.ledger is not None and resume_from:
            from ..ledger.chains import chain_run_ids, open_runs_of

            now = self.clock.now()
            continues = self.ledger.continued_run(resume_from, command=self.options.command, before=now)
            with self.ledger.session() as session:
                chain = chain_run_ids(session, continues) if continues else []
                runs = open_runs_of(session, command=self.options.command, run_ids=chain)
            stale = max(HEARTBEAT_STALE_S, 10 * self.settings.watch.sample_interval.total_seconds())
            busy = blocking_run(runs, now=now, host=socket.gethostname(), own_pid=os.getpid(), alive=watch_alive,
                                job_running=job_running, stale_s=stale)
            if busy is None and locked is not None:  # the lock's holder, named from the ledger
                busy = next((r for r in runs if r.host == socket.gethostname() and r.pid and watch_alive(r.pid)
                             and r.pid != os.getpid()), None)
            if busy is not None:
                unwatched = busy.host == socket.gethostname() and not (busy.pid and watch_alive(busy.pid))
                raise UsageError(refusal(busy.run_id, pid=busy.pid, host=busy.host, unwatched=unwatched,
                                         since=busy.last_seen_at.isoformat(timespec="seconds")))
        if locked is not None:
            raise UsageError(refusal(None, directory=locked))

    def _start(self) -> None:
        """Start the watch, in this order: the provider and the instance with the preflight
        (price, stop route: one read of the instance), the command, the ledger (opened,
        migrated and written once), only then the instance is started where it must be
        (:func:`~.instance.bring_up`), the ledger run, and the child. A refusal or a ledger that
        cannot be opened leaves nothing started."""
        s = self.settings
        paths.data_dir(s.data_dir)  # a data dir that cannot be created fails first
        url = s.database_url or paths.default_database_url(s.data_dir)
        # Fleet mode's central ledger: a bad URL is refused here, before anything starts.
        central_url = central_target(s.ledger.central_url, url)
        # Resolve the provider, the price and the stop route before touching the ledger: a bad
        # config or a watch that could not stop its instance changes nothing.
        provider = self._provider or open_provider(s, clock=self.clock)
        self.provider = provider
        resolved = resolve_instance(s, provider, say=self.say, advise_only=self.options.advise_only)
        instance_id, inst = resolved.instance_id, resolved.instance
        rate, billing, gpu_count = resolved.rate, resolved.billing, resolved.gpu_count
        route = self.route = resolved.route
        s = self.settings = resolved.settings
        locked = self._take_chain_lock(s)
        known, self.ledger = self._resume_sources(url)
        try:
            batch, resume_from = prepare_command(self.options, s, known=known)
            self._refuse_a_watched_chain(resume_from, locked)
        except BaseException:
            if self.ledger is not None:
                self.ledger.close()
                self.ledger = None
            raise

        # The ledger is opened and written before any instance is started, and before the job; a
        # migration runs in a child process, so no Alembic is left resident in the watch.
        if self.ledger is None:
            self.ledger = Ledger.open(url, isolated_migration=True)
        # Fleet mode: every write below also fills the outbox the central sync sends.
        self.ledger.outbox = central_url is not None
        try:
            instance_pk = self.ledger.ensure_instance(
                provider.name, instance_id, gpu=resolved.gpu_name, gpu_count=gpu_count, billing=billing,
                price_per_hour=rate.amount, currency=rate.currency, region=inst.region if inst else None,
            )
            # A run whose relay still runs (its job, or the relay waiting for its on-exit watch
            # after the job's end) is not lost: --attach takes it over.
            lost = self.ledger.close_lost_runs(instance_pk, host=socket.gethostname(), alive=watch_alive,
                                               job_running=lambda run: relay_running(run.log_path))
            target = self._attach_target(instance_pk, instance_id)
            pending = bring_up(resolved, self.options, clock=self.clock, say=self.say)
        except BaseException:
            self.ledger.close()
            self.ledger = None
            raise
        if lost:
            self.say(_("costctl: closed {count} earlier run(s) on this instance whose watch died without closing them "
                       "({runs}): status lost").format(count=len(lost), runs=", ".join(r[:8] for r in lost)))
        self.summary.stop_route = route.label
        self.summary.advise_only = not route.stops
        if not route.stops:
            self.status.badge = _("ADVISE-ONLY: nothing is stopped")
        self.started_at = self.clock.now()
        self.started_wall = time.time()
        if target is not None:  # --attach: the same ledger run, its log, its job
            self.log_path = target.log_path
            self.checkpoint_request = target.log_path.with_suffix(".checkpoint-request")
            self.ledger.resume_run(target.run_id, pid=os.getpid(), mode=self._run_mode(route))
            run_id, run_started_at = target.run_id, target.started_at
            self._spend_before = self.ledger.spend(run_id=run_id).get(rate.currency, Decimal(0))
        else:
            stem = f"{self.started_at.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
            self.log_path = paths.runs_dir(s.data_dir) / f"{stem}.log"
            self.checkpoint_request = paths.runs_dir(s.data_dir) / f"{stem}.checkpoint-request"
            # A resumed job's run is linked to the run it continues (the bill shows the chain).
            continues = (self.ledger.continued_run(resume_from, command=self.options.command, before=self.started_at)
                         if resume_from else None)
            run_id = self.ledger.start_run(
                instance_pk, started_at=self.started_at, command=self.options.command,
                log_path=str(self.log_path), host=socket.gethostname(), pid=os.getpid(),
                continues_run_id=continues, resumed_from=resume_from, mode=self._run_mode(route),
            )
            run_started_at = self.started_at
        self._state = RunState(provider=provider.name, instance_id=instance_id, instance=inst, rate=rate,
                               gpu_name=resolved.gpu_name, gpu_count=gpu_count, billing=billing,
                               instance_pk=instance_pk, run_id=run_id, run_started_at=run_started_at)
        self._summary_from = run_started_at  # an attached run's duration counts from its start
        self.summary.run_ids.append(run_id)
        # The last synchronous ledger moment: the prior spend, read once; from here on every
        # write goes through the writer thread and the policies decide from memory.
        self._spend = self._read_spend(self._state, self.started_at)
        self.writer = LedgerWriter(
            self.ledger, say=self.say, max_pending=s.watch.ledger_queue_max,
            retry_max_s=s.watch.ledger_retry_max.total_seconds(), charge_start=self._charge_from,
            linger_s=min(WRITE_EVERY_S, WRITE_EVERY_TICKS * s.watch.sample_interval.total_seconds()),
        )
        if central_url is not None:
            self.central = CentralSync(self.ledger, central_url, say=self.say,
                                       interval_s=s.ledger.sync_interval.total_seconds()).start()
        self.recorder = DecisionRecorder(self.writer, self.summary, self.say, run_id=run_id)
        # The job's own full-precision metrics ($COSTCTL_METRICS_FILE, written by the HF callback's
        # on_log): once the file exists the progress is read from it, the output being the fallback.
        self._auto_metrics = (self.log_path.with_name(self.log_path.stem + ".metrics.jsonl")
                              if self.options.command and self.options.metrics_file is None else None)
        extra_env = dict(self.options.extra_env)
        if self._auto_metrics is not None:
            extra_env.setdefault(ENV_METRICS_FILE, str(self._auto_metrics))
        # The checkpoints the job saves on its own, reported by costctl.job.report_checkpoint (the
        # HF and Lightning callbacks do): counted as requested saves are (Lifecycle.note_reported_saves).
        self._saves_path = (self.log_path.with_name(self.log_path.stem + ".saves.jsonl")
                            if self.options.command else None)
        if self._saves_path is not None:
            extra_env.setdefault(ENV_CHECKPOINT_SAVES, str(self._saves_path))
        self.job = Job(self.options.command, batch=batch, resume_from=resume_from,
                       grace_s=s.watch.grace_period.total_seconds(), checkpoint_request=self.checkpoint_request,
                       extra_env=extra_env, run_id=lambda: self.state.run_id,
                       on_start=self._job_started, log_path=self.log_path, on_output_error=self._output_failed,
                       on_exit_argv=lambda: on_exit_argv(self.state.run_id, on_exit=self.options.on_exit,
                                                         config=s.config_path, dry_run=self.options.dry_run,
                                                         advise_only=self.options.advise_only),
                       pty=shares_one_terminal() if self.options.pty is None else self.options.pty,
                       on_output=self._on_output_range)

        self.engine = PolicyEngine(s, on_error=self._policy_failed)
        self.history = History(
            sample_interval=s.watch.sample_interval,
            started_at=self.started_at,
            child_running=None,
            progress_source=bool(self.options.command or self.options.metrics_file),
            total_steps=s.watch.total_steps,
        )
        self.executor = Executor(
            log=self.recorder, clock=self.clock, hooks=s.hooks, job=self.job, instances=provider, run=self,
            say=self.say, dry_run=self.options.dry_run, log_path=str(self.log_path),
            advise_only=not route.stops, route=route, stop_log=self.writer, stop_config=s.stop,
            before_self_stop=self._before_self_stop,
        )
        self._start_notifier(s)
        earlier_saves, chain_preempted = self._chain_history(run_id)
        mtbf_s, mtbf_source, mtbf_shown = self._mtbf(chain_preempted)
        self.lifecycle = Lifecycle(
            s, clock=self.clock, run=self, job=self.job, instances=provider, log=self.recorder,
            stopper=self.executor, ledger=self.writer, summary=self.summary, say=self.say,
            request_path=self.checkpoint_request, command=self.options.command, dry_run=self.options.dry_run,
            started_wall=self.started_wall, on_oom=self.options.on_oom, mtbf_s=mtbf_s, mtbf_source=mtbf_source,
            earlier_saves_s=earlier_saves, earlier_saves_source=N_("ledger: the chain's checkpoint rows"),
            saves_path=self._saves_path, mtbf_shown=mtbf_shown,
        )
        for decision, outcome in pending:
            self.recorder.record(decision, outcome)
        if not route.stops:
            self.recorder.record(Decision(
                time=self.started_at, policy="advise-only", action=Action.WARN,
                reason=_("this watch stops nothing: every stop (policies, budget caps, --on-exit stop, a move to "
                         "another card) is advice only; {detail}").format(detail=route.detail),
                evidence={"stop_route": route.as_evidence()}, key="advise-only"), "warned")
        self._metrics = MetricsFileFollower(self.options.metrics_file) if self.options.metrics_file else None
        # Each stream's parser reads what analyze reads (named losses, column tables, gradient
        # norms); the policies get the primary series only, chosen by analyze's rule, and the
        # gradient norms (costctl.progress.output).
        self._output = output = OutputProgress(self.options.loss_regex, self.options.loss)
        # The parser reads the job's output back from the run log (the relay wrote it there),
        # at its own pace: nothing is dropped while the job runs (see .pump).
        self._pump = ParsePump(self.log_path, output.parse,
                               self._progress_q.put, self.clock.now, on_error=self._output_failed,
                               on_gap=output.gap, lines_seen=lambda: output.lines_seen,
                               on_backlog=self._progress_backlog,
                               # a user's --loss-regex may take its whole time budget on a line
                               # (costctl.user_regex): never on the thread that passes output through
                               inline_max_bytes=INLINE_MAX_BYTES if output.user_regex is None else 0)
        if s.checkpoint.path:
            warning = ephemeral_storage_warning(resolve_pattern(s.checkpoint.path))
            if warning:
                self.recorder.record(Decision(time=self.started_at, policy="checkpoint", action=Action.WARN,
                                              reason=warning, evidence={"path": s.checkpoint.path},
                                              key="checkpoint-storage"), "warned")
        if self.options.command:
            # The run log is written by the job's relay (costctl.relay), not by this process.
            self.job.mux = OutputMux(
                None, self._on_text,
                stdout_fd=self._fds[0], stderr_fd=self._fds[1],
                before_write=self.status.clear, after_write=self.status.after_child_write,
                lock=self.status.lock, on_terminal_gone=self._terminal_gone,
            )
            if not self.options.passthrough:
                self.job.mux.terminal = False  # the relay's run log keeps the output; nobody reads ours
            try:
                if target is not None:
                    self.job.attach(target.since)
                else:
                    self.job.start()
            except CostctlError:
                if target is not None:  # the run stays open: unguarded again once this watch is gone
                    self.writer.close(s.watch.ledger_flush_timeout.total_seconds())
                    self._close_central()
                    self.ledger.close()
                    raise
                self.writer.finish_run(run_id, ended_at=self.clock.now(), exit_code=None, status="failed-to-start")
                self.writer.close(s.watch.ledger_flush_timeout.total_seconds())
                self._close_central()
                self.ledger.close()
                raise
        if self._sampler is None:
            # the stand-in is named in the sampler's sentence: English message ids (N_), for it to translate
            stand_in = N_("the watched process tree") if self.child else N_("all user processes")
            gpu = detect_gpu_source(log=lambda m: self.say(_("costctl: {message}").format(message=m)),
                                    stand_in=stand_in)
            cpu = _job_cpu(self.child.pid) if self.child else MachineCpu()
            self._sampler = Sampler(gpu, cpu, count_ssh=s.policies.idle.count_ssh_sessions,
                                    jupyter=jupyter_source(s),
                                    on_error=self._sampler_failed)
            self._own_cpu = self.child is not None
        gpu_name = resolved.gpu_name
        shape = {"run": run_id[:8], "command": shlex.join(self.options.command or []),
                 "offset": target.since if target is not None else None, "provider": provider.name,
                 "instance": instance_id, "gpu": gpu_name or _("unknown GPU"), "price": rate.shown(),
                 "config": s.config_path or _("defaults and environment"),
                 "log": self.log_path}
        spot = billing == "spot"
        if target is not None:
            mode = "attached"
        else:
            mode = "running" if self.options.command else "guarding"
        self.say(_(_STARTED[(mode, spot)]).format(**shape))
        if route.kind == "self-stop":
            self.say(_("costctl: {route} ({detail})").format(route=route, detail=route.detail))
        else:
            self.say(_("costctl: {route}").format(route=route))
        if resume_from:
            self.say(_("costctl: resuming from {path}").format(path=resume_from))
        if self.options.metrics_file is not None and not self.options.metrics_file.exists():
            self.say(_("costctl: metrics file {path} does not exist yet; waiting for the job to write it").format(
                path=self.options.metrics_file))
        if billing == "spot":
            self._start_notice_source()
        self._start_control(s)

    # ------------------------------------------------------------------ notifications, snooze
    def _notify_context(self) -> Context:
        run = self.state
        return Context(provider=run.provider, instance=run.instance_id, run=run.run_id, host=socket.gethostname(),
                       command=shlex.join(self.options.command or []),
                       api_route=self.executor is None or self.executor.route.kind == "api")

    def _start_notifier(self, s: Settings) -> None:
        """``[notify] urls``: the notifier hangs on the recorder and on the stop's steps; the
        warnings before a stop are recorded when some URL takes them (``stop_pending``)."""
        if not s.notify.urls:
            return
        assert self.recorder is not None and self.executor is not None
        self.notifier = Notifier(s.notify, self._notify_context, say=self.say, on_exit=self.options.on_exit,
                                 tz=s.watch.tz)
        self.notifier.snoozable = lambda policy: self.engine.snoozable(policy)  # a snooze note only where a snooze holds the stop
        self.recorder.subscribe(self.notifier.on_decision)
        self.executor.on_stop_event(self.notifier.on_stop_event)
        if any(Event.STOP_PENDING.value in t.events for t in self.notifier.targets) and not self.stops_nothing:
            self._stop_warnings = StopWarnings(s.notify.warn_before, s.watch.tz)

    def _start_control(self, s: Settings) -> None:
        """The control socket ``costctl snooze`` reaches (not with ``[snooze] max = "off"``, nor
        for a watch that stops nothing). One that cannot be opened is said; the watch goes on."""
        if s.snooze.max is None or self.stops_nothing:
            return
        from ..snooze import ControlServer

        assert self.recorder is not None
        control = SnoozeControl(
            engine=self.engine, recorder=self.recorder, clock=self.clock, config=s.snooze, lock=self._lock,
            pending=lambda now: self.engine.next_stop(self.history, now),
            stopping=lambda: self.executor.stop.state if self.executor and self.executor.stop else None,
            where=lambda: {"provider": self.state.provider, "instance": self.state.instance_id,
                           "run": self.state.run_id[:8]},
            tz=s.watch.tz, on_change=self._snoozed,
            unsnoozable=lambda now: self.engine.next_stop(self.history, now, snoozable=False))
        server = ControlServer(control.handle)
        try:
            server.start()
        except (CostctlError, OSError) as exc:
            self.say(_("costctl: `costctl snooze` cannot reach this watch: {error}").format(
                error=getattr(exc, "message", None) or exc))
            return
        self._control = server

    def _snoozed(self, note: str | None) -> None:
        """A snooze was given (``note``: the sentence the next notifications carry) or lifted."""
        if self.notifier is not None:
            self.notifier.snoozed = note

    def _warn_stop(self, now: datetime) -> None:
        """``[notify] warn_before`` ahead of a pending stop: one warning decision."""
        warnings = self._stop_warnings
        if warnings is None or self.recorder is None:
            return
        run = self.state
        pending = self.engine.next_stop(self.history, now)
        decision = warnings.check(pending, now, provider=run.provider, instance=run.instance_id,
                                  host=socket.gethostname(),
                                  snoozable=(pending is not None and self.engine.snoozable(pending.policy)
                                             and self._control is not None))  # `costctl snooze` reaches it
        if decision is not None:
            self.recorder.record(decision, "warned", say=_("costctl {policy} warning: {reason}").format(
                policy=decision.policy, reason=decision.reason))

    def _attach_target(self, instance_pk: int, instance_id: str) -> AttachTarget | None:
        """``--attach RUN``: the run to take over (None without ``--attach``); its command
        becomes this watch's.

        Raises:
            UsageError: see :func:`.attach.find_target`; the run is on another instance.
        """
        if self.options.attach is None:
            return None
        if self.options.command:
            raise UsageError(_("--attach takes no command: the run's job already runs"))
        assert self.ledger is not None
        target = find_target(self.ledger.open_runs(host=socket.gethostname()), self.options.attach,
                             alive=watch_alive)
        if target.instance_pk != instance_pk:
            raise UsageError(_("--attach {attach}: run {run} was recorded on another instance than {instance} (give "
                               "the same --config as its watch)").format(attach=self.options.attach,
                                                                        run=target.run_id[:8], instance=instance_id))
        self.options = replace(self.options, command=target.command or ["?"])
        return target

    def _job_started(self, child: RelayChild) -> None:
        """A (re)start of the command: telemetry and the policies follow the new process."""
        self._child_done = False
        if self._pump is not None:
            self._pump.resume()
        self.history.child_running = True
        self.history.child_exited_at = None
        if self._own_cpu and self._sampler is not None:
            self._sampler.cpu = _job_cpu(child.pid)
        if self._wakeup is not None:  # the live loop: woken at the job's exit, not polling for it
            threading.Thread(target=self._wake_at_exit, args=(child,), name="costctl-job-exit", daemon=True).start()

    def _wake_at_exit(self, child: RelayChild) -> None:
        """Thread: wake the main loop when ``child``'s root process exits."""
        try:
            child.wait_exit()
        except Exception as exc:  # noqa: BLE001 - the loop still polls the child; no thread traceback
            if self._thread_failed("job-exit", exc):
                self.say(_("costctl: waiting for the job's exit failed: {error}{traceback}; the watch goes on and polls "
                           "the job").format(error=self._exc_text(exc), traceback=self._crash_log("job-exit", exc)))
        self._wake()

    def _wake(self) -> None:
        """Wake the main loop of :meth:`run` (nothing outside it); safe in a signal handler."""
        wakeup = self._wakeup
        if wakeup is not None:
            wakeup.wake()

    def move_to(self, inst: Instance) -> None:
        """The job moves to instance ``inst``: close this ledger run (status ``downsized``) and
        start a new one there, charged at ``inst``'s price; :attr:`state` is replaced whole.

        Raises:
            ConfigError: the provider reported no price for ``inst``, or one costctl refuses
                (:func:`costctl.cloud.checked_price`).
        """
        assert self.writer is not None and self.recorder is not None and self.provider is not None
        assert self._spend is not None
        old = self.state
        now = self.clock.now()
        self.writer.accrue(old.run_id, now, old.rate.amount, old.rate.currency)
        spent = self._spend.run_spend(now)
        self.writer.finish_run(old.run_id, ended_at=now, exit_code=self.child_status, status="downsized")
        try:  # the boundary: a negative or absurd price is refused, never charged or stored
            price = checked_price(self.provider.name, inst.price_per_hour, inst.currency, instance=inst.id)
        except PriceRefused as exc:
            raise ConfigError(exc.message) from None
        if price is None:
            raise ConfigError(_("{provider} reported no price for instance {instance}").format(
                provider=self.provider.name, instance=inst.id))
        if inst.currency == old.rate.currency:
            self._spend_before += spent
        # The new run's key and id are needed at once: written through the writer (after what
        # is queued), waited for.
        wait_s = self.settings.watch.ledger_flush_timeout.total_seconds()
        try:
            instance_pk = self.writer.submit(
                "ensure_instance", self.provider.name, inst.id, gpu=inst.gpu, gpu_count=inst.gpu_count,
                billing=inst.billing.value, price_per_hour=price, currency=inst.currency,
                region=inst.region, what=_("record the instance")).result(wait_s)
            run_id = self.writer.submit(
                "start_run", instance_pk, started_at=now, command=self.options.command, log_path=str(self.log_path),
                host=socket.gethostname(), pid=os.getpid(), what=_("record the run")).result(wait_s)
        except TimeoutError:
            raise LedgerError(_("the ledger was unreachable for {seconds:g}s: cannot start the run on "
                                "{instance}").format(seconds=wait_s, instance=inst.id)) from None
        self._state = replace(old, instance_id=inst.id, instance=inst,
                              rate=Money(price, inst.currency), gpu_name=inst.gpu,
                              gpu_count=inst.gpu_count, billing=inst.billing.value, instance_pk=instance_pk,
                              run_id=run_id, run_started_at=now)
        self._spend = self._read_spend(self.state, now)
        self.recorder.run_id = run_id
        self.history.rate = self.state.rate
        self.summary.run_ids.append(run_id)

    # ------------------------------------------------------------------ spot instances
    def _chain_history(self, run_id: str) -> tuple[list[float], int]:
        """What the earlier runs of ``run_id``'s chain (a resumed job) measured: their save
        durations (seconds, oldest first; :func:`costctl.ledger.chains.chain_saves`) and how
        many preemptions they recorded. Empty for a first run or an unreadable ledger."""
        from ..ledger.chains import chain_preemptions, chain_run_ids, chain_saves

        assert self.ledger is not None
        try:
            with self.ledger.session() as session:
                earlier = [r for r in chain_run_ids(session, run_id) if r != run_id]
                saves = [c.seconds for c in chain_saves(session, earlier)]
                return saves, chain_preemptions(session, earlier)
        except LedgerError:
            return [], 0

    def _mtbf(self, chain_preemptions: int = 0) -> tuple[float | None, str, str]:
        """Mean time between preemptions for the periodic interval (see the lifecycle docs):
        every preemption the ledger recorded on spot instances counts, the earlier runs' of
        this chain (``chain_preemptions``) among them. Returns ``(seconds, where it comes from
        in English (the evidence), the same in the current language)``."""
        configured = self.settings.checkpoint.mtbf.total_seconds()
        assert self.ledger is not None
        try:
            with self.ledger.session() as session:
                seen = spot_exposure(session)
        except LedgerError:
            return configured, "configured", _("configured")
        if seen.charged_s <= 0:
            return configured, "configured", _("configured")
        blended = (configured + seen.charged_s) / (1 + seen.preemptions)
        if chain_preemptions:
            source = N_("observed: {count} preemption(s) ({chain} of them in earlier runs of this chain) in "
                        "{hours:.1f} spot hours (ledger), with the configured {prior:g} h as one prior observation")
        else:
            source = N_("observed: {count} preemption(s) in {hours:.1f} spot hours (ledger), with the configured "
                        "{prior:g} h as one prior observation")
        shape = {"count": seen.preemptions, "chain": chain_preemptions, "hours": seen.charged_s / 3600,
                 "prior": configured / 3600}
        return blended, source.format(**shape), _(source).format(**shape)

    def _start_notice_source(self) -> None:
        """Find the preemption-notice source (sim provider at once; cloud metadata in the background)."""
        cfg = self.settings.preemption
        provider = self.provider

        from costctl_providers.notices import NoticePoller, cloud_source, detect_cloud

        def detect() -> None:
            urls = {"aws_base_url": cfg.aws_base_url, "gcp_base_url": cfg.gcp_base_url,
                    "azure_base_url": cfg.azure_base_url}
            if cfg.source != "auto":  # [preemption] source names the cloud: nothing detected
                found = cloud_source(cfg.source, clock=self.clock, **urls)
            else:
                found = detect_cloud(provider=provider, instance_id=self.state.instance_id, clock=self.clock, **urls)
            if found.source is not None:
                poller = NoticePoller(found.source, cfg.poll_interval.total_seconds(), on_notice=self._on_notice,
                                      on_error=self._notices_failed)
                if poller.long_poll and self._threaded:
                    # A long-polling source (GCP) waits on the server: one thread of its own polls
                    # it back to back, a notice is seen when it is set (the job below skips it).
                    poller.start()
                    said = _("costctl: watching {platform} for preemption notices with a long-poll (answered when "
                             "the notice is set)")
                else:
                    said = _("costctl: watching {platform} for preemption notices every {seconds:g}s")
                self.notice_poller = poller
                self.say(said.format(platform=found.platform, seconds=cfg.poll_interval.total_seconds()))

        def detect_in_thread() -> None:
            try:
                detect()
            except Exception as exc:  # noqa: BLE001 - a thread's exception would print a traceback
                self._notices_failed(exc)

        if cfg.source != "auto" or getattr(provider.capabilities, "preemption_notice", False):
            detect()
        else:
            threading.Thread(target=detect_in_thread, name="costctl-detect-cloud", daemon=True).start()

    def _on_notice(self, notice: Notice) -> None:
        with self._lock:
            assert self.lifecycle is not None
            self.lifecycle.on_notice(notice)

    def poll_notices(self, now: datetime | None = None) -> None:
        """Poll the preemption-notice source once (and, on the sim provider, whether the spot
        instance was already taken without notice). Called by a scheduler job every
        ``[preemption] poll_interval``; tests call it on a simulated clock."""
        poller = self.notice_poller
        if poller is None or self._stopped_at is not None:
            return
        if not poller.threaded:  # a long-polling source has its own thread
            poller.poll_once()
        if getattr(self.provider.capabilities, "preemption_notice", False):
            with self._lock:
                assert self.lifecycle is not None
                self.lifecycle.check_preempted()

    def make_scheduler(self) -> Any:
        """The watch's :class:`~.scheduler.LoopScheduler` with its jobs (not started): ``tick``
        every ``[watch] sample_interval`` in the loop's thread and, on a spot instance,
        ``notices`` every ``[preemption] poll_interval`` on a pool thread (an HTTP call that
        may take seconds). What only the loop needs is imported here, once the job runs
        (APScheduler: ~25 ms that the job's start does not wait for)."""
        from apscheduler.executors.pool import ThreadPoolExecutor

        from .scheduler import LoopScheduler

        interval = self.settings.watch.sample_interval.total_seconds()
        scheduler = LoopScheduler(self._wake, timezone=timezone.utc,
                                  executors={"threads": ThreadPoolExecutor(max_workers=1)})
        scheduler.add_job(
            self._safe_tick, "interval", seconds=interval, next_run_time=datetime.now(timezone.utc),
            max_instances=1, coalesce=True, misfire_grace_time=max(1, int(interval)), id="tick",
        )
        if self.state.billing == "spot":
            poll = self.settings.preemption.poll_interval.total_seconds()
            scheduler.add_job(
                self._safe_poll_notices, "interval", seconds=poll, next_run_time=datetime.now(timezone.utc),
                max_instances=1, coalesce=True, misfire_grace_time=max(1, int(poll)), id="notices",
                executor="threads",
            )
        return scheduler

    def _safe_poll_notices(self) -> None:
        try:
            self.poll_notices()
        except Exception as exc:  # noqa: BLE001 - a broken notice source must not end the watch
            self._notices_failed(exc)
        finally:
            self._wake()  # the lifecycle may have something for the main loop

    # ------------------------------------------------------------------ progress and the tick
    def _on_text(self, stream: str, text: str) -> None:
        """The command's output (output thread): a sign of life, and the OOM scan. Progress is
        parsed from the run log (:meth:`_on_output_range`)."""
        self.history.last_output_at = self.clock.now()  # any output is a sign of life (stall)
        if self.lifecycle is not None:
            self._scan_oom(stream, text)

    def _on_output_range(self, stream: str, offset: int, length: int) -> None:
        """Where a piece of the command's output is in the run log (output thread): queued for
        the parser thread (:class:`~.pump.ParsePump`), whose batches of points the tick drains."""
        if self._metrics is None and self._pump is not None:
            auto = self._auto_metrics
            if auto is not None and not self._auto_seen:
                # one stat per 0.1 s of output at most (a job that never writes the file pays
                # nothing per line); the HF callback creates it in on_train_begin, long before
                # its first logged loss
                mono = time.monotonic()
                if mono - self._auto_checked >= 0.1:
                    self._auto_checked = mono
                    self._auto_seen = auto.exists()  # from here on the output is not progress
            if not self._auto_seen:
                self._pump.put_range(stream, offset, length)

    def _scan_oom(self, stream: str, text: str) -> None:
        """The OOM scan, cheap on a flood: the chunk (with the end of the previous one, so that
        a message split between two chunks is seen) is searched whole with the OOM recognizers
        (C speed); only a chunk where one matches is scanned line by line. Otherwise the scanner
        gets just the chunk's last partial line, after a line end (its state stays exact)."""
        assert self.lifecycle is not None
        ctx = self._oom_ctx.get(stream, "")
        self._oom_ctx[stream] = text[-OOM_CONTEXT_CHARS:]
        window = ctx + text if ctx else text
        if oom_in(window):
            self.lifecycle.on_text(stream, text)
            return
        cut = max(text.rfind("\n"), text.rfind("\r"))
        if cut == len(text) - 1 and not self.lifecycle.oom.pending(stream):
            return  # a whole line (or lines) and nothing before it: the scanner's state is unchanged
        self.lifecycle.on_text(stream, text if cut < 0 else "\n" + text[cut + 1:])

    def _end_budget(self) -> float:
        """Seconds left of the watch's end budget: one sample interval from the job's exit (as
        this watch saw it), less :data:`END_RESERVE_S`."""
        budget = max(0.0, self.settings.watch.sample_interval.total_seconds() - END_RESERVE_S)
        exited = getattr(self.child, "exited_monotonic", None)
        return budget if exited is None else max(0.0, exited + budget - time.monotonic())

    def _finish_parsing(self) -> None:
        """The job's output ended: let the parser finish within one sample interval of the
        job's exit (a flood of output never keeps the watch, and its bill, going), less
        :data:`END_RESERVE_S`; what it has not parsed by then stays in the run log and is said,
        with how to read it (:meth:`_say_unparsed`)."""
        pump = self._pump
        if pump is None:
            return
        child = self.child
        deadline = time.monotonic() + self._end_budget()
        # The policies take what is parsed as it comes (a tick every FINAL_TICK_EVERY_S), so
        # that the last tick does not meet a whole interval's points at once.
        while not pump.wait_idle(min(FINAL_TICK_EVERY_S, max(0.0, deadline - time.monotonic()))):
            if time.monotonic() >= deadline:
                break
            self._progress_tick()
        left = pump.drain(max(0.0, deadline - time.monotonic()))
        if child is not None:
            # Everything the job wrote before its exit was passed through (the relay sends the
            # exit after it); what processes it left behind write after the exit is awaited
            # only within the same budget: they never keep the watch, and its bill, going.
            child.drain(max(0.0, deadline - time.monotonic()))
            if not getattr(child, "output_ended", True) and not getattr(self, "_stragglers_said", False):
                self._stragglers_said = True
                from ..relay.server import DRAIN_S

                self.say(_("costctl: processes the job left behind still hold its output; what they write from now "
                           "on is not shown here (the relay keeps it in the run log {log} for {seconds:g} s after the "
                           "job's exit)").format(log=self.log_path, seconds=DRAIN_S))
        if not left:  # a last line without a line end: parsed now
            output = getattr(self, "_output", None)
            if output is not None and (batch := output.flush(self.clock.now())):
                self._progress_q.put(batch)
        self._say_unparsed()
        output = getattr(self, "_output", None)
        if output is not None and self.options.loss is not None and "train" not in output.primary.primary \
                and output.primary.names.get("train") and not getattr(self, "_loss_said", False):
            self._loss_said = True
            shown = ", ".join(repr(n) for n in output.primary.names["train"])
            self.say(_("costctl: --loss {loss!r}: the job's output showed no such train loss series (it has {names}): "
                       "the loss policies saw no train loss").format(loss=self.options.loss, names=shown))

    def _say_unparsed(self) -> None:
        """Say (once per drain) what the parser left: never silently lost."""
        pump = self._pump
        info = pump.last_unparsed if pump is not None else None
        if info is not None:
            pump.last_unparsed = None
            if info.exact:
                unparsed = _("costctl: {bytes:,} bytes ({lines:,} lines) of the job's output were not parsed for "
                             "progress by the end of the watch (one sample interval after the job's exit): the "
                             "policies did not see them. They are in the run log {log} (offsets {first:,}-{end:,}); "
                             "`costctl analyze --train-log {log}` reads all of it")
            else:
                unparsed = _("costctl: {bytes:,} bytes (about {lines:,} lines) of the job's output were not parsed "
                             "for progress by the end of the watch (one sample interval after the job's exit): the "
                             "policies did not see them. They are in the run log {log} (offsets {first:,}-{end:,}); "
                             "`costctl analyze --train-log {log}` reads all of it")
            self.say(unparsed.format(bytes=info.bytes, lines=info.lines, log=self.log_path, first=info.first_offset,
                                     end=info.end_offset))
        output = getattr(self, "_output", None)
        if output is not None and output.user_regex is not None:
            self._say_regex_timeouts(output.user_regex)
        long_lines = output.long_lines if output is not None else 0
        if long_lines > getattr(self, "_long_said", 0):
            self._long_said = long_lines
            self.say(ngettext("costctl: {count:,} line of the job's output longer than {max:,} characters was skipped "
                              "for progress: a loss on them was not read (they are in the run log {log})",
                              "costctl: {count:,} lines of the job's output longer than {max:,} characters were "
                              "skipped for progress: a loss on them was not read (they are in the run log {log})",
                              long_lines).format(count=long_lines, max=MAX_LINE_CHARS, log=self.log_path))
        split = output.split_numbers if output is not None else 0
        if split > getattr(self, "_split_said", 0):
            self._split_said = split
            self.say(ngettext("costctl: {count:,} line of the job's output had a control character inside a number; "
                              "it was skipped for progress (that number is no number; the run log {log} keeps it)",
                              "costctl: {count:,} lines of the job's output had a control character inside a number; "
                              "they were skipped for progress (those numbers are no numbers; the run log {log} keeps "
                              "them)", split).format(count=split, log=self.log_path))
        if pump is not None and pump.lost_bytes and not getattr(self, "_lost_said", False):
            self._lost_said = True
            self.say(_("costctl: {bytes:,} bytes of the job's output could not be read back from the run log {log} "
                       "for progress (see {err}); the policies did not see them").format(
                bytes=pump.lost_bytes, log=self.log_path, err=self.log_path.with_suffix(".relay.err")))

    def _say_regex_timeouts(self, user: UserRegex) -> None:
        """Say, once each, that ``--loss-regex`` timed out on a line of the job's output (the line
        skipped) and that it was turned off for timing out too often (:mod:`costctl.user_regex`)."""
        if user.timeouts and not getattr(self, "_regex_timeout_said", False):
            self._regex_timeout_said = True
            self.say(_("costctl: --loss-regex took longer than {ms:g} ms on a line of the job's output; such lines are "
                       "skipped for progress (they are in the run log {log}); after {count} of them the pattern is "
                       "turned off").format(ms=LINE_BUDGET_S * 1000, log=self.log_path, count=MAX_TIMEOUTS))
        if user.disabled and not getattr(self, "_regex_disabled_said", False):
            self._regex_disabled_said = True
            self.say(_("costctl: --loss-regex timed out on {count} lines of the job's output and is turned off; the "
                       "built-in loss shapes read the rest of the output (the watch goes on)").format(count=MAX_TIMEOUTS))

    def _progress_backlog(self) -> None:
        """The parser waits for its points to be taken (parser thread): the main loop runs a
        progress tick (:meth:`_progress_tick`) at its next turn."""
        self._progress_due = True
        self._wake()

    def _progress_tick(self) -> None:
        """Give the policies the points parsed since the last tick, between two ticks: a tick
        at the last sample's instant (so no new sample is taken; the charge is up to then), so
        that a fast parser's points never pile up in memory for a whole sample interval."""
        self._progress_due = False
        with self._lock:
            samples = self.history.samples if getattr(self, "history", None) is not None else None
            if not samples or self._stopped_at is not None:
                return
            last = samples[-1].time
        try:
            self.tick(last)
        except Exception as exc:  # noqa: BLE001 - as a tick's (see _safe_tick)
            if not self._tick_error_reported:
                self._tick_error_reported = True
                self.say(self._tick_failed(exc, self._crash_log("tick", exc)))

    def _take_grad_norms(self) -> None:
        """The gradient norms read since the last tick, to the history (divergence reads them);
        a primary series that moved to another is said (once per move). The metrics file's
        (``--metrics-file``, the job's ``$COSTCTL_METRICS_FILE``) come after the output's: once
        the file is read the output is no longer parsed."""
        output = self._output
        if output is not None and (records := output.take_grad_norms()):
            self.history.add_grad_norms(records)
        if self._metrics is not None and (records := self._metrics.take_grad_norms()):
            self.history.add_grad_norms(records)
        if output is None:
            return
        if output.user_regex is not None:
            self._say_regex_timeouts(output.user_regex)
        missing = output.primary.missing
        if missing is not None and not getattr(self, "_loss_said", False):
            self._loss_said = True  # once: not again at the end
            self.say(_("costctl: {missing}, after {points} points of those in the job's output: the loss policies "
                       "watch no train loss until it appears (the watch goes on)").format(
                missing=missing, points=MISSING_AFTER_POINTS))
        changes = output.primary.changes
        for kind, old, new in changes[getattr(self, "_moves_said", 0):]:
            self.say(_("costctl: the output now shows a {kind} loss series {new!r}, which the policies watch from here "
                       "on in place of {old!r} (a 'total' one, else the plain per-batch loss; --loss NAME picks "
                       "one)").format(kind=kind, new=new, old=old))
        self._moves_said = len(changes)

    def _drain_progress(self, now: datetime) -> PointBatch:
        """Everything the output threads (and the metrics file) gave since the last drain, as one batch."""
        out = PointBatch()
        q = self._progress_q
        while not q.empty():  # only this thread takes from it: a non-empty queue has a batch
            out.extend(q.get_nowait())
        if self._pump is not None:
            self._pump.consumed(len(out))
        if self._metrics is None and self._auto_metrics is not None and (self._auto_seen or self._auto_metrics.exists()):
            self._metrics = MetricsFileFollower(self._auto_metrics)  # the output is no longer parsed
            self.say(_("costctl: progress now read from the job's metrics file {path} (full precision; the printed "
                       "values are the fallback)").format(path=self._auto_metrics))
        if self._metrics is not None:
            try:
                for point in self._metrics.poll(now):
                    out.append_point(point)
            except CostctlError as exc:
                self.say(_("costctl: metrics file: {error}").format(error=exc.message))
            except Exception as exc:  # noqa: BLE001 - a file the job writes must never fail a tick
                self._metrics_failed(exc)
        return out

    def _act(self, decision: Decision) -> None:
        """Carry out one policy decision: ``downsize`` to the lifecycle controller, the rest to
        the executor; either way it is recorded once, by the recorder."""
        assert self.executor is not None and self.recorder is not None
        if decision.action is Action.DOWNSIZE and self.lifecycle is not None and not self.executor.advise_only:
            recorded, outcome = self.lifecycle.downsize(decision)
            self.recorder.record(recorded, outcome, dry_run=self.options.dry_run,
                                 say=_("costctl {policy}: {reason} -> {outcome}").format(
                                     policy=recorded.policy, reason=recorded.reason, outcome=outcome))
        else:
            self.executor.handle(decision)
        self._start_stop_runner()

    def _start_stop_runner(self) -> None:
        """A stop was decided: in the live watch its process runs in a thread of its own (a
        simulated-clock driver steps it from :meth:`step`)."""
        proc = self.executor.stopping if self.executor is not None else None
        if proc is None or not self._threaded or self._stop_runner is not None:
            return
        self._stop_runner = StopRunner(proc)
        self._stop_runner.start()

    def tick(self, now: datetime | None = None) -> list[Decision]:
        """One evaluation: sample, accrue, evaluate policies, act. Returns the new decisions.

        A second tick at the same instant (a simulated clock that did not move) takes no new
        sample; it still drains progress, accrues and evaluates."""
        with self._lock:
            now = now or self.clock.now()
            if self._stopped_at is not None:
                return []
            assert self.writer is not None and self._sampler is not None
            run = self.state
            if self.child is not None:
                self.history.child_running = self.child.running
            sample = None
            if not self.history.samples or now > self.history.samples[-1].time:
                sample = self._sampler.sample(now)
                self.history.add_sample(sample)
            points = self._drain_progress(now)
            self.history.add_batch(points)
            self._take_grad_norms()
            self.summary.add_batch(points)
            # Queued for the writer thread: a tick never waits on the database, and its writes
            # go in one transaction (held until all are queued). Decisions follow outside the
            # hold: carrying one out may wait on the writer (a move waits for its new run's id).
            # A stop that already ended (confirmed, or failed) ends the charging where the
            # finish will: a tick that runs before the watch notices never charges past it.
            stop = self.executor.stop if self.executor is not None else None
            billed_to = stop.ended_at if stop is not None and stop.ended_at is not None and stop.ended_at < now else now
            with self.writer.hold():
                if sample is not None:
                    self.writer.record_samples(run.run_id, [sample])
                self._record_progress(run.run_id, points, now)
                self.writer.accrue(run.run_id, billed_to, run.rate.amount, run.rate.currency)
            self._queue_compaction(now)
            self._update_spend(billed_to)
            # While a stop is carried through the policies rest (the stop is decided), and while
            # the job ends on the user's Ctrl-C (the user decided).
            resting = self._ending is not None or (self.executor is not None and self.executor.stop is not None)
            decisions = [] if resting else self.engine.evaluate(self.history, now)
            for decision in decisions:
                self._act(decision)
            for key, evidence in self.engine.updates(now):  # e.g. a plateau episode's repeats
                assert self.recorder is not None
                self.recorder.update(key, evidence)
            if self.executor is not None and self.executor.stop is not None:
                resting = True  # a stop was decided just now
            self._schedule_deadline(now, None if resting else self.engine.next_due(self.history, now))
            if not resting:
                self._warn_stop(now)
            if sample is not None:
                self.summary.add_sample(sample)
                self._status(now, sample)
            return decisions

    def _schedule_deadline(self, now: datetime, due: datetime | None) -> None:
        """A policy deadline (a stall window's end, a hung-job stop) before the next periodic
        tick gets a one-off tick of its own (APScheduler ``date`` job, :data:`DEADLINE_SLACK_S`
        after it), so the decision comes on the first tick after the deadline, not up to a
        sample interval late. Sets :attr:`next_deadline`."""
        interval = self.settings.watch.sample_interval.total_seconds()
        if due is None or (due - now).total_seconds() >= interval:
            self.next_deadline = None
            return
        self.next_deadline = due
        scheduler = self._scheduler
        if scheduler is None or due == self._deadline_queued:
            return
        self._deadline_queued = due
        delay = (due - now).total_seconds() + DEADLINE_SLACK_S
        scheduler.add_job(self._safe_tick, "date", run_date=datetime.now(timezone.utc) + timedelta(seconds=delay),
                          id="deadline", replace_existing=True, misfire_grace_time=max(1, int(interval)))

    def _queue_compaction(self, now: datetime) -> None:
        """Queue one bounded sample-retention pass for the writer when it is due: every
        :data:`COMPACT_EVERY_S`, every :data:`COMPACT_BACKLOG_EVERY_S` while the last pass was
        not ``done`` (older samples left), never while one is in flight; nothing when ``[ledger]
        sample_retention`` is off."""
        retention = self.settings.ledger.sample_retention
        if retention is None or self.writer is None:
            return
        last = self._compact_ticket
        if last is not None and not last.done:
            return
        if self._compact_at is None:  # the first pass: a minute in, not at start-up
            self._compact_at = self.started_at
            every = COMPACT_BACKLOG_EVERY_S
        else:
            try:
                backlog = last is None or not last.result(0).done
            except Exception:  # noqa: BLE001 - failed or dropped: try again a minute on
                backlog = True
            every = COMPACT_BACKLOG_EVERY_S if backlog else COMPACT_EVERY_S
        if (now - self._compact_at).total_seconds() < every:
            return
        self._compact_ticket = self.writer.compact(now, retention)
        self._compact_at = now

    def _record_progress(self, run_id: str, points: PointBatch, now: datetime) -> None:
        """Queue the bounded record of ``points`` (and of intervals over by ``now``) for the
        writer: every point up to ``[ledger] progress_points_per_interval`` per interval, exact
        per-interval figures beyond (:mod:`costctl.ledger.progress_store`)."""
        assert self.writer is not None
        store = self._progress_stores.get(run_id)
        if store is None:
            cfg = self.settings.ledger
            store = self._progress_stores[run_id] = ProgressStore(
                interval_s=cfg.progress_interval.total_seconds(), points_per_interval=cfg.progress_points_per_interval)
        if rows := store.add(points, now):
            self.writer.record_progress(run_id, rows)

    def _read_spend(self, run: RunState, now: datetime) -> SpendTracker:
        """The run's prior spend, read from the ledger once (start-up, a move)."""
        assert self.ledger is not None
        return SpendTracker.read(self.ledger, instance_pk=run.instance_pk, run_started_at=run.run_started_at,
                                 rate_per_hour=run.rate.amount, currency=run.rate.currency,
                                 tz=self.settings.watch.tz, now=now)

    def _charge_from(self, run_id: str) -> datetime | None:
        """Where ``run_id``'s charges start (the writer's report of what it could not write)."""
        spend = self._spend
        return spend.charge_from if spend is not None and self.run_id == run_id else None

    def _update_spend(self, now: datetime) -> None:
        """The spend the policies and the status line see, from memory (no ledger read)."""
        assert self._spend is not None
        run = self.state
        cur = run.rate.currency
        total, today, spent = self._spend.figures(now)
        self.history.spend_total = Money(total, cur)
        self.history.spend_today = Money(today, cur)
        self.history.rate = run.rate
        self.summary.spend = Money(spent + self._spend_before, cur)

    def _status(self, now: datetime, sample: TelemetrySample) -> None:
        if not self.status.enabled:
            return
        elapsed = now - self.started_at
        util = ", ".join(
            f"GPU{g.index} {g.utilization:.0f}%" if g.utilization is not None else f"GPU{g.index} ?"
            for g in sample.gpus
        ) or (f"CPU {sample.cpu_percent:.0f}%" if sample.cpu_percent is not None else "CPU ?")
        loss = self.summary.last_loss
        loss_txt = _("loss {loss:.4g}").format(loss=loss) if loss is not None else _("no loss yet")
        spend = self.summary.spend
        # What matters most comes first, so a narrow terminal cuts the least useful part: a stop
        # in flight, else the countdown to the nearest pending stop.
        proc = self.stopping
        if proc is not None:
            lead = f"{proc.describe()} | "
        else:
            pending = self.engine.next_stop(self.history, now)
            tz = self.settings.watch.tz
            lead = (f"{countdown(pending.progress, pending.at, now, tz, would=self.stops_nothing)} | "
                    if pending is not None else "")
        shown = (spend if spend is not None else Money.zero(self.rate.currency)).shown()
        self.status.update(f" costctl | {lead}{str(elapsed).split('.')[0]} | {shown} | {util} | {loss_txt} ")

    def _crash_log(self, what: str, exc: BaseException) -> str:
        """Write ``exc``'s traceback to the crash-log dir; returns `` (traceback in PATH)`` or ''."""
        try:
            path = paths.crash_log_dir() / f"{what}-{self.run_id}.log"
            path.write_text("".join(traceback.format_exception(exc)))
        except (OSError, CostctlError):
            return ""
        return _(" (traceback in {path})").format(path=path)

    def _policy_failed(self, name: str, exc: BaseException) -> None:
        """A policy raised: say so once, naming it; the other policies go on (PolicyEngine)."""
        message = exc.message if isinstance(exc, CostctlError) else f"{type(exc).__name__}: {exc}"
        where = "" if isinstance(exc, CostctlError) else self._crash_log(f"policy-{name}", exc)
        self.say(_("costctl: policy {name} failed and is skipped while it fails: {message}{traceback}; the other "
                   "policies go on").format(name=name, message=message, traceback=where))

    def _safe_tick(self) -> None:
        """A scheduled tick (run by the main loop, :meth:`_loop`, which steps right after it)."""
        try:
            self.tick()
        except Exception as exc:  # noqa: BLE001 - keep guarding; the traceback goes to a log file
            if not self._tick_error_reported:
                self._tick_error_reported = True
                self.say(self._tick_failed(exc, self._crash_log("tick", exc)))

    @staticmethod
    def _tick_failed(exc: BaseException, where: str) -> str:
        """The line that says a tick raised ``exc`` (``where``: :meth:`_crash_log`'s text)."""
        return _("costctl: error during a tick: {error}: {detail}{traceback}").format(
            error=type(exc).__name__, detail=exc, traceback=where)

    # ------------------------------------------------------------------ the main loop
    def _handle_winch(self, signum: int, frame: Any) -> None:
        """costctl's terminal was resized: the job's pty follows (when it runs on one)."""
        child = self.job.child if getattr(self, "job", None) is not None else None
        size = terminal_size(1) if child is not None and child.tty else None
        if size is not None:
            child.resize(*size)  # type: ignore[union-attr]

    def _handle_hangup(self, signum: int, frame: Any) -> None:
        # SIGHUP (the terminal went away): the watch and the job go on; nothing more is written
        # to the terminal. Plain assignments only (see _handle_signal); the loop does the rest.
        # Where neither stdout nor stderr is a terminal (`> train.out 2>&1 &`), nothing changes.
        self._hangup = True
        self._wake()
        if not self._terminal_fds:
            return
        self.status.gone = True
        self.status.enabled = False
        mux = self.job.mux if self.job is not None else None
        if mux is not None:
            mux.terminal = False

    def _terminal_gone(self) -> None:
        """The terminal went away (SIGHUP, or a write failed with EIO): nothing more is written
        to it, and costctl's own stdout/stderr, where they were that terminal, now go to
        /dev/null, so no later write (a message, the summary, Python's flush at exit) fails."""
        self._hangup = True
        self.status.terminal_gone()
        mux = self.job.mux if self.job is not None else None
        if mux is not None:
            mux.terminal = False
        if self._terminal_fds is None:
            return
        fds, self._terminal_fds = self._terminal_fds, None
        try:
            null = os.open(os.devnull, os.O_WRONLY)
        except OSError:
            return
        for fd in fds:
            try:
                os.dup2(null, fd)
            except OSError:
                pass
        os.close(null)
        # The terminal's fds now write to /dev/null; a stdout or stderr that is a file or a pipe
        # (`> train.out`) goes on getting the job's output.
        if mux is not None and len(fds) < 2:
            mux.terminal = True

    def _thread_failed(self, what: str, exc: BaseException) -> bool:
        """An unexpected exception in one of the watch's threads or readers (``what``:
        ``"output"``, ``"metrics-file"``, ``"sampler-gpu"``, ``"notices"``...): counted in
        :attr:`thread_errors`; the first one's traceback goes to the crash log
        (``<crash-log dir>/<what>-<run id>.log``). Returns True for that first one, which the
        caller says, once (a thread failing on every line or tick says it once, not a line per
        failure); the thread goes on either way."""
        with self._errors_lock:
            count = self.thread_errors.get(what, 0) + 1
            self.thread_errors[what] = count
        return count == 1

    @staticmethod
    def _exc_text(exc: BaseException) -> str:
        """``Type: message`` of ``exc`` for one line (the message cut to 200 characters: an
        exception may quote megabytes of input)."""
        text = str(exc)
        return f"{type(exc).__name__}: {text if len(text) <= 200 else text[:197] + '...'}"

    def _output_failed(self, exc: BaseException) -> None:
        """Handling the job's output raised (the relay thread, or the parser thread): said once
        for the whole watch, with the traceback in the crash log; the output goes on being read
        and logged by the relay and parsed (from the next line on)."""
        if self._thread_failed("output", exc):
            where = self._crash_log("output", exc)
            self.say(_("costctl: error while handling the job's output: {error}{traceback}; the job and its run log "
                       "are unaffected").format(error=self._exc_text(exc), traceback=where))

    def _metrics_failed(self, exc: BaseException) -> None:
        """Reading the metrics file raised something unexpected: said once, the traceback in the
        crash log; the file is polled again at the next tick (the tick itself goes on)."""
        if self._thread_failed("metrics-file", exc):
            where = self._crash_log("metrics-file", exc)
            self.say(_("costctl: error while reading the metrics file: {error}{traceback}; the watch goes on and "
                       "reads it again at the next tick").format(error=self._exc_text(exc), traceback=where))

    def _sampler_failed(self, source: str, exc: BaseException) -> None:
        """A telemetry source raised (the sampler reads it ERROR, i.e. busy, for that sample):
        said once per source, the traceback in the crash log."""
        if self._thread_failed(f"sampler-{source}", exc):
            where = self._crash_log(f"sampler-{source}", exc)
            self.say(_("costctl: the {source} reading failed: {error}{traceback}; it counts as busy while it fails, "
                       "and the watch goes on").format(source=source, error=self._exc_text(exc), traceback=where))

    def _notices_failed(self, exc: BaseException) -> None:
        """The preemption-notice source raised something unexpected: said once, the traceback in
        the crash log; it is polled again (an unreadable source never gives a notice)."""
        if self._thread_failed("notices", exc):
            where = self._crash_log("notices", exc)
            self.say(_("costctl: preemption notice poll failed: {error}{traceback}; the watch goes on polling").format(
                error=self._exc_text(exc), traceback=where))

    def _handle_signal(self, signum: int, frame: Any) -> None:
        # Only a plain assignment: the handler runs between two bytecodes of the main thread,
        # which may hold a lock (Event.wait holds its Condition's) that set() would wait on
        # forever. The loop is woken through its self-pipe (a write: no lock).
        self._signal = signum
        self._signals += 1
        self._wake()

    def run(self) -> int:
        """Start everything, loop in real time until done, clean up; returns the exit status."""
        # SIGINT/SIGTERM are ours from before the child starts: one arriving while start() is
        # still running is passed to the job by the loop instead of killing costctl unrecorded.
        self._wakeup = Wakeup()
        old = {s: signal.signal(s, self._handle_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        old[signal.SIGHUP] = signal.signal(signal.SIGHUP, self._handle_hangup)
        old[signal.SIGWINCH] = signal.signal(signal.SIGWINCH, self._handle_winch)
        try:
            self.start()
        except BaseException:
            for s, h in old.items():
                signal.signal(s, h)
            self._close_wakeup()
            raise
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        scheduler = self.make_scheduler()
        self._threaded = True
        poller = self.notice_poller
        if poller is not None and poller.long_poll:  # found before the loop ran (see _start_notice_source)
            poller.start()
        self._scheduler = scheduler
        scheduler.start()
        exit_code = 0
        status = "running"
        try:
            exit_code, status = self._loop()
        finally:
            self._scheduler = None
            scheduler.shutdown(wait=True)
            if self.notice_poller is not None:
                self.notice_poller.stop()
            if self._stop_runner is not None:
                self._stop_runner.join(1.0)
            for s, h in old.items():
                signal.signal(s, h)
            try:
                exit_code, status = self.finish(exit_code, status)
            finally:
                self._close_wakeup()
        return exit_code

    def _close_wakeup(self) -> None:
        wakeup, self._wakeup = self._wakeup, None
        if wakeup is not None:
            wakeup.close()

    def _loop(self) -> tuple[int, str]:
        assert self._wakeup is not None
        while True:
            if self._hangup and self._terminal_fds is not None:
                self._terminal_gone()
            scheduler = self._scheduler
            if scheduler is not None and scheduler.wait_s() == 0.0:
                scheduler.run_due()  # the ticks that are due, in this thread; then the step
            result = self.step()
            if result is not None:
                return result
            self._wakeup.wait(self._loop_timeout())

    def _loop_timeout(self) -> float:
        """How long the main loop may sleep before its next :meth:`step` unless woken (seconds):
        up to the end of the grace period while the job ends after a signal, :data:`BUSY_POLL_S`
        while a checkpoint request or a stop is followed, else :data:`IDLE_WAIT_MAX_S` (the
        signals, the job's exit and :meth:`mark_stopped` wake it); never past the next
        scheduled job (:class:`~.scheduler.LoopScheduler`: the ticks run in this loop)."""
        wait = BUSY_POLL_S if self._done.is_set() else IDLE_WAIT_MAX_S  # ending: never a busy loop
        if self._ending is not None:
            wait = max(0.0, self._ending[2] - time.monotonic())
        if self.executor is not None and self.executor.stop is not None:
            wait = min(wait, BUSY_POLL_S)
        if self.lifecycle is not None and self.lifecycle.requester.pending is not None:
            wait = min(wait, BUSY_POLL_S)
        scheduler = self._scheduler
        due = scheduler.wait_s() if scheduler is not None else None
        return wait if due is None else min(wait, due)

    def step(self) -> tuple[int, str] | None:
        """One turn of the main loop: signals, stops, lifecycle, the command's exit.

        Returns ``(exit status, run status)`` when the watch should end, else None. The real
        loop calls it when woken (:meth:`_loop_timeout`); a simulated-clock driver calls it
        between clock advances.
        """
        if self._progress_due:
            self._progress_tick()
        if self._ending is not None:
            return self._on_ending()
        if self._signal is not None:
            return self._on_signal()
        if self.executor is not None and self.executor.stop is not None and self._stopped_at is None:
            return self._stop_step()
        if self._stopped_at is None and self.lifecycle is not None:
            with self._lock:
                try:
                    self.lifecycle.poll()
                except CostctlError as exc:  # e.g. the ledger is unwritable: keep guarding
                    self.say(_("costctl: lifecycle step failed: {error}").format(error=exc.message))
        job = self.job
        if self._stopped_at is not None:
            if job is not None and job.exists and job.status is None:
                job.end()
            code = self.child_status if self.child_status is not None else 0
            return code, "preempted" if self.lifecycle is not None and self.lifecycle.preempted else "stopped"
        if not self._child_done and job is not None and job.exists and not job.running:
            self._child_done = True
            status = job.wait(end_wait_s=self._end_budget())
            self._finish_parsing()
            with self._lock:
                self.history.child_running = False
                self.history.child_exited_at = self.clock.now()
            notifier = self.notifier
            if notifier is not None:
                notifier.defer()  # the job's end is told before what it leads to (job_ended)
            try:
                self.tick()  # record the last output and spend up to the exit
                if self._stopped_at is not None:
                    return None
                with self._lock:
                    assert self.lifecycle is not None
                    if self.lifecycle.requester.pending is not None:
                        self.lifecycle.poll()  # the job exited during a checkpoint request
                    if self._stopped_at is not None:
                        return None
                    if self.lifecycle.child_exited(status):
                        return None  # restarted (OOM retry)
                return self._after_exit(status)
            finally:
                if notifier is not None:
                    notifier.release()
        return None

    def _stop_step(self) -> tuple[int, str] | None:
        """A stop was decided: step it (simulated-clock drivers) and end the watch when it ends,
        with the job's status when the instance was stopped, else :data:`EXIT_STOP_FAILED`."""
        assert self.executor is not None and self.executor.stop is not None
        # Whoever decided it (a policy through _act, or the lifecycle's preemption straight to
        # the executor, maybe on the notice poll's thread), the live watch's stop runs in its
        # thread: started here at the latest.
        self._start_stop_runner()
        proc = self.executor.stopping
        if not self.executor.stop.done:  # set once the stop's end is recorded
            if proc is not None and not self._threaded and proc.due():
                proc.step()
            return None  # the status line shows the stop's progress at each tick
        stop = self.executor.stop
        self._stopped_at = stop.ended_at or self.clock.now()
        self._done.set()
        job = self.job
        if job is not None and job.exists and job.status is None:
            job.end()
        self.summary.stop = stop
        if not stop.stopped:
            return EXIT_STOP_FAILED, "stop failed"
        code = self.child_status if self.child_status is not None else 0
        return code, "preempted" if self.lifecycle is not None and self.lifecycle.preempted else "stopped"

    def _after_exit(self, status: int) -> tuple[int, str] | None:
        """The command exited for good: ``--on-exit`` leave, stop or guard."""
        if self.notifier is not None:
            self.notifier.job_ended(status, self.clock.now())
        if self._chain_lock is not None:  # its checkpoints are free for a --resume (a guard goes on)
            self._chain_lock.release()
        on_exit = self.options.on_exit
        if on_exit == "leave":
            return status, "completed" if status == 0 else "failed"
        if on_exit == "stop":
            with self._lock:
                self._act(Decision(
                    time=self.clock.now(), policy="on-exit", action=Action.STOP,
                    reason=_("the command exited with status {status} and --on-exit stop is set").format(
                        status=status),
                    evidence={"exit_status": status}, key="on-exit",
                ))
            if self.executor is None or self.executor.stop is None:  # dry run, advise-only
                return status, "completed" if status == 0 else "failed"
            return None
        if not self.stops_nothing:
            guard = _("costctl: the command exited with status {status}; guarding the instance until the idle policy "
                      "stops it (Ctrl-C leaves it running)")
        elif self.options.dry_run:
            guard = _("costctl: the command exited with status {status}; guarding the instance (it is never stopped: "
                      "--dry-run; Ctrl-C ends the watch)")
        else:
            guard = _("costctl: the command exited with status {status}; guarding the instance (it is never stopped: "
                      "--advise-only; Ctrl-C ends the watch)")
        self.say(guard.format(status=status))
        return None

    def _on_signal(self) -> tuple[int, str] | None:
        """A SIGINT/SIGTERM: pass it to a running job's process group and keep looping while it
        ends (:meth:`_on_ending`); with no job running, end the watch at once. Either way the
        instance is left running, and that is said."""
        sig = self._signal or signal.SIGTERM
        stop = self.executor.stop if self.executor is not None else None
        if stop is not None:  # told to end once a stop was decided: it ends as the stop did
            assert self.executor is not None
            proc = self.executor.stopping
            if proc is not None and proc.self_stop_returned:
                # A signal after the self-stop returned is most likely the power-off itself
                # (systemd ends every process): the run stays "self-stop sent", as recorded.
                self._stopped_at = self.clock.now()
                self.summary.stop = stop
                return (self.child_status if self.child_status is not None else 0), "self-stop sent"
            if proc is not None and not proc.done:  # not confirmed yet: failed
                proc.cancel(_("the watch got {signal}").format(signal=signal.Signals(sig).name))
            self.executor.abort()
            if self.job is not None and self.job.running:
                self.job.signal(signal.SIGKILL)  # the stop was ending it; the stop thread reaps it
            self._stopped_at = stop.ended_at or self.clock.now()
            self.summary.stop = stop
            if stop.state in ("confirmed", "gone"):
                code = self.child_status if self.child_status is not None else 0
                return code, "stopped"
            return EXIT_STOP_FAILED, "stop failed"
        name = signal.Signals(sig).name
        job = self.job
        if job is not None and job.running:
            again = "Ctrl-C" if sig == signal.SIGINT else name
            self.say(_("costctl: {signal}: passing it to the job ({again} again to end it at once)").format(
                signal=name, again=again))
            # Only the first signal is passed: a second one, even one that came before this
            # turn of the loop (a double tap), kills the job.
            self._ending = (sig, 1, time.monotonic() + job.grace_s)
            job.signal(sig)
            return self._on_ending()
        self.say(_("costctl: {signal}: the watch ends").format(signal=name))
        self._say_left_running()
        return (self.child_status if self.child_status is not None else 128 + sig), "interrupted"

    def _on_ending(self) -> tuple[int, str] | None:
        """The job was passed a signal: None while it is still ending; once it has exited, or
        at a second signal (SIGKILL to its whole group at once), or after ``[watch]
        grace_period`` (SIGKILL too), ``(its exit status, "interrupted")``. The exit status is
        the job's: 128+N when signal N ended it, so 137 after a second Ctrl-C."""
        assert self._ending is not None and self.job is not None
        sig, seen, deadline = self._ending
        job = self.job
        if job.running:
            if self._signals > seen:
                status = job.kill()
                latest = self._signal or sig
                again = "Ctrl-C" if latest == signal.SIGINT else signal.Signals(latest).name
                self.say(_("costctl: second {again}: the job was killed").format(again=again))
            elif time.monotonic() >= deadline:
                status = job.kill()
                self.say(_("costctl: the job did not end within the grace period ({seconds:g}s) after {signal}: it was "
                           "killed").format(seconds=job.grace_s, signal=signal.Signals(sig).name))
            else:
                return None
        else:
            status = job.kill()  # reaps it, and ends the stragglers of its group
        self._child_done = True
        self._say_left_running()
        return (status if status is not None else 128 + sig), "interrupted"

    def _say_left_running(self) -> None:
        """Say plainly that the watch leaves its instance running (and billing), unless a stop
        already ended the watch."""
        if self._stopped_at is not None or self._state is None:
            return
        run = self.state
        shape = {"provider": run.provider, "instance": run.instance_id, "rate": run.rate.shown(),
                 "why": "--dry-run" if self.options.dry_run else "advise-only"}
        if self.stops_nothing:
            self.say(_("costctl: {provider} instance {instance} is left running and bills on at {rate}/h (this watch "
                       "stops nothing anyway: {why})").format(**shape))
        else:
            self.say(_("costctl: {provider} instance {instance} is left running and bills on at {rate}/h; `costctl "
                       "stop {instance}` stops it").format(**shape))

    # ------------------------------------------------------------------ the end
    def _advise_underuse(self, end: datetime) -> None:
        """End-of-run advice when a cheaper card would have done this run (GPU telemetry only)."""
        summ = self.summary
        if summ.peak_gpu_memory_bytes is None or summ.busiest_gpu_utilization is None or self.lifecycle is None:
            return
        try:
            options = self.lifecycle.price_options()
        except CostctlError:
            return
        run = self.state
        advice = underuse_advice(
            run_id=run.run_id, gpu=run.gpu_name, rate=run.rate,
            duration_s=(end - run.run_started_at).total_seconds(), peak_memory_bytes=summ.peak_gpu_memory_bytes,
            card_memory_bytes=summ.gpu_memory_total_bytes, mean_utilization=summ.busiest_gpu_utilization,
            options=options, config=self.settings.downsize,
        )
        if advice is not None:
            assert self.recorder is not None
            self.recorder.record(Decision(time=end, policy="underutilized", action=Action.ADVISE, reason=advice.text,
                                          evidence=advice.to_dict(), key="underutilized"), "advised", say=False)
            summ.advice.append(advice.text)

    def _close_central(self) -> None:
        """Fleet mode: one last send to the central ledger (up to ``[ledger]
        central_flush_timeout``; what is left waits in the outbox), then stop the sender."""
        if self.central is not None:
            self.central.close(self.settings.ledger.central_flush_timeout.total_seconds())

    def finish(self, exit_code: int, status: str) -> tuple[int, str]:
        """Close the run in the ledger, print the summary and release everything; returns
        ``(exit status, run status)``. :meth:`run` calls it; simulated-clock drivers too."""
        if self.ledger is None or self._state is None:
            if self._chain_lock is not None:
                self._chain_lock.release()
            return exit_code, status
        end = self._stopped_at or self.clock.now()
        if self._pump is not None:
            self._finish_parsing()
            self._pump.close()
        try:
            if self._stopped_at is None:
                self.tick(end)
            else:  # stopped between ticks (e.g. a preemption): keep the progress seen since the last one
                with self._lock:
                    points = self._drain_progress(end)
                    if points:
                        self._record_progress(self.state.run_id, points, end)
                        self.summary.add_batch(points)
            with self._lock:
                if self.lifecycle is not None and self.lifecycle.requester.pending is not None:
                    self.lifecycle.requester.withdraw()
                self._advise_underuse(end)
                run = self.state
                assert self.writer is not None
                self.writer.accrue(run.run_id, end, run.rate.amount, run.rate.currency)
                self._update_spend(end)
                if status == "running":
                    status = "completed"
                for run_id, store in self._progress_stores.items():  # the open intervals
                    if rows := store.flush():
                        self.writer.record_progress(run_id, rows)
                self.writer.finish_run(run.run_id, ended_at=end, exit_code=self.child_status, status=status)
        except LedgerError as exc:
            self.say(_("costctl: could not close the run in the ledger: {error}").format(error=exc.message))
        finally:
            if self._control is not None:
                self._control.close()
                self._control = None
            if self.notifier is not None:  # what is queued is sent; a sender that hangs is left to its timeout
                self.notifier.close()
            if self.writer is not None:  # wait for the ledger (an outage: up to the flush timeout)
                self.writer.close(self.settings.watch.ledger_flush_timeout.total_seconds())
            self._close_central()
            self.status.close()
        self.summary.duration = end - min(self.started_at, self._summary_from or self.started_at)
        if not self.options.quiet and not self.status.gone:
            try:
                self.summary.print(self.state.run_id, self.rate.currency, sys.stderr)
            except OSError:  # the terminal went away
                self.status.terminal_gone()
        self.ledger.close()
        if self._chain_lock is not None:
            self._chain_lock.release()
        return exit_code, status


__all__ = ["Watcher", "run_unguarded", "watch_alive"]
