"""Replaying recorded logs: readers for GPU telemetry and training progress, and ``costctl analyze``.

* :mod:`.readers` — :func:`read_gpu_log` / :func:`read_train_log`, format picked from content;
  :func:`open_gpu_log` streams a GPU log (what ``costctl analyze`` reads; :mod:`.streaming`
  holds the per-sample figures)
  (:mod:`.formats`): nvidia-smi query CSV (:mod:`.gpu_smi_csv`), the looped nvidia-smi table
  (:mod:`.gpu_smi_table`), wandb system metrics (:mod:`.gpu_wandb`), HF/Lightning/Keras/YOLO/
  detectron2/MMEngine files and console logs (:mod:`.train_log`);
* :mod:`.oom` — out-of-memory messages and the sizes they report;
* :mod:`.engine` — the live :class:`~costctl.policies.PolicyEngine` driven on a
  :class:`~costctl.clock.SimClock` over recorded records;
* :mod:`.analysis` — idle stretches, decisions and money, the oracle (:mod:`.oracle`) and the
  peers' rules (:mod:`.peers`); :mod:`.render` and :mod:`.plot` show it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .analysis import Analysis, AnalyzeOptions, analyze, to_dict
    from .engine import replay_loss, replay_timeline
    from .gpu_log import GpuLog
    from .oom import OomEvent, find_oom, match_oom
    from .readers import open_gpu_log, read_gpu_log, read_train_log
    from .timeline import place_progress
    from .train_log import TrainLog

#: Where each name of the package is defined: imported on first use, so a module that needs one
#: submodule (the watch and the lifecycle use only :mod:`.oom`) does not load the readers, the
#: analysis and the engine with it (~40 ms of a watch's start-up).
_LAZY = {
    "Analysis": "analysis", "AnalyzeOptions": "analysis", "analyze": "analysis", "to_dict": "analysis",
    "replay_loss": "engine", "replay_timeline": "engine", "GpuLog": "gpu_log",
    "OomEvent": "oom", "find_oom": "oom", "match_oom": "oom",
    "open_gpu_log": "readers", "read_gpu_log": "readers", "read_train_log": "readers",
    "place_progress": "timeline", "TrainLog": "train_log",
}


def __getattr__(name: str) -> Any:
    """The names of :data:`__all__`, imported from their module on first use."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


__all__ = [
    "Analysis", "AnalyzeOptions", "GpuLog", "OomEvent", "TrainLog", "analyze", "find_oom", "match_oom",
    "open_gpu_log", "place_progress", "read_gpu_log", "read_train_log", "replay_loss", "replay_timeline", "to_dict",
]
