"""The simulated cloud's state: one JSON file in costctl's data dir, shared by processes.

``<data dir>/sim/state.json`` is read and written only inside :meth:`SimStateStore.transaction`,
which holds an inter-process file lock (the ``filelock`` package, ``state.json.lock``) and
writes the new state atomically (temporary file in the same directory + ``os.replace``), so
successive CLI calls and concurrent processes see one consistent simulated cloud.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from costctl.errors import ProviderError
from costctl.i18n import _

STATE_VERSION = 1


def empty_state() -> dict[str, Any]:
    """A fresh simulated cloud: no instances."""
    return {"version": STATE_VERSION, "next_id": 1, "instances": {}}


class SimStateStore:
    """Locked, atomic access to the sim state file.

    Args:
        data_dir: costctl's data dir; the state lives in ``data_dir/sim/state.json``.
        lock_timeout: seconds to wait for another process's lock before giving up.
    """

    def __init__(self, data_dir: Path, *, lock_timeout: float = 10.0) -> None:
        self.dir = Path(data_dir) / "sim"
        self.path = self.dir / "state.json"
        self._lock = FileLock(str(self.path) + ".lock", timeout=lock_timeout)

    def _read(self) -> dict[str, Any]:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return empty_state()
        except OSError as exc:
            raise ProviderError(_("sim: cannot read {path}: {reason}").format(path=self.path, reason=exc.strerror)) from None
        try:
            state = json.loads(text)
        except (ValueError, RecursionError):  # RecursionError: nested past the parser's limit
            raise ProviderError(
                _("sim: state file {path} is corrupt; delete it to reset the simulated cloud").format(path=self.path)
            ) from None
        if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
            raise ProviderError(
                _("sim: state file {path} has an unknown format; delete it to reset the simulated cloud").format(
                    path=self.path)
            )
        return state

    def _write(self, state: dict[str, Any]) -> None:
        fd, tmp = tempfile.mkstemp(prefix=".state-", suffix=".json", dir=self.dir)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(state, fh, indent=2, sort_keys=True)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise

    @contextmanager
    def transaction(self) -> Iterator[dict[str, Any]]:
        """Lock, yield the state dict for reading and changing, then write it back atomically
        (only if it changed; nothing is written when the block raises).

        Raises:
            ProviderError: the lock is held elsewhere for longer than ``lock_timeout``, or the
                file is unreadable or corrupt.
        """
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ProviderError(_("sim: cannot create {path}: {reason}").format(path=self.dir, reason=exc.strerror)) from None
        try:
            with self._lock:
                state = self._read()
                before = json.dumps(state, sort_keys=True)
                yield state
                if json.dumps(state, sort_keys=True) != before:
                    self._write(state)
        except Timeout:
            raise ProviderError(
                _("sim: state file {path} is locked by another process (waited {seconds:g}s)").format(
                    path=self.path, seconds=self._lock.timeout)
            ) from None
