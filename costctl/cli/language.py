"""The language of a costctl run, chosen once, before click parses anything (issue 16, part 3).

Help text, click's own words and every message of a run must speak one language, whichever
command runs, so it is chosen when :mod:`costctl.cli` is imported, from (first that is set and
valid): ``COSTCTL_UI__LANGUAGE``; the ``[ui] language`` of the config file costctl would read
(``--config FILE`` on the command line, else ``$COSTCTL_CONFIG``, else ``./costctl.toml``),
read cheaply and tolerantly (a file that is missing, unreadable or not valid TOML is skipped
here: loading the settings reports it later); else the locale variables
(:func:`costctl.i18n.choose_language`). A value that is not one of
:data:`costctl.i18n.CHOICES` is skipped too, so the error that reports it comes out in the
language the rest would choose.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path

from .. import tomlfile
from ..i18n import CHOICES, set_language
from ..paths import CONFIG_FILE_NAME

#: The environment variable of ``[ui] language`` (pydantic-settings' ``COSTCTL_`` prefix, ``__`` nesting).
LANGUAGE_VARIABLE = "COSTCTL_UI__LANGUAGE"


def _valid(value: object) -> str | None:
    """``value`` when it is one of :data:`CHOICES` (case and spaces aside), else None."""
    if not isinstance(value, str):
        return None
    found = {c.lower(): c for c in CHOICES}.get(value.strip().lower())
    return found


def config_path_from(argv: Sequence[str], environ: Mapping[str, str], cwd: Path) -> Path | None:
    """The config file a run with ``argv`` would read (``--config FILE`` / ``--config=FILE``,
    else ``$COSTCTL_CONFIG``, else ``cwd/costctl.toml``); None when none is named."""
    for i, arg in enumerate(argv):
        if arg == "--":
            break
        if arg == "--config" and i + 1 < len(argv):
            return Path(argv[i + 1])
        if arg.startswith("--config="):
            return Path(arg.split("=", 1)[1])
    if environ.get("COSTCTL_CONFIG"):
        return Path(environ["COSTCTL_CONFIG"])
    return cwd / CONFIG_FILE_NAME


def _plain_file(path: Path) -> bool:
    """``path`` is a regular file (stat only, never opened: a FIFO blocks an open, a device such
    as /dev/zero never ends; costctl.validation.require_regular_file says so later, in one line).
    Kept to the standard library: this runs before click loads."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def configured_language(argv: Sequence[str], environ: Mapping[str, str] | None = None,
                        cwd: Path | None = None) -> str | None:
    """The valid ``[ui] language`` a run with ``argv`` is configured with (``auto``, ``en``,
    ``zh_CN``): the environment variable's, else the config file's; None when neither sets
    a valid one. Never raises."""
    env = os.environ if environ is None else environ
    chosen = _valid(env.get(LANGUAGE_VARIABLE))
    if chosen is not None:
        return chosen
    path = config_path_from(argv, env, cwd or Path.cwd())
    if path is None or not _plain_file(path):
        return None  # a FIFO would block the open, a device never ends: load_settings says so in one line
    try:
        data = tomlfile.load(path)
    except (OSError, ValueError, RecursionError, AttributeError):  # none, unreadable, a directory, not TOML, too deep
        return None
    ui = data.get("ui")
    return _valid(ui.get("language")) if isinstance(ui, dict) else None


def choose_for_cli(argv: Sequence[str]) -> str:
    """Show this run's messages in the language ``argv`` and the environment choose (see the
    module docstring); returns it (``"en"`` or ``"zh_CN"``)."""
    return set_language(configured_language(argv))


__all__ = ["LANGUAGE_VARIABLE", "choose_for_cli", "config_path_from", "configured_language"]
