"""The end-of-watch summary: duration, spend, loss first/best/last, plateau point, decisions."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TextIO

from .i18n import DISPLAY_WORDS, N_, _, display_word, ngettext
from .money import Money
from .records import Decision, ProgressPoint, TelemetrySample


@dataclass
class RunSummary:
    """Running figures of one watch, kept small (no full history).

    Attributes:
        first_loss / best_loss / last_loss: train loss values (best = lowest finite);
            ``best_at`` where the best was seen (``"step 1200"`` or ``"epoch 7"``).
        loss_points: number of train-loss points seen; eval points are counted apart.
        plateau_at: the first plateau decision's evidence (progress point), if one fired.
        spend: the watch's spend so far (Money; all its runs); duration: wall time of the watch.
        peak_gpu_memory_bytes: highest memory used on any one GPU; ``gpu_memory_total_bytes``
            that GPU model's total.
        mean_gpu_utilization: mean utilization (percent) over every readable GPU reading.
        waste / waste_s: paid time whose work was lost (preemption after the last checkpoint).
        run_ids: the ledger runs of this watch (a move to another card starts a new one).
        advice: end-of-run advice lines (e.g. a cheaper card would have done it).
        stop_route: how the instance would be stopped, as the preflight found it
            (``"API (credential accepted)"``, ``"self-stop via shutdown"``); None when unknown.
        advise_only: the watch stopped nothing by request (``--advise-only``): stop decisions
            were advice.
        stop: the watch's stop (:class:`costctl.protocols.StopResult`: its state, attempts,
            outcome) when one was decided; None otherwise.
    """

    first_loss: float | None = None
    best_loss: float | None = None
    best_at: Any = None
    dry_run: bool = False
    last_loss: float | None = None
    loss_points: int = 0
    eval_points: int = 0
    plateau_at: dict[str, Any] | None = None
    decisions: list[Decision] = field(default_factory=list)
    spend: Money | None = None
    duration: timedelta | None = None
    peak_gpu_memory_bytes: int | None = None
    gpu_memory_total_bytes: int | None = None
    max_gpu_utilization: float | None = None
    waste: Money | None = None
    waste_s: float = 0.0
    run_ids: list[str] = field(default_factory=list)
    advice: list[str] = field(default_factory=list)
    stop_route: str | None = None
    advise_only: bool = False
    stop: Any = None
    _util_sum: float = field(default=0.0, repr=False)
    _util_n: int = field(default=0, repr=False)
    _per_gpu: dict[int, list[float]] = field(default_factory=dict, repr=False)  # index -> [sum, count]

    @property
    def mean_gpu_utilization(self) -> float | None:
        """Mean GPU utilization in percent over every readable reading (None without GPU telemetry)."""
        return self._util_sum / self._util_n if self._util_n else None

    @property
    def busiest_gpu_utilization(self) -> float | None:
        """The highest of the GPUs' own mean utilizations (percent; None without GPU telemetry):
        what the speed model of a move or of the right-sizing advice takes, as the busiest GPU
        bounds the run's pace (one idle GPU beside a busy one must not halve the figure)."""
        means = [total / n for total, n in self._per_gpu.values() if n]
        return max(means) if means else None

    def add_waste(self, money: Money, seconds: float) -> None:
        """Add paid-but-lost time (one currency per watch)."""
        self.waste = money if self.waste is None else Money(self.waste.amount + money.amount, money.currency)
        self.waste_s += seconds

    def add_progress(self, points: list[ProgressPoint]) -> None:
        """Fold new progress points in."""
        for p in points:
            if p.kind != "train":
                self.eval_points += 1
                continue
            self.loss_points += 1
            if self.first_loss is None:
                self.first_loss = p.value
            self.last_loss = p.value
            if math.isfinite(p.value) and (self.best_loss is None or p.value < self.best_loss):
                self.best_loss = p.value
                self.best_at = (f"step {p.step}" if p.step is not None
                                else f"epoch {p.epoch:g}" if p.epoch is not None else None)

    def add_batch(self, batch: Any) -> None:
        """Fold a :class:`~costctl.progress.batch.PointBatch` in (the same as :meth:`add_progress`,
        one loop over its columns, no object per point)."""
        n = len(batch)
        if not n:
            return
        keys, series, values = batch.keys, batch.series, batch.values
        train = {i for i, (kind, _) in enumerate(keys) if kind == "train"}
        if len(train) == len(keys):
            positions = range(n)
        else:
            positions = [i for i in range(n) if series[i] in train]
            self.eval_points += n - len(positions)
        if not positions:
            return
        self.loss_points += len(positions)
        if self.first_loss is None:
            self.first_loss = values[positions[0]]
        self.last_loss = values[positions[-1]]
        best, at = self.best_loss, None
        isfinite = math.isfinite
        for i in positions:
            v = values[i]
            if (best is None or v < best) and isfinite(v):
                best, at = v, i
        if at is not None:
            self.best_loss = best
            step, epoch = batch.steps[at], batch.epochs[at]
            self.best_at = (f"step {step}" if step >= 0 else f"epoch {epoch:g}" if epoch == epoch else None)

    def add_decision(self, decision: Decision) -> None:
        """Remember a decision (the first plateau's progress point is kept apart)."""
        self.decisions.append(decision)
        if decision.policy == "plateau" and self.plateau_at is None:
            self.plateau_at = dict(decision.evidence)

    def add_sample(self, sample: TelemetrySample) -> None:
        """Track peak GPU memory and utilization."""
        for g in sample.gpus:
            if g.memory_used_bytes is not None and g.memory_used_bytes >= (self.peak_gpu_memory_bytes or 0):
                self.peak_gpu_memory_bytes = g.memory_used_bytes
                self.gpu_memory_total_bytes = g.memory_total_bytes or self.gpu_memory_total_bytes
            if g.utilization is not None and g.error is None:
                self.max_gpu_utilization = max(self.max_gpu_utilization or 0.0, g.utilization)
                self._util_sum += g.utilization
                self._util_n += 1
                acc = self._per_gpu.setdefault(g.index, [0.0, 0])
                acc[0] += g.utilization
                acc[1] += 1

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form (money as a decimal string)."""
        return {
            "duration_s": self.duration.total_seconds() if self.duration else None,
            "spend": str(self.spend.amount) if self.spend else None,
            "currency": self.spend.currency if self.spend else None,
            "loss_first": self.first_loss,
            "loss_best": self.best_loss,
            "loss_best_at": self.best_at,
            "loss_last": self.last_loss,
            "loss_points": self.loss_points,
            "plateau_at": self.plateau_at,
            "waste": str(self.waste.amount) if self.waste else None,
            "waste_s": self.waste_s,
            "run_ids": list(self.run_ids),
            "advice": list(self.advice),
            "stop_route": self.stop_route,
            "advise_only": self.advise_only,
            "stop": None if self.stop is None else {
                "state": self.stop.state, "attempts": self.stop.attempts, "outcome": self.stop.outcome,
                "decided_at": self.stop.time.isoformat(),
                "ended_at": self.stop.ended_at.isoformat() if self.stop.ended_at else None,
            },
            "decisions": [
                {"time": d.time.isoformat(), "policy": d.policy, "action": d.action, "reason": d.reason}
                for d in self.decisions
            ],
        }

    def print(self, run_id: str, currency: str, file: TextIO) -> None:
        """Render the summary as a small rich table on ``file`` (costctl's stderr), in the current
        language (:mod:`costctl.i18n`; the decisions' reasons as they were recorded), money as the
        language writes it (:meth:`~costctl.money.Money.shown`: ``$0.0123``, ``¥1,008.00``)."""
        from rich.console import Console  # imported here: a watch loads rich only to print this
        from rich.table import Table
        from rich.text import Text

        console = Console(file=file, highlight=False, markup=False, soft_wrap=True)
        failed = self.stop is not None and not self.stop.stopped
        table = Table(title=_("costctl run {run}").format(run=run_id[:8]), show_header=False, title_justify="left")
        table.add_column(_("what"))
        table.add_column(_("value"))
        dur = str(self.duration).split(".")[0] if self.duration else "-"
        table.add_row(_("duration"), dur)
        table.add_row(_("spend"), (self.spend or Money.zero(currency)).shown())
        if self.advise_only:
            table.add_row(_("advise-only"), _("nothing was stopped: stop decisions were advice (--advise-only)"))
        elif self.stop_route:
            table.add_row(_("stop route"), self.stop_route)

        def fmt(v: float | None) -> str:
            return "-" if v is None else f"{v:.6g}"

        losses = {"first": fmt(self.first_loss), "best": fmt(self.best_loss), "last": fmt(self.last_loss),
                  "points": self.loss_points, "where": where_text(self.best_at)}
        if self.best_at is not None:
            loss_row = ngettext("{first} / {best} (at {where}) / {last}  [{points} point]",
                                "{first} / {best} (at {where}) / {last}  [{points} points]",
                                self.loss_points).format(**losses)
        else:
            loss_row = ngettext("{first} / {best} / {last}  [{points} point]",
                                "{first} / {best} / {last}  [{points} points]", self.loss_points).format(**losses)
        table.add_row(_("loss first / best / last"), loss_row)
        if self.plateau_at:
            where = [_(_PLATEAU_AT[k]).format(value=self.plateau_at[k]) for k in _PLATEAU_AT
                     if self.plateau_at.get(k) is not None]
            table.add_row(_("plateau detected at"), _(", ").join(where) or _("yes"))
        else:
            table.add_row(_("plateau detected at"), "-")
        if self.peak_gpu_memory_bytes is not None:
            table.add_row(_("peak GPU memory"), _("{mib:.0f} MiB").format(mib=self.peak_gpu_memory_bytes / 2**20))
        if self.mean_gpu_utilization is not None:
            table.add_row(_("mean GPU utilization"), f"{self.mean_gpu_utilization:.0f}%")
        if self.waste is not None:
            table.add_row(_("waste (lost work)"),
                          _("{amount} ({seconds:.0f}s since the last checkpoint)").format(
                              amount=self.waste.shown(), seconds=self.waste_s))
        if len(self.run_ids) > 1:
            table.add_row(_("ledger runs"), _(", ").join(r[:8] for r in self.run_ids))
        if self.stop is not None:
            what = stop_state_text("failed" if failed else self.stop.state)
            if failed:
                stop_row = ngettext("{what} after {attempts} request: {detail} -- the instance may still be running "
                                    "and billing",
                                    "{what} after {attempts} requests: {detail} -- the instance may still be running "
                                    "and billing", self.stop.attempts)
            else:
                stop_row = ngettext("{what} after {attempts} request: {detail}",
                                    "{what} after {attempts} requests: {detail}", self.stop.attempts)
            table.add_row(_("stop"), Text(stop_row.format(what=what, attempts=self.stop.attempts,
                                                          detail=self.stop.detail),
                                          style="bold red" if failed else ""))
        if self.decisions:
            groups: dict[tuple[str, str], list[Decision]] = {}
            for d in self.decisions:  # one row per policy and action; repeats are counted
                groups.setdefault((d.policy, d.action), []).append(d)
            for (policy, act), ds in groups.items():
                if ds[0].evidence.get("advise_only") and ds[0].evidence.get("would"):
                    action = _("{action} (would {would}; advise-only)").format(
                        action=action_text(act), would=action_text(ds[0].evidence["would"]))
                elif self.dry_run and act in ("stop", "downsize"):
                    action = _("would {action} (dry run)").format(action=action_text(act))
                else:
                    action = action_text(act)
                if len(ds) > 1:
                    row = _("{action}: {reason} (fired {count} times; the last: {last})").format(
                        action=action, reason=ds[0].reason, count=len(ds), last=_HEAD.split(ds[-1].reason, 1)[0])
                else:
                    row = _("{action}: {reason}").format(action=action, reason=ds[0].reason)
                table.add_row(_("decision {policy}").format(policy=policy), row)
        else:
            table.add_row(_("decisions"), _("none"))
        for line in self.advice:
            table.add_row(_("advice"), line)
        console.print(table)


#: How a stop that reached a state is named for people (``stop confirmed``), per
#: :class:`~costctl.stopping.StopState` value (the value itself stays in the ledger's
#: ``state`` column).
STOP_STATE_TEXT: dict[str, str] = {
    "requested": N_("stop requested"), "sent": N_("stop sent"), "confirmed": N_("stop confirmed"),
    "gone": N_("stop gone"), "self-stop sent": N_("stop self-stop sent"), "failed": N_("stop failed"),
}


#: A :class:`~costctl.stopping.StopState` value as a word for people (the status line:
#: ``stopping i-1: sent``).
STATE_WORDS: dict[str, str] = {k: DISPLAY_WORDS[k] for k in (  # from the one mapping (costctl.i18n)
    "requested", "sent", "confirmed", "gone", "self-stop sent", "failed")}


def stop_state_text(state: str) -> str:
    """``"stop confirmed"`` for ``"confirmed"`` (a :class:`~costctl.stopping.StopState`
    value), in the current language; an unknown state as ``"stop <state>"``."""
    found = STOP_STATE_TEXT.get(str(state))
    return _(found) if found else _("stop {state}").format(state=state)


#: A decision's action (:class:`~costctl.records.Action` value, kept in the ledger) as a word
#: for people; another action is said as it is.
ACTION_WORDS: dict[str, str] = {k: DISPLAY_WORDS[k] for k in (  # from the one mapping (costctl.i18n)
    "advise", "warn", "stop", "downsize", "checkpoint", "retry", "resume", "start", "snooze", "mark", "release")}


def action_text(action: str) -> str:
    """``action`` (an :class:`~costctl.records.Action` value) in the current language."""
    return display_word(action)


#: How a plateau's place is said in the summary, by evidence key (in this order).
_PLATEAU_AT = {"index": N_("index {value}"), "step": N_("step {value}"), "epoch": N_("epoch {value}"),
               "value": N_("value {value}")}
#: Where a reason's head ends (``"train loss plateaued at epoch 85: ..."``): its first colon
#: followed by a space, or its first full-width colon (a Chinese reason); the colons inside a
#: time shown in it (``idle for 30m since 2026-12-05 22:52:07+08:00: ...``) are followed by digits.
_HEAD = re.compile(":(?=\\s)|\uff1a")


def where_text(best_at: str | None) -> str:
    """``"step 1200"`` / ``"epoch 7"`` (:attr:`RunSummary.best_at`, kept in English in the JSON
    form) in the current language; another text as it is."""
    if not best_at:
        return ""
    kind, _sp, number = best_at.partition(" ")
    if kind == "step":
        return _("step {step}").format(step=number)
    if kind == "epoch":
        return _("epoch {epoch}").format(epoch=number)
    return best_at
