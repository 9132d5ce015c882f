"""Training progress (loss values) from a job's output lines or from its metrics file.

* :mod:`costctl.progress.lines` - :class:`LineParser` for live stdout/stderr chunks and the
  pure :func:`parse_line`;
* :mod:`costctl.progress.metrics_file` - :class:`MetricsFileFollower` tailing a Lightning /
  Keras CSV, JSON-lines or HF ``trainer_state.json`` file, and :func:`read_metrics_file`.

Both produce :class:`costctl.records.ProgressPoint` records; train and eval losses are kept
apart by ``kind``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from costctl.progress.lines import LineParser, compile_loss_regex, parse_epoch_header, parse_line
    from costctl.progress.metrics_file import MetricsFileFollower, read_metrics_file

#: Where each name of the package is defined: imported on first use, so a module that needs
#: only :mod:`costctl.progress.batch` (the policies, the settings: every command) does not
#: compile the line parser's patterns at start-up.
_LAZY = {
    "LineParser": "lines", "compile_loss_regex": "lines", "parse_epoch_header": "lines", "parse_line": "lines",
    "MetricsFileFollower": "metrics_file", "read_metrics_file": "metrics_file",
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
    "LineParser",
    "MetricsFileFollower",
    "compile_loss_regex",
    "parse_epoch_header",
    "parse_line",
    "read_metrics_file",
]
