"""Reading a TOML file the user wrote: TOML's own parser (``tomllib``), after one leading UTF-8
byte-order mark.

TOML is UTF-8 (toml.io/en/v1.0.0, "Spec"), and ``tomllib`` refuses a file that starts with a
byte-order mark (U+FEFF is no valid character outside a string). Editors on Windows (Notepad
before Windows 10 1903, and others when asked for "UTF-8 with BOM") write one, and the file
looks right to its author; Python's own ``utf-8-sig`` codec exists for exactly this. So one
BOM at the very start is dropped, as ``utf-8-sig`` does; any other byte is the parser's to judge.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: The UTF-8 encoding of U+FEFF, the byte-order mark.
UTF8_BOM = b"\xef\xbb\xbf"


def loads_bytes(data: bytes, *, parse_float: Callable[[str], Any] = float) -> dict[str, Any]:
    """The TOML document ``data`` (bytes, UTF-8, one leading BOM allowed) as a dict.

    Raises:
        UnicodeDecodeError: the bytes are not UTF-8.
        tomllib.TOMLDecodeError: not valid TOML.
        RecursionError / ValueError: nested too deeply / an integer too long to convert.
    """
    if data.startswith(UTF8_BOM):
        data = data[len(UTF8_BOM):]
    return tomllib.loads(data.decode("utf-8"), parse_float=parse_float)


def load(path: Path, *, parse_float: Callable[[str], Any] = float) -> dict[str, Any]:
    """The TOML file at ``path`` as a dict (see :func:`loads_bytes`).

    Raises:
        OSError: it cannot be read; and what :func:`loads_bytes` raises.
    """
    return loads_bytes(Path(path).read_bytes(), parse_float=parse_float)


__all__ = ["UTF8_BOM", "load", "loads_bytes"]
