"""What the stops did to the money: paid time wasted (idle before a stop, work lost to a
preemption) and money a confirmed stop saved, per run, for ``costctl bill``.

**Waste** is paid time whose work was lost or never done, a share of the spend:

* the rows of the ``waste`` table (a preemption: from the newest checkpoint to the take,
  recorded by the watch), clipped to the window;
* **idle before a stop**: a stop decision whose evidence names the start of the idle stretch it
  acted on (``idle_since``: the idle policy's, and any policy's that records one) wasted the
  run's rate from that moment to where the stop ended: its confirmation (``confirmed`` or
  ``gone``), its failure or its self-stop — or, for a stop never carried through (a dry run, an
  advise-only watch's "would stop", a watch killed before its first stop event), the decision
  itself, the last moment its evidence speaks for. Clipped to the run's charged time and to the
  window; parts already in the ``waste`` table are left out, so no second counts twice.

**Saved** is a stated counterfactual (:data:`COUNTERFACTUAL`): a stop confirmed by the provider
(``confirmed``: its status read stopped; ``gone``: it no longer knows the instance), made by a
watch that stops (not a dry run, not advise-only), by a policy that ends the instance's use (not
a preemption, where the provider took the instance anyway, nor a move to another card), saved the
run's rate for the time the instance would have run on without it: from the confirmation until
the next run on the same instance began, or ``[bill] saved_horizon`` after it, or now, whichever
is first. A stop that failed, was never confirmed or was a dry run saves nothing. A saving is
counted whole where its stop was confirmed (that instant's window, day and run).

Both are priced at the run's rate: the rate and currency of its newest charge (its summary,
:mod:`.summaries`; an open run: its newest rollup), else its instance's price. Read with a few
aggregate statements over the decisions, stop events and waste rows of the runs concerned
(never the charges or samples): Python loops run over stops, not over charges.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from sqlalchemy import Text, and_, func, or_, select, type_coerce

from ..clock import ensure_utc
from ..money import cost_of
from . import tables
from .engine import Reader

RUNS, INSTANCES, DECISIONS = tables.runs, tables.instances, tables.decisions
STOP_EVENTS, WASTE, ROLLUPS = tables.stop_events, tables.waste, tables.charge_rollups

#: Stop states that end a stop (:class:`costctl.stopping.StopState`'s terminal ones).
TERMINAL_STATES = ("confirmed", "gone", "self-stop sent", "failed")
#: Stop states the provider confirmed: the instance no longer bills. Only these save money.
SAVING_STATES = ("confirmed", "gone")
#: Policies whose stop saves nothing under the counterfactual, and why.
NO_SAVING_POLICIES = {
    "preemption": "the provider took the instance anyway",
    "downsize": "the job moved on to another card",
}
#: Where a saving's counterfactual ends (``Saving.bound``).
BOUND_NEXT_RUN, BOUND_HORIZON, BOUND_NOW = "next run", "horizon", "now"
#: The counterfactual behind "saved", said in the bill's footer and the README (``{horizon}``:
#: ``[bill] saved_horizon``, e.g. ``24h``).
COUNTERFACTUAL = ("Saved: what a confirmed stop avoided, had the instance run on at the run's rate until the "
                  "next run on it began or for {horizon} (whichever came first, and not past now); dry runs, "
                  "advise-only watches, preemptions and stops not confirmed save nothing.")
#: ``[bill] saved_horizon``'s default: a stopped instance is assumed to have run on a day at most.
DEFAULT_SAVED_HORIZON = timedelta(hours=24)
#: Evidence key naming the start of the idle stretch a stop acted on (an ISO-8601 time).
IDLE_SINCE = "idle_since"


@dataclass(frozen=True, slots=True)
class WastePiece:
    """Paid time wasted, ``[start, end)`` (aware UTC, inside the window) at ``rate_per_hour``
    (per instance-hour) in ``currency``; ``reason``: ``idle`` (before a stop) or the ``waste``
    row's reason (``preemption``, ``preempted``...). A zero-length piece is an instant
    (a recorded waste of 0 s) and costs nothing."""

    start: datetime
    end: datetime
    rate_per_hour: Decimal
    currency: str
    reason: str

    @property
    def seconds(self) -> float:
        """Length in seconds."""
        return (self.end - self.start).total_seconds()

    @property
    def amount(self) -> Decimal:
        """``rate_per_hour * seconds / 3600``, unrounded."""
        return cost_of(self.rate_per_hour, self.end - self.start)


@dataclass(frozen=True, slots=True)
class Saving:
    """What a confirmed stop saved (see the module docstring): the instance would have billed
    ``[at, until)`` (aware UTC) at ``rate_per_hour`` in ``currency``; ``bound`` says what ended
    the counterfactual: :data:`BOUND_NEXT_RUN`, :data:`BOUND_HORIZON` or :data:`BOUND_NOW`."""

    at: datetime
    until: datetime
    bound: str
    rate_per_hour: Decimal
    currency: str

    @property
    def seconds(self) -> float:
        """Seconds saved (0 when the next run began at once)."""
        return max(0.0, (self.until - self.at).total_seconds())

    @property
    def amount(self) -> Decimal:
        """``rate_per_hour * seconds / 3600``, unrounded (0 for no time)."""
        return cost_of(self.rate_per_hour, max(self.until - self.at, timedelta(0)))


@dataclass(frozen=True, slots=True)
class RunStory:
    """One run's waste and saving inside the window.

    ``gpu``: the card the run counts with in the bill (its summary's, else its instance's);
    ``waste``: its pieces, oldest first (idle before a stop and recorded waste, never
    overlapping); ``stop_policy`` / ``stop_state``: the stop carried through on it (None when
    none was: a dry run, or no stop); ``saving``: what that stop saved (None unless it was
    confirmed inside the window, by a watch that stops, under a policy that ends the instance's
    use)."""

    run_id: str
    instance_pk: int
    gpu: str | None
    waste: tuple[WastePiece, ...] = ()
    stop_policy: str | None = None
    stop_state: str | None = None
    saving: Saving | None = None

    def waste_by_currency(self, reasons: Iterable[str] | None = None) -> dict[str, tuple[float, Decimal]]:
        """``{currency: (seconds, amount)}`` of the waste pieces (only ``reasons`` when given)."""
        wanted = set(reasons) if reasons is not None else None
        out: dict[str, tuple[float, Decimal]] = {}
        for p in self.waste:
            if wanted is not None and p.reason not in wanted:
                continue
            s, a = out.get(p.currency, (0.0, Decimal(0)))
            out[p.currency] = (s + p.seconds, a + p.amount)
        return out


@dataclass(slots=True)
class _Run:
    """What the statements read about one run (internal)."""

    instance_pk: int
    started_at: datetime
    end: datetime
    mode: str | None
    gpu: str | None
    rate: Decimal | None
    currency: str
    stops: list[Any] = field(default_factory=list)  # decision rows, oldest first
    events: list[Any] = field(default_factory=list)  # stop events, oldest first
    recorded: list[Any] = field(default_factory=list)  # waste rows
    next_start: datetime | None = None


def _aware(value: datetime | None) -> datetime | None:
    return ensure_utc(value) if value is not None else None


def _iso(value: Any) -> datetime | None:
    """An evidence time (ISO-8601, ``Z`` allowed) as aware UTC; None when absent or unreadable."""
    if not isinstance(value, str):
        return None
    try:
        return ensure_utc(datetime.fromisoformat(value.replace("Z", "+00:00")))
    except ValueError:
        return None


def _clip(start: datetime, end: datetime, lo: datetime | None, hi: datetime | None) -> tuple[datetime, datetime] | None:
    a = max(start, lo) if lo is not None else start
    b = min(end, hi) if hi is not None else end
    return (a, b) if b > a else None


def _minus(pieces: list[tuple[datetime, datetime]], cuts: Sequence[tuple[datetime, datetime]]
           ) -> list[tuple[datetime, datetime]]:
    """``pieces`` (merged, sorted, disjoint) with every ``cut`` interval removed."""
    out = pieces
    for c0, c1 in cuts:
        if c1 <= c0:
            continue
        nxt: list[tuple[datetime, datetime]] = []
        for a, b in out:
            if c1 <= a or c0 >= b:
                nxt.append((a, b))
                continue
            if a < c0:
                nxt.append((a, c0))
            if c1 < b:
                nxt.append((c1, b))
        out = nxt
    return out


def _merge(intervals: Iterable[tuple[datetime, datetime]]) -> list[tuple[datetime, datetime]]:
    """Union of intervals, sorted and disjoint (touching ones joined)."""
    out: list[tuple[datetime, datetime]] = []
    for a, b in sorted(i for i in intervals if i[1] > i[0]):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def run_stories(session: Reader, since: datetime | None = None, until: datetime | None = None, *,
                now: datetime, horizon: timedelta, active: Sequence[Any] = (),
                run_ids: Iterable[str] | None = None) -> dict[str, RunStory]:
    """:class:`RunStory` per run with waste or a stop inside ``[since, until)``, by run id.

    Args:
        since / until: the bill's window (aware; None: unbounded).
        now: the bill's present (aware UTC): no saving runs past it.
        horizon: ``[bill] saved_horizon``, the longest a stopped instance is assumed to have run on.
        active: SQL conditions on ``runs`` that select the runs of the window (the bill's own
            rule, :func:`costctl.ledger.queries.run_page`'s); empty: every run.
        run_ids: only these runs (None: all).

    Runs without a stop decision or waste row are left out. Statements: the runs with a stop
    (or an advise-only watch's would-stop) or a waste row, their decisions, stop events and
    waste rows, the next run on each such run's instance (``LEAD`` over ``runs``), and, for
    open runs only, their newest charged rate.
    """
    since = _aware(since)
    until = _aware(until)
    now = ensure_utc(now)
    # An advise-only watch's would-stop is advice whose evidence says so (the JSON text, matched
    # as text: type_coerce keeps the pattern from being JSON-encoded as the column's values are).
    stopping = or_(DECISIONS.c.action == "stop",
                   and_(DECISIONS.c.action == "advise",
                        type_coerce(DECISIONS.c.evidence, Text).like('%"advise_only": true%')))
    concerned = select(DECISIONS.c.run_id).where(stopping).union(select(WASTE.c.run_id)).subquery("concerned")
    where = [RUNS.c.id.in_(select(concerned.c.run_id)), *active]
    if run_ids is not None:
        where.append(RUNS.c.id.in_(sorted(set(run_ids))))
    runs: dict[str, _Run] = {}
    open_ids: list[str] = []  # runs without a summary: priced below at their newest charged rate
    for r in session.execute(
            select(RUNS.c.id, RUNS.c.instance_pk, RUNS.c.started_at, RUNS.c.ended_at, RUNS.c.charged_until,
                   RUNS.c.last_seen_at, RUNS.c.mode, RUNS.c.billing, RUNS.c.gpu, RUNS.c.price_per_hour,
                   RUNS.c.price_currency, INSTANCES.c.gpu.label("inst_gpu"),
                   INSTANCES.c.price_per_hour.label("inst_price"), INSTANCES.c.currency.label("inst_currency"))
            .join(INSTANCES, INSTANCES.c.id == RUNS.c.instance_pk).where(*where)):
        ends = [t for t in (r.ended_at, r.charged_until) if t is not None]
        priced = r.billing is not None and r.price_per_hour is not None and r.price_currency is not None
        runs[r.id] = _Run(instance_pk=r.instance_pk, started_at=ensure_utc(r.started_at),
                          end=ensure_utc(max(ends) if ends else r.last_seen_at), mode=r.mode,
                          gpu=r.gpu if r.billing is not None else r.inst_gpu,
                          rate=r.price_per_hour if priced else r.inst_price,
                          currency=r.price_currency if priced else r.inst_currency)
        if not priced:
            open_ids.append(r.id)
    if not runs:
        return {}
    ids = select(RUNS.c.id).where(*where)
    if open_ids:  # the rate of an open run's newest charge, from the rollups
        newest: dict[str, tuple[int, Decimal, str]] = {}
        for run_id, rate, currency, last in session.execute(
                select(ROLLUPS.c.run_id, ROLLUPS.c.rate_per_hour, ROLLUPS.c.currency, func.max(ROLLUPS.c.last_us))
                .where(ROLLUPS.c.run_id.in_(open_ids))
                .group_by(ROLLUPS.c.run_id, ROLLUPS.c.rate_per_hour, ROLLUPS.c.currency)):
            if run_id not in newest or int(last) > newest[run_id][0]:
                newest[run_id] = (int(last), Decimal(str(rate)), currency)
        for run_id, (_, rate, currency) in newest.items():
            runs[run_id].rate, runs[run_id].currency = rate, currency
    for d in session.execute(
            select(DECISIONS.c.id, DECISIONS.c.run_id, DECISIONS.c.time, DECISIONS.c.policy, DECISIONS.c.action,
                   DECISIONS.c.evidence, DECISIONS.c.dry_run)
            .where(DECISIONS.c.run_id.in_(ids), stopping).order_by(DECISIONS.c.time, DECISIONS.c.id)):
        runs[d.run_id].stops.append(d)
    for e in session.execute(
            select(STOP_EVENTS.c.run_id, STOP_EVENTS.c.decision_id, STOP_EVENTS.c.time, STOP_EVENTS.c.state)
            .where(STOP_EVENTS.c.run_id.in_(ids)).order_by(STOP_EVENTS.c.time, STOP_EVENTS.c.id)):
        runs[e.run_id].events.append(e)
    for w in session.execute(select(WASTE).where(WASTE.c.run_id.in_(ids)).order_by(WASTE.c.start_at, WASTE.c.id)):
        runs[w.run_id].recorded.append(w)
    # The next run on each instance concerned (the counterfactual's first bound), in one pass.
    pks = sorted({run.instance_pk for run in runs.values() if run.events})
    if pks:
        following = func.lead(RUNS.c.started_at, type_=RUNS.c.started_at.type).over(partition_by=RUNS.c.instance_pk,
                                                      order_by=(RUNS.c.started_at, RUNS.c.id)).label("next_start")
        seq = select(RUNS.c.id, following).where(RUNS.c.instance_pk.in_(pks)).subquery("seq")
        for rid, nxt in session.execute(select(seq.c.id, seq.c.next_start).where(seq.c.id.in_(ids))):
            if rid in runs:
                runs[rid].next_start = _aware(nxt)
    return {rid: story for rid, run in runs.items()
            if (story := _story(rid, run, since, until, now, horizon)) is not None}


def _story(run_id: str, run: _Run, since: datetime | None, until: datetime | None, now: datetime,
           horizon: timedelta) -> RunStory | None:
    """One run's :class:`RunStory` from what was read (None when nothing of it is in the window)."""
    # The stop carried through: the decision its events name, else the run's first real stop.
    carried = None
    if run.events:
        named = {e.decision_id for e in run.events if e.decision_id is not None}
        carried = next((d for d in run.stops if d.id in named), None) or next(
            (d for d in run.stops if d.action == "stop" and not d.dry_run), None)
    terminal = next((e for e in run.events if e.state in TERMINAL_STATES), None)
    stop_end = ensure_utc(terminal.time) if terminal is not None else (
        ensure_utc(run.events[-1].time) if run.events else None)
    state = terminal.state if terminal is not None else (run.events[-1].state if run.events else None)

    idle: list[tuple[datetime, datetime]] = []
    for d in run.stops:
        evidence = d.evidence if isinstance(d.evidence, dict) else {}
        start = _iso(evidence.get(IDLE_SINCE))
        if start is None:
            continue
        end = stop_end if d is carried and stop_end is not None else ensure_utc(d.time)
        span = _clip(start, end, run.started_at, run.end)
        if span:
            idle.append(span)
    recorded = [(ensure_utc(w.start_at), ensure_utc(w.end_at)) for w in run.recorded]
    idle = _minus(_merge(idle), recorded)
    pieces: list[WastePiece] = []
    if run.rate is not None:
        for a, b in idle:
            span = _clip(a, b, since, until)
            if span:
                pieces.append(WastePiece(span[0], span[1], Decimal(run.rate), run.currency, "idle"))
    for w in run.recorded:
        a, b = ensure_utc(w.start_at), ensure_utc(w.end_at)
        if a == b:  # an instant: counted where it happened
            if (since is None or a >= since) and (until is None or a < until):
                pieces.append(WastePiece(a, a, w.rate_per_hour, w.currency, w.reason))
            continue
        span = _clip(a, b, since, until)
        if span:
            pieces.append(WastePiece(span[0], span[1], w.rate_per_hour, w.currency, w.reason))
    pieces.sort(key=lambda p: (p.start, p.end))

    saving = None
    if (carried is not None and state in SAVING_STATES and stop_end is not None and run.rate is not None
            and not carried.dry_run and run.mode is None and carried.policy not in NO_SAVING_POLICIES
            and (since is None or stop_end >= since) and (until is None or stop_end < until)):
        bounds = [(stop_end + horizon, BOUND_HORIZON), (now, BOUND_NOW)]
        if run.next_start is not None:
            bounds.insert(0, (run.next_start, BOUND_NEXT_RUN))
        end, bound = min(bounds, key=lambda b: b[0])  # ties: the next run, then the horizon
        saving = Saving(stop_end, max(end, stop_end), bound, Decimal(run.rate), run.currency)
    if not pieces and saving is None and carried is None:
        return None
    return RunStory(run_id=run_id, instance_pk=run.instance_pk, gpu=run.gpu, waste=tuple(pieces),
                    stop_policy=carried.policy if carried is not None else None,
                    stop_state=state if carried is not None else None, saving=saving)


__all__ = ["BOUND_HORIZON", "BOUND_NEXT_RUN", "BOUND_NOW", "COUNTERFACTUAL", "DEFAULT_SAVED_HORIZON", "IDLE_SINCE", "NO_SAVING_POLICIES",
           "RunStory", "SAVING_STATES", "Saving", "TERMINAL_STATES", "WastePiece", "run_stories"]
