"""Training progress (loss values) from a job's output lines or from its metrics file.

* :mod:`costctl.progress.lines` - :class:`LineParser` for live stdout/stderr chunks and the
  pure :func:`parse_line`;
* :mod:`costctl.progress.metrics_file` - :class:`MetricsFileFollower` tailing a Lightning /
  Keras CSV, JSON-lines or HF ``trainer_state.json`` file, and :func:`read_metrics_file`.

Both produce :class:`costctl.records.ProgressPoint` records; train and eval losses are kept
apart by ``kind``.
"""

from costctl.progress.lines import LineParser, compile_loss_regex, parse_epoch_header, parse_line
from costctl.progress.metrics_file import MetricsFileFollower, read_metrics_file

__all__ = [
    "LineParser",
    "MetricsFileFollower",
    "compile_loss_regex",
    "parse_epoch_header",
    "parse_line",
    "read_metrics_file",
]
