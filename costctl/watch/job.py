"""The watched command as the executor and lifecycle see it: :class:`Job` (a
:class:`~costctl.protocols.JobControl`).

It owns the :class:`~costctl.relay.client.RelayChild` (one relay and one job process per start
of the command: the relay owns the job's output, see :mod:`costctl.relay`), the batch plan and
the resume checkpoint, and starts the command with the argv and environment of
:func:`.command.child_argv_env`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from ..child import OutputMux
from ..relay.client import RelayChild
from ..records import BatchPlan
from .command import child_argv_env


class Job:
    """The watched command (see the module docstring).

    Args:
        command: argv of the job; None when the watch guards the machine (nothing to start).
        batch / resume_from: the batch plan and checkpoint of its first start.
        grace_s: seconds between SIGTERM and SIGKILL when it is ended.
        checkpoint_request: the ``$COSTCTL_CHECKPOINT_REQUEST`` file.
        extra_env: more environment for the job.
        run_id: gives the current ledger run (``$COSTCTL_RUN_ID``; a move changes it).
        on_start: called with each new :class:`RelayChild` (the watcher points its telemetry at it).
        log_path: the run log (written by the relay).
        on_output_error: called with an exception raised while the watch handled the job's
            output (the output goes on being read).
        pty: run the command on one pseudo-terminal for stdout and stderr (see
            :class:`~costctl.relay.client.RelayChild`); False: two pipes.
        on_exit_argv: gives what the relay starts when the job ends while no watch is attached
            (see :class:`~costctl.relay.client.RelayChild`).
        on_output: ``(stream, log offset, length)`` of each piece of output (see
            :class:`~costctl.relay.client.RelayChild`): the progress parser reads it from the log.
    """

    def __init__(self, command: Sequence[str] | None, *, batch: BatchPlan | None, resume_from: str | None,
                 grace_s: float, checkpoint_request: Path, extra_env: dict[str, str],
                 run_id: Callable[[], str], on_start: Callable[[RelayChild], None], log_path: Path,
                 on_output_error: Callable[[BaseException], None] | None = None,
                 on_exit_argv: Callable[[], list[str] | None] | None = None, pty: bool = False,
                 on_output: Callable[[str, int, int], None] | None = None) -> None:
        self.command = list(command) if command else None
        self._batch = batch
        self._resume_from = resume_from
        self.grace_s = grace_s
        self.checkpoint_request = checkpoint_request
        self.extra_env = extra_env
        self._run_id = run_id
        self._on_start = on_start
        self.mux: OutputMux | None = None
        self.log_path = log_path
        self._on_output_error = on_output_error
        self.pty = pty
        self._on_exit_argv = on_exit_argv
        self._on_output = on_output
        self._starts = 0
        self.child: RelayChild | None = None
        self.status: int | None = None

    @property
    def exists(self) -> bool:
        """The command was started (it may have exited since)."""
        return self.child is not None

    @property
    def running(self) -> bool:
        """The command runs now."""
        return self.child is not None and self.child.running

    @property
    def pid(self) -> int | None:
        """Pid of the command's root process (None before it started)."""
        return self.child.pid if self.child is not None else None

    @property
    def batch(self) -> BatchPlan | None:
        """The batch plan of the current start."""
        return self._batch

    @property
    def resume_from(self) -> str | None:
        """The checkpoint the current start resumed from."""
        return self._resume_from

    def start(self) -> None:
        """Start the command with the current batch plan and resume checkpoint.

        Raises:
            CostctlError: the command could not be started.
        """
        assert self.mux is not None and self.command
        argv, env = child_argv_env(self.command, self._batch, self._resume_from, run_id=self._run_id(),
                                   checkpoint_request=self.checkpoint_request, extra_env=self.extra_env)
        self._starts += 1
        self.child = RelayChild(argv, self.mux, log_path=self.log_path, start=self._starts, env=env,
                                on_error=self._on_output_error,
                                on_exit_argv=self._on_exit_argv() if self._on_exit_argv else None, pty=self.pty,
                                on_output=self._on_output)
        self.status = None
        self._on_start(self.child)

    def attach(self, since: int) -> None:
        """Follow the command already running under the relay of :attr:`log_path` (``costctl
        watch --attach``), from run-log offset ``since``.

        Raises:
            UsageError: the relay is gone or does not answer.
        """
        assert self.mux is not None
        self._starts = 1
        self.child = RelayChild.attach(self.log_path, self.mux, since=since, on_error=self._on_output_error,
                                       on_output=self._on_output)
        self.status = None
        self._on_start(self.child)

    def end(self, sig: int | None = None) -> int | None:
        """End the command (``sig``, default SIGTERM, to its group; SIGKILL after the grace
        period); returns its exit status (None without a command)."""
        if self.child is None:
            return None
        self.status = self.child.terminate(self.grace_s) if sig is None else self.child.terminate(self.grace_s, sig)
        return self.status

    def signal(self, sig: int) -> bool:
        """Send ``sig`` to the command's process group and return at once (the caller watches
        it end; :meth:`kill` ends it for good); False when there is no command or it is gone."""
        return self.child.send_signal(sig) if self.child is not None else False

    def kill(self) -> int | None:
        """SIGKILL the command's whole process group now and reap it; returns its exit status
        (137 when the SIGKILL ended it; None without a command)."""
        if self.child is None:
            return None
        self.status = self.child.kill()
        return self.status

    def wait(self, end_wait_s: float | None = None) -> int:
        """Reap the exited command; returns its exit status. ``end_wait_s``: at most this many
        seconds for the rest of its output after the exit (see :meth:`RelayChild.wait`)."""
        assert self.child is not None
        if end_wait_s is not None and isinstance(self.child, RelayChild):
            self.status = self.child.wait(end_wait_s=end_wait_s)
        else:
            self.status = self.child.wait()
        return self.status

    def restart(self, *, batch: BatchPlan | None = None, resume_from: str | None = None) -> None:
        """Start the command again (after an OOM or a move), with a new batch plan and/or checkpoint."""
        if batch is not None:
            self._batch = batch
        if resume_from is not None:
            self._resume_from = resume_from
        self.start()
