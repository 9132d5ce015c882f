"""One patrol sweep: read the fleet, store what was seen, match the policies, and (with
``--execute``) mark, warn and act.

In order:

1. the fleet (:func:`costctl.fleet.collect.collect`: every configured account, concurrently,
   with the ledger's guard and spend of each instance);
2. one **observation** per listed instance (status, GPU and CPU utilization or nothing) is
   stored — in a dry run too: observations are readings, not actions, and the idle filter
   needs them from the sweeps before — and observations older than the horizon are deleted
   (:func:`horizon`);
3. each policy's **matches**, each with the evidence of every filter, and what to do with it
   (:func:`costctl.patrol.model.plan`); marks of instances that no longer match; the provider's
   own releases coming (AutoDL's 15 days);
4. with ``execute``: marks no longer matching are cleared; new matches are marked (a decision,
   and told: one digest of the sweep's marks when there are several); warnings are recorded and
   sent; the notifications are given time to be delivered (a mark's delivery is recorded in its
   evidence: a release waits for it, and a stop too when a channel takes its notice); stops and
   releases whose patrol died mid-stop are taken over (:mod:`costctl.patrol.owner`); then
   each action due goes through its **claim** (:func:`costctl.ledger.patrol_store.claim`: the
   transaction that re-reads and records it, under the instance's lock) and the verified stop
   (:func:`costctl.patrol.act.carry_out`), and its end is notified.

A dry run (the default) records nothing but the observations and names what it would do.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from ..clock import Clock, RealClock, ensure_utc
from ..errors import CostctlError
from ..fleet.collect import collect
from ..fleet.model import FleetReport, FleetRow
from ..i18n import _, format_time, ngettext
from ..ledger import patrol_store as store
from ..notify.dispatch import KILL_SLACK_S, Notifier
from ..policies.idle import fmt_duration
from ..records import Action, Decision
from ..stopping import StopEvent, StopProcess, StopState
from . import messages
from .act import begin_stop, route_for
from .drive import drive
from .model import (FOLLOWS_NEW_SESSION, Clear, Match, Plan, ReleaseWarning, Seen, Step, gone_clear, iso, match,
                    new_session_clear, not_applicable_clear, open_mark, plan, release_warning, snoozed_until,
                    to_clear, under_way, warned)
from .owner import HEARTBEAT_EVERY, beat, owner_gone, parse_iso, same_owner, this_owner

from costctl_providers.base import Status

if TYPE_CHECKING:
    from costctl_providers.base import Provider

    from ..config import PatrolConfig, PatrolPolicyConfig, Settings, StopConfig
    from ..executor import Executor
    from ..ledger.db import Ledger

#: The steps that carry out a stop or release.
ACTING = frozenset({Step.ACT, Step.RESUME})
#: How long past ``[stop] deadline`` a patrol stop still "stopping" keeps a new mark off the instance.
IN_FLIGHT_SLACK = timedelta(minutes=10)


@dataclass
class Outcome:
    """What a sweep did (or, in a dry run, would do) with one match.

    Attributes:
        plan: the match and the step planned.
        done: one line: what was done or would be (``"marked (decision 12)"``, ``"would stop
            now"``, ``"stopped: confirmed"``...).
        decision_id: the decision recorded for it (None: none).
        state: for an action carried out, the stop state reached (``confirmed``, ``gone``,
            ``failed``), else None.
        follows: the mark this sweep cleared as ``new-session`` just before (a new mark records it
            as ``follows_new_session_of``), else None.
    """

    plan: Plan
    done: str
    decision_id: int | None = None
    state: str | None = None
    follows: int | None = None


@dataclass
class PolicyResult:
    """One policy's part of a sweep: its matches (in fleet order) and its marks that are obsolete
    (each with what was done: cleared, or would be)."""

    policy: PatrolPolicyConfig
    outcomes: list[Outcome] = field(default_factory=list)
    cleared: list[tuple[Clear, str]] = field(default_factory=list)


@dataclass
class WarningOutcome:
    """A provider's own release coming, and what was done about it."""

    warning: ReleaseWarning
    done: str
    decision_id: int | None = None


@dataclass
class SweepReport:
    """One sweep.

    Attributes:
        now: aware UTC; when the sweep read the fleet.
        execute: whether it acted (False: a dry run).
        fleet: what the accounts and the ledger said.
        policies: per configured policy, in order.
        warnings: the providers' own releases coming.
        notes: lines about what the patrol cannot see (AutoDL's ordinary instances).
        observations: how many observations were stored.
        failed: actions whose stop failed.
    """

    now: datetime
    execute: bool
    fleet: FleetReport
    policies: list[PolicyResult]
    warnings: list[WarningOutcome]
    notes: list[str]
    observations: int
    failed: int = 0


@dataclass
class _Stop:
    """An action started: its outcome, the executor carrying its verified stop, a release or not."""

    outcome: Outcome
    executor: Executor
    release: bool
    owner: dict[str, Any] = field(default_factory=dict)
    lost: bool = False  # another patrol took it over: this sweep drives it no further


@dataclass
class _Told:
    """What one action's notifications said so far (the "not confirmed yet" goes out once)."""

    outcome: Outcome
    release: bool
    stop: StopConfig
    unconfirmed: bool = False


def horizon(patrol: PatrolConfig, interval: timedelta) -> timedelta:
    """How far back observations are kept and read: ``observation_retention``, and at least
    every policy's idle window and stopped-for duration plus four intervals (the coverage
    rule's anchor may lie up to two intervals before a window)."""
    longest = patrol.observation_retention
    for policy in patrol.policies:
        for window in (policy.filters.idle, policy.filters.stopped_for):
            if window is not None:
                longest = max(longest, window + 4 * interval)
    return longest


def _observation(row: FleetRow, now: datetime) -> dict[str, Any]:
    inst = row.instance
    return {"provider": row.provider, "instance_id": inst.id, "account": row.account, "time": now,
            "status": inst.status.value, "gpu_utilization": inst.gpu_utilization,
            "cpu_utilization": inst.cpu_utilization}


def _facts(row: FleetRow) -> store.InstanceFacts:
    inst = row.instance
    return store.InstanceFacts(gpu=inst.gpu, gpu_count=inst.gpu_count, billing=inst.billing.value,
                               price_per_hour=inst.price_per_hour, currency=inst.currency, region=inst.region)


class Sweeper:
    """Runs sweeps (:meth:`sweep`) with one ledger and one configuration.

    Args:
        settings: the configuration (``[patrol]``, ``[notify]``, ``[stop]``, the providers).
        ledger: the ledger decisions and observations are written to.
        clock: time source (the simulated one in tests; the providers get it too).
        execute: act (False: a dry run that records only the observations).
        interval: the sweeps' nominal interval (``--every``, else ``[patrol] interval``).
        say: prints one of the patrol's live lines (the executor's stop lines included).
        notifier: makes the sweep's notifier (default: :class:`~costctl.notify.dispatch.Notifier`
            on ``[notify]``); a sweep with ``execute`` makes one and closes it.
    """

    def __init__(self, settings: Settings, ledger: Ledger, *, clock: Clock | None = None, execute: bool = False,
                 interval: timedelta | None = None, say: Callable[[str], None] = lambda line: None,
                 notifier: Callable[[], Notifier] | None = None) -> None:
        self.settings = settings
        self.ledger = ledger
        self.clock = clock or RealClock()
        self.execute = execute
        self.interval = interval or settings.patrol.interval
        self.say = say
        self.tz = settings.watch.tz
        self.host = socket.gethostname()
        self._make_notifier = notifier or self._default_notifier
        self._providers: dict[tuple[str, str | None], Provider] = {}

    def _default_notifier(self) -> Notifier:
        from ..notify.events import Context

        return Notifier(self.settings.notify, lambda: Context(provider="", instance="", run="", host=self.host),
                        say=self.say, tz=self.tz)

    # ------------------------------------------------------------------ reading
    def _seen(self, fleet: FleetReport, now: datetime) -> tuple[list[Seen], dict[store.Key, list[store.PatrolDecision]],
                                                                 list[tuple[store.Key, store.PatrolDecision]]]:
        from costctl_providers.registry import provider_class

        keys = [(row.provider, row.instance.id) for row in fleet.rows]
        since = now - horizon(self.settings.patrol, self.interval)
        with self.ledger.session() as s:
            conn = s.connection()
            known = store.watched(conn, keys)
            observed = store.observations(conn, keys, since)
            history = store.patrol_decisions(conn, keys)
            listed = set(keys)
            unlisted = [(key, mark) for key, mark in store.open_marks(conn) if key not in listed]
        seen = []
        for row in fleet.rows:
            cls: Any = provider_class(row.provider)
            caps = cls.capabilities
            key = (row.provider, row.instance.id)
            seen.append(Seen(row=row, known=key in known, observations=tuple(observed.get(key, ())),
                             gpu_readable=bool(caps.gpu_utilization), cpu_readable=bool(caps.cpu_utilization),
                             release_after=getattr(cls, "stopped_release_after", None)))
        return seen, history, unlisted

    def _notes(self, fleet: FleetReport) -> list[str]:
        """What the patrol cannot see: each read account whose adapter says its listing leaves
        instances out (:meth:`~costctl_providers.base.Provider.listing_note`; AutoDL's official
        API lists Pro instances only)."""
        notes = []
        for read in fleet.accounts:
            if not read.ok:
                continue
            try:
                said = self._provider_for(read.provider, read.account).listing_note()
            except CostctlError:
                continue
            if said:
                note = _("{provider}: {note}; the patrol sees, and warns about, the listed instances alone").format(
                    provider=read.provider, note=said)
                if note not in notes:
                    notes.append(note)
        return notes

    # ------------------------------------------------------------------ the sweep
    def sweep(self) -> SweepReport:
        """One sweep (see the module docstring).

        Raises:
            LedgerError: the ledger cannot be read or written.
        """
        fleet = collect(self.settings, clock=self.clock)
        now = ensure_utc(fleet.now)
        rows = [_observation(row, now) for row in fleet.rows]
        store.record_observations(self.ledger, rows)
        store.prune_observations(self.ledger, now - horizon(self.settings.patrol, self.interval))
        seen, history, unlisted = self._seen(fleet, now)
        patrol = self.settings.patrol
        flight = self.settings.stop.deadline + IN_FLIGHT_SLACK
        results: list[PolicyResult] = []
        for policy in patrol.policies:
            result = PolicyResult(policy)
            for one in seen:
                found = match(policy, one, now=now, interval=self.interval)
                past = history.get(one.key, [])
                resume = self._resumable(policy, one, found, past, now)
                if resume is not None:  # its patrol died driving it: this sweep takes it over
                    result.outcomes.append(Outcome(resume, ""))
                    continue
                fresh = new_session_clear(policy, one, past, tz=self.tz)
                if fresh is not None:  # restarted since the mark: that mark's episode is over
                    result.cleared.append((fresh, ""))
                    past = [d for d in past if d.id != fresh.mark.id]
                if found is not None:
                    planned = plan(found, past, patrol, now=now, in_flight_horizon=flight, tz=self.tz,
                                   needs_delivery=self._needs_delivery())
                    result.outcomes.append(Outcome(planned, "", follows=fresh.mark.id if fresh is not None else None))
                    obsolete = not_applicable_clear(planned)
                else:
                    obsolete = to_clear(policy, one, past)
                if obsolete is not None:
                    result.cleared.append((obsolete, ""))
            for key, mark in unlisted:  # marked, and not listed now: gone if its account was read
                if mark.policy == policy.decision_policy:
                    gone = gone_clear(key, mark, fleet.accounts, now=now, tz=self.tz)
                    if gone is not None:
                        result.cleared.append((gone, ""))
            results.append(result)
        warnings = []
        for one in seen:
            warning = release_warning(one, now=now, warning=patrol.release_warning, interval=self.interval, tz=self.tz)
            if warning is not None and not warned(history.get(one.key, []), warning.key):
                warnings.append(WarningOutcome(warning, ""))
        report = SweepReport(now=now, execute=self.execute, fleet=fleet, policies=results, warnings=warnings,
                             notes=self._notes(fleet), observations=len(rows))
        if self.execute:
            self._act(report, history)
        else:
            self._dry(report)
        return report

    def _resumable(self, policy: PatrolPolicyConfig, one: Seen, found: Match | None,
                   past: list[store.PatrolDecision], now: datetime) -> Plan | None:
        """A :attr:`Step.RESUME` plan when ``policy``'s stop or release of ``one`` is still
        under way and the patrol that owns it is provably gone
        (:func:`costctl.patrol.owner.owner_gone`), else None."""
        flying = under_way(past, policy.decision_policy)
        if flying is None:
            return None
        gone = owner_gone(flying.evidence.get("owner"), host=self.host, now=now, tz=self.tz)
        if gone is None:
            return None
        if found is None:  # it no longer matches (stopped meanwhile?): the stop is still confirmed
            found = Match(policy, one, {}, (_("its patrol {action} (decision {decision}) is still under way").format(
                action=flying.action, decision=flying.id),))
        return Plan(Step.RESUME, found, why=gone, resumes=flying)

    def _needs_delivery(self) -> bool:
        """Whether a ``[notify]`` URL takes the ``stop_pending`` event: then a stop acts only on
        a mark whose notice was delivered (with none, it acts after the grace: nobody can be told)."""
        config = self.settings.notify
        return any("stop_pending" in {str(getattr(e, "value", e)) for e in
                                      (t.events if t.events is not None else config.events)} for t in config.urls)

    # ------------------------------------------------------------------ a dry run
    def _dry(self, report: SweepReport) -> None:
        for result in report.policies:
            for outcome in result.outcomes:
                outcome.done = self._would(outcome.plan, report.now)
            result.cleared = [(c, _("would clear mark {mark}: {why}").format(mark=c.mark.id, why=c.line))
                              for c, _done in result.cleared]
        for warning in report.warnings:
            warning.done = _("would warn")

    def _would(self, p: Plan, now: datetime) -> str:
        action = p.match.policy.action
        at = format_time(now + p.match.policy.grace, self.tz)
        if p.step is Step.MARK:
            if action == "notify":
                return _("would notify")
            if action == "stop":
                return _("would mark and notify; would stop at {at} unless snoozed").format(at=at)
            return _("would mark and notify; would release {grace} after the notification is delivered").format(
                grace=fmt_duration(p.match.policy.grace))
        if p.step is Step.WAIT:
            assert p.due is not None and p.mark is not None
            return _("marked (decision {mark}); acts at {at}").format(mark=p.mark.id, at=format_time(p.due, self.tz))
        if p.step is Step.ACT:
            return _("would stop now") if action == "stop" else _("would release now")
        if p.step is Step.RESUME:
            assert p.resumes is not None
            return _("would take over decision {decision}: {why}").format(decision=p.resumes.id, why=p.why)
        if p.step is Step.NOTIFIED:
            assert p.mark is not None
            return _("notified (decision {mark})").format(mark=p.mark.id)
        return p.why or p.step.value

    # ------------------------------------------------------------------ acting
    def _act(self, report: SweepReport, history: dict[store.Key, list[store.PatrolDecision]]) -> None:
        notifier = self._make_notifier()
        try:
            marks: list[tuple[int, str]] = []  # (mark id, message key) whose delivery is recorded
            notices: list[tuple[Match, int]] = []  # the marks to tell of, in one digest per event
            for result in report.policies:
                result.cleared = [(c, self._clear(c, report.now)) for c, _done in result.cleared]
                for outcome in result.outcomes:
                    if outcome.plan.step is Step.MARK:
                        self._mark(outcome, report.now, notices)
                    elif outcome.plan.step is Step.HELD and outcome.plan.mark is not None \
                            and outcome.plan.due is None:  # a notice not delivered: again
                        notices.append((outcome.plan.match, outcome.plan.mark.id))
                        outcome.done = outcome.plan.why or ""
                    else:
                        outcome.done = "" if outcome.plan.step in ACTING else self._would(outcome.plan, report.now)
            marks.extend(self._post_marks(notifier, notices, report.now))
            for warning in report.warnings:
                self._warn(warning, report.now, notifier)
            undelivered = self._delivered(notifier, marks) if marks else 0
            if undelivered:
                report.notes.append(ngettext(
                    "{count} mark's notice was not delivered: its stop or release waits until one is (it is sent "
                    "again at the next sweep, and the grace counts from its delivery)",
                    "{count} marks' notices were not delivered: their stops and releases wait until they are (they "
                    "are sent again at the next sweep, and the grace counts from their delivery)",
                    undelivered).format(count=undelivered))
            started = [begun for result in report.policies for outcome in result.outcomes
                       if outcome.plan.step in ACTING and (begun := (self._resume(outcome, notifier) if
                                                                      outcome.plan.step is Step.RESUME else
                                                                      self._begin(outcome, notifier))) is not None]

            def ended(one: _Stop) -> None:
                self._finish(one, notifier)

            # side by side: one provider that never confirms delays no other instance's stop
            drive(started, lambda one: one.executor.stopping, clock=self.clock, ended=ended, say=self.say,
                  proceed=self._still_ours)
            report.failed = sum(1 for result in report.policies for outcome in result.outcomes
                                if outcome.plan.step in ACTING and outcome.state == StopState.FAILED.value)
        finally:
            notifier.flush(self._wait_s())
            notifier.close(wait_s=1.0)

    def _wait_s(self) -> float:
        return self.settings.notify.timeout.total_seconds() + KILL_SLACK_S

    def _clear(self, c: Clear, now: datetime) -> str:
        """Settle ``c``'s mark as ``cleared``, its evidence saying when, why (``cleared_why``: a
        machine word; ``cleared_reason``: the line) and what the sweep saw (``cleared_seen``)."""
        if store.settle_mark(self.ledger, c.mark.id, store.CLEARED, {
                "cleared_at": iso(now), "cleared_why": c.why, "cleared_reason": c.line, "cleared_seen": c.evidence}):
            self.say(_("costctl patrol: {provider} instance {instance}: mark {mark} ({policy}) cleared: {why}").format(
                provider=c.key[0], instance=c.key[1], mark=c.mark.id, policy=c.mark.policy, why=c.line))
            return _("mark {mark} cleared: {why}").format(mark=c.mark.id, why=c.line)
        return _("mark {mark} was settled by another patrol").format(mark=c.mark.id)

    def _mark(self, outcome: Outcome, now: datetime, notices: list[tuple[Match, int]]) -> None:
        found = outcome.plan.match
        policy = found.policy
        evidence = {**found.evidence, "action": policy.action, "grace_s": policy.grace.total_seconds()}
        if policy.action == "stop":
            evidence["due_at"] = iso(now + policy.grace)
        if outcome.follows is not None:
            evidence[FOLLOWS_NEW_SESSION] = outcome.follows
        decision = Decision(time=now, policy=policy.decision_policy, action=Action.MARK, reason=found.reason,
                            evidence=evidence)

        def check(past: list[store.PatrolDecision]) -> str | None:
            mark = open_mark(past, policy.decision_policy)
            if mark is not None:
                return _("marked already (decision {mark}, by another patrol)").format(mark=mark.id)
            return None

        claimed = store.claim(self.ledger, found.seen.key, _facts(found.seen.row), decision, outcome=store.MARKED,
                              check=check)
        if claimed.decision_id is None:
            outcome.done = _("not marked: {why}").format(why=claimed.refused)
            return
        outcome.decision_id = claimed.decision_id
        self.say(_("costctl patrol: {reason}; marked (decision {mark})").format(reason=found.reason,
                                                                                mark=claimed.decision_id))
        notices.append((found, claimed.decision_id))
        if policy.action == "notify":
            outcome.done = _("notified (decision {mark})").format(mark=claimed.decision_id)
        else:
            if policy.action == "stop":
                outcome.done = _("marked (decision {mark}); stops at {at} unless snoozed").format(
                    mark=claimed.decision_id, at=format_time(now + policy.grace, self.tz))
            else:
                outcome.done = _("marked (decision {mark}); releases {grace} after the notification is "
                                 "delivered").format(mark=claimed.decision_id, grace=fmt_duration(policy.grace))

    def _post_marks(self, notifier: Notifier, notices: list[tuple[Match, int]], now: datetime) -> list[tuple[int, str]]:
        """Tell of this sweep's marks: one message per event (``stop_pending``, ``advice``) — the
        mark's own message when it is alone, else one digest listing them
        (:func:`costctl.patrol.messages.digest_message`), so a big sweep never meets ``[notify]
        max_per_hour``. Returns ``(mark id, message key)`` of the stop and release marks, whose
        delivery is recorded."""
        groups: dict[bool, list[tuple[Match, int]]] = {}
        for found, mark_id in notices:
            groups.setdefault(found.policy.action == "notify", []).append((found, mark_id))
        keys: list[tuple[int, str]] = []
        for advice, group in groups.items():
            if len(group) == 1:
                [(found, mark_id)] = group
                policy, row = found.policy, found.seen.row
                message = messages.mark_message(
                    decision_id=mark_id, policy=policy.name, action=policy.action, reason=found.reason,
                    provider=row.provider, instance=row.instance.id, account=row.account, host=self.host,
                    at=format_time(now + policy.grace, self.tz), grace=fmt_duration(policy.grace), when=now)
            else:
                message = messages.digest_message(
                    [messages.DigestLine(mark_id, found.policy.name, found.policy.action, found.seen.row.provider,
                                         found.seen.row.instance.id, found.seen.row.account,
                                         format_time(now + found.policy.grace, self.tz),
                                         fmt_duration(found.policy.grace)) for found, mark_id in group],
                    advice=advice, host=self.host, when=now)
            notifier.post(message)
            if not advice:
                keys.extend((mark_id, message.key) for _found, mark_id in group)
        return keys

    def _delivered(self, notifier: Notifier, marks: list[tuple[int, str]]) -> int:
        """Wait for the marks' notifications, and record in each mark whether it was delivered
        (``notified_at``: when this patrol saw it delivered; a release, and a stop when a channel
        takes its notice, counts its grace from it). Returns how many were not delivered."""
        missed = 0
        notifier.flush(self._wait_s())
        when = iso(self.clock.now())
        for mark_id, key in marks:
            ok = notifier.delivered(key)
            evidence: dict[str, Any] = {"notified": bool(ok)}
            if ok:
                evidence["notified_at"] = when
            else:
                missed += 1
            store.add_evidence(self.ledger, mark_id, evidence)
        return missed

    def _warn(self, warning: WarningOutcome, now: datetime, notifier: Notifier) -> None:
        w = warning.warning
        row = w.seen.row
        decision = Decision(time=now, policy=store.PATROL_POLICY, action=Action.WARN, reason=w.reason, key=w.key,
                            evidence={"provider": row.provider, "instance": row.instance.id,
                                      "stopped_since": iso(w.stopped_since), "source": w.source,
                                      "release_at": iso(w.release_at)})
        claimed = store.claim(self.ledger, w.seen.key, _facts(row), decision, outcome="warned",
                              check=lambda past: _("warned already") if warned(past, w.key) else None)
        if claimed.decision_id is None:
            warning.done = _("not warned: {why}").format(why=claimed.refused)
            return
        warning.decision_id = claimed.decision_id
        self.say(_("costctl patrol: {reason}").format(reason=w.reason))
        notifier.post(messages.warning_message(decision_id=claimed.decision_id, reason=w.reason,
                                               provider=row.provider, instance=row.instance.id, account=row.account,
                                               host=self.host, at=format_time(w.release_at, self.tz), when=now,
                                               past=w.past))
        warning.done = _("warned (decision {decision})").format(decision=claimed.decision_id)

    def _provider(self, row: FleetRow) -> Provider:
        return self._provider_for(row.provider, row.account)

    def _provider_for(self, name: str, account: str | None) -> Provider:
        """The adapter of ``name``'s ``account`` (None: its default account), opened once."""
        from ..cloud import DEFAULT_ACCOUNT, open_provider

        key = (name, account)
        if key not in self._providers:
            self._providers[key] = open_provider(self.settings, name, clock=self.clock,
                                                 account=account or DEFAULT_ACCOUNT)
        return self._providers[key]

    def _begin(self, outcome: Outcome, notifier: Notifier) -> _Stop | None:
        """The action of a due mark: preflight, claim, and the verified stop started (None: it
        ended here, refused or failed at the preflight; :meth:`_finish` ends a started one)."""
        p = outcome.plan
        assert p.mark is not None
        found = p.match
        policy, row = found.policy, found.seen.row
        release = policy.action == "release"
        now = ensure_utc(self.clock.now())
        try:
            provider = self._provider(row)
        except CostctlError as exc:
            outcome.done = _("not acted on: {error}").format(error=exc.message)
            return None
        route, problem = route_for(provider, row.instance, release=release)
        owner = this_owner(self.host, now)
        evidence = {**found.evidence, "mark": p.mark.id, "marked_at": iso(p.mark.time), "due_at": iso(p.due),
                    "owner": owner}
        if p.mark.evidence.get("notified_at"):
            evidence["notified_at"] = p.mark.evidence["notified_at"]
        if problem is not None:
            evidence["preflight"] = problem
        action = Action.RELEASE if release else Action.STOP
        decision = Decision(time=now, policy=policy.decision_policy, action=action, reason=found.reason,
                            evidence=evidence)

        def check(past: list[store.PatrolDecision]) -> str | None:
            until = snoozed_until(past, now)
            if until is not None:
                return _("snoozed until {until}").format(until=format_time(until, self.tz))
            assert p.mark is not None
            other = next((d for d in past if d.action in (Action.STOP.value, Action.RELEASE.value)
                          and d.time >= p.mark.time), None)
            if other is not None:  # another policy (or patrol) acted on the instance since this mark
                return _("decision {decision} ({policy}) acted on the instance since this mark").format(
                    decision=other.id, policy=other.policy)
            return None

        first = "stop requested" if problem is None else _("failed: preflight: {problem}").format(problem=problem)
        claimed = store.claim(self.ledger, found.seen.key, _facts(row), decision, outcome=first, check=check,
                              settle=(p.mark.id, store.ACTED, {"acted_at": iso(now)}))
        if claimed.decision_id is None:
            outcome.done = _("not acted on: {why}").format(why=claimed.refused)
            return None
        outcome.decision_id = claimed.decision_id
        shape = {"provider": row.provider, "instance": row.instance.id, "decision": claimed.decision_id,
                 "reason": found.reason}
        if route is None:
            outcome.state = StopState.FAILED.value
            outcome.done = first
            self._post_result(notifier, outcome, StopState.FAILED.value, problem or "", 0)
            return None
        self.say((_("costctl patrol: releasing {provider} instance {instance} (decision {decision}): {reason}")
                  if release else _("costctl patrol: stopping {provider} instance {instance} (decision {decision}): "
                                    "{reason}")).format(**shape))
        return self._start(outcome, claimed.decision_id, decision, provider, route, release, owner, notifier)

    def _start(self, outcome: Outcome, decision_id: int, decision: Decision, provider: Provider, route: Any,
               release: bool, owner: dict[str, Any], notifier: Notifier) -> _Stop:
        """Start the verified stop of the claimed ``decision_id``; its steps refresh the owner's
        heartbeat (:mod:`costctl.patrol.owner`; at most every :data:`HEARTBEAT_EVERY`) and are
        told (:meth:`_on_stop_event`)."""
        told = _Told(outcome, release, self.settings.stop)
        last = [owner]
        holder: list[_Stop] = []

        def on_event(event: StopEvent, proc: StopProcess | None) -> None:
            if holder and holder[0].lost:
                return  # taken over: the other patrol tells
            if not event.state.terminal and event.time - parse_iso(last[0]["heartbeat"]) >= HEARTBEAT_EVERY:
                last[0] = beat(owner, event.time)
                try:
                    if not store.beat_if_owner(self.ledger, decision_id, last[0], same_owner) and holder:
                        holder[0].lost = True
                        return
                except CostctlError as exc:  # said; the stop goes on
                    self.say(_("costctl patrol: decision {decision}: heartbeat not recorded: {error}").format(
                        decision=decision_id, error=exc.message))
            self._on_stop_event(notifier, told, event, proc)

        executor = begin_stop(ledger=self.ledger, decision_id=decision_id, decision=decision, provider=provider,
                              inst=outcome.plan.match.seen.row.instance, route=route, release=release,
                              clock=self.clock, stop_config=self.settings.stop, say=self.say, on_event=on_event)
        holder.append(_Stop(outcome, executor, release, owner))
        return holder[0]

    def _still_ours(self, one: _Stop) -> bool:
        """Whether ``one`` is still this sweep's to drive (asked before each of its steps): not
        when another patrol took it over while this one slept (a SIGSTOP, a hung host)."""
        if not one.lost and one.owner and one.outcome.decision_id is not None:
            one.lost = not store.still_owner(self.ledger, one.outcome.decision_id, one.owner, same_owner)
        return not one.lost

    def _resume(self, outcome: Outcome, notifier: Notifier) -> _Stop | None:
        """Take over a stop or release whose patrol is gone (:attr:`Step.RESUME`): the same
        decision, its owner now this patrol, its evidence's ``resumed`` saying from whom and why
        (:func:`costctl.ledger.patrol_store.take_over`, under the instance's lock), then the
        same verified stop; None when it ended here (refused, or failed at the preflight)."""
        p = outcome.plan
        flying = p.resumes
        assert flying is not None
        found = p.match
        row = found.seen.row
        release = flying.action == Action.RELEASE.value
        now = ensure_utc(self.clock.now())
        try:
            provider = self._provider(row)
        except CostctlError as exc:
            outcome.done = _("not taken over: {error}").format(error=exc.message)
            return None
        owner = this_owner(self.host, now)
        before = flying.evidence.get("owner")
        refused = store.take_over(self.ledger, found.seen.key, flying.id, expected_owner=before, owner=owner,
                                  evidence={"at": iso(now), "from": before, "why": p.why})
        if refused is not None:
            outcome.done = _("not taken over: {why}").format(why=refused)
            return None
        outcome.decision_id = flying.id
        self.say(_("costctl patrol: {provider} instance {instance}: resuming decision {decision} ({action}): its "
                   "patrol is gone: {why}").format(provider=row.provider, instance=row.instance.id,
                                                   decision=flying.id, action=flying.action, why=p.why))
        if row.instance.status in ((Status.TERMINATED,) if release else (Status.STOPPED, Status.TERMINATED)):
            # the patrol that died may have sent its requests: the provider's status confirms them
            outcome.state = StopState.CONFIRMED.value
            outcome.done = _("confirmed: {provider} reads instance {instance} {status}; decision {decision} was "
                             "resumed and needed no further request").format(
                provider=row.provider, instance=row.instance.id, decision=flying.id, status=row.instance.status.value)
            self.ledger.set_decision_outcome(flying.id, outcome.done)
            self._post_result(notifier, outcome, outcome.state, outcome.done, 0)
            return None
        route, problem = route_for(provider, row.instance, release=release)
        if route is None:
            outcome.state = StopState.FAILED.value
            outcome.done = _("failed: preflight: {problem}").format(problem=problem)
            self.ledger.set_decision_outcome(flying.id, outcome.done)
            self._post_result(notifier, outcome, StopState.FAILED.value, problem or "", 0)
            return None
        decision = Decision(time=now, policy=flying.policy, action=Action.RELEASE if release else Action.STOP,
                            reason=found.reason, evidence=dict(flying.evidence))
        return self._start(outcome, flying.id, decision, provider, route, release, owner, notifier)

    def _finish(self, one: _Stop, notifier: Notifier) -> None:
        """A started action ended: its outcome (the decision's, where the sweep words it) and
        its notification."""
        outcome, release = one.outcome, one.release
        row = outcome.plan.match.seen.row
        assert outcome.decision_id is not None
        claimed_id = outcome.decision_id
        if one.lost:  # another patrol drives it now, records its end and tells it
            outcome.done = _("taken over by another patrol (decision {decision}): this patrol stopped driving "
                             "it").format(decision=claimed_id)
            self.say(_("costctl patrol: {provider} instance {instance}: {done}").format(
                provider=row.provider, instance=row.instance.id, done=outcome.done))
            return
        result = one.executor.stop
        state = result.state if result is not None else StopState.FAILED.value
        outcome.state = state
        detail = result.detail if result is not None else ""
        attempts = result.attempts if result is not None else 0
        if release and state in (StopState.CONFIRMED.value, StopState.GONE.value) and attempts:
            # the instance read terminated, or was gone, after our release request: that is the release
            outcome.done = _("released, confirmed: {provider} no longer holds instance {instance} after {count} "
                             "release request(s)").format(provider=row.provider, instance=row.instance.id,
                                                          count=attempts)
            state = outcome.state = StopState.CONFIRMED.value
            self.ledger.set_decision_outcome(claimed_id, outcome.done)
            self.say(_("costctl patrol: {done}").format(done=outcome.done))
        elif state == StopState.CONFIRMED.value and not attempts:
            # it was down by the time the executor read it: no request was sent, none is counted
            outcome.done = _("not acted on: {provider} reads instance {instance} {status} already; no request was "
                             "sent").format(provider=row.provider, instance=row.instance.id,
                                            status=_("released") if release else _("stopped"))
            self.ledger.set_decision_outcome(claimed_id, outcome.done)
            return
        elif state == StopState.CONFIRMED.value:
            outcome.done = (ngettext("released: confirmed by {provider} ({count} request)",
                                     "released: confirmed by {provider} ({count} requests)", attempts) if release
                            else ngettext("stopped: confirmed by {provider} ({count} request)",
                                          "stopped: confirmed by {provider} ({count} requests)", attempts)).format(
                provider=row.provider, count=attempts)
        elif state == StopState.GONE.value:
            outcome.done = _("gone: {detail}").format(detail=detail)
        else:
            outcome.done = _("FAILED: {detail}").format(detail=detail)
        self._post_result(notifier, outcome, state, detail, attempts)

    def _on_stop_event(self, notifier: Notifier, told: _Told, event: StopEvent, proc: StopProcess | None) -> None:
        """A step of a patrol's stop (the stop's thread), told as a watch's stop is told
        (:meth:`costctl.notify.dispatch.Notifier.on_stop_event`): once, the first sign that it is
        not going through — a request re-sent after a failure, or no confirmation ``[stop]
        unconfirmed_after`` after the first request — as ``stop_failed``, "not confirmed yet",
        with when it is given up on. Its end (confirmed, gone, failed) is told by
        :meth:`_finish`."""
        if not (event.state is StopState.REQUESTED or event.unconfirmed) or event.attempt < 1 or told.unconfirmed:
            return
        told.unconfirmed = True
        outcome = told.outcome
        found = outcome.plan.match
        row = found.seen.row
        assert outcome.decision_id is not None
        deadline = proc.deadline if proc is not None else event.time + told.stop.deadline
        notifier.post(messages.unconfirmed_message(
            decision_id=outcome.decision_id, policy=found.policy.name, action=found.policy.action,
            detail=event.detail, attempts=event.attempt, provider=row.provider, instance=row.instance.id,
            account=row.account, host=self.host, deadline=format_time(deadline, self.tz), when=event.time))

    def _post_result(self, notifier: Notifier, outcome: Outcome, state: str, detail: str, attempts: int) -> None:
        found = outcome.plan.match
        row = found.seen.row
        assert outcome.decision_id is not None
        message = messages.result_message(
            decision_id=outcome.decision_id, state=state, policy=found.policy.name, action=found.policy.action,
            reason=found.reason, detail=detail, attempts=attempts, provider=row.provider, instance=row.instance.id,
            account=row.account, host=self.host, when=ensure_utc(self.clock.now()))
        if message is not None:
            notifier.post(message)


__all__ = ["IN_FLIGHT_SLACK", "Outcome", "PolicyResult", "SweepReport", "Sweeper", "WarningOutcome", "horizon"]
