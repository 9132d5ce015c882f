"""Rendering an :class:`~costctl.replay.analysis.Analysis` for a terminal (``--format table``).

Tables hold short cells (times, money, durations) so they fit 80 columns; the long texts
(decision reasons, peer rules, assumptions) are printed as lines under them. Times are printed
as the logs recorded them; the date is left out of table cells when the whole timeline lies on
one day (the header line gives it).
"""

from __future__ import annotations

from decimal import Decimal

import math
from datetime import datetime, timedelta

from rich.console import Console
from rich.table import Table

from ..money import Money
from ..policies.idle import fmt_duration
from ..progress.lines import MAX_LINE_CHARS
from .analysis import Analysis, StretchReport

MIB = 2**20
#: advisory decisions of one policy listed in the table (the rest are counted).
MAX_ROWS_PER_POLICY = 3


class _Clock:
    """Formats times: full date-time, or time of day when the timeline lies on one day."""

    def __init__(self, start: datetime | None, end: datetime | None) -> None:
        self.same_day = bool(start and end and start.date() == end.date())

    def full(self, when: datetime | None) -> str:
        if when is None:
            return "-"
        text = when.strftime("%Y-%m-%d %H:%M:%S")
        return text + (f".{when.microsecond // 1000:03d}" if when.microsecond else "")

    def __call__(self, when: datetime | None) -> str:
        text = self.full(when)
        return text[11:] if self.same_day and when is not None else text


def _d(td: timedelta) -> str:
    return fmt_duration(td)


def _m(value: Money | None) -> str:
    return str(value) if value is not None else "-"


def _f(value: float | None, fmt: str = ".2f") -> str:
    if value is None:
        return "-"
    if not math.isfinite(value):
        return str(value)
    return format(value, fmt)


def _stretch_table(title: str, rows: list[StretchReport], t: _Clock, show_policy: bool) -> Table:
    table = Table(title=title, title_justify="left")
    for col in ("start", "duration", "spend", "after it"):
        table.add_column(col, no_wrap=True)
    if show_policy:
        table.add_column("idle policy", no_wrap=True)
    for r in rows:
        s = r.stretch
        cells = [t(s.start), _d(s.duration), _m(r.spend), "end of log" if s.final else "work resumed"]
        if show_policy:
            cells.append(f"stop {t(r.stopped_at)}" if r.stopped_at else "not stopped")
        table.add_row(*cells)
    return table


def _gpu_section(a: Analysis, console: Console, t: _Clock) -> None:
    g = a.gpu_log
    assert g is not None
    console.print(f"GPU log: {g.path} ({g.format}), {g.sample_count} samples, "
                  f"nominal interval {a.sample_interval.total_seconds():g} s"
                  + (f", {g.skipped} unreadable records skipped" if g.skipped else ""))
    table = Table(title="GPUs (never averaged)", title_justify="left")
    for col in ("GPU", "samples", "mean util %", "0 % samples", "longest 0 % run", "max MiB"):
        table.add_column(col)
    for st in a.gpu_stats:
        run = st.longest_zero_run
        table.add_row(
            str(st.index), str(st.samples), _f(st.mean_utilization), str(st.zero_samples),
            f"{run.count} from {t(run.start)}" if run else "-",
            f"{st.memory_used_max / MIB:.0f}" if st.memory_used_max is not None else "-",
        )
    console.print(table)


def _train_section(a: Analysis, console: Console) -> None:
    log = a.train_log
    assert log is not None
    console.print(f"training log: {log.path} ({log.format}), {log.count('train')} train-loss points, "
                  f"{log.count('eval')} eval points")
    if log.long_lines:
        console.print(f"  {log.long_lines:,} line{'s' if log.long_lines != 1 else ''} longer than "
                      f"{MAX_LINE_CHARS:,} characters skipped: a loss on them was not read")
    for kind in ("train", "eval"):
        s = log.summary_of(kind)
        if s.min is None or s.first is None or s.last is None:
            continue
        named = f" '{log.primary_names[kind]}' (primary)" if kind in log.primary_names else ""
        line = (f"  {kind}{named}: first {s.first.value:g}, last {s.last.value:g}, "
                f"min {s.min.value:g} at {log.x_axis} {_f(log.x(s.min), 'g')}")
        if s.last_improvement is not None:
            line += f", last >2 % improvement at {log.x_axis} {_f(log.x(s.last_improvement), 'g')}"
        if s.nonfinite:
            line += f", {s.nonfinite} NaN/inf from {log.x_axis} {_f(log.x(s.first_nonfinite), 'g')}"  # type: ignore[arg-type]
        console.print(line)
    for kind, name, gran, s in log.extra:  # the other series, kept apart (not watched by the policies)
        if s.min is None or s.first is None or s.last is None:
            continue
        console.print(f"  {kind} '{name}' (per {gran}, {s.count} points): first {s.first.value:g}, "
                      f"last {s.last.value:g}, min {s.min.value:g}")
    console.print(f"  placed on the time axis by {a.progress_placement}" if a.progress_placement
                  else "  not on the time axis: the loss policies ran on its own axis")
    if log.oom:
        console.print(f"  {len(log.oom)} out-of-memory error(s), first at line {log.oom[0].line_number}")


def _decisions(a: Analysis, console: Console, t: _Clock) -> None:
    if not a.decisions:
        console.print("Decisions: none (no policy would have fired)")
        return
    table = Table(title="Decisions", title_justify="left")
    for col in ("#", "when", "policy", "action", "saving", "note"):
        table.add_column(col)
    reasons: list[str] = []
    shown: dict[tuple[str, bool], int] = {}
    hidden: dict[tuple[str, bool], int] = {}
    for d in a.decisions:
        group = (d.decision.policy, d.on_time_axis)
        if d.decision.action != "stop" and shown.get(group, 0) >= MAX_ROWS_PER_POLICY:
            hidden[group] = hidden.get(group, 0) + 1
            continue
        shown[group] = shown.get(group, 0) + 1
        note = []
        if d.after_stop:
            note.append("after the stop")
        if d.work_after and d.decision.action == "stop":
            note.append("cuts the run")
        if d.saving is not None:
            saving = _m(d.saving)
        elif d.saving_if_followed is not None:
            saving = f"{_m(d.saving_if_followed)} if followed"
        else:
            saving = "-"
        reasons.append(d.decision.reason)
        table.add_row(str(len(reasons)), t(d.decision.time) if d.on_time_axis else (d.at or "-"),
                      d.decision.policy, d.decision.action, saving, ", ".join(note))
    console.print(table)
    for k, reason in enumerate(reasons, start=1):
        console.print(f"  {k}. {reason}")
    for (policy, _), count in hidden.items():
        console.print(f"  ... and {count} more {policy} decision(s) (all of them in --format json)")
    if any(d.work_after and d.decision.action == "stop" and not d.after_stop for d in a.decisions):
        console.print("  a stop marked 'cuts the run' falls in a pause that work followed")


def _peers(a: Analysis, console: Console, t: _Clock) -> None:
    first = a.first_stop
    table = Table(title="Compared on the same log", title_justify="left")
    for col in ("rule", "stops at", "saving", "note"):
        table.add_column(col)
    table.add_row("costctl idle", t(first.decision.time) if first else "never",
                  _m(first.saving) if first else "-", "cuts the run" if first and first.work_after else "")
    for p in a.peers:
        r = p.result
        table.add_row(f"{r.name} ({r.variant})" if r.variant else r.name, t(r.stop_time) if r.stop_time else "never", _m(p.saving),
                      "cuts the run" if p.work_after else "")
    table.add_row("oracle", t(a.oracle.time) if a.oracle.time else "never", _m(a.oracle_saving), "")
    console.print(table)
    console.print("  costctl idle: stop when ALL GPUs (and every other recorded signal) stayed idle for time_window")
    for p in a.peers:
        if p.result.settings:
            console.print(f"  {p.result.name} ({p.result.variant}) replays {p.result.settings}")
        console.print(f"    {p.result.rule}; {p.result.reason}")
        if p.result.assumption:
            console.print(f"    assumed: {p.result.assumption}")


def render(a: Analysis, console: Console) -> None:
    """Print the analysis (see :mod:`costctl.replay.analysis` for what each figure means)."""
    t = _Clock(a.start, a.end)
    span = (a.end - a.start) if a.start and a.end else None
    console.print(f"timeline: {t.full(a.start)} -> {t.full(a.end)}" + (f" ({_d(span)})" if span is not None else ""))
    if a.rate is not None:
        console.print(f"price: {a.rate}/h per instance; spend over the log: {_m(a.total_spend)}")
    else:
        console.print("price: none given (--price, --gpu/--provider or [instance] price_per_hour): durations only")
    if a.gpu_log is not None:
        _gpu_section(a, console, t)
    if a.train_log is not None:
        _train_section(a, console)
    console.print("signals used: " + (", ".join(a.signals_used) or "none"))
    if a.signals_absent:
        console.print("signals absent (take no part): " + ", ".join(a.signals_absent))
    console.print("policies replayed: " + ", ".join(a.policies))

    if a.gpu_log is not None:
        title = "Idle stretches (machine: every GPU idle, costctl's rule)"
        if a.stretches:
            console.print(_stretch_table(title, a.stretches, t, True))
        else:
            console.print(f"{title}: none")
        console.print(f"all idle time (incl. dips shorter than --min-stretch): {_d(a.idle_total)}"
                      + (f", {_m(a.idle_spend)}" if a.rate is not None else ""))
        for index, rows in a.gpu_idle_stretches.items():
            if rows:
                console.print(_stretch_table(f"GPU {index} idle stretches (this GPU alone)", rows, t, False))
            else:
                console.print(f"GPU {index}: no idle stretch")
        if a.gpu_idle_stretches and not any(r.stretch.final for r in a.stretches):
            idle_gpus = [i for i, rows in a.gpu_idle_stretches.items() if any(r.stretch.final for r in rows)]
            if idle_gpus:
                console.print(f"GPU {', '.join(map(str, idle_gpus))} idle to the end, but the machine is busy "
                              "under costctl's rule (ALL GPUs must be idle): costctl does not stop it")

    _decisions(a, console, t)
    o = a.oracle
    console.print(f"oracle (perfect hindsight): {'stop at ' + t.full(o.time) if o.time else 'no stop'} ({o.reason})"
                  + (f", saving {_m(a.oracle_saving)}" if a.oracle_saving is not None else ""))
    first = a.first_stop
    if first is not None and a.oracle_saving is not None and first.saving is not None:
        console.print(f"costctl: stop at {t.full(first.decision.time)}, saving {_m(first.saving)} "
                      f"({_m(a.oracle_saving - first.saving)} less than the oracle)")
    if a.peers:
        _peers(a, console, t)
    rs = a.rightsizing
    if rs is not None:
        if rs.advice is not None:
            console.print(f"right-sizing: {rs.advice.text}; on it the run would have cost about "
                          f"{rs.advice.cost_there.quantize(Decimal('0.01'))} {rs.advice.currency} "
                          f"({rs.advice.card.speed_source})")
        elif rs.reason:
            console.print(rs.reason)
    for line in a.assumptions:
        console.print(f"assumed: {line}")
    for line in a.notes:
        console.print(f"note: {line}")
