"""A regular expression the user wrote (``--loss-regex``), run with a time budget per line.

Python's :mod:`re` has no timeout, and a pattern with nested quantifiers can take exponential
time on one line (``(x+x+)+y`` on a line of x's: seconds at 30 characters, years at 100), which
would hang ``costctl analyze`` or stall a watch's output parser. Every pattern a user supplies is
therefore compiled here, with the well-kept :mod:`regex` package (the same syntax as :mod:`re`,
its ``VERSION0`` behaviour), and every search is given :data:`LINE_BUDGET_S`:

* a line whose search runs past the budget is skipped (no match) and counted
  (:attr:`UserRegex.timeouts`);
* after :data:`MAX_TIMEOUTS` such lines the pattern is turned off (:attr:`UserRegex.disabled`;
  :meth:`UserRegex.search` then matches nothing), so a pattern that times out on every line
  costs at most about ``MAX_TIMEOUTS * LINE_BUDGET_S`` of parsing in all; the caller says so
  once and reads on with costctl's built-in shapes.

A search releases the GIL (``concurrent=True``; the text is an immutable ``str``), so a slow
pattern on the watch's parser thread never holds up the thread that passes the job's output
through. costctl's own, fixed patterns stay on :mod:`re`: this module is for user input only.

Example::

    loss = compile_user_regex(r"loss=(?P<loss>\\S+)", option="--loss-regex")
    m = loss.search("step 3 loss=0.25")        # a regex.Match, or None (no match, a timeout)
"""

from __future__ import annotations

from typing import Any

import regex

from .errors import UsageError
from .i18n import _
from .validation import escape_controls

__all__ = ["LINE_BUDGET_S", "MAX_TIMEOUTS", "UserRegex", "compile_user_regex", "shown_pattern"]

#: Seconds one search of one line may take (50 ms): far above what any sane pattern needs on a
#: line of at most 64 Ki characters (microseconds), far below what a user waits for. The
#: :mod:`regex` engine checks its clock as it backtracks, so a search ends within a few budgets.
LINE_BUDGET_S = 0.05

#: Lines that may time out before the pattern is turned off (10: at most about half a second of
#: parsing lost to it in all, however long the log or the job).
MAX_TIMEOUTS = 10

#: The most characters of a pattern quoted in a message (a longer one is cut, ending in "...").
_SHOWN_CHARS = 200


def shown_pattern(pattern: str) -> str:
    """``pattern`` as a message quotes it: in single quotes as typed, control characters
    escaped (:func:`~costctl.validation.escape_controls`: the terminal shows what was typed),
    cut to about 200 characters."""
    text = escape_controls(pattern)
    if len(text) > _SHOWN_CHARS:
        text = text[: _SHOWN_CHARS - 3] + "..."
    return f"'{text}'"


class UserRegex:
    """A compiled user pattern whose searches each have :data:`LINE_BUDGET_S` (see the module
    docstring). One instance may serve several line parsers (a watch's stdout and stderr),
    one search at a time.

    Attributes:
        pattern: the pattern as the user wrote it.
        option: the option or key it came from, for messages (``"--loss-regex"``).
        groupindex: named group -> number, as :attr:`re.Pattern.groupindex`.
        groups: the number of groups.
        timeouts: lines whose search ran past the budget (skipped) so far.
        disabled: True once :data:`MAX_TIMEOUTS` lines timed out; every later search is None.
    """

    def __init__(self, compiled: Any, pattern: str, option: str) -> None:
        self._compiled = compiled
        self.pattern = pattern
        self.option = option
        self.groupindex: dict[str, int] = dict(compiled.groupindex)
        self.groups: int = compiled.groups
        self.timeouts = 0
        self.disabled = False

    def search(self, text: str) -> Any:
        """The first match in ``text`` (a :class:`regex.Match`), or None: no match, a search
        past :data:`LINE_BUDGET_S` (counted in :attr:`timeouts`), or the pattern turned off."""
        if self.disabled:
            return None
        try:
            return self._compiled.search(text, timeout=LINE_BUDGET_S, concurrent=True)
        except TimeoutError:
            self.timeouts += 1
            if self.timeouts >= MAX_TIMEOUTS:
                self.disabled = True
            return None


def compile_user_regex(pattern: str, *, option: str) -> UserRegex:
    """Compile the user's ``pattern`` given as ``option`` (for the message).

    Raises:
        UsageError: the pattern does not compile; the message names the option, the pattern
            (escaped, see :func:`shown_pattern`) and the engine's reason.
    """
    try:
        compiled = regex.compile(pattern)
    except (regex.error, ValueError, OverflowError, RecursionError, MemoryError) as exc:
        raise UsageError(_("{option} {pattern} is not a valid regular expression ({reason})").format(
            option=option, pattern=shown_pattern(pattern), reason=exc)) from None
    return UserRegex(compiled, pattern, option)
