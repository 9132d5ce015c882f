"""Which text encoding a recorded log's bytes are in: UTF-8 (with or without BOM) or UTF-16.

Windows PowerShell's ``>`` redirection writes UTF-16LE with a BOM (``\\xff\\xfe``); every other
tool writes UTF-8. A BOM alone is not trusted: a UTF-8 or binary file may start with the same
two bytes (``costctl watch`` reads a child's output as UTF-8 whatever its first bytes, and a
recorded copy of it must read the same). UTF-16 is chosen only when the first bytes really
decode as UTF-16 (no unpaired surrogate) into plausible log text: at least half of the
characters ASCII, as every training or GPU log is (numbers, ``loss``, ``%``, ``MiB``).
Otherwise the file is UTF-8, undecodable bytes replaced by U+FFFD, never fatal.
"""

from __future__ import annotations

import codecs

__all__ = ["decode_bytes", "detect_encoding"]

#: bytes of the head looked at to confirm UTF-16 (the first 16 Ki characters).
_CHECK_BYTES = 32 * 1024


def _plausible_utf16(body: bytes, codec: str) -> bool:
    """True when ``body`` (no BOM) decodes strictly as ``codec`` into mostly-ASCII text.

    The end of ``body`` may cut a character or a surrogate pair (a file's head): that part
    waits in the incremental decoder and does not count against it.
    """
    sample = body[:_CHECK_BYTES]
    try:
        text = codecs.getincrementaldecoder(codec)("strict").decode(sample, final=False)
    except UnicodeDecodeError:
        return False
    if not text:
        return True  # a BOM and (almost) nothing else: an empty UTF-16 file
    ascii_chars = len(text.encode("ascii", "ignore"))
    return "\x00" not in text and ascii_chars * 2 >= len(text)


def detect_encoding(head: bytes) -> str:
    """The Python codec name for a file whose first bytes are ``head`` (a few KiB or more).

    Rules: a UTF-8 BOM gives ``utf-8-sig``; a UTF-16 BOM gives ``utf-16`` when the bytes after
    it are plausible UTF-16 text (see the module doc), else ``utf-8``; without a BOM, NUL bytes
    in a quarter or more of the first 4 KiB, mostly in the odd (even) positions, give
    ``utf-16-le`` (``-be``) under the same check; otherwise ``utf-8``. Open the file with
    ``errors="replace"``: undecodable bytes are replaced, not fatal.
    """
    if head.startswith(codecs.BOM_UTF8):
        return "utf-8-sig"
    if head.startswith(codecs.BOM_UTF16_LE):
        return "utf-16" if _plausible_utf16(head[2:], "utf-16-le") else "utf-8"
    if head.startswith(codecs.BOM_UTF16_BE):
        return "utf-16" if _plausible_utf16(head[2:], "utf-16-be") else "utf-8"
    sample = head[:4096]
    if len(sample) >= 4 and sample.count(0) * 4 >= len(sample):
        codec = "utf-16-le" if sample[1::2].count(0) >= sample[0::2].count(0) else "utf-16-be"
        if _plausible_utf16(head, codec):
            return codec
    return "utf-8"


def decode_bytes(data: bytes) -> str:
    """The whole of ``data`` decoded by :func:`detect_encoding`'s choice, BOM dropped,
    undecodable bytes as U+FFFD."""
    return data.decode(detect_encoding(data[:64 * 1024]), "replace")
