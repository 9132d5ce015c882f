"""Rendering an :class:`~costctl.replay.analysis.Analysis` for a terminal (``--format table``).

Tables hold short cells (times, money, durations) so they fit 80 columns; the long texts
(decision reasons, peer rules, assumptions) are printed as lines under them. Times are printed
as the logs recorded them; the date is left out of table cells when the whole timeline lies on
one day (the header line gives it). Money is written as the current language writes it, prices
and spends alike (:func:`costctl.i18n.format_amount`: ``¥13.48`` in Chinese, ``CN¥13.48`` /
``$13.48`` in English; 2 decimals from 1 up, up to 4 below: ``$0.4499``). The JSON
(:func:`costctl.replay.analysis.to_dict`) keeps exact decimal strings.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from rich.console import Console
from rich.table import Table

from ..i18n import N_, _, format_amount, ngettext
from ..money import Money
from ..policies.idle import fmt_duration
from ..progress.lines import MAX_LINE_CHARS
from ..user_regex import LINE_BUDGET_S, MAX_TIMEOUTS
from ..summary import action_text
from .analysis import Analysis, StretchReport

MIB = 2**20
#: The analysis's own words that the report puts into its sentences, translated where said (the
#: JSON keeps them as they are): a series' kind, a log's x axis, a series' granularity, and how
#: the training log was placed on the time axis (:func:`costctl.replay.timeline.place_progress`).
WORDS = {"train": N_("train"), "eval": N_("eval"), "step": N_("step"), "epoch": N_("epoch"), "batch": N_("batch"),
         "start+rate": N_("start+rate"), "file timestamps": N_("file timestamps"),
         # the oracle's reasons (costctl.replay.oracle.oracle_stop)
         "final idle stretch": N_("final idle stretch"), "plateau onset": N_("plateau onset"),
         "the log ends busy: nothing to stop": N_("the log ends busy: nothing to stop")}
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


def _join(items: list[str]) -> str:
    """A list of facts or labels in one line, with the language's list separator."""
    return _(", ").join(items)


def _d(td: timedelta) -> str:
    return fmt_duration(td)


def _word(word: str) -> str:
    """``word`` (one of :data:`WORDS`) in the current language; any other word as it is."""
    return _(WORDS[word]) if word in WORDS else word


def _m(value: Money | None) -> str:
    """Money as the current language writes it (:meth:`~costctl.money.Money.shown`: ``¥13.48``,
    ``$1,234.57``, ``$0.4499``); ``-`` for None."""
    return value.shown() if value is not None else "-"


def _f(value: float | None, fmt: str = ".2f") -> str:
    if value is None:
        return "-"
    if not math.isfinite(value):
        return str(value)
    return format(value, fmt)


def _stretch_table(title: str, rows: list[StretchReport], t: _Clock, show_policy: bool) -> Table:
    table = Table(title=title, title_justify="left")
    for col in (_("start"), _("duration"), _("spend"), _("after it")):
        table.add_column(col, no_wrap=True)
    if show_policy:
        table.add_column(_("idle policy"), no_wrap=True)
    for r in rows:
        s = r.stretch
        cells = [t(s.start), _d(s.duration), _m(r.spend), _("end of log") if s.final else _("work resumed")]
        if show_policy:
            cells.append(_("stop {time}").format(time=t(r.stopped_at)) if r.stopped_at else _("not stopped"))
        table.add_row(*cells)
    return table


def _gpu_section(a: Analysis, console: Console, t: _Clock) -> None:
    g = a.gpu_log
    assert g is not None
    if g.skipped:
        line = _("GPU log: {path} ({format}), {samples} samples, nominal interval {interval:g} s, "
                 "{skipped} unreadable records skipped")
    else:
        line = _("GPU log: {path} ({format}), {samples} samples, nominal interval {interval:g} s")
    console.print(line.format(path=g.path, format=g.format, samples=g.sample_count,
                              interval=a.sample_interval.total_seconds(), skipped=g.skipped))
    table = Table(title=_("GPUs (never averaged)"), title_justify="left")
    for col in (_("GPU"), _("samples"), _("mean util %"), _("samples at 0 %"), _("longest run at 0 %"), _("max MiB")):
        table.add_column(col)
    for st in a.gpu_stats:
        run = st.longest_zero_run
        table.add_row(
            str(st.index), str(st.samples), _f(st.mean_utilization), str(st.zero_samples),
            _("{count} from {time}").format(count=run.count, time=t(run.start)) if run else "-",
            f"{st.memory_used_max / MIB:.0f}" if st.memory_used_max is not None else "-",
        )
    console.print(table)


def _train_section(a: Analysis, console: Console) -> None:
    log = a.train_log
    assert log is not None
    console.print(_("training log: {path} ({format}), {train} train-loss points, {eval} eval points").format(
        path=log.path, format=log.format, train=log.count("train"), eval=log.count("eval")))
    if log.long_lines:
        console.print("  " + ngettext(
            "{count:,} line longer than {limit:,} characters skipped: a loss on them was not read",
            "{count:,} lines longer than {limit:,} characters skipped: a loss on them was not read",
            log.long_lines).format(count=log.long_lines, limit=MAX_LINE_CHARS))
    if log.split_numbers:
        console.print("  " + ngettext(
            "{count:,} line with a control character inside a number skipped: that number is no number",
            "{count:,} lines with a control character inside a number skipped: those numbers are no numbers",
            log.split_numbers).format(count=log.split_numbers))
    if log.bad_steps:
        console.print("  " + ngettext(
            "{count:,} record with a step that is no count (not a whole number from 0 to 2^63-1) skipped",
            "{count:,} records with a step that is no count (not a whole number from 0 to 2^63-1) skipped",
            log.bad_steps).format(count=log.bad_steps))
    if log.records_skipped:
        console.print("  " + ngettext(
            "{count:,} record could not be read (not JSON, or nested too deep) and was skipped; the others were read",
            "{count:,} records could not be read (not JSON, or nested too deep) and were skipped; the others were read",
            log.records_skipped).format(count=log.records_skipped))
    if log.regex_timeouts:
        console.print("  " + ngettext(
            "{count:,} line took --loss-regex longer than {ms:g} ms and was skipped: a loss on it was not read",
            "{count:,} lines took --loss-regex longer than {ms:g} ms each and were skipped: a loss on them was not read",
            log.regex_timeouts).format(count=log.regex_timeouts, ms=LINE_BUDGET_S * 1000))
    if log.regex_disabled:
        console.print("  " + _("--loss-regex was turned off after it timed out on {count} lines; the built-in loss "
                               "shapes read the rest of the log").format(count=MAX_TIMEOUTS))
    for kind in ("train", "eval"):
        s = log.summary_of(kind)
        if s.min is None or s.first is None or s.last is None:
            continue
        figures = dict(kind=_word(kind), first=s.first.value, last=s.last.value, min=s.min.value, axis=_word(log.x_axis),
                       x=_f(log.x(s.min), "g"))
        if kind in log.primary_names:
            head = _("{kind} '{name}' (primary): first {first:g}, last {last:g}, min {min:g} at {axis} {x}").format(
                name=log.primary_names[kind], **figures)
        else:
            head = _("{kind}: first {first:g}, last {last:g}, min {min:g} at {axis} {x}").format(**figures)
        facts = [head]
        if s.last_improvement is not None:
            facts.append(_("last improvement >2 % at {axis} {x}").format(
                axis=_word(log.x_axis), x=_f(log.x(s.last_improvement), "g")))
        if s.nonfinite:
            facts.append(_("{count} NaN/inf from {axis} {x}").format(
                count=s.nonfinite, axis=_word(log.x_axis), x=_f(log.x(s.first_nonfinite), "g")))  # type: ignore[arg-type]
        console.print("  " + _join(facts))
    for kind, name, gran, s in log.extra:  # the other series, kept apart (not watched by the policies)
        if s.min is None or s.first is None or s.last is None:
            continue
        console.print("  " + _("{kind} '{name}' (per {granularity}, {count} points): first {first:g}, "
                               "last {last:g}, min {min:g}").format(
            kind=_word(kind), name=name, granularity=_word(gran), count=s.count, first=s.first.value, last=s.last.value,
            min=s.min.value))
    console.print("  " + (_("placed on the time axis by {placement}").format(placement=_word(a.progress_placement))
                          if a.progress_placement
                          else _("not on the time axis: the loss policies ran on its own axis")))
    if log.oom:
        console.print("  " + _("{count} out-of-memory error(s), first at line {line}").format(
            count=len(log.oom), line=log.oom[0].line_number))


def _decisions(a: Analysis, console: Console, t: _Clock) -> None:
    if not a.decisions:
        console.print(_("Decisions: none (no policy would have fired)"))
        return
    table = Table(title=_("Decisions"), title_justify="left")
    for col in ("#", _("when"), _("policy"), _("action"), _("saving"), _("note")):
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
            note.append(_("after the stop"))
        if d.work_after and d.decision.action == "stop":
            note.append(_("cuts the run"))
        if d.saving is not None:
            saving = _m(d.saving)
        elif d.saving_if_followed is not None:
            saving = _("{amount} if followed").format(amount=_m(d.saving_if_followed))
        else:
            saving = "-"
        reasons.append(d.decision.reason)
        table.add_row(str(len(reasons)), t(d.decision.time) if d.on_time_axis else (d.at or "-"),
                      d.decision.policy, action_text(d.decision.action), saving, _join(note))
    console.print(table)
    for k, reason in enumerate(reasons, start=1):
        console.print(f"  {k}. {reason}")
    for (policy, _on_axis), count in hidden.items():
        console.print("  " + _("... and {count} more {policy} decision(s) (all of them in --format json)").format(
            count=count, policy=policy))
    if any(d.work_after and d.decision.action == "stop" and not d.after_stop for d in a.decisions):
        console.print("  " + _("a stop marked 'cuts the run' falls in a pause that work followed"))


def _peers(a: Analysis, console: Console, t: _Clock) -> None:
    first = a.first_stop
    table = Table(title=_("Compared on the same log"), title_justify="left")
    for col in (_("rule"), _("stops at"), _("saving"), _("note")):
        table.add_column(col)
    never = _("never")
    cuts = _("cuts the run")
    table.add_row(_("costctl idle"), t(first.decision.time) if first else never,
                  _m(first.saving) if first else "-", cuts if first and first.work_after else "")
    for p in a.peers:
        r = p.result
        table.add_row(f"{r.name} ({r.variant})" if r.variant else r.name, t(r.stop_time) if r.stop_time else never,
                      _m(p.saving), cuts if p.work_after else "")
    table.add_row(_("oracle"), t(a.oracle.time) if a.oracle.time else never, _m(a.oracle_saving), "")
    console.print(table)
    console.print("  " + _("costctl idle: stop when ALL GPUs (and every other recorded signal) stayed idle for "
                           "time_window"))
    for p in a.peers:
        if p.result.settings:
            console.print("  " + _("{name} ({variant}) replays {settings}").format(
                name=p.result.name, variant=p.result.variant, settings=p.result.settings))
        console.print("    " + _("{rule}; {reason}").format(rule=p.result.rule, reason=p.result.reason))
        if p.result.assumption:
            console.print("    " + _("assumed: {assumption}").format(assumption=p.result.assumption))


def render(a: Analysis, console: Console) -> None:
    """Print the analysis (see :mod:`costctl.replay.analysis` for what each figure means)."""
    t = _Clock(a.start, a.end)
    span = (a.end - a.start) if a.start and a.end else None
    if span is not None:
        console.print(_("timeline: {start} -> {end} ({duration})").format(
            start=t.full(a.start), end=t.full(a.end), duration=_d(span)))
    else:
        console.print(_("timeline: {start} -> {end}").format(start=t.full(a.start), end=t.full(a.end)))
    if a.rate is not None:
        console.print(_("price: {rate}/h per instance; spend over the log: {spend}").format(
            rate=_m(a.rate), spend=_m(a.total_spend)))
    else:
        console.print(_("price: none given (--price, --gpu/--provider or [instance] price_per_hour): "
                        "durations only"))
    if a.gpu_log is not None:
        _gpu_section(a, console, t)
    if a.train_log is not None:
        _train_section(a, console)
    console.print(_("signals used: {signals}").format(signals=_join(a.signals_used) or _("none")))
    if a.signals_absent:
        console.print(_("signals absent (take no part): {signals}").format(signals=_join(a.signals_absent)))
    console.print(_("policies replayed: {policies}").format(policies=_join(a.policies)))

    if a.gpu_log is not None:
        if a.stretches:
            console.print(_stretch_table(_("Idle stretches (machine: every GPU idle, costctl's rule)"),
                                         a.stretches, t, True))
        else:
            console.print(_("Idle stretches (machine: every GPU idle, costctl's rule): none"))
        if a.rate is not None:
            console.print(_("all idle time (incl. dips shorter than --min-stretch): {duration}, {spend}").format(
                duration=_d(a.idle_total), spend=_m(a.idle_spend)))
        else:
            console.print(_("all idle time (incl. dips shorter than --min-stretch): {duration}").format(
                duration=_d(a.idle_total)))
        for index, rows in a.gpu_idle_stretches.items():
            if rows:
                console.print(_stretch_table(_("GPU {index} idle stretches (this GPU alone)").format(index=index),
                                             rows, t, False))
            else:
                console.print(_("GPU {index}: no idle stretch").format(index=index))
        if a.gpu_idle_stretches and not any(r.stretch.final for r in a.stretches):
            idle_gpus = [i for i, rows in a.gpu_idle_stretches.items() if any(r.stretch.final for r in rows)]
            if idle_gpus:
                console.print(_("GPU {gpus} idle to the end, but the machine is busy under costctl's rule "
                                "(ALL GPUs must be idle): costctl does not stop it").format(
                    gpus=", ".join(map(str, idle_gpus))))

    _decisions(a, console, t)
    o = a.oracle
    if o.time is None:
        console.print(_("oracle (perfect hindsight): no stop ({reason})").format(reason=_word(o.reason)))
    elif a.oracle_saving is None:
        console.print(_("oracle (perfect hindsight): stop at {time} ({reason})").format(
            time=t.full(o.time), reason=_word(o.reason)))
    else:
        console.print(_("oracle (perfect hindsight): stop at {time} ({reason}), saving {saving}").format(
            time=t.full(o.time), reason=_word(o.reason), saving=_m(a.oracle_saving)))
    first = a.first_stop
    if first is not None and a.oracle_saving is not None and first.saving is not None:
        if first.work_after or first.saving.amount > a.oracle_saving.amount:
            # a stop before the oracle's with work after it cut the run: not a better saving
            console.print(_("costctl: stop at {time}, which would have cut the run short (work followed it): "
                            "not a saving").format(time=t.full(first.decision.time)))
        else:
            console.print(_("costctl: stop at {time}, saving {saving} ({less} less than the oracle)").format(
                time=t.full(first.decision.time), saving=_m(first.saving), less=_m(a.oracle_saving - first.saving)))
    if a.peers:
        _peers(a, console, t)
    rs = a.rightsizing
    if rs is not None:
        if rs.advice is not None:
            console.print(_("right-sizing: {advice}; on it the run would have cost about {cost} "
                            "({speed_source})").format(
                advice=rs.advice.text, cost=format_amount(rs.advice.cost_there, rs.advice.currency),
                speed_source=rs.advice.card.speed_text or rs.advice.card.speed_source))
        elif rs.reason:
            console.print(rs.reason)
    for line in a.assumptions:
        console.print(_("assumed: {assumption}").format(assumption=line))
    for line in a.notes:
        console.print(_("note: {note}").format(note=line))
