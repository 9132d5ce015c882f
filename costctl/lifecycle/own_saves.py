"""The checkpoints a job reports saving on its own schedule: the saves file.

``costctl watch`` names a file in the job's environment (``$COSTCTL_CHECKPOINT_SAVES``,
:data:`costctl.job.ENV_CHECKPOINT_SAVES`); the job appends one JSON line per completed save it
made unasked (:func:`costctl.job.report_checkpoint`: the Hugging Face callback's ``on_save``, the
Lightning callback, a script's own ``--save-every``)::

    {"version": 1, "checkpoint": "/abs/out/checkpoint-30", "step": 30,
     "save_started_at": "2026-01-05T10:00:01.2+00:00", "save_ended_at": "2026-01-05T10:00:01.9+00:00",
     "pid": 4242}

:class:`SavesFollower` reads the lines appended since its last look (complete lines only, at
most :data:`MAX_READ_BYTES` a look; a line that is not such a record is skipped), cheaply: one
``stat`` when nothing was appended. The lifecycle controller counts each reported save as it
counts a requested one (:meth:`costctl.lifecycle.controller.Lifecycle.note_reported_saves`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

#: The most bytes read from the saves file in one look (the rest waits for the next).
MAX_READ_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class SaveReport:
    """One save the job reported.

    Attributes:
        checkpoint: the checkpoint saved (file or directory), absolute; None: the job did not say.
        step: the training step it holds, or None.
        started_at / ended_at: when the save began (None: unknown) and ended, aware UTC (wall clock).
    """

    checkpoint: Path | None
    step: int | None
    started_at: datetime | None
    ended_at: datetime

    @property
    def duration_s(self) -> float | None:
        """The save's own duration in seconds (end - start), or None when unknown or not positive."""
        if self.started_at is None:
            return None
        d = (self.ended_at - self.started_at).total_seconds()
        return d if d > 0 else None


def _time(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        t = datetime.fromisoformat(value)
    except ValueError:
        return None
    return t.astimezone(timezone.utc) if t.tzinfo is not None else None


def parse_report(line: bytes) -> SaveReport | None:
    """One line of the saves file as a :class:`SaveReport`; None for anything else (not JSON,
    no aware ``save_ended_at``, a ``checkpoint`` that is not a string, a huge ``step``)."""
    try:
        record = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(record, dict):
        return None
    ended = _time(record.get("save_ended_at"))
    if ended is None:
        return None
    cp = record.get("checkpoint")
    step = record.get("step")
    if not isinstance(step, int) or isinstance(step, bool) or not 0 <= step < 2**63:
        step = None
    return SaveReport(checkpoint=Path(cp) if isinstance(cp, str) and cp else None, step=step,
                      started_at=_time(record.get("save_started_at")), ended_at=ended)


class SavesFollower:
    """Reads the reports appended to the saves file ``path`` since the last :meth:`take`.

    Args:
        path: the saves file (it need not exist yet).
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._offset = 0

    def take(self) -> list[SaveReport]:
        """The reports of the complete lines appended since the last call, in order."""
        try:
            size = os.stat(self.path).st_size
        except OSError:
            return []
        if size < self._offset:  # replaced or truncated: read it again from the start
            self._offset = 0
        if size == self._offset:
            return []
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self._offset)
                data = fh.read(min(size - self._offset, MAX_READ_BYTES))
        except OSError:
            return []
        end = data.rfind(b"\n")
        if end < 0:
            if len(data) >= MAX_READ_BYTES:  # one line longer than a look: not a report, skip it
                self._offset += len(data)
            return []
        self._offset += end + 1
        return [r for line in data[:end].split(b"\n") if (r := parse_report(line)) is not None]


__all__ = ["MAX_READ_BYTES", "SaveReport", "SavesFollower", "parse_report"]
