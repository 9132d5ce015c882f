"""Opening recorded logs as text whatever their encoding: UTF-8 (with or without BOM) or UTF-16.

Windows PowerShell redirects (``nvidia-smi ... > gpu_log.csv``) write UTF-16LE with a BOM and
CRLF line ends; a reader that assumes UTF-8 sees a NUL byte between every character. The
encoding is picked from the first bytes by :func:`costctl.progress.encoding.detect_encoding`
(a BOM or NUL bytes, trusted only when the text really decodes as UTF-16), never from the
file name. Line ends are left untouched (``newline=""``) so that tqdm's carriage returns reach
the console parser and quoted multi-line CSV fields reach :mod:`csv` intact.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from pathlib import Path

from ..errors import UsageError
from ..i18n import _
from ..progress.encoding import detect_encoding
from ..validation import require_regular_file

__all__ = [
    "BLOCK_CHARS", "SNIFF_BYTES", "detect_encoding", "iter_lines", "open_text", "read_all", "read_head", "split_lines",
]

#: bytes read to sniff the encoding and the format.
SNIFF_BYTES = 64 * 1024


def open_text(path: Path) -> io.TextIOWrapper:
    """Open ``path`` for reading as text with its detected encoding and no newline translation.

    Raises:
        UsageError: the file does not exist or cannot be read, or is a FIFO or a device (one
            line naming it).
    """
    require_regular_file(path)
    try:
        with path.open("rb") as fh:
            head = fh.read(SNIFF_BYTES)
        return open(path, encoding=detect_encoding(head), errors="replace", newline="")  # noqa: SIM115
    except FileNotFoundError:
        raise UsageError(_("{path}: no such file").format(path=path)) from None
    except IsADirectoryError:
        raise UsageError(_("{path}: is a directory, expected a log file").format(path=path)) from None
    except OSError as exc:
        raise UsageError(_("{path}: cannot read: {error}").format(path=path, error=exc.strerror)) from None


def read_head(path: Path, chars: int = SNIFF_BYTES // 2) -> str:
    """The first ``chars`` characters of ``path``, decoded (for format sniffing).

    Raises:
        UsageError: as :func:`open_text`.
    """
    with open_text(path) as fh:
        return fh.read(chars)


def read_all(path: Path) -> str:
    """The whole file decoded, line ends kept as they are.

    Raises:
        UsageError: as :func:`open_text`.
    """
    with open_text(path) as fh:
        return fh.read()


def split_lines(text: str) -> list[str]:
    """Physical lines without their ``\\n`` / ``\\r\\n`` ends (a lone ``\\r`` is kept: tqdm)."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [ln[:-1] if ln.endswith("\r") else ln for ln in lines]


#: characters read per block by :func:`iter_lines` (1 Mi: large reads, bounded memory).
BLOCK_CHARS = 1 << 20

_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)")


def iter_lines(path: Path, block_chars: int = BLOCK_CHARS) -> Iterator[str]:
    """The lines of ``path`` with their ends (``\n``, ``\r\n`` or a lone ``\r``, as a text file
    opened with ``newline=""`` splits them), read in blocks of ``block_chars`` decoded characters;
    the same lines whatever the block size.

    Raises:
        UsageError: as :func:`open_text`.
    """
    with open_text(path) as fh:
        pieces: list[str] = []  # the unfinished line, in pieces (no quadratic copies of a long line)
        while block := fh.read(max(1, block_chars)):
            if "\n" not in block and "\r" not in block and not (pieces and pieces[-1].endswith("\r")):
                pieces.append(block)  # inside a long line: nothing to split yet
                continue
            text = "".join(pieces) + block if pieces else block
            # Lines are cut up to the last line end only: the regex is never run over the
            # unfinished line (trying it at each of its positions would cost its length squared).
            # A CR at the block's end may be half of a CRLF: its line waits for the next block.
            stop = len(text) - 1 if text.endswith("\r") else len(text)
            end = max(text.rfind("\n", 0, stop), text.rfind("\r", 0, stop)) + 1
            for m in _LINE.finditer(text, 0, end):
                yield m.group()
            pieces = [text[end:]] if end < len(text) else []
        if pieces:
            text = "".join(pieces)  # a held CR ends its line now; then the last line, unended
            # cut up to the last line end only, as above (the regex over a long unended tail
            # costs its length squared), then the tail as one line
            end = max(text.rfind("\n"), text.rfind("\r")) + 1
            for m in _LINE.finditer(text, 0, end):
                yield m.group()
            if end < len(text):
                yield text[end:]
