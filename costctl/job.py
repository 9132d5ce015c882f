"""The training-job side of costctl's protocol: a few environment variables and one file.

Import this from a training script (it imports nothing heavy: only ``os``, ``signal`` and
``pathlib``). ``costctl watch`` sets, in the child's environment:

* ``COSTCTL_CHECKPOINT_REQUEST`` - a file path. When that file exists, costctl asks for a
  checkpoint: save one at the next safe point (e.g. the end of the current epoch or step),
  then delete the file (:func:`acknowledge_checkpoint`). costctl then waits, up to its
  deadline, for a checkpoint file newer than the request to appear where the user told it to
  look. The job never needs a signal handler: by default costctl sends no signal.
* ``COSTCTL_RESUME_FROM`` - set by ``costctl watch --resume``: the checkpoint (file or
  directory) to continue from. Continue the epoch/step count from it; do not restart.
* ``COSTCTL_BATCH_SIZE`` / ``COSTCTL_ACCUM_STEPS`` - set by ``--on-oom retry`` after a CUDA
  out-of-memory crash: the per-device (micro-)batch size halved and gradient-accumulation
  steps doubled, so the effective batch ``batch_size * accum_steps`` stays the same.
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
            save_checkpoint(...)
            job.acknowledge_checkpoint()
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

__all__ = [
    "ENV_ACCUM_STEPS",
    "ENV_BATCH_SIZE",
    "ENV_CHECKPOINT_REQUEST",
    "ENV_METRICS_FILE",
    "ENV_RESUME_FROM",
    "accum_steps",
    "acknowledge_checkpoint",
    "batch_size",
    "checkpoint_request_path",
    "checkpoint_requested",
    "log_metrics",
    "metrics_file_path",
    "request_checkpoint_on_signal",
    "resume_path",
]

ENV_CHECKPOINT_REQUEST = "COSTCTL_CHECKPOINT_REQUEST"
ENV_RESUME_FROM = "COSTCTL_RESUME_FROM"
ENV_BATCH_SIZE = "COSTCTL_BATCH_SIZE"
ENV_ACCUM_STEPS = "COSTCTL_ACCUM_STEPS"
ENV_METRICS_FILE = "COSTCTL_METRICS_FILE"

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


def acknowledge_checkpoint(path: str | os.PathLike[str] | None = None) -> None:
    """Mark the request as handled: delete the request file and clear a signal request.

    Call it after the checkpoint file is completely written (e.g. after ``os.replace`` of a
    temporary file), so that costctl never finds a half-written checkpoint.

    Args:
        path: the request file to remove; defaults to ``$COSTCTL_CHECKPOINT_REQUEST``.
            A file that is already gone is fine.
    """
    global _signal_requested
    _signal_requested = False
    target = Path(path) if path is not None else checkpoint_request_path()
    if target is None:
        return
    try:
        target.unlink()
    except FileNotFoundError:
        pass


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
