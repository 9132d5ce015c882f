"""``costctl bill --plot FILE.png``: where the money went, drawn.

One panel per currency (two currencies are never drawn on one axis): each instance's cumulative
spend over the bill's window, with its stops (red: the provider confirmed; red dashed: a stop
that failed or was never confirmed; grey dashed: a dry run's would-be stop) and advice (orange),
warnings (olive) and moves to another card (purple) as vertical lines; below, one run's GPU
utilization per GPU (percent) and its CPU (percent of one core, on its own axis), with its
decisions marked. The data comes from :mod:`costctl.ledger.timeline` (summed in SQL into at most
2,000 bins per series).

Needs matplotlib (the optional extra ``costctl[plot]``, imported only here, with the Agg
backend); without it the bill stops before printing anything, with one line
(:func:`check_plot_path`).

Labels, titles and legends are Chinese under a Chinese language only when a font with Chinese
glyphs is installed (:func:`costctl.replay.plot.figure_text`): matplotlib's own fonts have none
and would draw empty boxes, so without one the PNG keeps its English labels. The instances'
names (``provider:id (GPU)``) and the currency codes are data, the same in every language.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

from .errors import UsageError
from .i18n import N_, _
from .replay.plot import figure_text, pyplot

if TYPE_CHECKING:
    from .ledger.timeline import Mark, PlotData

#: Colour and line style of a mark, by action (a stop's by how it ended).
STYLES = {
    "confirmed": ("tab:red", "-"),
    "stop": ("tab:red", "--"),
    "dry-run": ("tab:grey", "--"),
    "advise": ("tab:orange", "-"),
    "warn": ("tab:olive", "-"),
    "downsize": ("tab:purple", "-"),
}
#: Width and height of the figure, inches, and its resolution (dots per inch).
WIDTH_IN, PANEL_IN, DPI = 11.0, 3.0, 100
#: Legend entries per column beside a spend panel.
LEGEND_ROWS = 20


def check_plot_path(path: Path) -> None:
    """Check, before the bill is printed, that ``--plot`` can be drawn: matplotlib is installed,
    ``path`` ends in ``.png`` and its folder exists and is writable.

    Raises:
        UsageError: one line naming what is wrong and what is allowed.
    """
    if path.suffix.lower() != ".png":
        raise UsageError(_("--plot {path}: expected a file name ending in .png").format(path=path))
    if path.is_dir():
        raise UsageError(_("--plot {path} is a directory; give a file path, e.g. {example}").format(
            path=path, example=path / "spend.png"))
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise UsageError(_("--plot {path}: the folder {folder} does not exist").format(path=path, folder=folder))
    if not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise UsageError(_("--plot {path}: cannot write there (permission denied)").format(path=path))
    pyplot()


def _style(mark: Mark) -> tuple[str, str]:
    if mark.action == "stop":
        if mark.dry_run:
            return STYLES["dry-run"]
        return STYLES["confirmed"] if mark.stop_state in ("confirmed", "gone") else STYLES["stop"]
    return STYLES.get(mark.action, ("tab:purple", "-"))


def _mark(ax: Any, marks: list[Mark]) -> None:
    """Draw ``marks`` on ``ax`` as vertical lines across it, one collection per style (a ledger's
    2,000 marks are 5 collections, not 2,000 lines)."""
    groups: dict[tuple[str, str], list[Any]] = {}
    for mark in marks:
        groups.setdefault(_style(mark), []).append(mark.time)
    for (colour, style), times in groups.items():
        ax.vlines(times, 0, 1, transform=ax.get_xaxis_transform(), colors=colour, linestyles=style, linewidth=0.9,
                  alpha=0.8)


def plot_bill(data: PlotData, path: Path, tz: ZoneInfo) -> Path:
    """Draw ``data`` (:func:`costctl.ledger.timeline.plot_data`) to ``path`` (PNG, ``WIDTH_IN``
    inches wide at ``DPI``; ``PANEL_IN`` inches per panel) with times shown in ``tz``, and
    return ``path``.

    Raises:
        UsageError: matplotlib missing, nothing to draw (no spend and no run in the window),
            or the file cannot be written.
    """
    plt = pyplot()
    currencies = sorted({s.currency for s in data.spend})
    panels = len(currencies) + (1 if data.run is not None else 0)
    if panels == 0:
        raise UsageError(_("--plot {path}: nothing to draw (no spend and no run in the window)").format(path=path))
    text, rc = figure_text()
    with plt.rc_context(rc):
        return _draw(plt, text, data, path, tz, currencies, panels)


def _draw(plt: Any, text: Callable[[str], str], data: PlotData, path: Path, tz: ZoneInfo, currencies: list[str],
          panels: int) -> Path:
    """:func:`plot_bill`'s drawing, labels through ``text`` (:func:`costctl.replay.plot.figure_text`)."""
    from matplotlib.dates import AutoDateLocator, ConciseDateFormatter

    fig, axes = plt.subplots(panels, 1, figsize=(WIDTH_IN, PANEL_IN * panels), squeeze=False)
    axes = [row[0] for row in axes]
    try:
        for ax, currency in zip(axes, currencies):
            for series in (s for s in data.spend if s.currency == currency):
                ax.plot(series.times, [float(a) for a in series.amounts], linewidth=1.2, label=series.label,
                        drawstyle="default")
            _mark(ax, [m for m in data.marks if m.currency == currency])
            ax.set_ylabel(text(N_("spend ({currency})")).format(currency=currency))
            ax.set_title(text(N_("Cumulative spend per instance in {currency}: red = stop (dashed: not confirmed), "
                                 "grey dashed = dry-run stop, orange = advice")).format(currency=currency),
                         fontsize="medium", loc="left")
            # beside the panel: a legend of 20 instances would hide the lines
            ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="x-small", frameon=False,
                      ncols=1 + (len(ax.get_lines()) - 1) // LEGEND_ROWS)
            ax.grid(alpha=0.3)
        if data.spend:  # the currencies' panels on one time axis: the window's charges
            first = min(series.times[0] for series in data.spend)
            last = max(series.times[-1] for series in data.spend)
            for ax in axes[:len(currencies)]:
                ax.set_xlim(first, max(last, first))
        if data.run is not None:
            ax = axes[-1]
            run = data.run
            cpu = None
            for series in run.series:
                if series.gpu_index is None:
                    cpu = series
                    continue
                ax.plot(series.times, series.values, linewidth=0.9, label=f"GPU {series.gpu_index}")
            ax.set_ylim(-2, 102)
            ax.set_ylabel(text(N_("GPU utilization %")))
            if cpu is not None:
                twin = ax.twinx()
                twin.plot(cpu.times, cpu.values, color="tab:grey", linestyle=":", linewidth=0.9, label="CPU")
                twin.set_ylabel(text(N_("CPU, percent of one core")))
                twin.legend(loc="lower left", bbox_to_anchor=(1.06, 0.0), fontsize="x-small", frameon=False)
            _mark(ax, run.marks)
            if not run.series:
                ax.text(0.5, 0.5, text(N_("no readable utilization samples for this run")), transform=ax.transAxes,
                        ha="center", va="center")
            ax.set_xlim(run.started_at, max(run.ended_at, run.started_at))
            ax.set_title(text(N_("Utilization of run {run} on {instance}")).format(run=run.run_id[:12],
                                                                                  instance=run.label),
                         fontsize="medium", loc="left")
            if any(s.gpu_index is not None for s in run.series):
                ax.legend(loc="upper left", bbox_to_anchor=(1.06, 1.0), fontsize="x-small", frameon=False)
            ax.grid(alpha=0.3)
        for ax in axes:
            locator = AutoDateLocator(tz=tz)
            ax.xaxis.set_major_locator(locator)
            ax.xaxis.set_major_formatter(ConciseDateFormatter(locator, tz=tz))
        # Fixed margins in inches (tight_layout measures every label: seconds on a big ledger).
        height = PANEL_IN * panels
        fig.subplots_adjust(left=0.7 / WIDTH_IN, right=1 - 2.4 / WIDTH_IN, top=1 - 0.35 / height,
                            bottom=0.55 / height, hspace=0.55)
        try:
            fig.savefig(path, dpi=DPI)
        except OSError as exc:
            raise UsageError(_("--plot {path}: cannot write: {error}").format(path=path, error=exc.strerror)) from None
    finally:
        plt.close(fig)
    return path


__all__ = ["DPI", "LEGEND_ROWS", "PANEL_IN", "STYLES", "WIDTH_IN", "check_plot_path", "plot_bill"]
