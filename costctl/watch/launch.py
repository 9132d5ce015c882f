"""The job started as early as is safe: :func:`launch_early`, before the watch's heavy parts.

``costctl watch -- CMD`` used to import the whole watch (the ledger's SQLAlchemy stack, the
scheduler, the policies, the lifecycle: ~0.35 s) and open and migrate the ledger before the job
started; a job's start-up is billed time. Now :func:`launch_early`, with light imports only,

1. does everything that guards money first, exactly as :meth:`.watcher.Watcher.start` would:
   the configuration (validated by the caller), the provider, the instance, its price and the
   stop route (the preflight: a watch that could not stop its instance refuses here, nothing
   started), and the command's checks (:func:`.command.prepare_command`);
2. takes the run's id (``uuid4().hex``, as the ledger would), its start time (the run's charges
   start there, before the job) and its log path, and installs the watch's SIGINT/SIGTERM/
   SIGHUP handling (a signal from here on is kept and passed to the job by the watch's loop,
   never a KeyboardInterrupt that would leave the job running unrecorded);
3. starts the job (its relay) with an :class:`~costctl.child.OutputMux` whose callbacks go to
   a :class:`_Pending` that keeps what the watch needs until :meth:`EarlyStart.bind`: the
   ranges of output for the parser (the parser itself, :class:`~.pump.ParsePump`, runs at
   once: it reads the run log), the OOM scan's input (reduced as the watch reduces it: the
   chunks where an OOM recognizer matches, else the last partial line), the time of the last
   output, a failed write to the terminal, an error.

The watch (:class:`~.watcher.Watcher` with ``early=``) is then imported and started; it opens
the ledger and records the instance and the run (with that id and start time) while the job
runs, then binds the pending callbacks to itself.

Where the ledger fails after the job started (unreachable, unwritable, a failed migration):
nothing has been recorded, so no billing record is lost — the ledger holds none for this run,
as when a refusal came first — and the job, running for well under a second, is ended (SIGTERM,
``[watch] grace_period``, SIGKILL; said on stderr with the ledger's error) so that no job runs
unrecorded and unguarded; its output so far stays in its run log. The job does *not* start early
where the watch must first start an instance (:func:`.instance.bring_up`: that start is
recorded in the ledger before anything runs), with ``--attach`` (no job to start) or without a
command.
"""

from __future__ import annotations

import os
import queue
import signal
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import paths
from ..child import OutputMux
from ..clock import RealClock
from ..config import Settings
from ..errors import CostctlError, LedgerError
from ..progress.lines import LineParser
from ..relay.client import RelayChild, shares_one_terminal, terminal_size
from ..replay.oom import oom_in
from ..statusline import StatusLine
from .attach import on_exit_argv
from .command import prepare_command
from .instance import ResolvedInstance, resolve_instance
from .job import Job
from .options import WatchOptions
from .pump import ParsePump

if TYPE_CHECKING:
    from costctl_providers.base import Provider

    from .watcher import Watcher

#: Characters of the previous chunk searched with the next one for an OOM message (as the watch).
OOM_CONTEXT_CHARS = 512
#: Signals the early start takes over (the watch's loop handles them once it runs; SIGWINCH is
#: handled at once: the job's pty is resized).
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _no_taker_yet() -> None:
    """The pump's ``on_backlog`` before the watch binds: nobody can take points yet (the
    parser waits at :data:`~.pump.MAX_UNCONSUMED_POINTS`; the watch's own ``on_backlog``
    replaces this one at its bind and is asked then)."""


class _Pending:
    """The job's callbacks until the watch binds them (output thread; see the module docstring)."""

    def __init__(self, pump: ParsePump | None) -> None:
        self.pump = pump
        self.watcher: Watcher | None = None
        self._lock = threading.Lock()
        self.oom_texts: list[tuple[str, str]] = []  # (stream, text) for the OOM scan, reduced
        self._ctx: dict[str, str] = {}
        self.last_output_at: datetime | None = None
        self.terminal_gone = False
        self.error: BaseException | None = None
        self.child: RelayChild | None = None
        self.clock = RealClock()

    def on_text(self, stream: str, text: str) -> None:
        with self._lock:  # bind() replays what came before under it: the order is kept
            w = self.watcher
            if w is None:
                self.last_output_at = self.clock.now()
                ctx = self._ctx.get(stream, "")
                self._ctx[stream] = text[-OOM_CONTEXT_CHARS:]
                if oom_in(ctx + text if ctx else text):
                    self.oom_texts.append((stream, text))
                else:
                    cut = max(text.rfind("\n"), text.rfind("\r"))
                    self.oom_texts.append((stream, text if cut < 0 else "\n" + text[cut + 1:]))
                    if len(self.oom_texts) > 64:  # keep it small: only the partial lines matter then
                        self._squash()
                return
        w._on_text(stream, text)

    def _squash(self) -> None:
        """Merge consecutive reduced (no-OOM) entries of a stream into their last partial line."""
        out: list[tuple[str, str]] = []
        for stream, text in self.oom_texts:
            if out and out[-1][0] == stream and text.startswith("\n") and out[-1][1].startswith("\n") \
                    and "\n" not in out[-1][1][1:] and "\r" not in out[-1][1][1:]:
                out[-1] = (stream, text)
            else:
                out.append((stream, text))
        self.oom_texts = out

    def on_output(self, stream: str, offset: int, length: int) -> None:
        w = self.watcher
        if w is not None:
            w._on_output_range(stream, offset, length)
        elif self.pump is not None:  # None: progress comes from a metrics file
            self.pump.put_range(stream, offset, length)

    def on_terminal_gone(self) -> None:
        w = self.watcher
        if w is not None:
            w._terminal_gone()
        else:
            self.terminal_gone = True

    def on_error(self, exc: BaseException) -> None:
        w = self.watcher
        if w is not None:
            w._output_failed(exc)
        elif self.error is None:
            self.error = exc

    def on_start(self, child: RelayChild) -> None:
        w = self.watcher
        if w is not None:
            w._job_started(child)
        else:
            self.child = child


@dataclass
class EarlyStart:
    """The preflight's results and the job already started (see the module docstring).

    Attributes:
        settings: the settings as the preflight left them (the resolved instance's).
        provider / resolved: the provider and the instance, price and stop route.
        batch / resume_from: :func:`.command.prepare_command`'s results.
        url: the ledger's URL (not opened yet).
        run_id: the ledger run's id (uuid4 hex), given to the job as ``$COSTCTL_RUN_ID``.
        started_at / started_wall: the run's start (aware UTC; POSIX seconds), before the job's.
        log_path / checkpoint_request: the run log and the checkpoint-request file.
        job: the started :class:`~.job.Job`; status: the status line its output clears.
        pump / parsers / progress_q: the parser thread, the per-stream parsers, its batches.
        signals: signals received before the watch's handlers took over (in order).
        old_handlers: the signal handlers before the early start's (restored by the watch).
    """

    settings: Settings
    provider: Provider
    resolved: ResolvedInstance
    batch: Any
    resume_from: str | None
    url: str
    run_id: str
    started_at: datetime
    started_wall: float
    log_path: Path
    checkpoint_request: Path
    clock: RealClock
    status: StatusLine
    job: Job | None = None
    pump: ParsePump | None = None
    parsers: dict[str, LineParser] = field(default_factory=dict)
    progress_q: queue.SimpleQueue = field(default_factory=queue.SimpleQueue)
    pending: _Pending | None = None
    signals: list[int] = field(default_factory=list)
    old_handlers: dict[int, Any] = field(default_factory=dict)
    #: the job could not be started (126/127): the watch records the run as failed-to-start
    start_error: CostctlError | None = None

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.signals.append(signum)  # a plain append: safe in a signal handler

    def _on_winch(self, signum: int, frame: Any) -> None:
        """costctl's terminal was resized: the job's pty follows (as the watch's handler does)."""
        child = self.job.child if self.job is not None else None
        size = terminal_size(1) if child is not None and child.tty else None
        if size is not None:
            child.resize(*size)  # type: ignore[union-attr]

    def restore_signals(self) -> None:
        """Put back the handlers from before the early start."""
        for sig, handler in self.old_handlers.items():
            signal.signal(sig, handler)
        self.old_handlers = {}

    def end_job(self, why: str) -> None:
        """The watch cannot go on (its ledger failed): end the job (SIGTERM, the grace period,
        SIGKILL), said on stderr with ``why``; its output so far stays in its run log."""
        job = self.job
        if job is None or not job.exists:
            return
        ran = time.time() - self.started_wall
        if not self.status.gone:
            self.status.message(f"costctl: {why}; the job, started {ran:.1f}s ago before the ledger was "
                                f"open, is ended (nothing recorded; its output so far is in {self.log_path})")
        try:
            job.end()
        finally:
            if self.pump is not None:
                self.pump.close()

    def bind(self, watcher: Watcher) -> None:
        """Hand the job's callbacks to ``watcher`` (its parts exist now): what came before
        (OOM scan input, the last output's time, a failed terminal write, an error, the job's
        start) is given to it first, in order."""
        pending = self.pending
        if pending is None:
            return
        if pending.child is not None:
            watcher._job_started(pending.child)
        with pending._lock:
            pending.watcher = watcher
            texts, pending.oom_texts = pending.oom_texts, []
            if pending.last_output_at is not None:
                watcher.history.last_output_at = pending.last_output_at
            if watcher.lifecycle is not None:
                for stream, text in texts:
                    watcher.lifecycle.on_text(stream, text)
            watcher._oom_ctx.update(pending._ctx)
        if pending.terminal_gone:
            watcher._terminal_gone()
        if pending.error is not None:
            watcher._output_failed(pending.error)


def sqlite_ledger_ready(url: str) -> bool:
    """For a plain SQLite file URL (``sqlite:///PATH``, the default ledger): create its
    directory as the ledger would and check the file (or, before its first use, the directory)
    is readable and writable, without SQLAlchemy; True then. False for any other URL (a
    server, a query string, in-memory): the job then starts after the ledger is open.

    Raises:
        LedgerError: the directory cannot be created or the file or directory cannot be written
            (the ledger's own words: nothing is started).
    """
    prefix = "sqlite:///"
    if not url.startswith(prefix) or "?" in url:
        return False
    raw = url[len(prefix):]
    if not raw or raw == ":memory:" or raw.startswith("file:"):
        return False
    path = Path(raw).expanduser()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise LedgerError(f"cannot create the directory of database {path}: a file is in the way (not a directory)") \
            from None
    except OSError as err:
        raise LedgerError(f"cannot create the directory of database {path}: {err.strerror or err}") from None
    target = path if path.exists() else path.parent
    if not os.access(target, os.R_OK | os.W_OK):
        raise LedgerError(f"cannot write the database {path}: permission denied")
    return True


def can_start_early(options: WatchOptions, resolved: ResolvedInstance, url: str) -> bool:
    """Whether the job may start before the ledger is open: a command, no ``--attach``, a
    SQLite ledger that can be written (:func:`sqlite_ledger_ready`), and no instance to start
    first (:func:`.instance.bring_up` starts a stopped instance, or one to resume on, and
    records it before anything runs).

    Raises:
        LedgerError: see :func:`sqlite_ledger_ready`.
    """
    if not options.command or options.attach is not None:
        return False
    if not sqlite_ledger_ready(url):
        return False
    inst = resolved.instance
    if inst is None:
        return True
    from costctl_providers.base import Status

    return inst.status not in (Status.STOPPED, Status.STOPPING, Status.TERMINATED)


def launch_early(settings: Settings, options: WatchOptions, *, stdout_fd: int = 1,
                 stderr_fd: int = 2) -> EarlyStart | None:
    """The preflight, then the job (see the module docstring); None when the job must not
    start before the ledger is open (:func:`can_start_early`): then the preflight's results
    are not kept and :meth:`.watcher.Watcher.start` does it all in its own order.

    Raises:
        ConfigError, ProviderError, UsageError: the preflight refused (nothing started).
        LedgerError: the SQLite ledger cannot be written (nothing started).
        CostctlError: the command could not be started (126/127).
    """
    from ..cloud import open_provider

    s = settings
    paths.data_dir(s.data_dir)  # a data dir that cannot be created fails first
    url = s.database_url or paths.default_database_url(s.data_dir)
    clock = RealClock()
    status = StatusLine(False if options.quiet else options.status_line)
    say = (lambda text: None) if options.quiet else status.message
    provider = open_provider(s, clock=clock)
    resolved = resolve_instance(s, provider, say=say, advise_only=options.advise_only)
    s = resolved.settings
    batch, resume_from = prepare_command(options, s)
    if not can_start_early(options, resolved, url):
        return None
    started_at = clock.now()
    early = EarlyStart(
        settings=s, provider=provider, resolved=resolved, batch=batch, resume_from=resume_from, url=url,
        run_id=uuid.uuid4().hex, started_at=started_at, started_wall=time.time(),
        log_path=Path(), checkpoint_request=Path(), clock=clock, status=status,
    )
    stem = f"{started_at.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
    early.log_path = paths.runs_dir(s.data_dir) / f"{stem}.log"
    early.checkpoint_request = paths.runs_dir(s.data_dir) / f"{stem}.checkpoint-request"
    for sig in SIGNALS:
        early.old_handlers[sig] = signal.signal(sig, early._on_signal)
    early.old_handlers[signal.SIGWINCH] = signal.signal(signal.SIGWINCH, early._on_winch)
    parsers = early.parsers = {"stdout": LineParser(options.loss_regex), "stderr": LineParser(options.loss_regex)}
    progress_q = early.progress_q
    pump = early.pump = ParsePump(early.log_path, lambda stream, data, now: parsers[stream].feed_batch(data, now),
                                  progress_q.put, clock.now, on_gap=lambda stream: parsers[stream].gap(),
                                  lines_seen=lambda: sum(p.lines_seen for p in parsers.values()),
                                  # until the watch binds (its ledger opened, maybe migrated in a
                                  # child: a second or more), the parser waits at the bound too:
                                  # its points are not taken yet, so they must not pile up
                                  on_backlog=_no_taker_yet)
    pending = early.pending = _Pending(pump if options.metrics_file is None else None)
    pump._on_error = pending.on_error
    run_id = early.run_id
    job = early.job = Job(
        options.command, batch=batch, resume_from=resume_from, grace_s=s.watch.grace_period.total_seconds(),
        checkpoint_request=early.checkpoint_request, extra_env=options.extra_env,
        run_id=lambda: pending.watcher.state.run_id if pending.watcher is not None else run_id,
        on_start=pending.on_start, log_path=early.log_path, on_output_error=pending.on_error,
        on_exit_argv=lambda: on_exit_argv(pending.watcher.state.run_id if pending.watcher is not None else run_id,
                                          on_exit=options.on_exit, config=s.config_path, dry_run=options.dry_run,
                                          advise_only=options.advise_only),
        pty=shares_one_terminal() if options.pty is None else options.pty, on_output=pending.on_output)
    job.mux = OutputMux(None, pending.on_text, stdout_fd=stdout_fd, stderr_fd=stderr_fd,
                        before_write=status.clear, after_write=status.after_child_write, lock=status.lock,
                        on_terminal_gone=pending.on_terminal_gone)
    try:
        job.start()
    except CostctlError as exc:  # recorded by the watch (failed-to-start), then raised
        early.start_error = exc
        early.job = None
        pump.close()
    except BaseException:
        early.restore_signals()
        pump.close()
        raise
    return early


__all__ = ["EarlyStart", "can_start_early", "launch_early"]
