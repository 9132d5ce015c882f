"""Logged gradient norms on console lines: what :mod:`costctl.policies.grad_norm` reads.

One extraction for ``costctl analyze`` and the live ``costctl watch``: Hugging Face dicts
(``'grad_norm': 1.2`` or ``'1.2'``), Megatron's ``| grad norm: nan |``, ``grad_norm=...``
postfixes. Each logged value is a :data:`GradNormRecord` ``(grad_norm, loss, step, epoch)``:
``loss`` is the train loss :func:`~costctl.progress.parse_line` reads on the same line (None
when the line has none: Megatron prints none for a skipped iteration), ``step``/``epoch`` where
it was logged (None when unknown).
"""

from __future__ import annotations

import re

from .named import line_bounds

#: ``(grad_norm, loss on the same record or None, step or None, epoch or None)``.
GradNormRecord = tuple[float, "float | None", "int | None", "float | None"]
#: the names a gradient norm is logged under (HF, Lightning/W&B style, Megatron's console).
GRAD_NORM_KEYS = ("grad_norm", "train/grad_norm", "grad norm", "gradient_norm")
#: literals one of which every line :func:`console_grad_norms` reads holds (a cheap prefilter).
GRAD_NORM_WORDS = ("rad_norm", "rad norm", "RAD_NORM", "RAD NORM")
# A logged gradient norm on a console line. Run only over blocks holding the literal. The same
# on an ASCII block's lower-case copy, case-sensitive: starts with a literal the regex engine
# finds fast (the word boundary before it is checked per match).
_GRAD_NORM_LOW_RE = re.compile(
    r"""grad[_ ]norm['"]?\s*[:=]\s*['"]?(?:tensor\(\s*)?"""
    r"([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:e[-+]?\d+)?|[-+]?(?:nan|inf(?:inity)?))(?![a-z0-9_])"
)
_GRAD_NORM_RE = re.compile(
    r"""(?<![A-Za-z0-9_])grad[_ ]norm['"]?\s*[:=]\s*['"]?(?:tensor\(\s*)?"""
    r"([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf(?:inity)?))(?![A-Za-z0-9_])",
    re.IGNORECASE,
)


def console_grad_norms(text: str, out) -> None:
    """Append the gradient norms logged on the complete lines ``text`` to ``out`` (anything
    with ``append``: a list, a deque), one :data:`GradNormRecord` per line holding one (the
    first on the line), with the loss, step and epoch :func:`~costctl.progress.parse_line`
    reads on its line.

    Cheap: a block without ``rad_norm``/``rad norm`` (either case) costs four substring scans; the regex runs over
    blocks that hold it and each line with a match is parsed once.
    """
    if not any(w in text for w in GRAD_NORM_WORDS):
        return
    from .lines import _step_epoch_total, clean_line, parse_line

    done_line = -1
    ascii_text = text.isascii()
    low = text.lower() if ascii_text else text
    for m in (_GRAD_NORM_LOW_RE if ascii_text else _GRAD_NORM_RE).finditer(low):
        if m.start() and (low[m.start() - 1].isalnum() or low[m.start() - 1] == "_"):
            continue  # "xgrad_norm": not the key
        start, end = line_bounds(text, m.start(), m.end())
        if start == done_line:
            continue  # one gradient norm per line (the first)
        done_line = start
        line = text[start:end]
        value = float(m.group(1))
        train = [p for p in parse_line(line) if p.kind == "train"]
        if train:
            out.append((value, train[0].value, train[0].step, train[0].epoch))
        else:  # no loss on the line (Megatron prints none for a skipped iteration): where it is
            step, epoch, _ = _step_epoch_total(clean_line(line))
            out.append((value, None, step, epoch))


__all__ = ["GRAD_NORM_KEYS", "GRAD_NORM_WORDS", "GradNormRecord", "console_grad_norms"]
