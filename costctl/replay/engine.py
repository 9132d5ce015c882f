"""Replaying recorded records through the live policy engine on a simulated clock.

This is the same :class:`~costctl.policies.PolicyEngine` and :class:`~costctl.policies.History`
that ``costctl watch`` drives; only the sources (recorded samples and progress points instead
of NVML and the child's pipe) and the clock (:class:`~costctl.clock.SimClock`, moved to each
recorded time, never sleeping) differ.

Facts the live watch knows and a recording does not, and what the replay assumes instead:

* spend so far (for the budget policy): ``rate x (now - first record)``; the daily spend
  counts from the start of the day in ``[watch] timezone``;
* whether the job is still running (for the stall policy): when the caller knows the job's
  span (``job=(start, exit)``, as a scenario of ``benchmarks/bench_policies.py`` records it) it
  runs exactly over it; else, when progress is on the time axis, the job is taken to run from
  its first to its last recorded progress point (an assumed end, not an observed exit: the idle
  policy's ``exit_window`` is not applied to it); with neither there is no job, and the stall
  policy cannot fire.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Iterable, Iterator

from ..clock import SimClock
from ..config import Settings
from ..i18n import _
from ..money import Money, cost_of
from ..progress.batch import PointBatch
from ..policies import History, PolicyEngine
from ..records import Decision, ProgressPoint, TelemetrySample
from .gpu_log import RELATIVE_EPOCH
from .timeline import nominal_interval

#: policies that read the loss alone (the ones a replay on the loss's own axis can run).
LOSS_POLICIES = ("plateau", "not_learning", "overfitting", "unstable", "divergence")


@dataclass(slots=True)
class ReplayRun:
    """What the policies concluded over a recorded timeline.

    Attributes:
        decisions: every new decision, in the order the engine reported them.
        policies: names of the enabled policies.
        sample_interval: the History's nominal sample interval.
        progress_on_axis: True when timed progress points took part (progress was a signal).
        evaluations: how many times the engine was evaluated.
    """

    decisions: list[Decision]
    policies: list[str]
    sample_interval: timedelta
    progress_on_axis: bool
    evaluations: int = 0
    assumptions: list[str] = field(default_factory=list)


def _spend(rate: Money, start: datetime, now: datetime, tz) -> tuple[Money, Money]:
    total = Money(cost_of(rate.amount, now - start), rate.currency)
    local = now.astimezone(tz)
    day_start = local.replace(hour=0, minute=0, second=0, microsecond=0)
    since = max(start, day_start)
    return total, Money(cost_of(rate.amount, now - since), rate.currency)


def replay_timeline(
    settings: Settings,
    samples: Iterable[TelemetrySample],
    progress: Iterable[ProgressPoint] = (),
    *,
    rate: Money | None = None,
    sample_interval: timedelta | None = None,
    only: Iterable[str] | None = None,
    job: tuple[datetime, datetime | None] | None = None,
) -> ReplayRun:
    """Drive the policy engine over recorded samples and timed progress points.

    The clock is set to every distinct record time in order; at each, the records up to that
    time are added to the History and the engine is evaluated once.

    Args:
        settings: configuration (``[policies.*]``, ``[watch] timezone``).
        samples: telemetry in time order (equal times are spread by 1 microsecond); a list, or
            any iterable (read once, nothing kept) when ``sample_interval`` is given.
        progress: progress points; those with ``time`` None are ignored here (see
            :func:`replay_loss`).
        rate: price per instance-hour; enables spend for the budget policy and money in evidence.
        sample_interval: nominal sampling period (default: the median positive gap).
        only: restrict to these policy names.
        job: ``(start, exit)`` of the watched job when known (exit None: it runs past the end);
            ``child_running`` / ``child_exited_at`` follow it instead of the progress span.

    Raises:
        PolicyError: from a policy (e.g. budget caps in another currency than ``rate``).
    """
    if isinstance(samples, list):
        interval = nominal_interval(samples, sample_interval)
    elif sample_interval is None:
        raise ValueError("replay_timeline over a stream of samples needs its sample_interval")
    else:
        interval = sample_interval
    stream = _strictly_increasing(iter(samples))
    timed = sorted((p for p in progress if p.time is not None), key=lambda p: p.time)  # type: ignore[arg-type, return-value]
    engine = PolicyEngine(settings, only=only)
    run = ReplayRun([], engine.names, interval, bool(timed))
    head = next(stream, None)
    if head is None and not timed:
        return run
    # every distinct time in order: the (strictly increasing) sample times merged with the progress times
    start = min(t for t in (head.time if head is not None else None, timed[0].time if timed else None)
                if t is not None)
    history = History(sample_interval=interval, started_at=start, progress_source=bool(timed), rate=rate)
    first_progress = timed[0].time if timed else None
    last_progress = timed[-1].time if timed else None
    if job is not None:
        first_progress = last_progress = None
    elif timed:
        run.assumptions.append(_("the job is taken to run from its first to its last recorded progress point"))
    clock = SimClock(start)
    tz = settings.watch.tz
    j = 0
    pending = head

    def merged_times():
        nonlocal pending
        k = 0
        while pending is not None:
            while k < len(timed) and timed[k].time < pending.time:  # type: ignore[operator]
                t = timed[k].time
                while k < len(timed) and timed[k].time == t:
                    k += 1
                yield t, None
            sample, pending = pending, next(stream, None)
            while k < len(timed) and timed[k].time == sample.time:
                k += 1
            yield sample.time, sample
        while k < len(timed):
            t = timed[k].time
            while k < len(timed) and timed[k].time == t:
                k += 1
            yield t, None

    for t, sample in merged_times():
        clock.set(t)
        if sample is not None:
            history.add_sample(sample)
        while j < len(timed) and timed[j].time <= t:  # type: ignore[operator]
            history.add_progress(timed[j])
            j += 1
        if job is not None:
            exited = job[1] is not None and t >= job[1]
            history.child_running = job[0] <= t and not exited
            history.child_exited_at = job[1] if exited else None
        elif last_progress is not None and first_progress is not None:
            history.child_running = first_progress <= t <= last_progress
            history.child_exited_at = None  # an assumed end is no observed exit (no exit_window)
        if rate is not None:
            history.spend_total, history.spend_today = _spend(rate, start, t, tz)
        run.decisions.extend(engine.evaluate(history, clock.now()))
        run.evaluations += 1
    return run


def replay_loss(settings: Settings, points: Iterable[ProgressPoint] | Iterable[PointBatch], *,
                rate: Money | None = None) -> ReplayRun:
    """Run the loss policies (plateau, divergence) over points that have no wall time.

    ``points`` are :class:`ProgressPoint` records, or :class:`PointBatch` blocks (what
    ``costctl analyze`` streams: the engine is evaluated once per block, as the watch evaluates
    once per tick, and the loss policies still see every point in order). The clock advances one
    simulated second per point from 1970-01-01 so that decisions are ordered; those times mean
    nothing — report a decision by its evidence's ``step``/``epoch``. Blocks should hold one
    kind each (``TrainLog.iter_batches``): decisions of one block are put in point order.
    """
    replay = LossReplay(settings, rate=rate)
    for item in points:
        replay.add(item)
    return replay.finish()


class LossReplay:
    """:func:`replay_loss` fed one item at a time (``add``), so that a reader can feed it while
    it reads (``costctl analyze`` feeds the train blocks of a console log during its one read);
    :attr:`run` holds the decisions so far. Feeding the same items gives the same run."""

    def __init__(self, settings: Settings, *, rate: Money | None = None) -> None:
        self.settings = settings
        self.engine = PolicyEngine(settings, only=LOSS_POLICIES)
        # the price per hour, when known, prices the decisions (the spend per hour at stake)
        self.history = History(progress_source=False, rate=rate)
        self.clock = SimClock(RELATIVE_EPOCH)
        self.run = ReplayRun([], self.engine.names, self.history.sample_interval, False)

    def add(self, item: ProgressPoint | PointBatch) -> None:
        """Feed one point or one block (see :func:`replay_loss`)."""
        engine, history, clock = self.engine, self.history, self.clock
        if isinstance(item, PointBatch):
            if not item:
                return
            clock.advance(len(item))
            history.add_batch(item)
            # one evaluation saw the whole block: its decisions in point order, as point by
            # point (each policy's own come in order; the index counts points of one kind)
            # (a block mixing kinds: a kind's decisions after those of the kinds that came before it)
            rank = {}
            for kind, _ in item.keys:
                rank.setdefault(kind, len(rank))
            found = sorted(engine.evaluate(history, clock.now()),
                           key=lambda d: (rank.get(d.evidence.get("kind", d.evidence.get("monitor")), 0),
                                          d.evidence.get("index", 0)))
        else:
            clock.advance(1)
            history.add_progress(item)
            found = engine.evaluate(history, clock.now())
        self.run.decisions.extend(found)
        self.run.evaluations += 1

    def finish(self) -> ReplayRun:
        """:attr:`run`, with a line per loss policy whose rule did not apply to this log (its
        ``not_applicable``: a GRPO loss starting at 0, a resumed log...)."""
        # the log is fed one kind after the other (train, then eval): a plateau of the train loss
        # that an overfitting episode (read from the eval points later) covers is dropped now,
        # as a live watch, which reads them in file order, drops it when it fires
        self.run.decisions = self.engine.drop_superseded(self.run.decisions)
        for policy in self.engine.policies:
            why = getattr(policy, "not_applicable", None)
            line = _("{policy}: {reason}").format(policy=policy.name, reason=why) if why else None
            if line and line not in self.run.assumptions:
                self.run.assumptions.append(line)
        return self.run


def _strictly_increasing(samples: Iterator[TelemetrySample]) -> Iterator[TelemetrySample]:
    """:func:`costctl.replay.timeline.strictly_increasing` one sample at a time."""
    prev = None
    for s in samples:
        if prev is not None and s.time <= prev:
            s = replace(s, time=prev + timedelta(microseconds=1))
        prev = s.time
        yield s
