"""``costctl analyze``'s model: replay the configured policies over recorded logs and cost it out.

:func:`analyze` takes a GPU log and/or a training log, replays the policy engine on a
simulated clock (:mod:`.engine`), and returns an :class:`Analysis` with

* the idle stretches (machine, under costctl's all-GPUs rule; and per GPU when there are
  several) and the money spent in each (``price x duration``);
* every decision with its time and action; a ``stop`` saves ``price x (end of log - stop
  time)``; an ``advise`` would have saved the same if followed (``saving_if_followed``);
  decisions after the first stop could not have happened (``after_stop``); a stop with work
  after it would have cut the run short (``work_after``);
* the oracle's stop and saving (:mod:`.oracle`), and with ``compare`` the peers' rules
  (:mod:`.peers`);
* which signals took part and what was assumed.

Money is ``Decimal`` in the price's currency (never float); a log without a price reports
durations only.

Memory does not grow with the GPU log: the samples flow once (after the log's first pass,
:attr:`~costctl.replay.gpu_log.GpuLog.scan`, which gives the per-GPU figures and the nominal
interval) through the replay engine and the streaming figures of :mod:`.streaming` (stretches,
peers, the decimated plot series); only listed stretches, decisions and the peers' verdicts are
kept. A kept sample list (:func:`~costctl.replay.readers.read_gpu_log`) and a streamed log
(:func:`~costctl.replay.readers.open_gpu_log`) give the same analysis.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from collections.abc import Iterator

from ..config import Settings
from ..i18n import _, ngettext
from ..money import Money, cost_of
from ..policies import classify_sample
from ..records import Decision, ProgressPoint, TelemetrySample

#: bound on each GPU's plot series (points).
PLOT_POINTS = 4096
from .engine import ReplayRun, replay_loss, replay_timeline
from .gpu_log import RELATIVE_EPOCH, GpuLog, LogScan
from .oracle import OracleStop, oracle_stop
from .peers import DSTACK_SETTINGS, SKYPILOT_DEFAULT_IDLE_MINUTES, PeerResult
from .stats import GpuStats
from .streaming import DstackStream, PlotSeries, SkypilotStream, StretchStream
from .stretches import Stretch
from .series_figures import series_figures
from .train_log import TrainLog


@dataclass(frozen=True, slots=True)
class AnalyzeOptions:
    """Knobs of an analysis.

    Attributes:
        compare: also replay SkyPilot's autostop (``-i skypilot_idle_minutes``) and dstack's
            utilization_policy with its documented example and its 5-minute minimum window.
        min_stretch: idle stretches shorter than this are counted in totals but not listed.
        sample_interval: the log's nominal sampling period (default: median positive gap).
        skypilot_idle_minutes: ``sky autostop -i`` minutes for the comparison.
    """

    compare: bool = False
    min_stretch: timedelta = timedelta(minutes=5)
    sample_interval: timedelta | None = None
    skypilot_idle_minutes: float = SKYPILOT_DEFAULT_IDLE_MINUTES


@dataclass(frozen=True, slots=True)
class DecisionReport:
    """One policy decision on the replayed timeline.

    Attributes:
        decision: the engine's decision (``time`` is simulated and meaningless on the loss's own axis).
        on_time_axis: False for decisions of the loss-only replay (no wall times).
        at: where it fired on the loss's own axis (``"step 181000"``), else None.
        saving: for a ``stop`` on the time axis that could happen: ``price x (end - time)``.
        saving_if_followed: the same figure for an ``advise``/``warn`` (if the user had acted).
        after_stop: True when an earlier stop had already ended the instance.
        work_after: True when work (a busy sample or progress) follows the decision time.
    """

    decision: Decision
    on_time_axis: bool
    at: str | None = None
    saving: Money | None = None
    saving_if_followed: Money | None = None
    after_stop: bool = False
    work_after: bool = False


@dataclass(frozen=True, slots=True)
class StretchReport:
    """An idle stretch with its cost and what the idle policy did in it."""

    stretch: Stretch
    spend: Money | None
    stopped_at: datetime | None


@dataclass(frozen=True, slots=True)
class PeerReport:
    """A peer rule's result with its money figure."""

    result: PeerResult
    saving: Money | None
    work_after: bool


@dataclass(slots=True)
class Analysis:
    """Everything ``costctl analyze`` reports (see the module docstring)."""

    start: datetime | None
    end: datetime | None
    rate: Money | None
    gpu_log: GpuLog | None
    gpu_stats: list[GpuStats]
    train_log: TrainLog | None
    progress_placement: str | None
    sample_interval: timedelta
    signals_used: list[str]
    signals_absent: list[str]
    policies: list[str]
    stretches: list[StretchReport]
    gpu_idle_stretches: dict[int, list[StretchReport]]
    idle_total: timedelta
    decisions: list[DecisionReport]
    oracle: OracleStop
    oracle_saving: Money | None
    peers: list[PeerReport]
    assumptions: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: per GPU, a decimated ``(time, utilization %)`` series for ``--plot`` (at most
    #: :data:`PLOT_POINTS` points, see :class:`~costctl.replay.streaming.PlotSeries`).
    plot_series: dict[int, list[tuple[datetime, float]]] = field(default_factory=dict)
    #: right-sizing of the recorded run (:class:`costctl.lifecycle.underuse.LogRightsizing`, set by
    #: the CLI, which sits above the lifecycle layer), or None when there is no GPU log.
    rightsizing: Any = None

    @property
    def total_spend(self) -> Money | None:
        """``price x (end - start)`` of the whole timeline."""
        if self.rate is None or self.start is None or self.end is None:
            return None
        return _money(self.rate, self.end - self.start)

    @property
    def first_stop(self) -> DecisionReport | None:
        """The first ``stop`` decision on the time axis (the one that would have ended the instance)."""
        return next((d for d in self.decisions if d.on_time_axis and d.decision.action == "stop"), None)

    @property
    def idle_spend(self) -> Money | None:
        """``price x`` the time spent in all machine idle stretches (listed or not)."""
        return _money(self.rate, self.idle_total) if self.rate is not None else None


def _money(rate: Money, duration: timedelta) -> Money:
    return Money(cost_of(rate.amount, duration), rate.currency)


def _saving(rate: Money | None, end: datetime | None, when: datetime | None) -> Money | None:
    if rate is None or end is None or when is None:
        return None
    return _money(rate, max(end - when, timedelta(0)))


def _where(decision: Decision) -> str | None:
    ev = decision.evidence
    if ev.get("step") is not None:
        return _("step {step}").format(step=ev["step"])
    if ev.get("epoch") is not None:
        return _("epoch {epoch:g}").format(epoch=ev["epoch"])
    if ev.get("index") is not None:
        return _("point {index}").format(index=ev["index"])
    return None


def _in_log_order(decisions: list[Decision]) -> list[Decision]:
    """``decisions`` sorted by where they fired on the log's axis: by step when every one has a
    step, else by epoch when every one has an epoch, else as they are (stable)."""
    for key in ("step", "epoch"):
        values = [d.evidence.get(key) for d in decisions]
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            order = sorted(range(len(decisions)), key=values.__getitem__)
            return [decisions[i] for i in order]
    return list(decisions)


def _signals(scan: LogScan | None, n: int, timed: list[ProgressPoint], train: TrainLog | None) -> tuple[list[str], list[str]]:
    used, absent = [], []
    if scan is not None:
        (used if scan.gpu_status_seen else absent).append(
            ngettext("gpu utilization ({count} GPU)", "gpu utilization ({count} GPUs)", n).format(count=n))
        if scan.cpu_status_seen:
            used.append(_("cpu"))
        else:
            absent.append(_("cpu (not recorded)"))
        if scan.ssh_status_seen:
            used.append(_("ssh sessions"))
        else:
            absent.append(_("ssh sessions (not recorded)"))
    else:
        absent.append(_("gpu utilization (no GPU log)"))
    if timed:
        used.append(_("training progress (on the time axis)"))
    elif train is not None:
        absent.append(_("training progress (not on the time axis: its own axis for the loss policies)"))
    else:
        absent.append(_("training progress (no training log)"))
    return used, absent


def analyze(
    settings: Settings,
    *,
    gpu_log: GpuLog | None = None,
    train_log: TrainLog | None = None,
    progress: list[ProgressPoint] | None = None,
    placement: str | None = None,
    rate: Money | None = None,
    options: AnalyzeOptions = AnalyzeOptions(),
) -> Analysis:
    """Replay ``settings``' policies over the logs and cost the result out.

    Args:
        settings: configuration; ``[policies.*]`` are replayed as configured.
        gpu_log: recorded telemetry.
        train_log: recorded training progress.
        progress: ``train_log``'s points placed on the time axis (from
            :func:`costctl.replay.timeline.place_progress`); None/untimed: the loss policies run
            on the loss's own axis.
        placement: how ``progress`` was placed (for the report).
        rate: price per instance-hour.
        options: see :class:`AnalyzeOptions`.

    Raises:
        UsageError: neither log given.
        PolicyError: from the policies (e.g. budget caps in another currency than ``rate``).
    """
    from ..errors import UsageError

    if gpu_log is None and train_log is None:
        raise UsageError(_("nothing to analyze: give --gpu-log FILE and/or --train-log FILE"))
    scan = gpu_log.scan if gpu_log is not None and gpu_log.sample_count else None
    if options.sample_interval is not None:
        interval = options.sample_interval
    elif scan is not None and scan.interval_s is not None:
        interval = timedelta(seconds=scan.interval_s)
    else:
        interval = timedelta(seconds=5)
    points = progress if progress is not None else (train_log.points if train_log else [])
    timed = sorted((p for p in points if p.time is not None), key=lambda p: p.time)  # type: ignore[arg-type,return-value]
    ends = ([scan.earliest, scan.latest] if scan is not None else []) + [p.time for p in timed[:1] + timed[-1:]]
    start = min(ends) if ends else None  # type: ignore[type-var]
    end = max(ends) if ends else None  # type: ignore[type-var]
    idle_cfg = settings.policies.idle
    assumptions: list[str] = []
    notes: list[str] = []
    if gpu_log is not None:
        notes.append(_("nvidia-smi and dashboard times carry no zone; they are shown as recorded (read as UTC)"))
        if gpu_log.relative:
            notes.append(_("the GPU log records only elapsed seconds: times count from --start-time "
                           "(default 1970-01-01)"))

    # One pass over the samples feeds the replay and every streaming figure (nothing per sample kept).
    indices = gpu_log.gpu_indices if scan is not None else []
    progress_times = [p.time for p in timed]
    min_gpu, min_cpu = idle_cfg.min_gpu_utilization, idle_cfg.min_cpu_utilization
    machine = StretchStream(2 * interval, progress_times, None,  # type: ignore[arg-type]
                            lambda s: s.duration >= options.min_stretch or s.final, machine=True)
    per_gpu_streams = {i: StretchStream(2 * interval, [], i, lambda s: s.duration >= options.min_stretch or s.final,
                                        machine=False) for i in indices} if len(indices) > 1 else {}
    plots = {i: PlotSeries(PLOT_POINTS) for i in indices}
    span = (timed[0].time, timed[-1].time) if timed else None
    peer_streams: list[Any] = []
    if options.compare and scan is not None:
        peer_streams = [SkypilotStream(idle_minutes=options.skypilot_idle_minutes, min_gpu_utilization=min_gpu,
                                       job_span=span)]  # type: ignore[arg-type]
        peer_streams += [DstackStream(setting) for setting in DSTACK_SETTINGS]
    last_busy: list[datetime | None] = [None]

    def feed() -> Iterator[TelemetrySample]:
        for sample in gpu_log.iter_samples():  # type: ignore[union-attr]
            idle = classify_sample(sample, min_gpu_utilization=min_gpu, min_cpu_utilization=min_cpu).idle is True
            machine.add(sample.time, idle)
            if not idle and (last_busy[0] is None or sample.time > last_busy[0]):
                last_busy[0] = sample.time
            seen: set[int] = set()
            for g in sample.gpus:
                plots[g.index].add(sample.time, g.utilization)
                if g.index in seen:
                    continue
                seen.add(g.index)
                stream = per_gpu_streams.get(g.index)
                if stream is not None:
                    stream.add(sample.time, g.error is None and g.utilization is not None and g.utilization < min_gpu)
            for peer in peer_streams:
                peer.add(sample)
            yield sample

    samples_in = feed() if scan is not None else iter(())
    if start is not None:
        run: ReplayRun = replay_timeline(settings, samples_in, timed, rate=rate, sample_interval=interval)
    else:
        run = ReplayRun([], [], interval, False)
    for _sample in samples_in:  # a replay that stopped early still leaves every sample to the figures
        pass
    assumptions.extend(run.assumptions)
    loss_run: ReplayRun | None = None
    if train_log is not None and not timed:
        pre = train_log.train_replay
        if pre is not None and pre.settings is settings:  # fed the train blocks during the read
            for batch in train_log.iter_batches(kinds=("eval",)):
                pre.add(batch)
            loss_run = pre.finish()
        else:
            loss_run = replay_loss(settings, train_log.iter_batches(), rate=rate)
        notes.append(_("the training log has no wall times: its loss analysis stands on its own axis "
                       "(give --start-time and --step-rate to place it on the GPU log's time axis)"))
        notes.extend(loss_run.assumptions)  # e.g. where a diagnosis does not apply
        loss_run.decisions.extend(_grad_norm_decisions(settings, train_log, notes))

    work = [t for t in (last_busy[0], progress_times[-1] if progress_times else None) if t is not None]
    last_work = max(work) if work else None
    decisions: list[DecisionReport] = []
    stopped: datetime | None = None
    for d in run.decisions:
        after_stop = stopped is not None and d.time > stopped
        is_stop = d.action == "stop"
        later_work = last_work is not None and last_work > d.time
        decisions.append(DecisionReport(
            d, True,
            saving=_saving(rate, end, d.time) if is_stop and not after_stop else None,
            saving_if_followed=_saving(rate, end, d.time) if not is_stop and not after_stop else None,
            after_stop=after_stop, work_after=later_work,
        ))
        if is_stop and stopped is None:
            stopped = d.time
    if loss_run is not None:
        # in the order of the log's own axis (analyze feeds the train points, then the eval ones:
        # an eval diagnosis would otherwise follow every train one); stable, so without a
        # position the replay's order stands
        for d in _in_log_order(loss_run.decisions):
            decisions.append(DecisionReport(d, False, at=_where(d)))

    listed_raw = machine.finish() if scan is not None else []
    idle_stops = [d.decision.time for d in decisions if d.on_time_axis and d.decision.policy == "idle"]

    def report(s: Stretch) -> StretchReport:
        fired = next((t for t in idle_stops if s.start <= t <= s.end), None)
        return StretchReport(s, _money(rate, s.duration) if rate is not None else None, fired)

    listed = [report(s) for s in listed_raw]
    idle_total = machine.total
    per_gpu: dict[int, list[StretchReport]] = {}
    for index, stream in per_gpu_streams.items():
        per_gpu[index] = [StretchReport(s, _money(rate, s.duration) if rate is not None else None, None)
                          for s in stream.finish()]

    plateau_cfg = settings.policies.plateau if "plateau" in settings.policies.model_fields_set else None
    if start is not None:
        oracle = oracle_stop([machine.last] if machine.last is not None else [], timed_progress=timed,
                             plateau=plateau_cfg)
    else:
        oracle = OracleStop(None, _("no time axis (no GPU log, training log not placed in time): no stop to cost"))

    peers = [PeerReport(p.result(), _saving(rate, end, p.result().stop_time),
                        p.result().stop_time is not None and last_work is not None and last_work > p.result().stop_time)
             for p in peer_streams]

    used, absent = _signals(scan, len(indices), timed, train_log)
    policies = list(run.policies) + [p for p in (loss_run.policies if loss_run else []) if p not in run.policies]
    return Analysis(
        start=start, end=end, rate=rate, gpu_log=gpu_log,
        gpu_stats=list(scan.stats.values()) if scan is not None else [],
        train_log=train_log, progress_placement=placement, sample_interval=interval,
        signals_used=used, signals_absent=absent, policies=policies,
        stretches=listed, gpu_idle_stretches=per_gpu, idle_total=idle_total,
        decisions=decisions, oracle=oracle, oracle_saving=_saving(rate, end, oracle.time),
        peers=peers, assumptions=assumptions, notes=notes,
        plot_series={i: p.series() for i, p in plots.items()},
    )


def _iso(when: datetime | None) -> str | None:
    return when.isoformat().replace("+00:00", "Z") if when is not None else None


def _m(value: Money | None) -> dict[str, str] | None:
    return {"amount": str(value.rounded(2)), "exact": str(value.amount), "currency": value.currency} if value else None


def _grad_norm_decisions(settings: Settings, train_log: TrainLog, notes: list[str]) -> list[Decision]:
    """:class:`~costctl.policies.grad_norm.GradNormStreak` over the log's gradient norms (the
    ``[policies.divergence]`` action and ``grad_norm_streak``); a note on isolated ones, and on
    a train loss whose best is 0 while the gradient norms were non-finite (a filtered loss,
    not a converged run)."""
    from ..policies.grad_norm import GradNormStreak

    if not train_log.grad_norms:
        return []
    conf = settings.policies.divergence
    rule = GradNormStreak(streak=conf.grad_norm_streak, action=conf.action)
    now = RELATIVE_EPOCH
    found = train_log.grad_norms.feed(rule, now)
    rule.finish()
    if rule.isolated:
        notes.append(_("{count} isolated non-finite grad_norm value(s) (fp16 loss scaling skips such steps): "
                       "not divergence").format(count=rule.isolated))
    best = train_log.summary_of("train").min if train_log.count("train") else None
    if rule.nonfinite and best is not None and best.value == 0.0:
        notes.append(_("train loss best is 0 while {count} grad_norm value(s) were non-finite: the loss looks "
                       "filtered or zeroed, not converged").format(count=rule.nonfinite))
    return found


def to_dict(a: Analysis) -> dict[str, Any]:
    """The analysis as JSON-ready data (times ISO 8601 with ``Z``, money as decimal strings)."""

    def stretch(r: StretchReport) -> dict[str, Any]:
        s = r.stretch
        return {
            "start": _iso(s.start), "end": _iso(s.end), "duration_s": s.duration.total_seconds(),
            "samples": s.samples, "final": s.final, "work_followed": not s.final,
            "spend": _m(r.spend), "stopped_at": _iso(r.stopped_at),
        }

    return {
        "start": _iso(a.start),
        "end": _iso(a.end),
        "duration_s": (a.end - a.start).total_seconds() if a.start and a.end else None,
        "price_per_hour": _m(a.rate),
        "total_spend": _m(a.total_spend),
        "gpu_log": None if a.gpu_log is None else {
            "path": str(a.gpu_log.path) if a.gpu_log.path else None,
            "format": a.gpu_log.format,
            "samples": a.gpu_log.sample_count,
            "skipped": a.gpu_log.skipped,
            "fields": list(a.gpu_log.fields),
            "gpus": [
                {
                    "index": st.index, "samples": st.samples, "interval_s": st.interval_s,
                    "mean_utilization": st.mean_utilization, "zero_samples": st.zero_samples,
                    "longest_zero_run": None if st.longest_zero_run is None else {
                        "samples": st.longest_zero_run.count, "start": _iso(st.longest_zero_run.start),
                        "end": _iso(st.longest_zero_run.end), "seconds": st.longest_zero_run.seconds,
                    },
                    "memory_used_max_bytes": st.memory_used_max,
                }
                for st in a.gpu_stats
            ],
        },
        "train_log": None if a.train_log is None else {
            "path": str(a.train_log.path) if a.train_log.path else None,
            "format": a.train_log.format,
            "train_points": a.train_log.count("train"),
            "eval_points": a.train_log.count("eval"),
            "x_axis": a.train_log.x_axis,
            "placed_on_time_axis": a.progress_placement,
            "oom_errors": len(a.train_log.oom),
            "long_lines_skipped": a.train_log.long_lines,
            "records_skipped": a.train_log.records_skipped,
            "bad_step_records_skipped": a.train_log.bad_steps,
            "split_number_lines_skipped": a.train_log.split_numbers,
            "loss_regex_timeouts": a.train_log.regex_timeouts,
            "loss_regex_disabled": a.train_log.regex_disabled,
            "series": series_figures(a.train_log),
        },
        "sample_interval_s": a.sample_interval.total_seconds(),
        "signals_used": a.signals_used,
        "signals_absent": a.signals_absent,
        "policies": a.policies,
        "idle_stretches": [stretch(r) for r in a.stretches],
        "idle_total_s": a.idle_total.total_seconds(),
        "idle_spend": _m(a.idle_spend),
        "gpu_idle_stretches": {str(k): [stretch(r) for r in v] for k, v in a.gpu_idle_stretches.items()},
        "decisions": [
            {
                "policy": d.decision.policy, "action": d.decision.action,
                "time": _iso(d.decision.time) if d.on_time_axis else None,
                "at": d.at, "on_time_axis": d.on_time_axis, "reason": d.decision.reason, "key": d.decision.key,
                "saving": _m(d.saving), "saving_if_followed": _m(d.saving_if_followed),
                "after_stop": d.after_stop, "work_after": d.work_after, "evidence": d.decision.evidence,
            }
            for d in a.decisions
        ],
        "oracle": {
            "stop": _iso(a.oracle.time), "reason": a.oracle.reason,
            "idle_start": _iso(a.oracle.idle_start), "plateau_onset": _iso(a.oracle.plateau_onset),
            "saving": _m(a.oracle_saving),
        },
        "compare": [
            {
                "name": p.result.name, "variant": p.result.variant, "settings": p.result.settings,
                "rule": p.result.rule, "assumption": p.result.assumption,
                "stop": _iso(p.result.stop_time), "reason": p.result.reason, "gpu": p.result.gpu,
                "saving": _m(p.saving), "work_after": p.work_after,
            }
            for p in a.peers
        ],
        "rightsizing": None if a.rightsizing is None else {
            "advice": a.rightsizing.advice.to_dict() if a.rightsizing.advice is not None else None,
            "reason": a.rightsizing.reason,
        },
        "assumptions": a.assumptions,
        "notes": a.notes,
    }
