"""The patrol's pure parts: each filter's rule and evidence, idle over a window from stored
observations (coverage, missing readings busy, never the GPU alone where the CPU is read), the
stopped-since rule, scope, what a match leads to (mark, wait, act, snoozed, held), the provider's
own release warning, the config's one-line errors, and the sweep schedule."""

from __future__ import annotations

import dataclasses

import threading
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from costctl.config import PatrolConfig, PatrolPolicyConfig, load_settings
from costctl.errors import ConfigError
from costctl.fleet.model import AccountRead, Guard, GuardState, row_of
from costctl.ledger.patrol_store import MARKED, Observation, PatrolDecision
from costctl.money import Money
from costctl.patrol.idle import idle_over
from costctl.patrol.model import Seen, Step, match, plan, release_warning, scope_problem, stopped_since
from costctl.patrol.schedule import Every
from costctl_providers.base import BillingMode, Instance, Status

T = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
FIVE = timedelta(minutes=5)


def inst(iid: str = "i-1", *, status: Status = Status.RUNNING, provider: str = "runpod", label: str | None = None,
         started: datetime | None = T - timedelta(hours=3), stopped: datetime | None = None, price: str = "0.5",
         currency: str = "USD") -> Instance:
    return Instance(provider=provider, id=iid, gpu="RTX 4090", gpu_raw="RTX 4090", gpu_count=1,
                    billing=BillingMode.ON_DEMAND, price_per_hour=Decimal(price), currency=currency, status=status,
                    started_at=started, stopped_at=stopped, label=label)


def seen(instance: Instance, *, account: str | None = None, observations=(), known: bool = False,
         guard: GuardState = GuardState.UNWATCHED, ledger: dict | None = None, gpu: bool = True, cpu: bool = True,
         release_after: timedelta | None = None) -> Seen:
    row = row_of(AccountRead(instance.provider, account, (instance,)), instance, None, now=T,
                 lag=timedelta(seconds=30))
    row = type(row)(row.provider, row.account, row.instance, row.uptime_s, row.provider_spend, ledger or {},
                    Guard(guard), row.stopped_s, row.stopped_spend)
    return Seen(row=row, known=known, observations=tuple(observations), gpu_readable=gpu, cpu_readable=cpu,
                release_after=release_after)


def policy(action: str = "stop", **filters) -> PatrolPolicyConfig:
    extra = {"allow_release": True} if action == "release" else {}
    return PatrolPolicyConfig(name="p", action=action, grace="10m", filters=filters, **extra)


def readings(n: int, gpu: float | None = 0.0, cpu: float | None = 1.0, *, end: datetime = T,
             status: str = "running") -> list[Observation]:
    return [Observation(end - (n - 1 - k) * FIVE, status, gpu, cpu) for k in range(n)]


# ----------------------------------------------------------------------------- idle over a window


def test_idle_needs_observations_that_cover_the_window():
    kw = dict(now=T, window=timedelta(minutes=30), interval=FIVE, min_gpu_utilization=5, min_cpu_utilization=10,
              gpu_readable=True, cpu_readable=True)
    assert idle_over(readings(7), **kw) is not None           # 11:30 .. 12:00: an anchor at the window's start
    assert idle_over(readings(6), **kw) is None               # 11:35 .. 12:00: the window is not covered
    gap = readings(7)
    del gap[3]                                                # a 10-minute gap is allowed (2 intervals) ...
    assert idle_over(gap, **kw) is not None
    del gap[3]                                                # ... a 15-minute one is not
    assert idle_over(gap, **kw) is None
    stale = readings(7, end=T - timedelta(minutes=11))        # the newest is more than two intervals old
    assert idle_over(stale, **kw) is None


@pytest.mark.parametrize("gpu, cpu, cpu_readable, idle", [
    (0.0, 1.0, True, True),
    (0.0, 35.0, True, False),      # GPU idle, CPU busy: never idle by the GPU alone where CPU is read
    (0.0, None, True, False),      # a missing CPU reading counts as busy
    (None, 1.0, True, False),      # a missing GPU reading counts as busy
    (0.0, None, False, True),      # an adapter that reads no CPU: the GPU decides (Vast)
    (7.0, None, False, False),
])
def test_each_readable_signal_must_be_idle_and_a_missing_reading_is_busy(gpu, cpu, cpu_readable, idle):
    obs = readings(7, gpu, cpu)
    obs[3] = Observation(obs[3].time, "running", gpu, cpu)
    found = idle_over(obs, now=T, window=timedelta(minutes=30), interval=FIVE, min_gpu_utilization=5,
                      min_cpu_utilization=10, gpu_readable=True, cpu_readable=cpu_readable)
    assert (found is not None) is idle


def test_no_readable_signal_is_never_idle_and_duplicate_times_are_skipped():
    obs = readings(7)
    assert idle_over(obs, now=T, window=timedelta(minutes=30), interval=FIVE, min_gpu_utilization=5,
                     min_cpu_utilization=10, gpu_readable=False, cpu_readable=False) is None
    doubled = sorted(obs + obs, key=lambda o: o.time)         # two patrols stored the same sweep
    assert idle_over(doubled, now=T, window=timedelta(minutes=30), interval=FIVE, min_gpu_utilization=5,
                     min_cpu_utilization=10, gpu_readable=True, cpu_readable=True) is not None


# ----------------------------------------------------------------------------- filters


def test_every_filter_must_hold_and_says_what_it_saw():
    s = seen(inst(label="exp-7"), account="team", observations=readings(7), ledger={"USD": Decimal("12.5")})
    p = policy(provider="runpod", account="team", label="exp-*", status="running", min_age="2h", guarded=False,
               idle="30m", spend_over="10", currency="usd")
    found = match(p, s, now=T, interval=FIVE)
    assert found is not None
    ev = found.evidence
    assert ev["label"] == "exp-7" and ev["age"]["age_s"] == 3 * 3600 and ev["guard"]["state"] == "unwatched"
    assert ev["idle"]["signals"] == ["gpu", "cpu"] and ev["spend"]["spent"] == "12.500000"
    assert ev["spend"]["provider"] == "1.500000" and ev["spend"]["ledger"] == "12.500000"
    assert found.reason.startswith("runpod instance i-1 matches patrol policy p: provider runpod; account team; label 'exp-7'; "
                                   "status running; 3h old (at least 2h); not guarded (unwatched); idle over 30m")
    assert "; spent $12.50 (over $10.00)" in found.reason   # money for people: the one formatter
    for wrong in (dict(provider="vastai"), dict(account="default"), dict(label="prod-*"), dict(status="stopped"),
                  dict(min_age="4h"), dict(guarded=True), dict(spend_over="20", currency="USD"),
                  dict(spend_over="1", currency="CNY")):
        assert match(policy(**wrong), s, now=T, interval=FIVE) is None, wrong


def test_an_unknown_guard_or_age_never_matches():
    assert match(policy(guarded=False), seen(inst(), guard=GuardState.UNKNOWN), now=T, interval=FIVE) is None
    assert match(policy(min_age="1m"), seen(inst(started=None)), now=T, interval=FIVE) is None


def test_stopped_since_from_the_provider_else_the_unbroken_observations():
    by_provider = seen(inst(status=Status.STOPPED, stopped=T - timedelta(days=4)))
    assert stopped_since(by_provider, interval=FIVE) == (T - timedelta(days=4), "provider")
    watched = readings(3, None, None, end=T - timedelta(hours=1), status="running") + \
        readings(13, None, None, status="stopped")
    assert stopped_since(seen(inst(status=Status.STOPPED), observations=watched), interval=FIVE) == (
        T - timedelta(hours=1), "observations")
    broken = readings(13, None, None, status="stopped")
    del broken[5:8]                                           # a gap of 20 minutes: only what follows counts
    assert stopped_since(seen(inst(status=Status.STOPPED), observations=broken), interval=FIVE)[0] == \
        broken[5].time
    assert stopped_since(seen(inst()), interval=FIVE) is None
    found = match(policy("release", stopped_for="72h"), by_provider, now=T, interval=FIVE)
    assert found is not None and found.evidence["stopped"]["source"] == "provider"
    assert match(policy("release", stopped_for="72h"), seen(inst(status=Status.STOPPED), observations=watched),
                 now=T, interval=FIVE) is None


# ----------------------------------------------------------------------------- scope and plan


def test_scope_known_or_labelled_unless_act_on_all():
    patrol = PatrolConfig(labels=["team-*"])
    assert scope_problem(seen(inst(), known=True), patrol) is None
    assert scope_problem(seen(inst(label="team-a")), patrol) is None
    assert "out of scope" in scope_problem(seen(inst(label="alice")), patrol)
    assert scope_problem(seen(inst(label="alice")), PatrolConfig(act_on="all")) is None


def _mark(at: datetime, **evidence) -> PatrolDecision:
    return PatrolDecision(id=7, time=at, policy="patrol:p", action="mark", outcome=MARKED, key="", evidence=evidence)


def test_a_match_is_marked_then_waits_then_acts_unless_snoozed():
    patrol = PatrolConfig(act_on="all")
    found = match(policy(status="running"), seen(inst()), now=T, interval=FIVE)
    flight = timedelta(minutes=25)
    assert plan(found, [], patrol, now=T, in_flight_horizon=flight).step is Step.MARK
    marked = [_mark(T - timedelta(minutes=5))]
    waiting = plan(found, marked, patrol, now=T, in_flight_horizon=flight)
    assert (waiting.step, waiting.due) == (Step.WAIT, T + timedelta(minutes=5))
    assert plan(found, marked, patrol, now=T + timedelta(minutes=5), in_flight_horizon=flight).step is Step.ACT
    snooze = PatrolDecision(id=9, time=T, policy="patrol", action="snooze", outcome="snoozed", key="",
                            evidence={"until": "2026-05-01T13:00:00Z"})
    held = plan(found, [snooze, *marked], patrol, now=T + timedelta(minutes=5), in_flight_horizon=flight)
    assert held.step is Step.SNOOZED and "snoozed until 2026-05-01 13:00:00+00:00" == held.why
    stop = PatrolDecision(id=8, time=T, policy="patrol:q", action="stop", outcome="stop requested", key="")
    assert plan(found, [stop], patrol, now=T, in_flight_horizon=flight).step is Step.HELD


def test_a_release_counts_its_grace_from_a_delivered_notification_and_needs_no_guard():
    patrol = PatrolConfig(act_on="all")
    s = seen(inst(status=Status.STOPPED, stopped=T - timedelta(days=4)))
    found = match(policy("release", stopped_for="72h"), s, now=T, interval=FIVE)
    not_told = plan(found, [_mark(T - timedelta(hours=1))], patrol, now=T, in_flight_horizon=FIVE)
    assert not_told.step is Step.HELD and not_told.due is None
    told = [_mark(T - timedelta(hours=1), notified_at="2026-05-01T11:55:00Z")]
    assert plan(found, told, patrol, now=T, in_flight_horizon=FIVE).step is Step.WAIT
    assert plan(found, told, patrol, now=T + timedelta(minutes=5), in_flight_horizon=FIVE).step is Step.ACT
    guarded = seen(inst(status=Status.STOPPED, stopped=T - timedelta(days=4)), guard=GuardState.NOT_STOPPING)
    found = match(policy("release", stopped_for="72h"), guarded, now=T, interval=FIVE)
    held = plan(found, told, patrol, now=T + timedelta(minutes=5), in_flight_horizon=FIVE)
    assert (held.step, held.mark.id) == (Step.NOT_APPLICABLE, 7)  # the sweep clears the mark


@pytest.mark.parametrize("guard", [GuardState.GUARDED, GuardState.NOT_STOPPING])
def test_a_guarded_or_watched_instance_is_never_marked_for_release(guard):
    """Issue 18: the release notice went out for an instance the act step then refused."""
    patrol = PatrolConfig(act_on="all")
    s = seen(inst(status=Status.STOPPED, stopped=T - timedelta(days=4)), guard=guard)
    found = match(policy("release", stopped_for="72h"), s, now=T, interval=FIVE)
    planned = plan(found, [], patrol, now=T, in_flight_horizon=FIVE)
    assert planned.step is Step.NOT_APPLICABLE and planned.mark is None
    assert f"its guard is {guard.value}" in planned.why


@pytest.mark.parametrize("status", [Status.STOPPED, Status.STOPPING, Status.TERMINATED])
def test_a_stop_never_marks_or_acts_on_an_instance_that_is_not_running(status):
    """Issue 18: a stopped instance was marked "will be stopped" and its stop "confirmed"."""
    patrol = PatrolConfig(act_on="all")
    found = match(policy(min_age="1h"), seen(inst(status=status)), now=T, interval=FIVE)
    assert found is not None
    fresh = plan(found, [], patrol, now=T, in_flight_horizon=FIVE)
    assert (fresh.step, fresh.why) == (Step.NOT_APPLICABLE, f"already {status.value}: nothing to stop")
    due = plan(found, [_mark(T - timedelta(hours=1))], patrol, now=T, in_flight_horizon=FIVE)
    assert (due.step, due.mark.id) == (Step.NOT_APPLICABLE, 7)
    running = match(policy(min_age="1h"), seen(inst()), now=T, interval=FIVE)
    assert plan(running, [], patrol, now=T, in_flight_horizon=FIVE).step is Step.MARK


@pytest.mark.parametrize("action", ["stop", "release"])
def test_an_unknown_guard_is_treated_as_guarded_nothing_marked(action):
    """Issue 18: with the (central) ledger unreadable, nobody can tell whether a watch guards it."""
    patrol = PatrolConfig(act_on="all")
    status = Status.STOPPED if action == "release" else Status.RUNNING
    s = seen(inst(status=status, stopped=T - timedelta(days=4)), guard=GuardState.UNKNOWN)
    filters = {"stopped_for": "72h"} if action == "release" else {"min_age": "1h"}
    found = match(policy(action, **filters), s, now=T, interval=FIVE)
    for history in ([], [_mark(T - timedelta(hours=1), notified_at="2026-05-01T10:00:00Z")]):
        held = plan(found, history, patrol, now=T, in_flight_horizon=FIVE)
        assert held.step is Step.HELD and held.mark is None and "unknown" in held.why


def test_a_notify_policy_marks_once_and_notifies_about_any_instance():
    found = match(policy("notify", status="running"), seen(inst(label="alice")), now=T, interval=FIVE)
    patrol = PatrolConfig()
    assert plan(found, [], patrol, now=T, in_flight_horizon=FIVE).step is Step.MARK
    assert plan(found, [_mark(T)], patrol, now=T, in_flight_horizon=FIVE).step is Step.NOTIFIED


def test_the_providers_own_release_is_warned_ahead():
    stopped = inst("pro-1", provider="autodl", status=Status.STOPPED, stopped=T - timedelta(days=14), currency="CNY")
    s = seen(stopped, release_after=timedelta(days=15))
    w = release_warning(s, now=T, warning=timedelta(hours=48), interval=FIVE)
    assert w is not None and w.release_at == T + timedelta(days=1) and w.key == "release-warning:2026-04-17T12:00:00Z"
    assert "autodl releases instance pro-1 and its data at 2026-05-02 12:00:00+00:00" in w.reason
    assert release_warning(s, now=T, warning=timedelta(hours=12), interval=FIVE) is None
    assert release_warning(s, now=T, warning=None, interval=FIVE) is None
    assert release_warning(seen(stopped), now=T, warning=timedelta(hours=48), interval=FIVE) is None



@pytest.mark.parametrize("language", ["en", "zh_CN"])
def test_a_release_date_already_past_is_worded_as_overdue(language):
    """Issue: an instance past AutoDL's release date was told "releases at <past date> ... before then"."""
    from costctl.i18n import in_language
    from costctl.patrol.messages import warning_message
    stopped = inst("pro-1", provider="autodl", status=Status.STOPPED, stopped=T - timedelta(days=16), currency="CNY")
    s = seen(stopped, release_after=timedelta(days=15))
    ahead = release_warning(seen(dataclasses.replace(stopped, stopped_at=T - timedelta(days=14)),
                                 release_after=timedelta(days=15)), now=T, warning=timedelta(hours=48), interval=FIVE)
    w = release_warning(s, now=T, warning=timedelta(hours=48), interval=FIVE)
    assert w is not None and w.past and w.release_at == T - timedelta(days=1) and ahead is not None and not ahead.past
    observed = dataclasses.replace(w, source="observations")
    with in_language(language):
        reason, seen_reason, coming = w.reason, observed.reason, ahead.reason
        title = warning_message(decision_id=1, reason=w.reason, provider="autodl", instance="pro-1", account=None,
                                host="h", at="x", when=T, past=True).title
    if language == "en":
        assert reason.startswith("autodl was due to release instance pro-1 and its data at 2026-04-30 12:00:00+00:00 "
                                 "(24h ago): it has been shut down since")
        assert reason.endswith("it may be gone at any moment: start it or copy its data now")
        assert "at the latest (24h ago)" in seen_reason and seen_reason.endswith("copy its data now")
        assert "before then" not in reason + seen_reason and coming.endswith("start it or copy its data before then")
        assert title == "autodl was due to release pro-1 and its data at x: it may be gone now"
    else:
        assert "原定于 2026-04-30 12:00:00+00:00（24h 前）释放" in reason and reason.endswith("请立即开机或拷出数据")
        assert "最迟原定于" in seen_reason and seen_reason.endswith("请立即开机或拷出数据")
        assert "在此之前" in coming and "在此之前" not in reason
        assert "可能随时已被释放" in title


# ----------------------------------------------------------------------------- config


@pytest.mark.parametrize("toml, says", [
    ('[[patrol.policies]]\nname = "x"\naction = "stop"\n', "patrol.policies.0.filters = None: set at least one filter"),
    ('[[patrol.policies]]\nname = "x"\naction = "release"\nfilters = {stopped_for = "72h"}\n',
     "patrol.policies.0.allow_release = False: action \"release\" destroys the instance's disk"),
    ('[[patrol.policies]]\nname = "x"\naction = "release"\nallow_release = true\nfilters = {status = "stopped"}\n',
     "patrol.policies.0.filters = {'status': 'stopped'}: action \"release\" needs filters.stopped_for"),
    ('[[patrol.policies]]\nname = "x"\naction = "kill"\nfilters = {status = "running"}\n',
     "patrol.policies.0.action = 'kill': expected 'notify', 'stop' or 'release'"),
    ('[[patrol.policies]]\nname = "X y"\naction = "stop"\nfilters = {status = "running"}\n',
     "patrol.policies.0.name = 'X y': expected 1 to 24 characters"),
    ('[[patrol.policies]]\nname = "x"\naction = "stop"\nfilters = {provider = "aws"}\n',
     "patrol.policies.0.filters.provider = 'aws': unknown provider 'aws'; expected one of autodl, runpod, sim, vastai"),
    ('[[patrol.policies]]\nname = "x"\naction = "stop"\nfilters = {idle = "30s"}\n',
     "patrol.policies.0.filters.idle = '30s': expected a window from 1m to 168h"),
    ('[[patrol.policies]]\nname = "x"\naction = "stop"\nfilters = {currency = "USD"}\n',
     "patrol.policies.0.filters.currency = 'USD': currency is the currency of spend_over"),
    ('[[patrol.policies]]\nname = "x"\naction = "stop"\nfilters = {status = "running", colour = "red"}\n',
     "unknown key 'patrol.policies.0.filters.colour'"),
    ('[[patrol.policies]]\nname = "x"\naction = "stop"\nfilters = {status = "running"}\n'
     '[[patrol.policies]]\nname = "x"\naction = "notify"\nfilters = {status = "running"}\n',
     "two policies are named 'x'"),
    ('[patrol]\ninterval = "1s"\n', "patrol.interval = '1s': expected an interval from 10s to 24h"),
])
def test_a_bad_policy_is_one_line_naming_the_key(tmp_path: Path, toml, says):
    path = tmp_path / "costctl.toml"
    path.write_text(toml)
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    assert says in info.value.message and "\n" not in info.value.message and info.value.exit_code == 2


def test_a_good_policy_loads():
    p = PatrolPolicyConfig(name="idle-1", action="stop", filters={"provider": "vastai", "idle": "1h"})
    assert p.filters.provider == ["vastai"] and p.filters.idle == timedelta(hours=1) and p.grace == timedelta(hours=1)
    assert p.decision_policy == "patrol:idle-1"


# ----------------------------------------------------------------------------- the schedule


def test_every_runs_at_once_then_on_its_interval_and_survives_a_failed_sweep():
    runs: list[int] = []
    errors: list[BaseException] = []
    done = threading.Event()

    def sweep() -> None:
        runs.append(len(runs))
        if len(runs) == 2:
            raise RuntimeError("provider down")
        if len(runs) == 3:
            every.stop()
            done.set()

    every = Every(timedelta(milliseconds=50), sweep, on_error=errors.append, handle_signals=False)
    thread = threading.Thread(target=every.run, daemon=True)
    thread.start()
    assert done.wait(30)
    thread.join(30)
    assert not thread.is_alive() and runs[:3] == [0, 1, 2] and [str(e) for e in errors] == ["provider down"]
    job_defaults = every.scheduler._job_defaults
    assert (job_defaults["coalesce"], job_defaults["max_instances"]) == (True, 1)


@pytest.mark.parametrize("age, action, step", [
    (timedelta(seconds=35), "stop", Step.HELD),       # just past the guard lag: maybe a network outage
    (timedelta(minutes=14), "release", Step.HELD),
    (timedelta(minutes=15), "stop", Step.MARK),       # STALE_HOLD reached: the watch is taken for dead
    (timedelta(hours=3), "stop", Step.MARK),
])
def test_a_stale_heartbeat_holds_a_stop_or_release_until_it_is_stale_hold_old(age, action, step):
    """Re-trial finding: a watch cut off from the team's central ledger for ~35 s read "stale" and a
    2-second grace let a patrol stop its (alive) colleague's instance. A stale heartbeat younger
    than STALE_HOLD holds without a mark; older, the instance is unguarded as before."""
    from costctl.fleet.model import Guard as G
    from costctl.patrol.model import STALE_HOLD

    assert STALE_HOLD == timedelta(minutes=15)
    status = Status.STOPPED if action == "release" else Status.RUNNING
    s = seen(inst(status=status, stopped=T - timedelta(days=30) if action == "release" else None),
             guard=GuardState.STALE)
    row = s.row
    row = type(row)(row.provider, row.account, row.instance, row.uptime_s, row.provider_spend, row.ledger_spend,
                    G(GuardState.STALE, run_id="r-1", heartbeat_age=age), row.stopped_s, row.stopped_spend)
    s = Seen(row=row, known=True, observations=(), gpu_readable=True, cpu_readable=True, release_after=None)
    p = policy(action, guarded=False) if action == "stop" else policy("release", stopped_for="72h")
    found = match(p, s, now=T, interval=FIVE)
    assert found is not None
    planned = plan(found, [], PatrolConfig(act_on="all"), now=T, in_flight_horizon=FIVE)
    assert planned.step is step, planned.why
    if step is Step.HELD:
        assert "may be alive behind a network outage" in planned.why
