"""Which instances a patrol policy matches, with the evidence, and what the patrol may do to
them now: pure functions of the fleet's rows, the stored observations, the patrol's earlier
decisions, the configuration and the time.

Terms:

* **match** — every filter of the policy holds for the instance (:func:`match`); the
  evidence records what each filter saw.
* **scope** — a stop or release acts only on an instance this ledger knows (a watch of this
  ledger ran on it) or whose label matches ``[patrol] labels``, unless ``[patrol] act_on =
  "all"`` (:func:`scope_problem`); a notify policy notifies about any instance.
* **mark** — a match opens an episode: the instance is marked (a decision, and a notification
  now); the policy's action is due ``grace`` after the mark (a release: after the mark's
  notification was delivered, see :func:`plan`); the episode ends when the action is taken
  (``acted``) or the mark is obsolete (``cleared``: :func:`to_clear`, :func:`not_applicable_clear`,
  :func:`gone_clear`; a provider account that could not be read clears nothing).
* **snooze** — ``costctl snooze --instance PROVIDER:ID 2h`` holds every patrol action on the
  instance until then (a mark goes on, the action waits).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from ..clock import ensure_utc
from ..fleet.model import FleetRow, GuardState
from ..i18n import _, format_amount, format_time
from ..ledger.patrol_store import ACTED, MARKED, PATROL_POLICY, Observation, PatrolDecision
from ..money import round_money
from ..policies.idle import fmt_duration
from ..records import Action
from .idle import idle_over

from costctl_providers.base import Status

if TYPE_CHECKING:
    from ..config import PatrolConfig, PatrolPolicyConfig

#: The account filter's word for a provider's default account.
DEFAULT_ACCOUNT_WORD = "default"


def iso(when: datetime | None) -> str | None:
    """ISO 8601 UTC to the second with a ``Z`` (evidence and keys), None for None."""
    return ensure_utc(when).isoformat(timespec="seconds").replace("+00:00", "Z") if when is not None else None


@dataclass(frozen=True)
class Seen:
    """One instance as a sweep sees it.

    Attributes:
        row: its fleet row (the provider's record, the guard, the spend).
        known: a run of this ledger ran on it.
        observations: the patrol's stored observations of it, oldest first (this sweep's included).
        gpu_readable / cpu_readable: its adapter reads GPU / CPU utilization
            (``capabilities.gpu_utilization`` / ``cpu_utilization``).
        release_after: how long its provider keeps a stopped instance before releasing it
            itself (``Provider.stopped_release_after``), None when it keeps it.
    """

    row: FleetRow
    known: bool = False
    observations: tuple[Observation, ...] = ()
    gpu_readable: bool = False
    cpu_readable: bool = False
    release_after: timedelta | None = None

    @property
    def key(self) -> tuple[str, str]:
        """``(provider, instance id)``."""
        return self.row.provider, self.row.instance.id

    @property
    def label(self) -> str | None:
        """The instance's label at the provider."""
        return self.row.instance.label


def stopped_since(seen: Seen, *, interval: timedelta) -> tuple[datetime, str] | None:
    """Since when ``seen`` has been stopped, and the source: ``("provider")`` its own stop time,
    else ``"observations"``: the oldest of the unbroken run of observations that read
    ``stopped`` up to the newest (a gap over twice ``interval`` ends the run), a lower bound.
    None when it is not stopped, or neither tells."""
    inst = seen.row.instance
    if inst.status is not Status.STOPPED:
        return None
    if inst.stopped_at is not None:
        return ensure_utc(inst.stopped_at), "provider"
    since: datetime | None = None
    later: datetime | None = None
    for obs in reversed(seen.observations):
        if obs.status != Status.STOPPED.value or (later is not None and later - obs.time > 2 * interval):
            break
        since = later = obs.time
    return (since, "observations") if since is not None else None


def age_since(seen: Seen) -> datetime | None:
    """When the instance was created, else last started, by the provider's times (None: unknown)."""
    inst = seen.row.instance
    when = inst.created_at or inst.started_at
    return ensure_utc(when) if when is not None else None


def label_matches(label: str | None, patterns: Sequence[str]) -> bool:
    """Whether ``label`` matches one of the shell-style ``patterns`` (case-sensitive); never
    for an instance without a label."""
    return label is not None and any(fnmatch.fnmatchcase(label, p) for p in patterns)


def _money(amount: Decimal) -> str:
    return str(round_money(amount, 6))


@dataclass(frozen=True)
class Match:
    """An instance a policy matches.

    Attributes:
        policy: the ``[[patrol.policies]]`` entry.
        seen: the instance.
        evidence: per filter, what it saw (JSON: money as decimal strings, times ISO UTC).
        clauses: per filter, one clause saying it (in the current language), in filter order.
    """

    policy: PatrolPolicyConfig
    seen: Seen
    evidence: dict[str, Any]
    clauses: tuple[str, ...]

    @property
    def reason(self) -> str:
        """One sentence: the instance, the policy, and what each filter saw."""
        return _("{provider} instance {instance} matches patrol policy {policy}: {detail}").format(
            provider=self.seen.row.provider, instance=self.seen.row.instance.id, policy=self.policy.name,
            detail=_("; ").join(self.clauses))


def match(policy: PatrolPolicyConfig, seen: Seen, *, now: datetime, interval: timedelta) -> Match | None:
    """The :class:`Match` of ``seen`` by ``policy`` at ``now`` (aware), or None when a filter
    does not hold (see :class:`costctl.config.PatrolFilters` for each filter's rule).

    Args:
        interval: the patrol's nominal interval between observations (the idle filter's
            coverage, the stopped-for filter's gaps).
    """
    f = policy.filters
    row, inst = seen.row, seen.row.instance
    now = ensure_utc(now)
    evidence: dict[str, Any] = {"provider": row.provider, "account": row.account, "instance": inst.id,
                                "status": inst.status.value}
    clauses: list[str] = []
    if f.provider is not None and row.provider not in f.provider:
        return None
    if f.account is not None and (row.account or DEFAULT_ACCOUNT_WORD) not in f.account:
        return None
    if f.label is not None:
        if not label_matches(seen.label, f.label):
            return None
        evidence["label"] = seen.label
        clauses.append(_("label {label!r}").format(label=seen.label))
    if f.status is not None:
        if inst.status.value not in f.status:
            return None
        clauses.append(_("status {status}").format(status=inst.status.value))
    if f.min_age is not None:
        since = age_since(seen)
        if since is None or now - since < f.min_age:
            return None
        evidence["age"] = {"since": iso(since), "age_s": int((now - since).total_seconds()),
                           "min_age_s": int(f.min_age.total_seconds())}
        clauses.append(_("{age} old (at least {minimum})").format(age=fmt_duration(now - since),
                                                                   minimum=fmt_duration(f.min_age)))
    if f.guarded is not None:
        guarded = row.guard.state is GuardState.GUARDED
        if row.guard.state is GuardState.UNKNOWN or guarded is not f.guarded:
            return None
        evidence["guard"] = {"state": row.guard.state.value, "run_id": row.guard.run_id,
                             "heartbeat_age_s": row.guard.heartbeat_age.total_seconds()
                             if row.guard.heartbeat_age is not None else None}
        clauses.append(_("guarded by a watch of this ledger") if guarded
                       else _("not guarded ({state})").format(state=row.guard.state.value))
    if f.idle is not None:
        decision = idle_over(seen.observations, now=now, window=f.idle, interval=interval,
                             min_gpu_utilization=f.min_gpu_utilization, min_cpu_utilization=f.min_cpu_utilization,
                             gpu_readable=seen.gpu_readable, cpu_readable=seen.cpu_readable)
        if decision is None:
            return None
        evidence["idle"] = decision.evidence
        clauses.append(_("idle over {window} by {count} of the patrol's observations ({signals})").format(
            window=fmt_duration(f.idle), count=decision.evidence.get("samples"),
            signals=", ".join(decision.evidence.get("signals", []))))
    if f.spend_over is not None:
        currency = f.currency
        if inst.currency != currency:
            return None
        provider = row.provider_spend.amount if row.provider_spend is not None else None
        ledger = row.ledger_spend.get(currency) if currency is not None else None
        figures = [a for a in (provider, ledger) if a is not None]
        if not figures or max(figures) <= f.spend_over:
            return None
        spent = max(figures)
        evidence["spend"] = {"currency": currency, "over": str(f.spend_over), "spent": _money(spent),
                             "provider": _money(provider) if provider is not None else None,
                             "ledger": _money(ledger) if ledger is not None else None}
        clauses.append(_("spent {spent} (over {cap})").format(spent=format_amount(spent, currency),
                                                               cap=format_amount(f.spend_over, currency)))
    if f.stopped_for is not None:
        found = stopped_since(seen, interval=interval)
        if found is None or now - found[0] < f.stopped_for:
            return None
        since, source = found
        evidence["stopped"] = {"since": iso(since), "source": source, "stopped_s": int((now - since).total_seconds()),
                               "stopped_for_s": int(f.stopped_for.total_seconds()),
                               "stopped_price_per_hour": str(inst.stopped_price_per_hour)
                               if inst.stopped_price_per_hour is not None else None}
        if source == "provider":
            clauses.append(_("stopped for {stopped} (at least {minimum})").format(
                stopped=fmt_duration(now - since), minimum=fmt_duration(f.stopped_for)))
        else:
            clauses.append(_("stopped for at least {stopped} by the patrol's observations (at least {minimum})").format(
                stopped=fmt_duration(now - since), minimum=fmt_duration(f.stopped_for)))
    if f.account is not None:
        clauses.insert(0, _("account {account}").format(account=row.account or DEFAULT_ACCOUNT_WORD))
    if f.provider is not None:
        clauses.insert(0, _("provider {provider}").format(provider=row.provider))
    return Match(policy, seen, evidence, tuple(clauses))


def scope_problem(seen: Seen, patrol: PatrolConfig) -> str | None:
    """Why a stop or release may not touch ``seen`` (None: it may): with ``[patrol] act_on =
    "known"``, an instance no watch of this ledger ran on and whose label matches none of
    ``[patrol] labels``."""
    if patrol.act_on == "all" or seen.known or label_matches(seen.label, patrol.labels):
        return None
    return _("out of scope: no watch of this ledger ran on it and its label matches none of [patrol] labels")


# ----------------------------------------------------------------------------- what to do now

#: Statuses a stop has nothing to do with: the instance is not running (already on its way down or down).
NOT_STOPPABLE = frozenset({Status.STOPPING, Status.STOPPED, Status.TERMINATED})

#: How long a stale heartbeat (a run not ended, not seen within the guard lag) holds a stop or a
#: release: a watch cut off from a team's central ledger by a short network outage looks stale
#: exactly like a dead one, so the patrol acts only once the heartbeat is this old (15 minutes:
#: longer than the outbox's backoff reaches in an ordinary outage, short beside an instance-hour).
STALE_HOLD = timedelta(minutes=15)


class Step(StrEnum):
    """What the patrol does (or, in a dry run, would do) with a match now."""

    #: record a mark and notify (the episode starts)
    MARK = "mark"
    #: marked; its action is due later (grace) — nothing to do now
    WAIT = "wait"
    #: the action is due: act (stop or release)
    ACT = "act"
    #: due, but the instance is snoozed
    SNOOZED = "snoozed"
    #: due, but a condition of the action does not hold (release's; guarded; in flight)
    HELD = "held"
    #: a stop or release would not touch this instance (see :func:`scope_problem`)
    OUT_OF_SCOPE = "out-of-scope"
    #: a notify policy's mark is open: it was notified already
    NOTIFIED = "notified"
    #: a stop or release of this policy still under way whose patrol is gone: taken over
    RESUME = "resume"
    #: the action cannot apply to the instance as it is now (a stop of an instance not running, a
    #: release of a guarded or watched one): nothing is marked, and an open mark is cleared
    NOT_APPLICABLE = "not-applicable"


@dataclass(frozen=True)
class Plan:
    """What to do with one match now.

    Attributes:
        step: :class:`Step`.
        match: the match.
        mark: the open mark of this policy on the instance (None before it is marked).
        due: when the action is (or was) due (None when there is no mark or no action).
        why: one line saying why it waits, is held or is out of scope (None otherwise); for
            :attr:`Step.RESUME`, why the stop's owner is deemed gone.
        resumes: for :attr:`Step.RESUME`, the stop or release decision taken over.
    """

    step: Step
    match: Match
    mark: PatrolDecision | None = None
    due: datetime | None = None
    why: str | None = None
    resumes: PatrolDecision | None = None


def open_mark(history: Sequence[PatrolDecision], policy: str) -> PatrolDecision | None:
    """The newest mark of ``policy`` (``patrol:<name>``) still ``marked``, from an instance's
    decisions (newest first)."""
    return next((d for d in history if d.policy == policy and d.action == Action.MARK.value
                 and d.outcome == MARKED), None)


def snoozed_until(history: Sequence[PatrolDecision], now: datetime) -> datetime | None:
    """Until when the newest patrol snooze of the instance holds, None when none holds at ``now``."""
    for d in history:
        if d.action == Action.SNOOZE.value and d.policy == PATROL_POLICY:
            until = d.evidence.get("until")
            when = datetime.fromisoformat(until.replace("Z", "+00:00")) if isinstance(until, str) else None
            return when if when is not None and when > ensure_utc(now) else None
    return None


def in_flight(history: Sequence[PatrolDecision], now: datetime, horizon: timedelta) -> PatrolDecision | None:
    """A patrol stop or release of the instance decided within ``horizon`` before ``now`` and
    not ended yet (outcome still ``stop requested``), else None."""
    for d in history:
        if (d.action in (Action.STOP.value, Action.RELEASE.value) and d.outcome == "stop requested"
                and d.time >= ensure_utc(now) - horizon):
            return d
    return None


def under_way(history: Sequence[PatrolDecision], policy: str) -> PatrolDecision | None:
    """The newest stop or release of ``policy`` on the instance whose outcome is still ``stop
    requested`` (of any age: a patrol that died driving it leaves it so), else None."""
    return next((d for d in history if d.policy == policy and d.action in (Action.STOP.value, Action.RELEASE.value)
                 and d.outcome == "stop requested"), None)


def due_at(policy: PatrolPolicyConfig, mark: PatrolDecision, *, needs_delivery: bool = False) -> datetime | None:
    """When ``mark``'s action is due: ``grace`` after the mark; for a release, and for a stop
    when a notification channel takes its notice (``needs_delivery``), ``grace`` after the
    mark's notification was delivered (None until it was)."""
    if policy.action == "release" or (needs_delivery and policy.action == "stop"):
        notified = mark.evidence.get("notified_at")
        if not isinstance(notified, str):
            return None
        return datetime.fromisoformat(notified.replace("Z", "+00:00")) + policy.grace
    return mark.time + policy.grace


def plan(found: Match, history: Sequence[PatrolDecision], patrol: PatrolConfig, *, now: datetime,
         in_flight_horizon: timedelta, tz: Any = None, needs_delivery: bool = False) -> Plan:
    """What to do now with ``found``, given the instance's patrol decisions (newest first);
    times in the lines are shown in ``tz`` (None: UTC).

    Rules, in order: a stop or release never touches an out-of-scope instance (not even a
    mark); nor one whose guard is unknown (the ledger could not be read: it is treated as
    guarded, held without a mark), nor one whose watch's heartbeat is stale but younger than
    :data:`STALE_HOLD` (held without a mark); a stop never marks an instance that is not running (stopping,
    stopped, terminated: :data:`NOT_STOPPABLE`), a release never marks an instance something
    guards or watches (the same checks as at act time, so nothing is announced that would not be
    done); a notify policy marks once per episode (the mark is its notification); an instance
    with a patrol stop or release in flight is not marked again; a mark waits until its action
    is due (:func:`due_at`; ``needs_delivery``: a notification channel takes a stop's notice, so
    a stop too waits for its notice to be delivered), then is held while the instance is snoozed, while it is guarded or
    watched (a release), or acted on.
    """
    now = ensure_utc(now)
    policy = found.policy
    if policy.action != "notify":
        problem = scope_problem(found.seen, patrol)
        if problem is not None:
            return Plan(Step.OUT_OF_SCOPE, found, why=problem)
        if found.seen.row.duplicate:
            return Plan(Step.HELD, found, why=_("the provider listed this instance id more than once: its status is "
                                                "uncertain, nothing is marked or done"))
        guard = found.seen.row.guard.state
        if guard is GuardState.UNKNOWN:
            return Plan(Step.HELD, found, why=_("the ledger cannot be read, so whether a watch guards it is unknown: "
                                                "treated as guarded, nothing is marked or done"))
        age = found.seen.row.guard.heartbeat_age
        if guard is GuardState.STALE and age is not None and age < STALE_HOLD:
            return Plan(Step.HELD, found, why=_(
                "a watch's heartbeat is {age} old: it may be alive behind a network outage, so nothing is marked "
                "or done until it is {hold} old").format(age=fmt_duration(age), hold=fmt_duration(STALE_HOLD)))
        status = found.seen.row.instance.status
        if policy.action == "stop" and status in NOT_STOPPABLE:
            return Plan(Step.NOT_APPLICABLE, found, open_mark(history, policy.decision_policy),
                        why=_("already {status}: nothing to stop").format(status=status.value))
        if policy.action == "release" and guard not in (GuardState.UNWATCHED, GuardState.STALE):
            return Plan(Step.NOT_APPLICABLE, found, open_mark(history, policy.decision_policy),
                        why=_("a release needs an instance nothing guards or watches; its guard is {state}").format(
                            state=guard.value))
    mark = open_mark(history, policy.decision_policy)
    if mark is None:
        flying = in_flight(history, now, in_flight_horizon)
        if flying is not None and policy.action != "notify":
            return Plan(Step.HELD, found, why=_("a patrol {action} decided at {time} is still under way").format(
                action=flying.action, time=format_time(flying.time, tz)))
        return Plan(Step.MARK, found)
    if policy.action == "notify":
        return Plan(Step.NOTIFIED, found, mark)
    due = due_at(policy, mark, needs_delivery=needs_delivery)
    if due is None and policy.action == "stop":
        return Plan(Step.HELD, found, mark, why=_("a stop needs its mark's notification delivered first (a "
                                                  "notification channel is configured); none was yet (it is sent "
                                                  "again, and the grace counts from its delivery)"))
    if due is None:
        return Plan(Step.HELD, found, mark, why=_("a release needs its mark's notification delivered first; none "
                                                  "was yet (it is sent again)"))
    if now < due:
        return Plan(Step.WAIT, found, mark, due)
    until = snoozed_until(history, now)
    if until is not None:
        return Plan(Step.SNOOZED, found, mark, due, why=_("snoozed until {until}").format(until=format_time(until, tz)))
    return Plan(Step.ACT, found, mark, due)


#: Why a mark is cleared (the machine words in its evidence, ``cleared_why``).
NO_LONGER_MATCHES, NOT_APPLICABLE, GONE = "no-longer-matches", "not-applicable", "gone"
#: Why a mark is cleared: the instance runs a session its provider started after the mark.
NEW_SESSION = "new-session"
#: The statuses whose ``started_at`` is the start of the session now running.
IN_SESSION = frozenset({Status.STARTING, Status.RUNNING, Status.STOPPING})
#: :data:`IN_SESSION` as the words stored in observations.
IN_SESSION_WORDS = frozenset(status.value for status in IN_SESSION)
#: The evidence key of a mark made right after a new-session clear: the cleared mark's id.
FOLLOWS_NEW_SESSION = "follows_new_session_of"


@dataclass(frozen=True)
class Clear:
    """An open mark that is obsolete: the episode ends (the mark's outcome becomes ``cleared``);
    the next match starts a new one (a new mark, a new notification, a new grace).

    Attributes:
        key: ``(provider, instance id)``.
        mark: the open mark.
        why: :data:`NO_LONGER_MATCHES`, :data:`NOT_APPLICABLE`, :data:`GONE` or :data:`NEW_SESSION`.
        line: one line saying why (the current language).
        evidence: what the sweep saw (JSON; added to the mark's evidence).
    """

    key: tuple[str, str]
    mark: PatrolDecision
    why: str
    line: str
    evidence: dict[str, Any]


def to_clear(policy: PatrolPolicyConfig, seen: Seen, history: Sequence[PatrolDecision]) -> Clear | None:
    """The open mark of ``policy`` on ``seen`` (an instance the sweep read, which ``policy`` no
    longer matches) to clear, else None: none is open, or the instance's guard is unknown (the
    ledger could not be read) and the policy filters on what the ledger says (``guarded``,
    ``spend_over``): then whether it still matches is unknown and the mark stays."""
    mark = open_mark(history, policy.decision_policy)
    if mark is None:
        return None
    row = seen.row
    if row.guard.state is GuardState.UNKNOWN and (policy.filters.guarded is not None
                                                  or policy.filters.spend_over is not None):
        return None
    evidence = {"status": row.instance.status.value, "guard": row.guard.state.value}
    return Clear(seen.key, mark, NO_LONGER_MATCHES, _("no longer matches (status {status}, guard {guard})").format(
        status=row.instance.status.value, guard=row.guard.state.value), evidence)


def new_session_clear(policy: PatrolPolicyConfig, seen: Seen, history: Sequence[PatrolDecision], *,
                      tz: Any = None) -> Clear | None:
    """The open mark of ``policy`` on ``seen`` to clear because it belongs to an earlier session:
    the instance is in a session (starting, running, stopping) its provider says began
    (``started_at``: Vast's start date, RunPod's now minus uptime, AutoDL's and the simulator's
    start time) after the mark was made — it was restarted during the grace, so what the mark
    announced is not about this session. None when no mark is open, the start is unknown, or it
    is not after the mark, or the mark itself follows a new-session clear
    (:data:`FOLLOWS_NEW_SESSION` in its evidence) and no sweep since it saw the instance out of a
    session (a container that restarts over and over — RunPod's start is now minus its uptime —
    is cleared once, not at every restart). The next match is a new episode: a new mark, a new notice, a new
    grace. Times in the line are shown in ``tz`` (None: UTC)."""
    mark = open_mark(history, policy.decision_policy)
    inst = seen.row.instance
    if mark is None or inst.started_at is None or inst.status not in IN_SESSION:
        return None
    started, marked = ensure_utc(inst.started_at), ensure_utc(mark.time)
    if started <= marked:
        return None
    if mark.evidence.get(FOLLOWS_NEW_SESSION) is not None and not any(
            o.status not in IN_SESSION_WORDS for o in seen.observations if ensure_utc(o.time) >= marked):
        return None  # restarted again with no sweep seeing it down: a crash loop, still billing
    return Clear(seen.key, mark, NEW_SESSION, _("a new session: {provider} started the instance at {started}, after "
                                                "the mark was made at {marked}").format(
        provider=seen.key[0], started=format_time(started, tz), marked=format_time(marked, tz)),
        {"status": inst.status.value, "session_started_at": iso(started), "marked_at": iso(marked)})


def not_applicable_clear(planned: Plan) -> Clear | None:
    """The open mark of a :attr:`Step.NOT_APPLICABLE` plan to clear (its action can no longer
    apply: the instance was stopped, or got guarded), else None."""
    if planned.step is not Step.NOT_APPLICABLE or planned.mark is None:
        return None
    row = planned.match.seen.row
    return Clear(planned.match.seen.key, planned.mark, NOT_APPLICABLE, planned.why or planned.step.value,
                 {"status": row.instance.status.value, "guard": row.guard.state.value})


def gone_clear(key: tuple[str, str], mark: PatrolDecision, reads: Sequence[Any], *, now: datetime,
               tz: Any = None) -> Clear | None:
    """The mark of an instance the sweep did not list, to clear when the account it was marked in
    (``account`` of the mark's evidence) was read successfully (the provider no longer holds
    it: released, terminated and removed, or moved away); None when that account could not be
    read, or was not asked (its provider no longer configured): nothing is known, the mark stays.

    Args:
        reads: the sweep's :class:`~costctl.fleet.model.AccountRead` of every account asked.
    """
    account = mark.evidence.get("account")
    if not any(r.ok and r.provider == key[0] and r.account == account for r in reads):
        return None
    return Clear(key, mark, GONE, _("{provider} no longer lists instance {instance} (account {account} read at "
                                    "{time})").format(provider=key[0], instance=key[1],
                                                      account=account or DEFAULT_ACCOUNT_WORD,
                                                      time=format_time(now, tz)),
                 {"account": account, "listed": False})


# ----------------------------------------------------------------------------- a provider's own release


@dataclass(frozen=True)
class ReleaseWarning:
    """A stopped instance its provider will release by itself soon (AutoDL: 15 days shut down).

    Attributes:
        seen: the instance.
        stopped_since: since when it is stopped; source ``provider`` or ``observations`` (then a
            lower bound: the release may come sooner).
        release_at: ``stopped_since`` + the provider's rule.
        key: the warning's decision key (once per stop).
        tz: the zone its times are shown in (None: UTC).
        now: when the warning was made (None: taken as before ``release_at``); at or past
            ``release_at`` the warning says the release is overdue, not coming.
    """

    seen: Seen
    stopped_since: datetime
    source: str
    release_at: datetime
    key: str = field(default="")
    tz: Any = None
    now: datetime | None = None

    @property
    def past(self) -> bool:
        """Whether the release date is reached already (the instance may be gone any moment)."""
        return self.now is not None and ensure_utc(self.now) >= self.release_at

    @property
    def reason(self) -> str:
        """One sentence for the decision and the notification."""
        shape = {"provider": self.seen.row.provider, "instance": self.seen.row.instance.id,
                 "at": format_time(self.release_at, self.tz), "since": format_time(self.stopped_since, self.tz),
                 "after": fmt_duration(self.release_at - self.stopped_since)}
        if self.past:
            assert self.now is not None
            shape["ago"] = fmt_duration(ensure_utc(self.now) - self.release_at)
            if self.source == "provider":
                return _("{provider} was due to release instance {instance} and its data at {at} ({ago} ago): it has "
                         "been shut down since {since} and {provider} releases an instance shut down for {after}; it "
                         "may be gone at any moment: start it or copy its data now").format(**shape)
            return _("{provider} was due to release instance {instance} and its data at {at} at the latest ({ago} "
                     "ago): the patrol has seen it shut down since {since} and {provider} releases an instance shut "
                     "down for {after}; it may be gone at any moment: start it or copy its data now").format(**shape)
        if self.source == "provider":
            return _("{provider} releases instance {instance} and its data at {at}: it has been shut down since "
                     "{since} and {provider} releases an instance shut down for {after}; start it or copy its data "
                     "before then").format(**shape)
        return _("{provider} releases instance {instance} and its data at {at} at the latest: the patrol has seen "
                 "it shut down since {since} and {provider} releases an instance shut down for {after}; start it "
                 "or copy its data before then").format(**shape)


def release_warning(seen: Seen, *, now: datetime, warning: timedelta | None, interval: timedelta,
                    tz: Any = None) -> ReleaseWarning | None:
    """The warning due for ``seen`` at ``now``: its provider releases stopped instances by
    itself (``release_after``), it is stopped, and the release is at most ``warning`` away (or
    past); None otherwise (``warning`` None: off)."""
    if warning is None or seen.release_after is None:
        return None
    found = stopped_since(seen, interval=interval)
    if found is None:
        return None
    since, source = found
    release_at = since + seen.release_after
    if ensure_utc(now) < release_at - warning:
        return None
    return ReleaseWarning(seen, since, source, release_at, key=f"release-warning:{iso(since)}", tz=tz,
                          now=ensure_utc(now))


def warned(history: Sequence[PatrolDecision], key: str) -> bool:
    """Whether the warning keyed ``key`` was recorded for the instance already."""
    return any(d.key == key for d in history)


__all__ = ["DEFAULT_ACCOUNT_WORD", "GONE", "IN_SESSION", "NEW_SESSION", "NOT_APPLICABLE", "NOT_STOPPABLE",
           "NO_LONGER_MATCHES", "FOLLOWS_NEW_SESSION", "IN_SESSION_WORDS", "Clear", "Match", "Plan", "ReleaseWarning", "Seen", "Step", "age_since", "due_at",
           "in_flight", "iso", "label_matches", "match", "open_mark", "plan", "release_warning", "scope_problem",
           "snoozed_until", "stopped_since", "to_clear", "under_way",
           "not_applicable_clear", "gone_clear", "new_session_clear",
           "warned"]
