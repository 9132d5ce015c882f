"""The live status line: one line at the bottom of the terminal, never mixed into the child's lines.

Shown only when costctl's stderr is a terminal. Before the child's bytes reach the terminal
the line is erased; it is redrawn only after a chunk that ends a line, so it never splits a
line the child is still writing (a tqdm bar redrawing itself with ``\\r`` keeps its line).
It is drawn in reverse video (``ESC[7m``) on a terminal, cut to the terminal's width; plain
escape codes, so that a watch does not import rich (several MB of its memory) for one line.
"""

from __future__ import annotations

import os
import sys
import threading
from datetime import datetime, tzinfo

from .i18n import _

_ERASE = "\r\x1b[2K"
_REVERSE, _RESET = "\x1b[7m", "\x1b[0m"


def _stderr_width() -> int:
    """Columns of the terminal on stderr (``$COLUMNS`` or 80 when it has none)."""
    try:
        return os.get_terminal_size(sys.stderr.fileno()).columns
    except (AttributeError, OSError, ValueError):
        try:
            return int(os.environ.get("COLUMNS", "80"))
        except ValueError:
            return 80


def countdown(progress: str, at: datetime, now: datetime, tz: tzinfo, *, would: bool = False) -> str:
    """The status line's countdown to a pending stop: ``"idle 25m of 30m — stopping at 14:05"``.

    Args:
        progress: how far along the policy is (``Pending.progress``).
        at / now: aware datetimes: when the stop fires, and now.
        tz: the zone the time is shown in (``[watch] timezone``); ``HH:MM``, with the date
            (``2026-06-02 14:05``) when that is not today there.
        would: the watch stops nothing (``--advise-only``, ``--dry-run``): "would stop at".
    """
    local = at.astimezone(tz)
    when = local.strftime("%H:%M") if local.date() == now.astimezone(tz).date() else local.strftime("%Y-%m-%d %H:%M")
    if would:
        return _("{progress} — would stop at {time}").format(progress=progress, time=when)
    return _("{progress} — stopping at {time}").format(progress=progress, time=when)


class StatusLine:
    """A redrawable status line on a terminal stderr.

    Args:
        enabled: draw at all (False when stderr is not a TTY or the user turned it off).
        badge: a fixed tag drawn at the start of every status text (e.g. ``"ADVISE-ONLY:
            nothing is stopped"`` for a watch that stops nothing); None for none.
    """

    def __init__(self, enabled: bool | None = None, *, badge: str | None = None) -> None:
        if enabled is None:
            enabled = sys.stderr.isatty() and os.environ.get("TERM") != "dumb"
        self.enabled = enabled
        self.badge = badge
        self._text = ""
        self._shown = False
        self._line_open = False  # the child left a partial line on stderr
        self.gone = False  # the terminal went away: nothing is written any more
        self.lock = threading.RLock()

    def _write(self, text: str) -> None:
        """Write and flush ``text`` to stderr; once that fails (EIO: the terminal went away)
        nothing more is written (:attr:`gone`)."""
        if self.gone:
            return
        try:
            sys.stderr.write(text)
            sys.stderr.flush()
        except (OSError, ValueError):
            self.terminal_gone()

    def terminal_gone(self) -> None:
        """The terminal went away (SIGHUP, EIO): write nothing more, draw nothing more."""
        self.gone = True
        self.enabled = False

    def _draw(self) -> None:
        if not self.enabled or not self._text or self._line_open:
            return
        width = max(20, _stderr_width() - 1)
        text = self.text[:width]
        try:
            tty = sys.stderr.isatty()
        except (AttributeError, ValueError):
            tty = False
        self._write(_ERASE + (_REVERSE + text + _RESET if tty else text))
        self._shown = True

    def clear(self) -> None:
        """Erase the line if it is shown (called before child bytes are written)."""
        with self.lock:
            if self.enabled and self._shown:
                self._write(_ERASE)
                self._shown = False

    def after_child_write(self, stream: str, data: bytes) -> None:
        """Note where the child's output ended and redraw when it ended a line."""
        with self.lock:
            if data and (stream == "stderr" or self.enabled):
                self._line_open = not data.endswith(b"\n")
            self._draw()

    @property
    def text(self) -> str:
        """The status text as drawn (the badge first, when set)."""
        return f" [{self.badge}] |{self._text}" if self.badge and self._text else self._text

    def update(self, text: str) -> None:
        """Replace the status text and redraw (the badge, when set, stays in front)."""
        with self.lock:
            self._text = text
            if self._shown:
                self._write(_ERASE)
                self._shown = False
            self._draw()

    def message(self, text: str) -> None:
        """Print a message of costctl's own on its own line (stderr), keeping the status line."""
        with self.lock:
            self.clear()
            if self._line_open:
                self._write("\n")
                self._line_open = False
            self._write(text.rstrip("\n") + "\n")
            self._draw()

    def close(self) -> None:
        """Erase the line for good."""
        with self.lock:
            self.clear()
            self.enabled = False
