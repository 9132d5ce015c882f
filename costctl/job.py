"""The training-job side of costctl's protocol: a few environment variables and one file.

Import this from a training script (it imports nothing heavy: only ``os``, ``signal``,
``json``, ``datetime`` and ``pathlib``). ``costctl watch`` sets, in the child's environment:

* ``COSTCTL_CHECKPOINT_REQUEST`` - a file path. When that file exists, costctl asks for a
  checkpoint: save one at the next safe point (e.g. the end of the current epoch or step), then
  call :func:`acknowledge_checkpoint`: it writes the *acknowledgement record* beside the
  request (:func:`ack_path`) and deletes the request. costctl ends the job (on a preemption)
  only once it has the record for the request it made, or, without one, once a new checkpoint
  under ``[checkpoint] path`` passes the format check of :mod:`costctl.checkpoint_integrity`.
  The job never needs a signal handler: by default costctl sends no signal.

  The record is one JSON object, written atomically (a temporary file, then ``os.replace``)::

      {"version": 1,
       "request": "2026-01-05T10:00:00+00:00",   # requested_at of the request answered, or null
       "checkpoint": "/abs/out/checkpoint-30",   # the checkpoint saved (file or directory), or null
       "step": 30,                                # the training step saved, or null
       "save_started_at": "2026-01-05T10:00:01.200000+00:00",  # aware UTC (wall clock), or null
       "save_ended_at": "2026-01-05T10:00:01.900000+00:00",    # aware UTC (wall clock)
       "pid": 4242}
* ``COSTCTL_RESUME_FROM`` - set by ``costctl watch --resume``: the checkpoint (file or
  directory) to continue from. Continue the epoch/step count from it; do not restart.
* ``COSTCTL_BATCH_SIZE`` / ``COSTCTL_ACCUM_STEPS`` - set by ``--on-oom retry`` after a CUDA
  out-of-memory crash: the per-device (micro-)batch size halved and gradient-accumulation
  steps doubled, so the effective batch ``batch_size * accum_steps`` stays the same.
* ``COSTCTL_CHECKPOINT_SAVES`` - a file path where the job reports the checkpoints it saves on
  its own schedule (HF ``save_steps``, Lightning's ``ModelCheckpoint``, a script's
  ``--save-every``), one JSON line per completed save, the acknowledgement record's fields
  without ``request`` (:func:`report_checkpoint`; :func:`acknowledge_checkpoint` with no request
  pending reports the save there). costctl counts them as it counts requested saves: the
  restart point of a preemption's waste, the save's duration for the Young/Daly interval, and a
  place ``--resume`` looks, wherever the checkpoint lies.
* ``COSTCTL_METRICS_FILE`` - a file path where the job may append its logged metrics as JSON
  lines at full precision (:func:`log_metrics`; the Hugging Face callback does it in
  ``on_log``). Once the file exists, costctl reads the progress from it instead of from the
  job's output (which stays the fallback: printed values may be rounded, transformers 5
  prints four significant digits).

Only where the user configures a signal does costctl also send one (to the worker processes,
never to a torchrun agent); :func:`request_checkpoint_on_signal` turns such a signal into a
request so that :func:`checkpoint_requested` sees it.

Example::

    from costctl import job

    batch = job.batch_size(default=32)
    accum = job.accum_steps(default=1)
    start = load(job.resume_path()) if job.resume_path() else 0
    for epoch in range(start + 1, epochs + 1):
        train_one_epoch(...)
        if job.checkpoint_requested():
            t0 = time.time()
            save_checkpoint(path)
            job.acknowledge_checkpoint(checkpoint=path, step=epoch, started_at=t0)
        elif epoch % save_every == 0:  # a save of the job's own: report it too
            t0 = time.time()
            save_checkpoint(path)
            job.report_checkpoint(path, step=epoch, started_at=t0)
"""

from __future__ import annotations

import json
import os
import signal
from datetime import datetime, timezone
from pathlib import Path

__all__ = [
    "ENV_ACCUM_STEPS",
    "ENV_BATCH_SIZE",
    "ENV_CHECKPOINT_REQUEST",
    "ENV_CHECKPOINT_SAVES",
    "ENV_METRICS_FILE",
    "ENV_RESUME_FROM",
    "ACK_SUFFIX",
    "accum_steps",
    "ack_path",
    "acknowledge_checkpoint",
    "batch_size",
    "checkpoint_request_path",
    "checkpoint_requested",
    "log_metrics",
    "report_checkpoint",
    "saves_file_path",
    "metrics_file_path",
    "request_checkpoint_on_signal",
    "resume_path",
]

ENV_CHECKPOINT_REQUEST = "COSTCTL_CHECKPOINT_REQUEST"
ENV_RESUME_FROM = "COSTCTL_RESUME_FROM"
ENV_BATCH_SIZE = "COSTCTL_BATCH_SIZE"
ENV_ACCUM_STEPS = "COSTCTL_ACCUM_STEPS"
ENV_METRICS_FILE = "COSTCTL_METRICS_FILE"
ENV_CHECKPOINT_SAVES = "COSTCTL_CHECKPOINT_SAVES"
#: The acknowledgement record is the request file's name plus this.
ACK_SUFFIX = ".ack.json"

_signal_requested = False


def checkpoint_request_path() -> Path | None:
    """The request file costctl watches for (``$COSTCTL_CHECKPOINT_REQUEST``), or None when unset."""
    value = os.environ.get(ENV_CHECKPOINT_REQUEST, "").strip()
    return Path(value) if value else None


def checkpoint_requested() -> bool:
    """True when costctl asks for a checkpoint: the request file exists, or a configured
    signal arrived (see :func:`request_checkpoint_on_signal`). Cheap: one ``stat`` call."""
    if _signal_requested:
        return True
    path = checkpoint_request_path()
    return path is not None and path.exists()


def ack_path(request: str | os.PathLike[str]) -> Path:
    """Where the acknowledgement record of request file ``request`` goes: beside it, its name
    plus ``.ack.json``."""
    p = Path(request)
    return p.with_name(p.name + ACK_SUFFIX)


def _iso(value: datetime | float | None) -> str | None:
    if value is None:
        return None
    if isinstance(value, (int, float)):
        return datetime.fromtimestamp(value, timezone.utc).isoformat()
    if value.tzinfo is None:
        raise ValueError(f"{value!r} is a naive datetime: pass an aware UTC time")
    return value.astimezone(timezone.utc).isoformat()


def acknowledge_checkpoint(
    path: str | os.PathLike[str] | None = None,
    *,
    checkpoint: str | os.PathLike[str] | None = None,
    step: int | None = None,
    started_at: datetime | float | None = None,
    ended_at: datetime | float | None = None,
) -> Path | None:
    """Mark the request as handled: write the acknowledgement record (see the module
    docstring), then delete the request file and clear a signal request.

    Call it after the checkpoint is completely written (files closed, e.g. after
    ``os.replace`` of a temporary file): costctl may end the job as soon as it reads the record.

    Args:
        path: the request file; defaults to ``$COSTCTL_CHECKPOINT_REQUEST``. A request that is
            already gone is fine: nothing is written (another rank answered it, or nobody asked).
        checkpoint: the checkpoint saved (file or directory); None lets costctl find the
            newest new match of ``[checkpoint] path``.
        step: the training step it holds.
        started_at / ended_at: when the save began and ended: aware datetimes or seconds
            since the epoch (``time.time()``); ``ended_at`` defaults to now.

    Returns:
        The record's path; with no request pending (none configured, or it is gone: answered by
        another rank, or nobody asked), the save is reported as one of the job's own
        (:func:`report_checkpoint`) and that file's path is returned, or None outside a watch.

    Raises:
        ValueError: a naive datetime.
    """
    global _signal_requested
    _signal_requested = False
    target = Path(path) if path is not None else checkpoint_request_path()
    text = None
    if target is not None:
        try:
            text = target.read_text()
        except OSError:
            text = None  # answered already (e.g. by another rank on this machine): no second record
    if target is None or text is None:
        return report_checkpoint(checkpoint, step=step, started_at=started_at, ended_at=ended_at)
    try:
        requested = json.loads(text).get("requested_at")
    except (ValueError, AttributeError):
        requested = None
    record = {
        "version": 1,
        "request": requested,
        "checkpoint": os.path.abspath(os.fspath(checkpoint)) if checkpoint is not None else None,
        "step": int(step) if step is not None else None,
        "save_started_at": _iso(started_at),
        "save_ended_at": _iso(ended_at if ended_at is not None else datetime.now(timezone.utc)),
        "pid": os.getpid(),
    }
    out = ack_path(target)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(record) + "\n")
        os.replace(tmp, out)
    except OSError:
        try:
            tmp.unlink()
        except OSError:
            pass
    try:
        target.unlink()
    except FileNotFoundError:
        pass
    return out


def saves_file_path() -> Path | None:
    """Where to report the job's own checkpoint saves (``$COSTCTL_CHECKPOINT_SAVES``), or None."""
    value = os.environ.get(ENV_CHECKPOINT_SAVES, "").strip()
    return Path(value) if value else None


def report_checkpoint(
    checkpoint: str | os.PathLike[str] | None,
    *,
    step: int | None = None,
    started_at: datetime | float | None = None,
    ended_at: datetime | float | None = None,
    path: str | os.PathLike[str] | None = None,
) -> Path | None:
    """Report a checkpoint the job saved on its own (no request asked for it): append one JSON
    line to the saves file (``path``, default :func:`saves_file_path`), the acknowledgement
    record's fields without ``request``. Call it after the checkpoint is completely written.

    Args:
        checkpoint: the checkpoint saved (file or directory); None lets costctl look for the
            newest match of ``[checkpoint] path``.
        step: the training step it holds.
        started_at / ended_at: when the save began and ended (aware datetimes or
            ``time.time()`` seconds); ``ended_at`` defaults to now.

    Returns:
        The saves file, or None when there is none (not under ``costctl watch``) or it cannot
        be written (a report is never worth failing the training job for).

    Raises:
        ValueError: a naive datetime.
    """
    target = Path(path) if path is not None else saves_file_path()
    record = {
        "version": 1,
        "checkpoint": os.path.abspath(os.fspath(checkpoint)) if checkpoint is not None else None,
        "step": int(step) if step is not None else None,
        "save_started_at": _iso(started_at),
        "save_ended_at": _iso(ended_at if ended_at is not None else datetime.now(timezone.utc)),
        "pid": os.getpid(),
    }
    if target is None:
        return None
    try:
        # one write of one line in append mode: concurrent ranks' lines never interleave
        fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (json.dumps(record) + "\n").encode())
        finally:
            os.close(fd)
    except OSError:
        return None
    return target


def metrics_file_path() -> Path | None:
    """Where to append logged metrics (``$COSTCTL_METRICS_FILE``), or None when unset/empty."""
    value = os.environ.get(ENV_METRICS_FILE, "").strip()
    return Path(value) if value else None


def log_metrics(metrics: dict, *, step: int | None = None, epoch: float | None = None,
                path: Path | None = None) -> bool:
    """Append one JSON line of ``metrics`` (with ``step``/``epoch`` when given) to the metrics
    file (``path``, default :func:`metrics_file_path`); floats at full precision, NaN/inf as
    JSON's ``NaN``/``Infinity`` (which costctl reads). Values that are not numbers, strings or
    booleans are left out. Returns False (writing nothing) when there is no metrics file.

    Raises:
        OSError: the file cannot be written.
    """
    import json

    target = path if path is not None else metrics_file_path()
    if target is None:
        return False
    record: dict = {}
    if step is not None:
        record["step"] = step
    if epoch is not None:
        record["epoch"] = epoch
    for key, value in metrics.items():
        if isinstance(value, (bool, int, float, str)):
            record[str(key)] = value
        elif hasattr(value, "item"):  # a 0-d tensor / numpy scalar
            try:
                record[str(key)] = float(value.item())
            except (TypeError, ValueError):
                continue
    with open(target, "a", encoding="utf-8") as fh:  # one write per record: a line appears whole
        fh.write(json.dumps(record) + "\n")
    return True


def resume_path() -> str | None:
    """The checkpoint to resume from (``$COSTCTL_RESUME_FROM``), or None when unset/empty."""
    value = os.environ.get(ENV_RESUME_FROM, "").strip()
    return value or None


def _positive_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"{name}={raw!r} is not allowed: it must be a positive integer")
    return value


def batch_size(default: int) -> int:
    """The per-device (micro-)batch size: ``$COSTCTL_BATCH_SIZE`` when set, else ``default``.

    Raises:
        ValueError: the variable is set to something other than a positive integer.
    """
    return _positive_int(ENV_BATCH_SIZE, default)


def accum_steps(default: int = 1) -> int:
    """Gradient-accumulation steps: ``$COSTCTL_ACCUM_STEPS`` when set, else ``default``.

    Raises:
        ValueError: the variable is set to something other than a positive integer.
    """
    return _positive_int(ENV_ACCUM_STEPS, default)


def request_checkpoint_on_signal(signum: int = signal.SIGUSR1) -> None:
    """Install a handler that turns ``signum`` into a checkpoint request.

    Only for users who configured costctl to send a signal: without a handler, SIGUSR1's
    default action terminates the process. The handler only sets a flag (safe at any point);
    the script still saves at its next :func:`checkpoint_requested` check.
    """

    def _handler(_signum: int, _frame: object) -> None:
        global _signal_requested
        _signal_requested = True

    signal.signal(signum, _handler)
