"""``costctl patrol`` against the local fake provider servers (real HTTP on 127.0.0.1) for all
three adapters and the simulated provider, a real SQLite ledger, a local webhook for the
notifications (Apprise ``json://`` through the real sender child) and a simulated clock that
the patrol, the providers and the stops share.

The fleet holds one instance for each policy to find and several it must not:

* ``idle-unguarded`` (stop): Vast 312, idle by Vast's GPU readings over 30 minutes of the
  patrol's observations, known to this ledger (a watch ran on it and ended); Vast 314 is idle
  too but out of scope (never watched, a label no ``[patrol] labels`` pattern takes); RunPod's
  pod 3 reads an idle GPU but a busy CPU (never idle by the GPU alone); the sim's own instance
  reports no utilization (missing readings are busy);
* ``old-disks`` (release): the simulated ``sim-scratch``, stopped nine days ago; Vast 313 is
  stopped too but only for as long as the patrol has seen it;
* ``spend-cap`` (stop): the team account's Vast 700, over 100 USD by its provider's figures;
* and AutoDL's Pro instance, shut down 14 days ago: AutoDL releases it at 15 days, so the patrol
  warns.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
import sqlalchemy as sa

from costctl.cli import patrol as patrol_cli
from costctl.cli import snooze as snooze_cli
from costctl.clock import SimClock
from costctl.ledger import Ledger
from costctl.paths import default_database_url
from costctl_providers.sim import SimProvider
from tests.fakes.autodl import PRO, FakeAutoDL
from tests.fakes.runpod import FakeRunPod
from tests.fakes.http import Reply
from tests.fakes.vastai import API_KEY as VAST_KEY, FakeVast
from tests.fakes.webhook import FakeWebhook
from tests.fleet_world import NOW, SECRETS as WORLD_SECRETS, TEAM_KEY, fakes, isolate, providers_toml, run_cli

HOOK_TOKEN = "hook-secret-5f1e"
SECRETS = (*WORLD_SECRETS, HOOK_TOKEN)
VAST_ROUTE = "/api/v0/instances/{id}/"

POLICIES = '''
[[patrol.policies]]
name = "idle-unguarded"
action = "stop"
grace = "10m"
filters = {status = "running", guarded = false, idle = "30m"}

[[patrol.policies]]
name = "old-disks"
action = "release"
allow_release = true
grace = "10m"
filters = {provider = ["sim", "vastai", "runpod"], stopped_for = "72h"}

[[patrol.policies]]
name = "spend-cap"
action = "stop"
grace = "10m"
filters = {account = "team", status = "running", spend_over = "100", currency = "USD"}
'''


@dataclass
class Patrol:
    """The fakes, the webhook, the clock, the data dir and the config of one test."""

    vast: FakeVast
    runpod: FakeRunPod
    autodl: FakeAutoDL
    hook: FakeWebhook
    clock: SimClock
    data: Path
    config: Path

    def ledger(self) -> Ledger:
        return Ledger.open(default_database_url(self.data))

    def sim(self, at: datetime | None = None) -> SimProvider:
        return SimProvider({}, data_dir=self.data, clock=SimClock(at or self.clock.now()))

    def write_config(self, *, policies: str = POLICIES, notify: bool = True, **extra_tables: str) -> None:
        text = (providers_toml(self.vast, self.runpod, self.autodl)
                + '[patrol]\ninterval = "5m"\nlabels = ["team-*"]\n\n'
                '[stop]\npoll_interval = "5s"\nresend_interval = "30s"\ndeadline = "5m"\n\n')
        if notify:
            text += f'[notify]\nurls = ["{self.hook.json_url(HOOK_TOKEN)}"]\ntimeout = "20s"\n\n'
        for name, table in extra_tables.items():
            text += f"[{name}]\n{table}\n\n"
        self.config.write_text(text + policies)


@pytest.fixture
def patrol(tmp_path, monkeypatch) -> Iterator[Patrol]:
    data, work = isolate(tmp_path, monkeypatch)
    clock = SimClock(NOW)
    monkeypatch.setattr(patrol_cli, "clock", lambda: clock)
    monkeypatch.setattr(snooze_cli, "clock", lambda: clock)
    shut = (NOW - timedelta(days=14)).isoformat()
    with fakes() as (vast, runpod, autodl), FakeWebhook() as hook:
        vast.add(312, gpu_util=0.0)                                                  # idle, known
        vast.add(313, actual="stopped", intended="stopped", disk_hour=0.0035)       # stopped: since when?
        vast.add(314, gpu_util=0.0, label="someone-else")                            # idle, out of scope
        vast.add(700, owner=TEAM_KEY, num_gpus=2, dph_total=0.9, gpu_util=87.0, label="team-sweep")  # over cap
        runpod.add("pod000000001", gpus=2, gpu_util=[1, 96], cpu_percent=35)        # busy GPU
        runpod.add("pod000000003", gpu_util=[0], cpu_percent=35)                     # idle GPU, busy CPU
        autodl.add_pro("pro-76419909953e", "shutdown", stopped_at={"Time": shut, "Valid": True})
        p = Patrol(vast, runpod, autodl, hook, clock, data, work / "costctl.toml")
        p.write_config()
        sim = p.sim(NOW - timedelta(days=10))
        sim.create_instance("RTX 4090", instance_id="sim-scratch", label="team-scratch")
        p.sim(NOW - timedelta(days=9)).stop_instance("sim-scratch", wait=False)
        with p.ledger() as ledger:  # a watch of this ledger ran on Vast 312, and ended
            pk = ledger.ensure_instance("vastai", "312", gpu="RTX 4090", gpu_count=1, billing="on-demand",
                                        price_per_hour=Decimal("0.4215"), currency="USD")
            run = ledger.start_run(pk, started_at=NOW - timedelta(days=2), command=["python", "train.py"],
                                   log_path=None, host="gpu-box", pid=4242)
            ledger.accrue(run, NOW - timedelta(days=1), Decimal("0.4215"), "USD")
            ledger.finish_run(run, ended_at=NOW - timedelta(days=1), exit_code=0, status="finished")
        yield p


def run(capsys, *argv: str) -> tuple[int, str, str]:
    return run_cli(capsys, argv, SECRETS)


def sweep(capsys, *flags: str) -> tuple[int, dict, str]:
    code, out, err = run(capsys, "patrol", "--format", "json", *flags)
    return code, json.loads(out), err


def matches(report: dict) -> dict[str, dict[str, str]]:
    """``{policy: {instance id: step}}``."""
    return {p["name"]: {m["id"]: m["step"] for m in p["matches"]} for p in report["policies"]}


def observe(p: Patrol, capsys, minutes: int) -> dict:
    """Dry runs every 5 minutes for ``minutes`` (the clock ends ``minutes`` later); the last report."""
    report: dict = {}
    for step in range(minutes // 5 + 1):
        if step:
            p.clock.advance(300)
        code, report, err = sweep(capsys)
        assert code == 0, err
    return report


def changes(p: Patrol) -> dict[str, int]:
    """Every request that could change an instance, per fake."""
    return {
        "vast PUT": p.vast.server.count("PUT", VAST_ROUTE),
        "vast DELETE": p.vast.server.count("DELETE", VAST_ROUTE),
        "runpod": len(p.runpod.requests_for("podStop")) + len(p.runpod.requests_for("podTerminate")),
        "autodl": p.autodl.server.count("POST", f"{PRO}/power_off") + p.autodl.server.count("POST", f"{PRO}/release"),
    }


def table(p: Patrol, sql: str) -> list[tuple]:
    with p.ledger() as ledger, ledger.engine.connect() as conn:
        return [tuple(r) for r in conn.execute(sa.text(sql))]


NOTHING = {"vast PUT": 0, "vast DELETE": 0, "runpod": 0, "autodl": 0}


def test_a_dry_run_names_exactly_what_each_policy_matches_and_changes_nothing(patrol, capsys):
    report = observe(patrol, capsys, 30)
    assert report["mode"] == "dry-run" and report["as_of"] == "2026-05-01T12:30:00Z"
    assert matches(report) == {
        "idle-unguarded": {"312": "mark", "314": "out-of-scope"},
        "old-disks": {"sim-scratch": "mark"},
        "spend-cap": {"700": "mark"},
    }
    by = {m["id"]: m for p in report["policies"] for m in p["matches"]}
    idle = by["312"]["evidence"]["idle"]
    assert idle["signals"] == ["gpu"] and idle["samples"] == 7 and idle["idle_since"] == "2026-05-01T12:00:00Z"
    assert by["312"]["evidence"]["guard"]["state"] == "unwatched"
    assert "would mark and notify; would stop at 2026-05-01 12:40:00" in by["312"]["done"]
    assert "out of scope" in by["314"]["done"]
    stopped = by["sim-scratch"]["evidence"]["stopped"]
    assert (stopped["source"], stopped["since"]) == ("provider", "2026-04-22T12:00:00Z")
    assert "would release 10m after the notification is delivered" in by["sim-scratch"]["done"]
    spend = by["700"]["evidence"]["spend"]
    assert spend["currency"] == "USD" and Decimal(spend["spent"]) > 100 and spend["ledger"] is None
    [warning] = report["warnings"]
    assert (warning["provider"], warning["id"], warning["release_at"]) == (
        "autodl", "pro-76419909953e", "2026-05-02T12:00:00Z")
    assert warning["done"] == "would warn" and any("Pro instances" in n for n in report["notes"])

    # nothing changed: no stop or release reached a provider, the ledger holds only the observations
    assert changes(patrol) == NOTHING
    assert patrol.sim().get_instance("sim-scratch").status.value == "stopped"
    assert table(patrol, "SELECT COUNT(*) FROM decisions") == [(0,)]
    assert table(patrol, "SELECT COUNT(*) FROM stop_events") == [(0,)]
    assert table(patrol, "SELECT provider, provider_instance_id FROM instances") == [("vastai", "312")]
    assert table(patrol, "SELECT COUNT(*) FROM runs") == [(1,)]
    assert report["instances"] == report["observations"] == 9          # one reading per listed instance
    assert table(patrol, "SELECT COUNT(*) FROM patrol_observations") == [(7 * 9,)]
    assert patrol.hook.messages == []


def test_execute_notifies_first_acts_after_the_grace_and_its_stops_are_confirmed(patrol, capsys):
    observe(patrol, capsys, 30)

    code, report, err = sweep(capsys, "--execute")           # 12:30: mark and notify, nothing stopped
    assert code == 0, err
    assert matches(report) == {"idle-unguarded": {"312": "mark", "314": "out-of-scope"},
                               "old-disks": {"sim-scratch": "mark"}, "spend-cap": {"700": "mark"}}
    assert changes(patrol) == NOTHING
    titles = patrol.hook.titles()
    assert sorted(titles) == sorted([  # the three marks in one digest, a line each
        "3 instances marked by the patrol: they will be stopped or released unless snoozed",
        "autodl will release pro-76419909953e and its data at 2026-05-02 12:00:00+00:00",
    ])
    [digest] = [m["message"] for m in patrol.hook.messages if m["title"].startswith("3 instances marked")]
    assert digest.splitlines()[:3] == [
        "- vastai instance 312 (account default): policy idle-unguarded: stopped at 2026-05-01 12:40:00+00:00",
        "- sim instance sim-scratch (account default): policy old-disks: released 10m after this notice",
        "- vastai instance 700 (account team): policy spend-cap: stopped at 2026-05-01 12:40:00+00:00"]
    marks = table(patrol, "SELECT policy, action, outcome FROM decisions WHERE run_id IS NULL ORDER BY id")
    assert marks == [("patrol:idle-unguarded", "mark", "marked"), ("patrol:old-disks", "mark", "marked"),
                     ("patrol:spend-cap", "mark", "marked"), ("patrol", "warn", "warned")]
    [(evidence,)] = table(patrol, "SELECT evidence FROM decisions WHERE policy = 'patrol:old-disks'")
    assert json.loads(evidence)["notified_at"] == "2026-05-01T12:30:00Z"

    patrol.clock.advance(300)                                # 12:35: within the grace
    code, report, _err = sweep(capsys, "--execute")
    assert {m["step"] for p in report["policies"] for m in p["matches"]} == {"wait", "out-of-scope"}
    assert changes(patrol) == NOTHING and len(patrol.hook.messages) == 2

    patrol.clock.advance(300)                                # 12:40: the grace is over: act
    code, report, err = sweep(capsys, "--execute")
    assert code == 0, err
    done = {m["id"]: (m["step"], m["state"]) for p in report["policies"] for m in p["matches"]}
    assert done == {"312": ("act", "confirmed"), "314": ("out-of-scope", None), "sim-scratch": ("act", "confirmed"),
                    "700": ("act", "confirmed")}
    # the providers did it, once each, and their own status confirms it
    assert sorted(t for t in patrol.vast.transitions if t[1] == "intended_status") == [  # side by side: any order
        ("312", "intended_status", "running", "stopped"), ("700", "intended_status", "running", "stopped")]
    assert patrol.vast.instances["312"]["actual_status"] == "stopped"
    assert patrol.sim().get_instance("sim-scratch").status.value == "terminated"
    assert changes(patrol)["vast DELETE"] == 0 and changes(patrol)["runpod"] == 0
    actions = table(patrol, "SELECT d.policy, d.action, e.state FROM decisions d JOIN stop_events e "
                            "ON e.decision_id = d.id WHERE e.state = 'confirmed' ORDER BY d.id")
    assert actions == [("patrol:idle-unguarded", "stop", "confirmed"), ("patrol:old-disks", "release", "confirmed"),
                       ("patrol:spend-cap", "stop", "confirmed")]
    assert table(patrol, "SELECT COUNT(*) FROM stop_events WHERE run_id IS NOT NULL") == [(0,)]
    outcomes = dict(table(patrol, "SELECT policy, outcome FROM decisions WHERE action IN ('stop', 'release')"))
    assert outcomes["patrol:idle-unguarded"].startswith("stop confirmed: vastai reports instance 312 stopped after 1 stop request")
    [(evidence,)] = table(patrol, "SELECT evidence FROM decisions WHERE action = 'stop' AND policy = "
                                  "'patrol:idle-unguarded'")
    ev = json.loads(evidence)
    assert ev["idle"]["signals"] == ["gpu"] and ev["stop_route"] == "API (credential accepted)"
    assert ev["stop"]["state"] == "confirmed" and ev["mark"] and ev["marked_at"] == "2026-05-01T12:30:00Z"
    assert table(patrol, "SELECT outcome FROM decisions WHERE action = 'mark' ORDER BY id") == [
        ("acted",), ("acted",), ("acted",)]
    from costctl.ledger import live  # the dashboard's decisions list shows the patrol's, with their instance

    with patrol.ledger() as ledger, ledger.engine.connect() as conn:
        shown = [(d.run_id, d.instance_id, d.action, d.stop_state) for d in live.recent_decisions(conn)]
    assert (None, "312", "stop", "confirmed") in shown and (None, "sim-scratch", "release", "confirmed") in shown
    titles = patrol.hook.titles()[2:]
    assert sorted(titles) == sorted(["312 was stopped by patrol policy idle-unguarded",
                                     "sim-scratch was released by patrol policy old-disks",
                                     "700 was stopped by patrol policy spend-cap"])

    patrol.clock.advance(300)                                # 12:45: nothing matches any more
    code, report, _err = sweep(capsys, "--execute")
    assert matches(report) == {"idle-unguarded": {"314": "out-of-scope"}, "old-disks": {}, "spend-cap": {}}
    assert len(patrol.hook.messages) == 5


def test_a_snoozed_instance_waits_and_a_mark_that_no_longer_matches_is_cleared(patrol, capsys):
    observe(patrol, capsys, 30)
    sweep(capsys, "--execute")                                # 12:30: marked
    code, out, _err = run(capsys, "snooze", "--instance", "vastai:312", "1h")
    assert code == 0 and "patrol actions on vastai:312 held until 2026-05-01 13:30:00+00:00" in out
    for _ in range(2):
        patrol.clock.advance(300)
        code, report, _err = sweep(capsys, "--execute")     # 12:40: due, but snoozed
    by = {m["id"]: m for p in report["policies"] for m in p["matches"]}
    assert by["312"]["step"] == "snoozed" and "snoozed until 2026-05-01 13:30:00" in by["312"]["done"]
    assert patrol.vast.instances["312"]["actual_status"] == "running"
    code, out, _err = run(capsys, "snooze", "--instance", "vastai:312", "status")
    assert "held until 2026-05-01 13:30:00" in out

    patrol.vast.instances["312"]["gpu_util"] = 55.0          # busy again: the mark is cleared
    patrol.clock.advance(300)
    code, report, _err = sweep(capsys, "--execute")
    [idle] = [p for p in report["policies"] if p["name"] == "idle-unguarded"]
    assert [(c["id"], c["why"], c["done"]) for c in idle["cleared"]] == [(
        "312", "no-longer-matches", f"mark {idle['cleared'][0]['mark']} cleared: no longer matches (status running, "
                                    "guard unwatched)")]
    [(outcome, evidence)] = table(patrol, "SELECT outcome, evidence FROM decisions WHERE policy = "
                                          "'patrol:idle-unguarded' AND action = 'mark'")
    assert outcome == "cleared"
    ev = json.loads(evidence)
    assert (ev["cleared_at"], ev["cleared_why"], ev["cleared_seen"]) == (
        "2026-05-01T12:45:00Z", "no-longer-matches", {"status": "running", "guard": "unwatched"})
    assert patrol.vast.server.count("PUT", VAST_ROUTE) == 1 and patrol.vast.instances["700"]["intended_status"] \
        == "stopped"  # the team's instance was not snoozed: it was stopped at 12:40


def test_a_release_waits_for_a_delivered_notification(patrol, capsys):
    patrol.write_config(notify=False)
    observe(patrol, capsys, 30)
    sweep(capsys, "--execute")
    for _ in range(3):
        patrol.clock.advance(300)
        code, report, _err = sweep(capsys, "--execute")
    by = {m["id"]: m for p in report["policies"] for m in p["matches"]}
    assert by["sim-scratch"]["step"] == "held" and "notification delivered first" in by["sim-scratch"]["done"]
    assert patrol.sim().get_instance("sim-scratch").status.value == "stopped"
    assert patrol.vast.instances["312"]["intended_status"] == "stopped"


def test_no_policies_observes_and_says_so_and_a_bad_option_is_one_line(patrol, capsys):
    patrol.write_config(policies="")
    code, report, err = sweep(capsys)
    assert code == 0 and report["policies"] == [] and "no [[patrol.policies]] configured" in err
    code, _out, err = run(capsys, "patrol", "--every", "1s")
    assert code == 2 and "--every '1s': expected an interval from 10s to 24h" in err and err.count("\n") == 1
    code, _out, err = run(capsys, "patrol", "--execute", "--dry-run")
    assert code == 2 and "contradict" in err


def test_the_table_names_each_policy_s_matches(patrol, capsys):
    observe(patrol, capsys, 25)
    patrol.clock.advance(300)
    code, out, _err = run(capsys, "patrol")
    assert code == 0
    assert "policy idle-unguarded (stop, grace 10m): 2 matching instance(s)" in out
    assert "policy spend-cap (stop, grace 10m): 1 matching instance(s)" in out
    assert "warning: autodl releases instance pro-76419909953e and its data at 2026-05-02 12:00:00+00:00" in out
    assert "dry run: nothing was changed but the 9 observation(s) stored" in out


def test_in_chinese(patrol, capsys):
    from costctl import i18n

    before = i18n.language()
    patrol.write_config(ui='language = "zh_CN"')
    try:
        observe(patrol, capsys, 25)
        patrol.clock.advance(300)
        code, out, _err = run(capsys, "patrol")
    finally:
        i18n.set_language(before)
    assert code == 0
    assert "策略 idle-unguarded（stop，宽限期 10m）：2 台实例符合" in out
    assert "按巡检的 7 条观测，30m 内空闲（gpu）" in out and "演练：除保存 9 条观测外未做任何改动" in out


def test_a_notify_policy_tells_once_per_episode_about_any_instance(patrol, capsys):
    patrol.write_config(policies='''
[[patrol.policies]]
name = "busy-pods"
action = "notify"
filters = {provider = "runpod", status = "running"}
''')
    code, report, err = sweep(capsys, "--execute")
    assert code == 0, err
    assert matches(report) == {"busy-pods": {"pod000000001": "mark", "pod000000003": "mark"}}
    assert sorted(patrol.hook.titles()) == ["2 instances match a patrol policy",
                                           "autodl will release pro-76419909953e and its data at 2026-05-02 "
                                           "12:00:00+00:00"]
    patrol.clock.advance(300)
    code, report, _err = sweep(capsys, "--execute")
    assert matches(report) == {"busy-pods": {"pod000000001": "notified", "pod000000003": "notified"}}
    assert len(patrol.hook.messages) == 2 and changes(patrol) == NOTHING  # told once; the warning once too


def test_an_unreadable_account_s_error_never_shows_any_account_s_key(patrol, capsys):
    # a 200 that says it failed, echoing both Vast accounts' keys: each account's line shows neither
    from tests.test_fleet_cli import LIST, _leaks

    msg = f"keys {VAST_KEY} and {TEAM_KEY} are not members of the same team"
    for flags in (("--format", "json"), ()):
        patrol.vast.server.inject("GET", LIST, *[Reply.json({"success": False, "msg": msg})] * 2)
        code, out, err = run(capsys, "patrol", *flags)
        assert "are not members of the same team" in out + err and _leaks(out + err) == [], flags
