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
writes) and acknowledges the request. Files are named from ``filename`` (``{epoch}`` and
``{step}`` filled in) in ``dirpath`` (default: the ModelCheckpoint callback's directory, else
``<default_root_dir>/checkpoints``). Lightning (``lightning.pytorch``, or the older
``pytorch_lightning``) is imported only when the class is first used.
"""

from __future__ import annotations

import os
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


def _build() -> type:
    Callback = _callback_base()

    class CostctlCheckpoint(Callback):  # type: ignore[misc, valid-type]
        """Saves ``dirpath/filename`` on every rank when costctl requests a checkpoint.

        Args:
            dirpath: directory for the checkpoints (see the module docstring for the default).
            filename: name pattern with ``{epoch}`` and ``{step}``.
            check_every_n_steps: look for a request every N training batches.
        """

        def __init__(self, dirpath: str | os.PathLike[str] | None = None,
                     filename: str = "costctl-epoch={epoch}-step={step}.ckpt",
                     check_every_n_steps: int = 1) -> None:
            super().__init__()
            if check_every_n_steps < 1:
                raise ValueError("check_every_n_steps must be >= 1")
            self.dirpath = os.fspath(dirpath) if dirpath is not None else None
            self.filename = filename
            self.check_every_n_steps = check_every_n_steps
            self.saved: list[str] = []

        def checkpoint_path(self, trainer: Any) -> str:
            """Where the next requested checkpoint goes."""
            directory = self.dirpath
            if directory is None:
                mc = getattr(trainer, "checkpoint_callback", None)
                directory = getattr(mc, "dirpath", None) or os.path.join(trainer.default_root_dir, "checkpoints")
            return os.path.join(directory, self.filename.format(epoch=trainer.current_epoch, step=trainer.global_step))

        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            if trainer.global_step % self.check_every_n_steps:
                return
            if not _any_rank(trainer, job.checkpoint_requested()):
                return
            path = self.checkpoint_path(trainer)
            trainer.save_checkpoint(path)
            self.saved.append(path)
            job.acknowledge_checkpoint()

    return CostctlCheckpoint


def __getattr__(name: str) -> Any:
    if name == "CostctlCheckpoint":
        cls = _build()
        globals()[name] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
