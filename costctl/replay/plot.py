"""``--plot FILE.png``: utilization, loss, decisions and cumulative spend on one time axis.

Needs matplotlib (the optional extra ``costctl[plot]``); without it :func:`plot_analysis` raises
a one-line :class:`~costctl.errors.UsageError`. Uses the non-interactive Agg backend.

The figure's labels follow the language (:mod:`costctl.i18n`) only where they can be drawn:
matplotlib's bundled fonts (DejaVu) have no CJK glyphs, so Chinese labels would be empty boxes.
In Chinese, :func:`figure_text` looks for an installed font with Simplified Chinese glyphs
(:data:`CJK_FONTS`, e.g. Noto Sans CJK SC from ``fonts-noto-cjk``, WenQuanYi Micro Hei from
``fonts-wqy-microhei``); with one, the labels are Chinese and drawn in it; without one (most
containers, AutoDL's included), they stay English, so the PNG stays readable.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..i18n import N_, _, language
from ..money import cost_of
from ..records import ProgressPoint
from .analysis import Analysis

_COLOURS = {"stop": "tab:red", "advise": "tab:orange", "warn": "tab:olive"}
#: Font families with Simplified Chinese glyphs, in the order tried (the families of the Debian/
#: Ubuntu packages fonts-noto-cjk, fonts-arphic-*, fonts-wqy-*, and the Windows/macOS system fonts).
CJK_FONTS = ("Noto Sans CJK SC", "Noto Sans SC", "Source Han Sans SC", "Source Han Sans CN", "WenQuanYi Micro Hei",
             "WenQuanYi Zen Hei", "Sarasa Gothic SC", "Microsoft YaHei", "SimHei", "PingFang SC", "Hiragino Sans GB",
             "Heiti SC", "AR PL UMing CN", "AR PL UKai CN", "Droid Sans Fallback")


def cjk_font(installed: Callable[[], set[str]] | None = None) -> str | None:
    """The first family of :data:`CJK_FONTS` that matplotlib can use here, or None.

    Args:
        installed: the font family names matplotlib knows (default: its font manager's list).
    """
    if installed is None:
        from matplotlib import font_manager

        names = {f.name for f in font_manager.fontManager.ttflist}
    else:
        names = installed()
    return next((name for name in CJK_FONTS if name in names), None)


def figure_text(installed: Callable[[], set[str]] | None = None) -> tuple[Callable[[str], str], dict[str, Any]]:
    """How a figure writes its labels: ``(text, rc)``, where ``text(msgid)`` is the label (an
    English message id) in the language the figure uses and ``rc`` the matplotlib settings to
    draw it with (``plt.rc_context(rc)``).

    Chinese only when the language is Chinese and a CJK font is installed (:func:`cjk_font`);
    otherwise English labels and no settings (see the module docstring).
    """
    if language() != "zh_CN":
        return (lambda message: message), {}
    font = cjk_font(installed)
    if font is None:
        return (lambda message: message), {}
    return _, {"font.family": "sans-serif", "font.sans-serif": [font, "DejaVu Sans"], "axes.unicode_minus": False}


def pyplot():
    """``matplotlib.pyplot`` on the non-interactive Agg backend.

    Raises:
        UsageError: matplotlib is not installed (one line naming the extra to install).
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UsageError(_("--plot needs matplotlib, which is not installed: pip install 'costctl[plot]'")) from None
    return plt


def plot_analysis(a: Analysis, path: Path, progress: list[ProgressPoint] | None = None) -> Path:
    """Draw the analysis to ``path`` (PNG) and return it.

    Panels, sharing the time axis: GPU utilization per GPU (%) with the machine's idle stretches
    shaded; the train/eval loss when it is on the time axis (else on its own x-axis); cumulative
    spend (``price x elapsed``, when a price is known). Decisions are vertical lines (red = stop,
    orange = advise), the oracle's stop a dashed black line.

    Raises:
        UsageError: matplotlib missing, or the file cannot be written.
    """
    plt = pyplot()
    text, rc = figure_text()
    with plt.rc_context(rc):
        return _draw_analysis(plt, text, a, path, progress)


def _draw_analysis(plt: Any, text: Callable[[str], str], a: Analysis, path: Path,
                   progress: list[ProgressPoint] | None) -> Path:
    timed = [p for p in (progress or []) if p.time is not None]
    own_axis = a.train_log is not None and not timed
    panels = ["util"] if a.gpu_log is not None else []
    if timed or own_axis:
        panels.append("loss")
    if a.rate is not None and a.start is not None:
        panels.append("spend")
    if not panels:
        raise UsageError(_("--plot: nothing to draw (no GPU log, no loss, no price)"))
    fig, axes = plt.subplots(len(panels), 1, figsize=(11, 2.8 * len(panels)), sharex=not own_axis, squeeze=False)
    axes = [row[0] for row in axes]
    by_name = dict(zip(panels, axes))
    if "util" in by_name:
        ax = by_name["util"]
        for index, series in sorted(a.plot_series.items()):  # decimated: lows and highs kept
            ax.plot([t for t, _ in series], [u for _, u in series], linewidth=0.8, label=f"GPU {index}")
        for r in a.stretches:
            ax.axvspan(r.stretch.start, r.stretch.end, color="grey", alpha=0.2)
        ax.set_ylabel(text(N_("GPU util %")))
        ax.set_ylim(-2, 102)
        ax.legend(loc="upper right", fontsize="small")
    if "loss" in by_name:
        ax = by_name["loss"]
        log = a.train_log
        for kind, style in (("train", "-"), ("eval", "o-")):
            pts = [p for p in (timed if timed else (log.points if log else [])) if p.kind == kind]
            if not pts:
                continue
            xs = [p.time for p in pts] if timed else [log.x(p) for p in pts]  # type: ignore[union-attr]
            ax.plot(xs, [p.value for p in pts], style, linewidth=0.8, markersize=3,
                    label=text(N_("train loss")) if kind == "train" else text(N_("eval loss")))
        ax.set_ylabel(text(N_("loss")))
        if own_axis and log is not None:
            ax.set_xlabel(text(N_("{axis} (not on the time axis)")).format(
                axis=text(N_("step")) if log.x_axis == "step" else text(N_("epoch"))))
        ax.legend(loc="upper right", fontsize="small")
    if "spend" in by_name and a.start is not None and a.end is not None and a.rate is not None:
        ax = by_name["spend"]
        times = sorted({t for series in a.plot_series.values() for t, _ in series} | {p.time for p in timed})  # type: ignore[misc]
        times = times or [a.start, a.end]
        ax.plot(times, [float(cost_of(a.rate.amount, t - a.start)) for t in times], color="tab:green")
        ax.set_ylabel(text(N_("spend ({currency})")).format(currency=a.rate.currency))
    for d in a.decisions:
        if not d.on_time_axis:
            continue
        for name, ax in by_name.items():
            if name == "loss" and own_axis:
                continue
            ax.axvline(d.decision.time, color=_COLOURS.get(d.decision.action, "tab:purple"), linewidth=1)
    if a.oracle.time is not None:
        for name, ax in by_name.items():
            if not (name == "loss" and own_axis):
                ax.axvline(a.oracle.time, color="black", linestyle="--", linewidth=1)
    axes[0].set_title(text(N_("costctl analyze: red = stop, orange = advise, dashed = oracle stop, grey = idle "
                              "stretch")))
    fig.autofmt_xdate()
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=100)
    except OSError as exc:
        raise UsageError(_("--plot {path}: cannot write: {error}").format(path=path, error=exc.strerror)) from None
    finally:
        plt.close(fig)
    return path
