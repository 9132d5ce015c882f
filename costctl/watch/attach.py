"""``costctl watch --attach RUN``: find the run whose watch died while its job runs on.

RUN is a ledger run id or a unique prefix of one, or the pid of the job's root process. The
run must be open, recorded on this host, its watch gone and its job still running under its
relay (the relay's state file beside the run log says so), i.e. what ``costctl bill`` shows as
``unguarded``. The new watch resumes the job's output at the log offset the dead watch was last
sent (``watch_offset`` in the state file), or at the log's current end when that is unknown:
output already seen is never parsed again as new progress.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from ..clock import ensure_utc
from ..errors import UsageError
from ..i18n import _
from ..relay import protocol as relay_protocol
from ..relay.client import costctl_argv


@dataclass(frozen=True)
class AttachTarget:
    """The run a ``--attach`` watch takes over.

    Attributes:
        run_id: its ledger id.
        instance_pk: its instance's ledger key.
        started_at: when the run started (aware UTC).
        command: the job's argv as recorded.
        log_path: the run log (written by the relay).
        since: the log offset (bytes) to follow the job's output from.
    """

    run_id: str
    instance_pk: int
    started_at: datetime
    command: list[str] | None
    log_path: Path
    since: int


def on_exit_argv(run_id: str, *, on_exit: str, config: Path | None, dry_run: bool,
                 advise_only: bool) -> list[str]:
    """What the relay starts when the job of ``run_id`` ends and its watch is gone: ``costctl
    watch --attach RUN`` with the same ``--on-exit``, config file and stop mode, so the run is
    closed and the instance guarded, stopped or left as the dead watch would have; the job's
    output is not passed through again (``--no-passthrough``: the run log has it). The database
    and data dir come from the environment the relay inherited (a ``--db`` given on the command
    line is not carried: it would show in the process list)."""
    args = ["watch", "--quiet", "--no-status", "--no-passthrough", "--on-exit", on_exit]
    if config is not None:
        args += ["--config", str(Path(config).resolve())]
    if dry_run:
        args.append("--dry-run")
    if advise_only:
        args.append("--advise-only")
    return costctl_argv(*args, "--attach", run_id)


def _matches(run: Any, ref: str) -> bool:
    if run.id.startswith(ref.lower()):
        return True
    if ref.isdigit() and run.log_path:
        state = relay_protocol.read_state(relay_protocol.state_path(Path(run.log_path))) or {}
        return state.get("job_pid") == int(ref)
    return False


def find_target(runs: list[Any], ref: str, *, alive: Callable[[int], bool]) -> AttachTarget:
    """The run of ``runs`` (open runs of this host, :meth:`Ledger.open_runs`) that ``ref``
    names, checked to be attachable.

    Raises:
        UsageError: (exit status 2) no run or more than one matches, its watch still runs, or
            its job or relay is gone.
    """
    ref = ref.strip()
    if not ref:
        raise UsageError(_("--attach needs a run id (or a unique prefix) or the job's pid"))
    found = [r for r in runs if _matches(r, ref)]
    if not found:
        raise UsageError(_("--attach {ref}: no open run on {host} has this id or job pid (`costctl bill` lists "
                           "the runs)").format(ref=ref, host=socket.gethostname()))
    if len(found) > 1:
        raise UsageError(_("--attach {ref}: {count} open runs match ({runs}); give more of the run id").format(
            ref=ref, count=len(found), runs=", ".join(r.id[:8] for r in found)))
    (run,) = found
    if run.pid is not None and run.pid != os.getpid() and alive(run.pid):
        raise UsageError(_("--attach {ref}: run {run} is still watched (watch pid {pid})").format(
            ref=ref, run=run.id[:8], pid=run.pid))
    if not run.log_path:
        raise UsageError(_("--attach {ref}: run {run} has no run log (it watched no command)").format(
            ref=ref, run=run.id[:8]))
    log_path = Path(run.log_path)
    state = relay_protocol.read_state(relay_protocol.state_path(log_path))
    if state is None or not relay_protocol._pid_running(state.get("relay_pid")):
        raise UsageError(_("--attach {ref}: the output relay of run {run} is gone (its job is no longer "
                           "running)").format(ref=ref, run=run.id[:8]))
    offset = state.get("watch_offset")
    try:
        size = log_path.stat().st_size
    except OSError:
        size = 0
    since = offset if isinstance(offset, int) and 0 <= offset <= size else size
    return AttachTarget(run_id=run.id, instance_pk=run.instance_pk, started_at=ensure_utc(run.started_at),
                        command=list(run.command) if run.command else None, log_path=log_path, since=since)
