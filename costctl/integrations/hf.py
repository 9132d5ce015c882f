"""Hugging Face ``Trainer`` callback: save a checkpoint when costctl asks for one.

Usage::

    from costctl.integrations.hf import CostctlCheckpointCallback

    trainer = Trainer(model=model, args=args, ..., callbacks=[CostctlCheckpointCallback()])
    trainer.train(resume_from_checkpoint=os.environ.get("COSTCTL_RESUME_FROM") or None)

and in ``costctl.toml``: ``[checkpoint] path = "<output_dir>/checkpoint-*"`` (the Trainer saves
``checkpoint-<step>/`` directories; ``--resume`` takes the newest intact one).

After each ``check_every_n_steps``-th optimizer step the callback checks for costctl's request
(:func:`costctl.job.checkpoint_requested`: one ``stat`` call), OR-s the answer over all ranks
(one tiny all-reduce under ``torch.distributed``) and sets ``control.should_save`` on every
rank, so they all enter the Trainer's save together. When the save is done (``on_save``:
transformers calls it after ``Trainer._save_checkpoint`` returned, which writes
``trainer_state.json`` last) the world-zero process acknowledges the request with its record
(:func:`costctl.job.acknowledge_checkpoint`): the checkpoint ``<output_dir>/checkpoint-<step>``,
the step, and the save's start and end. The start is the oldest file time in that directory
(its first file written), not earlier than the step at which the save was asked for; the end
is the moment ``on_save`` runs. A save of the Trainer's own (``save_steps``, ``save_strategy``)
is reported the same way (:func:`costctl.job.report_checkpoint`, start not before the end of
the step it follows), so costctl counts it for a preemption's waste, the Young/Daly interval
and ``--resume`` without a request. ``transformers`` is imported only when the class is first used.

Full-precision progress: transformers 5 prints its log dicts with four significant digits
(``'loss': '0.695'``), coarser than ``ReduceLROnPlateau``'s default threshold. When costctl
runs the job (``$COSTCTL_METRICS_FILE`` set), the callback creates that file in
``on_train_begin`` and appends each ``on_log`` dict to it as a JSON line with the exact floats,
``step`` (``state.global_step``) and ``epoch``, on the main process only; costctl then reads
the progress from the file, and from the printed lines only when there is no such file.
"""

from __future__ import annotations

import os
import time
from typing import Any

from .. import job
from ._dist import any_rank

__all__ = ["CostctlCheckpointCallback"]


def _first_write(path: str, not_before: float) -> float:
    """Seconds since the epoch of the oldest file in ``path`` (the save's first write), never
    before ``not_before``; ``not_before`` when there is none."""
    oldest = None
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                mtime = os.stat(os.path.join(root, name)).st_mtime
            except OSError:
                continue
            oldest = mtime if oldest is None else min(oldest, mtime)
    return max(not_before, oldest) if oldest is not None else not_before


def _build() -> type:
    try:
        from transformers import TrainerCallback
    except ImportError as exc:  # pragma: no cover - exercised only without transformers
        raise ImportError("costctl.integrations.hf needs transformers: pip install transformers") from exc

    class CostctlCheckpointCallback(TrainerCallback):  # type: ignore[misc, valid-type]
        """Sets ``control.should_save`` on every rank when costctl requests a checkpoint.

        Args:
            check_every_n_steps: look for a request every N optimizer steps (default 1; raise
                it when steps take milliseconds).
        """

        def __init__(self, check_every_n_steps: int = 1) -> None:
            if check_every_n_steps < 1:
                raise ValueError("check_every_n_steps must be >= 1")
            self.check_every_n_steps = check_every_n_steps
            self.requested = False
            self.requested_wall: float | None = None
            self.step_end_wall: float | None = None  # the last step's end: an own save starts after it

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            self.step_end_wall = time.time()
            if state.global_step % self.check_every_n_steps:
                return control
            if any_rank(job.checkpoint_requested(), getattr(args, "device", None)):
                control.should_save = True
                if not self.requested:
                    self.requested_wall = time.time()
                self.requested = True
            return control

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            path = job.metrics_file_path()
            if path is not None and getattr(state, "is_world_process_zero", True):
                path.touch()  # from now on costctl reads the progress from the file
            return control

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> Any:
            if logs and getattr(state, "is_world_process_zero", True):
                job.log_metrics(dict(logs), step=getattr(state, "global_step", None),
                                epoch=getattr(state, "epoch", None))
            return control

        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            ended = time.time()
            requested, self.requested = self.requested, False
            if not getattr(state, "is_world_process_zero", True):
                return control  # only the process that writes trainer_state.json acknowledges
            step = int(state.global_step)
            path = os.path.join(str(args.output_dir), f"checkpoint-{step}")
            if requested:
                started = _first_write(path, self.requested_wall or ended)
                job.acknowledge_checkpoint(checkpoint=path, step=step, started_at=started, ended_at=ended)
            else:  # the Trainer's own save (save_steps): reported, so costctl counts it too
                started = _first_write(path, self.step_end_wall or ended)
                job.report_checkpoint(path, step=step, started_at=started, ended_at=ended)
            return control

    return CostctlCheckpointCallback


def __getattr__(name: str) -> Any:
    if name == "CostctlCheckpointCallback":
        cls = _build()
        globals()[name] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
