"""PyTorch Lightning callback: save a checkpoint when costctl asks for one.

Usage::

    from costctl.integrations.lightning import CostctlCheckpoint

    trainer = L.Trainer(..., callbacks=[CostctlCheckpoint(dirpath="/root/autodl-tmp/ckpt")])
    trainer.fit(model, ckpt_path=os.environ.get("COSTCTL_RESUME_FROM") or None)

and in ``costctl.toml``: ``[checkpoint] path = "/root/autodl-tmp/ckpt/*.ckpt"``.

After every ``check_every_n_steps``-th training batch the callback checks for costctl's request
(:func:`costctl.job.checkpoint_requested`), lets every rank agree through the strategy
(``reduce_boolean_decision(..., all=False)``: any rank that saw it; on Lightning versions
without ``all``, one all-reduce through ``torch.distributed``), then calls
``trainer.save_checkpoint`` on all ranks (it is a collective in sharded strategies; rank 0
writes) and acknowledges the request with its record (:func:`costctl.job.acknowledge_checkpoint`:
the file, the step, the save's start and end) once the file is closed:

* with the default, synchronous CheckpointIO, when ``trainer.save_checkpoint`` returned (it
  ends with a barrier, so every rank may acknowledge). ``on_save_checkpoint`` would be too
  early: Lightning calls it while it builds the checkpoint dict, before anything is written.
* with ``AsyncCheckpointIO`` (the save runs on its one-thread executor; Lightning has no hook
  for "the async save finished"), the global-zero rank queues the acknowledgement on that
  same executor, right behind the save, so it runs once the file is closed, and not at all
  when the save failed (``_error`` set: costctl then times out). A CheckpointIO without such
  an executor: a background thread acknowledges once the file passes
  :func:`costctl.checkpoint_integrity.check_checkpoint` (its zip end record is written
  last), giving up after ``async_timeout_s``.

Files are named from ``filename`` (``{epoch}`` and
``{step}`` filled in) in ``dirpath`` (default: the ModelCheckpoint callback's directory, else
``<default_root_dir>/checkpoints``). Lightning (``lightning.pytorch``, or the older
``pytorch_lightning``) is imported only when the class is first used.

Full-precision progress: when costctl runs the job (``$COSTCTL_METRICS_FILE`` set), the
callback creates that file in ``on_train_start`` and, every ``log_every_n_steps`` optimizer
steps, appends the logged scalars (``trainer.callback_metrics``: ``train_loss_step``...) with the
step and epoch as one JSON line, on global rank zero; costctl reads the progress from it (a
progress bar's rounded figures, or no printed loss at all, are then no matter).
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

from .. import job
from ._dist import any_rank

__all__ = ["CostctlCheckpoint"]


def _callback_base() -> type:
    try:
        from lightning.pytorch.callbacks import Callback
    except ImportError:
        try:
            from pytorch_lightning.callbacks import Callback
        except ImportError as exc:  # pragma: no cover - exercised only without Lightning
            raise ImportError("costctl.integrations.lightning needs lightning: pip install lightning") from exc
    return Callback


def _any_rank(trainer: Any, flag: bool) -> bool:
    """``flag`` OR-ed over the ranks through the strategy (current Lightning:
    ``reduce_boolean_decision(..., all=False)``); older strategies, whose method only ANDs,
    go through ``torch.distributed`` directly."""
    try:
        return bool(trainer.strategy.reduce_boolean_decision(flag, all=False))
    except TypeError:
        return any_rank(flag, getattr(trainer.strategy, "root_device", None))


def _request_id() -> str | None:
    """The pending request's ``requested_at`` (it tells one request from the next; a merged
    request keeps it), or None."""
    path = job.checkpoint_request_path()
    try:
        value = json.loads(path.read_text()).get("requested_at") if path is not None else None
    except (OSError, ValueError, AttributeError):
        return None
    return str(value) if value is not None else None


def _acknowledge_when_written(trainer: Any, path: str, step: int, started: float, timeout_s: float) -> str:
    """Acknowledge once ``path`` is closed; returns how: ``"sync"``, ``"executor"``, ``"watcher"``
    or ``"skipped"`` (a non-zero rank under an asynchronous CheckpointIO)."""
    io = getattr(getattr(trainer, "strategy", None), "checkpoint_io", None)
    if not any(c.__name__ == "AsyncCheckpointIO" for c in type(io).__mro__):
        job.acknowledge_checkpoint(checkpoint=path, step=step, started_at=started)
        return "sync"
    if not getattr(trainer, "is_global_zero", True):
        return "skipped"  # only rank 0 writes, on its own thread: it acknowledges
    request = job.checkpoint_request_path()

    def ack() -> None:
        if getattr(io, "_error", None) is None:
            job.acknowledge_checkpoint(request, checkpoint=path, step=step, started_at=started)

    executor = getattr(io, "_executor", None)
    if executor is not None and hasattr(executor, "submit"):
        executor.submit(ack)  # one worker, first in first out: runs after the save
        return "executor"

    def watch() -> None:
        from ..checkpoint_integrity import check_checkpoint

        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            if check_checkpoint(path)[0]:
                ack()
                return
            time.sleep(0.05)

    threading.Thread(target=watch, name="costctl-ack", daemon=True).start()
    return "watcher"


def _build() -> type:
    Callback = _callback_base()

    class CostctlCheckpoint(Callback):  # type: ignore[misc, valid-type]
        """Saves ``dirpath/filename`` on every rank when costctl requests a checkpoint.

        Args:
            dirpath: directory for the checkpoints (see the module docstring for the default).
            filename: name pattern with ``{epoch}`` and ``{step}``.
            check_every_n_steps: look for a request every N training batches.
            async_timeout_s: with an asynchronous CheckpointIO that has no executor to queue
                on, how long (seconds) to wait for the file to be whole before giving up.
        """

        def __init__(self, dirpath: str | os.PathLike[str] | None = None,
                     filename: str = "costctl-epoch={epoch}-step={step}.ckpt",
                     check_every_n_steps: int = 1, async_timeout_s: float = 600.0) -> None:
            super().__init__()
            if check_every_n_steps < 1:
                raise ValueError("check_every_n_steps must be >= 1")
            self.dirpath = os.fspath(dirpath) if dirpath is not None else None
            self.filename = filename
            self.check_every_n_steps = check_every_n_steps
            self.async_timeout_s = async_timeout_s
            self.saved: list[str] = []
            self.acknowledged_by: list[str] = []
            self._served: str | None = None
            self._reported: set[str] = set()  # the ModelCheckpoint files already reported

        def _report_own_saves(self, trainer: Any) -> None:
            """The checkpoints Lightning's ``ModelCheckpoint`` callbacks saved on their own
            schedule since the last look (``last_model_path``, ``best_model_path``, the top-k
            ``best_k_models``), reported once each on global rank zero
            (:func:`costctl.job.report_checkpoint`: costctl counts them for a preemption's waste
            and ``--resume``; it checks each file's format itself). Their save times are not
            known here: the Young/Daly interval keeps its other inputs."""
            if job.saves_file_path() is None or not getattr(trainer, "is_global_zero", True):
                return
            for mc in getattr(trainer, "checkpoint_callbacks", None) or []:
                paths = [getattr(mc, "last_model_path", ""), getattr(mc, "best_model_path", "")]
                paths += list((getattr(mc, "best_k_models", None) or {}).keys())
                for path in paths:
                    if path and path not in self._reported and path not in self.saved and os.path.isfile(path):
                        self._reported.add(path)
                        job.report_checkpoint(path, step=int(trainer.global_step))

        def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
            self._report_own_saves(trainer)

        def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
            self._report_own_saves(trainer)

        def checkpoint_path(self, trainer: Any) -> str:
            """Where the next requested checkpoint goes."""
            directory = self.dirpath
            if directory is None:
                mc = getattr(trainer, "checkpoint_callback", None)
                directory = getattr(mc, "dirpath", None) or os.path.join(trainer.default_root_dir, "checkpoints")
            return os.path.join(directory, self.filename.format(epoch=trainer.current_epoch, step=trainer.global_step))

        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            path = job.metrics_file_path()
            if path is not None and getattr(trainer, "is_global_zero", True):
                path.touch()  # from now on costctl reads the progress from the file
            self._logged_step: int | None = None

        def _log_metrics(self, trainer: Any) -> None:
            """Every ``log_every_n_steps``-th optimizer step, the logged scalars (``self.log``:
            ``train_loss_step``...) as one full-precision JSON line of the metrics file, on
            global rank zero; nothing when costctl did not set one (``$COSTCTL_METRICS_FILE``)."""
            step = int(trainer.global_step)
            every = int(getattr(trainer, "log_every_n_steps", 50) or 50)
            if step % every or step == getattr(self, "_logged_step", None) or job.metrics_file_path() is None \
                    or not getattr(trainer, "is_global_zero", True):
                return
            self._logged_step = step
            try:
                job.log_metrics(dict(trainer.callback_metrics), step=step, epoch=trainer.current_epoch)
            except OSError:
                pass  # a metrics file that cannot be written never stops the training

        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            self._log_metrics(trainer)
            self._report_own_saves(trainer)
            if trainer.global_step % self.check_every_n_steps:
                return
            seen = job.checkpoint_requested()
            if seen and self._served is not None and _request_id() == self._served:
                seen = False  # the request this callback saved for, still awaiting an async acknowledgement
            if not _any_rank(trainer, seen):
                return
            self._served = _request_id()
            path = self.checkpoint_path(trainer)
            started = time.time()
            trainer.save_checkpoint(path)
            self.saved.append(path)
            self.acknowledged_by.append(_acknowledge_when_written(
                trainer, path, int(trainer.global_step), started, self.async_timeout_s))

    return CostctlCheckpoint


def __getattr__(name: str) -> Any:
    if name == "CostctlCheckpoint":
        cls = _build()
        globals()[name] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
