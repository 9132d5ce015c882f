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

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from sqlalchemy import JSON, Text, and_, case, cast, func, or_, select, type_coerce

from ..clock import ensure_utc
from ..i18n import N_
from ..money import cost_of
from . import tables
from .engine import Reader, dialect_name
from .sqltime import epoch_us_sql
from .timebuckets import epoch_us, from_epoch_us

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
#: ``[bill] saved_horizon``, e.g. ``24h``): an English message id, said in English in the JSON
#: bill and in the current language under the table (:func:`costctl.report.counterfactual_text`).
COUNTERFACTUAL = N_("Saved: what a confirmed stop avoided, had the instance run on at the run's rate until the "
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


@dataclass(slots=True)
class _Run:
    """What the statements read about one run (internal); times in POSIX microseconds."""

    instance_pk: int
    start_us: int
    end_us: int
    mode: str | None
    gpu: str | None
    rate: Decimal | None
    currency: str
    priced: bool = True  # its summary gave its rate (else: an open run)
    next_us: int | None = None  # the next run on the same instance began
    named: int | None = None  # the decision its stop events name
    stop_end_us: int | None = None  # its stop's terminal event, else its last event
    state: str | None = None  # that terminal event's state
    has_events: bool = False
    stops: list[tuple[int, int, str, str, bool, int | None]] = field(default_factory=list)
    # (decision id, decided µs, policy, action, dry run, idle since µs), oldest first
    recorded: list[tuple[int, int, Decimal, str, str]] = field(default_factory=list)
    # waste rows: (start µs, end µs, rate, currency, reason)


def _idle_since_sql(dialect: str) -> Any:
    """SQL for the ``idle_since`` of a decision's evidence (ISO-8601 text, NULL when absent)."""
    text = type_coerce(DECISIONS.c.evidence, Text)
    if dialect == "postgresql":
        return func.json_extract_path_text(cast(text, JSON), IDLE_SINCE)
    return case((func.json_valid(text) == 1, func.json_extract(text, f"$.{IDLE_SINCE}")), else_=None)


def _iso_us(value: Any) -> int | None:
    """An evidence time (ISO-8601, ``Z`` allowed; naive = UTC) as POSIX µs; None when absent or unreadable."""
    if not isinstance(value, str):
        return None
    try:
        return epoch_us(ensure_utc(datetime.fromisoformat(value.replace("Z", "+00:00"))))
    except ValueError:
        return None


def _clip(a: int, b: int, lo: int | None, hi: int | None) -> tuple[int, int] | None:
    a = max(a, lo) if lo is not None else a
    b = min(b, hi) if hi is not None else b
    return (a, b) if b > a else None


def _minus(pieces: list[tuple[int, int]], cuts: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """``pieces`` (merged, sorted, disjoint) with every ``cut`` interval removed."""
    out = pieces
    for c0, c1 in cuts:
        if c1 <= c0:
            continue
        nxt: list[tuple[int, int]] = []
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


def _merge(intervals: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Union of intervals, sorted and disjoint (touching ones joined)."""
    out: list[tuple[int, int]] = []
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
            rule, :func:`costctl.ledger.queries.active_runs_sql`); empty: every run.
        run_ids: only these runs (None: all).

    Runs without a stop decision or waste row are left out. Two statements carry it, with
    times as integer microseconds: one row per stop decision (or advise-only would-stop) with
    its run, the run's stop events summed up per run (the decision they name, the terminal
    event: a stop has one) and the next run on its instance (``LEAD`` over ``runs``), and one
    row per waste row with its run; a third prices open runs at their newest charged rate.
    """
    dialect = dialect_name(session)

    def us(col: Any) -> Any:
        return epoch_us_sql(col, dialect)

    lo = epoch_us(since) if since is not None else None
    hi = epoch_us(until) if until is not None else None
    now_us = epoch_us(now)
    horizon_us = horizon // timedelta(microseconds=1)
    where = list(active)
    if run_ids is not None:
        where.append(RUNS.c.id.in_(sorted(set(run_ids))))
    # An advise-only watch's would-stop is advice whose evidence says so (the JSON text, matched
    # as text: type_coerce keeps the pattern from being JSON-encoded as the column's values are).
    stopping = or_(DECISIONS.c.action == "stop",
                   and_(DECISIONS.c.action == "advise",
                        type_coerce(DECISIONS.c.evidence, Text).like('%"advise_only": true%')))
    E = STOP_EVENTS
    terminal = E.c.state.in_(TERMINAL_STATES)
    events = (select(E.c.run_id, func.max(E.c.decision_id).label("named"),
                     func.min(case((terminal, us(E.c.time)))).label("end_us"),
                     func.max(case((terminal, E.c.state))).label("state"),
                     func.max(us(E.c.time)).label("last_us"))
              .group_by(E.c.run_id).subquery("ev"))
    stopped_pks = select(RUNS.c.instance_pk).where(RUNS.c.id.in_(select(E.c.run_id)))
    following = (select(RUNS.c.id, func.lead(us(RUNS.c.started_at)).over(
        partition_by=RUNS.c.instance_pk, order_by=(RUNS.c.started_at, RUNS.c.id)).label("next_us"))
        .where(RUNS.c.instance_pk.in_(stopped_pks)).subquery("seq"))
    run_cols = (RUNS.c.id, RUNS.c.instance_pk, us(RUNS.c.started_at).label("start_us"),
                us(RUNS.c.ended_at).label("ended_us"), us(RUNS.c.charged_until).label("charged_us"),
                us(RUNS.c.last_seen_at).label("seen_us"), RUNS.c.mode, RUNS.c.billing, RUNS.c.gpu,
                RUNS.c.price_per_hour, RUNS.c.price_currency, INSTANCES.c.gpu.label("inst_gpu"),
                INSTANCES.c.price_per_hour.label("inst_price"), INSTANCES.c.currency.label("inst_currency"))
    runs: dict[str, _Run] = {}

    def run_of(r: Any) -> _Run:
        run = runs.get(r.id)
        if run is None:
            ends = [t for t in (r.ended_us, r.charged_us) if t is not None]
            priced = r.billing is not None and r.price_per_hour is not None and r.price_currency is not None
            run = runs[r.id] = _Run(
                instance_pk=r.instance_pk, start_us=int(r.start_us), end_us=int(max(ends) if ends else r.seen_us),
                mode=r.mode, gpu=r.gpu if r.billing is not None else r.inst_gpu,
                rate=r.price_per_hour if priced else r.inst_price,  # an open run's: its newest charged rate, below
                currency=r.price_currency if priced else r.inst_currency, priced=priced)
        return run

    D = DECISIONS
    for r in session.execute(
            select(*run_cols, D.c.id.label("decision_id"), us(D.c.time).label("decided_us"), D.c.policy, D.c.action,
                   D.c.dry_run, _idle_since_sql(dialect).label("idle_since"), events.c.named, events.c.end_us,
                   events.c.state, events.c.last_us, following.c.next_us)
            .select_from(D.join(RUNS, RUNS.c.id == D.c.run_id).join(INSTANCES, INSTANCES.c.id == RUNS.c.instance_pk)
                         .outerjoin(events, events.c.run_id == RUNS.c.id)
                         .outerjoin(following, following.c.id == RUNS.c.id))
            .where(stopping, *where).order_by(D.c.run_id, D.c.time, D.c.id)):
        run = run_of(r)
        if r.last_us is not None:
            run.has_events, run.named, run.state = True, r.named, r.state
            run.stop_end_us = int(r.end_us if r.end_us is not None else r.last_us)
        run.next_us = int(r.next_us) if r.next_us is not None else None
        run.stops.append((r.decision_id, int(r.decided_us), r.policy, r.action, bool(r.dry_run),
                          _iso_us(r.idle_since)))
    W = WASTE
    for r in session.execute(
            select(*run_cols, us(W.c.start_at).label("w_start"), us(W.c.end_at).label("w_end"), W.c.rate_per_hour.label(
                "w_rate"), W.c.currency.label("w_currency"), W.c.reason)
            .select_from(W.join(RUNS, RUNS.c.id == W.c.run_id).join(INSTANCES, INSTANCES.c.id == RUNS.c.instance_pk))
            .where(*where).order_by(W.c.start_at, W.c.id)):
        run_of(r).recorded.append((int(r.w_start), int(r.w_end), r.w_rate, r.w_currency, r.reason))
    if not runs:
        return {}
    open_ids = [rid for rid, run in runs.items() if not run.priced]
    if open_ids:  # an open run (no summary yet): the rate of its newest charge, from the rollups
        newest: dict[str, tuple[int, Decimal, str]] = {}
        for run_id, rate, currency, last in session.execute(
                select(ROLLUPS.c.run_id, ROLLUPS.c.rate_per_hour, ROLLUPS.c.currency, func.max(ROLLUPS.c.last_us))
                .where(ROLLUPS.c.run_id.in_(open_ids))
                .group_by(ROLLUPS.c.run_id, ROLLUPS.c.rate_per_hour, ROLLUPS.c.currency)):
            if run_id not in newest or int(last) > newest[run_id][0]:
                newest[run_id] = (int(last), Decimal(str(rate)), currency)
        for run_id, (_, rate, currency) in newest.items():
            runs[run_id].rate, runs[run_id].currency = rate, currency
    return {rid: story for rid, run in runs.items()
            if (story := _story(rid, run, lo, hi, now_us, horizon_us)) is not None}


def _story(run_id: str, run: _Run, lo: int | None, hi: int | None, now_us: int, horizon_us: int) -> RunStory | None:
    """One run's :class:`RunStory` from what was read (None when nothing of it is in the window)."""
    # The stop carried through: the decision its events name, else the run's first real stop.
    carried = None
    if run.has_events:
        carried = next((d for d in run.stops if d[0] == run.named), None) or next(
            (d for d in run.stops if d[3] == "stop" and not d[4]), None)
    idle = []
    for d in run.stops:
        if d[5] is None:
            continue
        end = run.stop_end_us if d is carried and run.stop_end_us is not None else d[1]
        span = _clip(d[5], end, run.start_us, run.end_us)
        if span:
            idle.append(span)
    merged = _minus(_merge(idle), [(a, b) for a, b, *_ in run.recorded]) if idle else []
    pieces: list[WastePiece] = []
    if run.rate is not None:
        for a, b in merged:
            span = _clip(a, b, lo, hi)
            if span:
                pieces.append(WastePiece(from_epoch_us(span[0]), from_epoch_us(span[1]), Decimal(run.rate),
                                         run.currency, "idle"))
    for a, b, rate, currency, reason in run.recorded:
        if a == b:  # an instant: counted where it happened
            if (lo is None or a >= lo) and (hi is None or a < hi):
                pieces.append(WastePiece(from_epoch_us(a), from_epoch_us(a), rate, currency, reason))
            continue
        span = _clip(a, b, lo, hi)
        if span:
            pieces.append(WastePiece(from_epoch_us(span[0]), from_epoch_us(span[1]), rate, currency, reason))
    pieces.sort(key=lambda p: (p.start, p.end))

    saving = None
    at = run.stop_end_us
    if (carried is not None and run.state in SAVING_STATES and at is not None and run.rate is not None
            and not carried[4] and run.mode is None and carried[2] not in NO_SAVING_POLICIES
            and (lo is None or at >= lo) and (hi is None or at < hi)):
        bounds = [(at + horizon_us, BOUND_HORIZON), (now_us, BOUND_NOW)]
        if run.next_us is not None:
            bounds.insert(0, (run.next_us, BOUND_NEXT_RUN))
        end, bound = min(bounds, key=lambda b: b[0])  # ties: the next run, then the horizon
        saving = Saving(from_epoch_us(at), from_epoch_us(max(end, at)), bound, Decimal(run.rate), run.currency)
    if not pieces and saving is None and carried is None:
        return None
    return RunStory(run_id=run_id, instance_pk=run.instance_pk, gpu=run.gpu, waste=tuple(pieces),
                    stop_policy=carried[2] if carried is not None else None,
                    stop_state=run.state if carried is not None else None, saving=saving)


__all__ = ["BOUND_HORIZON", "BOUND_NEXT_RUN", "BOUND_NOW", "COUNTERFACTUAL", "DEFAULT_SAVED_HORIZON", "IDLE_SINCE", "NO_SAVING_POLICIES",
           "RunStory", "SAVING_STATES", "Saving", "TERMINAL_STATES", "WastePiece", "run_stories"]
