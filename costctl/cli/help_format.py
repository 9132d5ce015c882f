"""``--help`` laid out by display width, for Chinese as for English (issue 16, part 3).

click's help formatter measures text in characters and breaks lines only at spaces: a Chinese
sentence (two terminal cells a character, no spaces) overflows the terminal, and its
``TextWrapper`` then cuts English words and option names in two. :class:`WidthFormatter`
measures with :func:`rich.cells.cell_len` (Unicode East Asian Width, as a terminal shows it)
and breaks a line at a space or between two wide characters, never inside a run of narrow
ones (an English word, ``--accum-steps``), nor before closing punctuation (``，。）``) or after
opening punctuation (``（“``). :func:`short_help` makes a command's one-line summary the same
way (click's counts words split at spaces: a Chinese summary became ``...``).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import typer

#: click's context and help formatter as typer uses them (its own copy of click, or click itself).
Context: type[Any] = typer.Context
HelpFormatter: type[Any] = typer.Context.formatter_class

#: Punctuation a line never starts with (it belongs to the text before it) or ends with (it
#: belongs to the text after it): the common rules of Chinese line breaking (kinsoku).
CLOSING = frozenset("，。、；：！？）》」』】〕”’…,.;:!?)]")
OPENING = frozenset("（《「『【〔“‘([")


def tokens(text: str) -> list[str]:
    """``text`` cut where a line may break: runs of spaces, single wide characters (with any
    closing punctuation after them, and any opening punctuation before them) and runs of narrow
    ones (a word, an option name), which are never cut."""
    out: list[str] = []
    kinds: list[str] = []
    for ch in text:
        kind = "space" if ch.isspace() else ("wide" if cell_len(ch) > 1 else "narrow")
        if out and kinds[-1] != "space" and kind != "space" and (
                (kind == "narrow" and kinds[-1] == "narrow") or out[-1][-1] in OPENING
                or (ch in CLOSING and "wide" in (kind, kinds[-1]))):
            out[-1] += ch
            kinds[-1] = kind  # a line may break after a wide character, never inside a narrow run
        elif out and kind == "space" and kinds[-1] == "space":
            out[-1] += ch
        else:
            out.append(ch)
            kinds.append(kind)
    return out


def fill(text: str, width: int, initial_indent: str = "", subsequent_indent: str = "") -> str:
    """One paragraph, spaces collapsed, wrapped to ``width`` terminal cells (a token longer
    than a line is left whole on its own line)."""
    lines: list[str] = []
    line, has_text, pending = initial_indent, False, ""
    for tok in tokens(" ".join(text.split())):
        if tok.isspace():
            pending = " " if has_text else ""
            continue
        if has_text and cell_len(line) + cell_len(pending) + cell_len(tok) > width:
            lines.append(line)
            line, pending = subsequent_indent, ""
        line += pending + tok
        has_text, pending = True, ""
    if has_text:
        lines.append(line)
    return "\n".join(lines)


def wrap_text(text: str, width: int = 78, initial_indent: str = "", subsequent_indent: str = "",
              preserve_paragraphs: bool = False) -> str:
    """click's :func:`~click.formatting.wrap_text` by display width (see the module docstring):
    paragraphs split at blank lines keep their indent; one that starts with a ``\\b`` line is
    kept as written."""
    text = text.expandtabs()
    if not preserve_paragraphs:
        return fill(text, width, initial_indent, subsequent_indent)
    paragraphs: list[tuple[int, bool, list[str]]] = []
    for block in _blocks(text.splitlines()):
        first = block[0]
        indent = cell_len(first) - cell_len(first.lstrip())
        if first.strip() == "\b":
            paragraphs.append((indent, True, block[1:]))
        else:
            paragraphs.append((indent, False, [" ".join(line.strip() for line in block)]))
    out = []
    for indent, raw, lines in paragraphs:
        pad = " " * indent
        if raw:
            out.append("\n".join(initial_indent + pad + line for line in lines))
        else:
            out.append(fill(lines[0], width, initial_indent + pad, subsequent_indent + pad))
    return "\n\n".join(out)


def _blocks(lines: list[str]) -> list[list[str]]:
    blocks: list[list[str]] = [[]]
    for line in lines:
        if line.strip():
            blocks[-1].append(line)
        elif blocks[-1]:
            blocks.append([])
    return [b for b in blocks if b]


def cell_len(text: str) -> int:
    """The terminal cells ``text`` takes (:func:`rich.cells.cell_len`; imported on first help
    shown, so that a command run pays nothing for it at start-up)."""
    from rich.cells import cell_len as cells

    return cells(text)


class WidthFormatter(HelpFormatter):
    """click's help formatter measuring display width (see the module docstring)."""

    def write_text(self, text: str) -> None:
        indent = " " * self.current_indent
        self.write(wrap_text(text, self.width, initial_indent=indent, subsequent_indent=indent,
                             preserve_paragraphs=True))
        self.write("\n")

    def write_dl(self, rows: Sequence[tuple[str, str]], col_max: int = 30, col_spacing: int = 2) -> None:
        rows = [(first, second) for first, second in rows]
        first_col = min(max((cell_len(first) for first, _ in rows), default=0), col_max) + col_spacing
        for first, second in rows:
            self.write(f"{'':>{self.current_indent}}{first}")
            if not second:
                self.write("\n")
                continue
            if cell_len(first) <= first_col - col_spacing:
                self.write(" " * (first_col - cell_len(first)))
            else:
                self.write("\n" + " " * (first_col + self.current_indent))
            text_width = max(self.width - first_col - self.current_indent, 10)
            lines = wrap_text(second, text_width, preserve_paragraphs=True).splitlines() or [""]
            self.write(f"{lines[0]}\n")
            for line in lines[1:]:
                self.write(f"{'':>{first_col + self.current_indent}}{line}\n" if line else "\n")


class WidthContext(Context):
    """click's context whose help formatter is :class:`WidthFormatter`."""

    formatter_class = WidthFormatter


def short_help(text: str, limit: int) -> str:
    """A command's one-line summary from its help ``text``, at most ``limit`` cells (as click
    makes it, by display width): the first sentence of the first paragraph when it fits, else
    the paragraph when it fits, else as many whole tokens as fit, followed by ``...``."""
    paragraph = inspect.cleandoc(text).split("\n\n")[0]
    if paragraph.strip().startswith("\b"):
        paragraph = paragraph.strip()[1:]
    paragraph = " ".join(paragraph.split())
    ends = [cut for cut in (paragraph.find("。"), paragraph.find(". ")) if cut != -1]
    if ends and cell_len(paragraph[:min(ends) + 1]) <= limit:
        return paragraph[:min(ends) + 1]
    if cell_len(paragraph) <= limit:
        return paragraph
    out = ""
    for tok in tokens(paragraph):
        if cell_len(out + tok) + 3 > limit:
            break
        out += tok
    return out.rstrip(" ,，、;；:：") + "..."


def short_help_of(cmd: Any, limit: int) -> str:
    """:func:`short_help` of ``cmd`` (its ``short_help`` when it has one, else its help)."""
    if cmd.short_help:
        return " ".join(inspect.cleandoc(cmd.short_help).split())
    return short_help(cmd.help or "", limit) if cmd.help else ""


__all__ = ["WidthContext", "WidthFormatter", "short_help", "short_help_of", "tokens", "wrap_text"]
