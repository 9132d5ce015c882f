"""A patrol killed while it drove a stop leaves the stop's decision ``stop requested``: the next
sweep takes it over when the stop's owner is provably gone (its process no longer runs on this
host, or another host's heartbeat is old) — the same decision, the same verified stop, its
evidence saying from whom and why — and leaves a live owner's stop alone. The fleet of
tests/test_patrol_cli.py (its simulated clock, real HTTP fakes, a real SQLite ledger); the dead
owner is a real child process that has exited."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from datetime import timedelta

import pytest

from costctl.ledger import patrol_store as store
from costctl.patrol.model import iso
from costctl.patrol.owner import process_start, this_owner
from costctl.records import Action, Decision
from tests.test_patrol_marks import idle_policy, marked, stops_of_312
from tests.test_patrol_cli import patrol, run, sweep, table  # noqa: F401 - the fixture


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert process_start(child.pid) is None
    return child.pid


def owners(now) -> dict:
    host = socket.gethostname()
    return {
        "dead-pid": {"host": host, "pid": dead_pid(), "started": 1.0, "heartbeat": iso(now)},
        "reused-pid": {"host": host, "pid": os.getpid(), "started": 1.0, "heartbeat": iso(now)},
        "old-heartbeat": {"host": "other-box", "pid": 4711, "started": 1.0, "heartbeat": iso(now)},
        "live": this_owner(host, now),
        "fresh-heartbeat": {"host": "other-box", "pid": 4711, "started": 1.0,
                            "heartbeat": iso(now + timedelta(minutes=4))},
    }


def claim_left_behind(p, mark_id: int, owner: dict) -> int:
    """What a patrol killed right after its claim leaves: the mark acted on, a stop decision
    ``stop requested`` owned by ``owner``, and no stop request sent."""
    now = p.clock.now()
    decision = Decision(time=now, policy="patrol:idle-unguarded", action=Action.STOP, reason="idle",
                        evidence={"mark": mark_id, "owner": owner})
    with p.ledger() as ledger:
        got = store.claim(ledger, ("vastai", "312"), store.InstanceFacts("RTX 4090", 1, "on-demand", None, "USD"),
                          decision, outcome="stop requested", check=lambda past: None,
                          settle=(mark_id, store.ACTED, {"acted_at": iso(now)}))
    assert got.decision_id is not None
    return got.decision_id


@pytest.mark.parametrize("who, taken", [("dead-pid", True), ("reused-pid", True), ("old-heartbeat", True),
                                        ("live", False), ("fresh-heartbeat", False)])
def test_a_stop_whose_patrol_is_gone_is_taken_over_and_a_live_one_s_is_left_alone(patrol, capsys, who, taken):
    mark_id = marked(patrol, capsys)                                    # 12:30, due 12:40
    patrol.clock.advance(600)                                           # 12:40: claimed, then killed
    owner = owners(patrol.clock.now())[who]
    stop_id = claim_left_behind(patrol, mark_id, owner)
    patrol.clock.advance(300)                                           # 12:45: the next sweep
    told = len(patrol.hook.messages)
    code, report, err = sweep(capsys, "--execute")
    assert code == 0, err
    found = [m for m in idle_policy(report)["matches"] if m["id"] == "312"]
    [(outcome, evidence)] = table(patrol, f"SELECT outcome, evidence FROM decisions WHERE id = {stop_id}")
    evidence = json.loads(evidence)
    stops = table(patrol, "SELECT count(*) FROM decisions d JOIN instances i ON i.id = d.instance_pk "
                         "WHERE d.action = 'stop' AND i.provider_instance_id = '312'")
    assert stops == [(1,)]                                              # never a second decision
    if not taken:
        assert all(m["step"] == "held" and "still under way" in m["why"] for m in found)
        assert outcome == "stop requested" and stops_of_312(patrol) == [] and "resumed" not in evidence
        return
    [m] = found
    assert (m["step"], m["state"], m["decision"]) == ("resume", "confirmed", stop_id)
    assert outcome.startswith("stop confirmed") and len(stops_of_312(patrol)) == 1
    [resumed] = evidence["resumed"]
    assert resumed["from"] == owner and resumed["at"] == "2026-05-01T12:45:00Z" and resumed["why"] == m["why"]
    assert evidence["owner"]["pid"] == os.getpid() and evidence["owner"]["host"] == socket.gethostname()
    assert f"resuming decision {stop_id} (stop): its patrol is gone: " in err
    assert any("312 was stopped by patrol policy idle-unguarded" in t for t in patrol.hook.titles()[told:])


def test_a_taken_over_stop_already_stopped_is_confirmed_without_a_request(patrol, capsys):
    mark_id = marked(patrol, capsys)
    patrol.clock.advance(600)
    stop_id = claim_left_behind(patrol, mark_id, owners(patrol.clock.now())["dead-pid"])
    patrol.vast.instances["312"].update(actual_status="stopped", intended_status="stopped", cur_state="stopped")
    patrol.clock.advance(300)
    code, report, err = sweep(capsys, "--execute")
    assert code == 0, err
    [m] = [m for m in idle_policy(report)["matches"] if m["id"] == "312"]
    assert (m["step"], m["state"], m["decision"]) == ("resume", "confirmed", stop_id)
    [(outcome,)] = table(patrol, f"SELECT outcome FROM decisions WHERE id = {stop_id}")
    assert "needed no further request" in outcome
    assert stops_of_312(patrol) == []


def test_a_dry_run_names_the_take_over_and_changes_nothing(patrol, capsys):
    mark_id = marked(patrol, capsys)
    patrol.clock.advance(600)
    stop_id = claim_left_behind(patrol, mark_id, owners(patrol.clock.now())["old-heartbeat"])
    patrol.clock.advance(300)
    code, report, err = sweep(capsys)
    [m] = [m for m in idle_policy(report)["matches"] if m["id"] == "312"]
    assert m["step"] == "resume" and m["done"].startswith(f"would take over decision {stop_id}: the patrol on "
                                                          "other-box (process 4711) last stepped it at")
    assert table(patrol, f"SELECT outcome FROM decisions WHERE id = {stop_id}") == [("stop requested",)]
    assert stops_of_312(patrol) == []


def test_the_driving_patrol_refreshes_its_heartbeat_while_it_drives_the_stop(patrol, capsys):
    """Vast answers success and stops nothing: the stop is driven to its deadline (5m); its
    owner's heartbeat follows the steps (so another host never takes over a live patrol's stop)."""
    marked(patrol, capsys)
    patrol.vast.ignore_stops = True
    patrol.clock.advance(600)                                           # 12:40: acts, fails at 12:45
    code, report, err = sweep(capsys, "--execute")
    [(evidence,)] = table(patrol, "SELECT d.evidence FROM decisions d JOIN instances i ON i.id = d.instance_pk "
                                  "WHERE d.action = 'stop' AND i.provider_instance_id = '312'")
    owner = json.loads(evidence)["owner"]
    assert owner["pid"] == os.getpid() and owner["host"] == socket.gethostname()
    assert "2026-05-01T12:44:00Z" <= owner["heartbeat"] < "2026-05-01T12:45:01Z"


def test_a_patrol_that_slept_through_a_take_over_drives_the_stop_no_further(patrol, capsys, monkeypatch):
    """A patrol frozen (SIGSTOP, a hung host) while another took its stop over: when it wakes it
    sends no further stop request, never writes itself back as the owner, records no end and
    tells nobody; the new owner's stop is the only one (a trial found two drivers, two
    "confirmed" ends and two "stopped" notices)."""
    marked(patrol, capsys)
    patrol.vast.ignore_stops = True
    patrol.clock.advance(600)                                           # 12:40: acts
    other = {"host": "other-box", "pid": 4711, "started": 1.0, "heartbeat": iso(patrol.clock.now())}
    moved = patrol.clock.set

    def set_and_take_over(when):                                        # at 12:41 another patrol takes over
        moved(when)
        if when >= patrol.clock.now().replace(hour=12, minute=41) and not taken:
            with patrol.ledger() as ledger, ledger.engine.begin() as conn:
                import sqlalchemy as sa
                (stop_id, evidence), = conn.execute(sa.text(
                    "SELECT d.id, d.evidence FROM decisions d JOIN instances i ON i.id = d.instance_pk "
                    "WHERE d.action = 'stop' AND i.provider_instance_id = '312'")).all()
                ev = json.loads(evidence) if isinstance(evidence, str) else dict(evidence)
                conn.execute(sa.text("UPDATE decisions SET evidence = :ev WHERE id = :id"),
                             {"ev": json.dumps({**ev, "owner": other}), "id": stop_id})
            taken.append(len(stops_of_312(patrol)))

    taken: list[int] = []
    monkeypatch.setattr(patrol.clock, "set", set_and_take_over)
    told = len(patrol.hook.messages)
    code, out, err = run(capsys, "patrol", "--format", "json", "--execute")
    assert out, err
    report = json.loads(out)
    assert taken, "the take-over never happened in the test"
    assert len(stops_of_312(patrol)) == taken[0]                        # not one request after it
    [(outcome, evidence)] = table(patrol, "SELECT d.outcome, d.evidence FROM decisions d JOIN instances i ON "
                                          "i.id = d.instance_pk WHERE d.action = 'stop' AND i.provider_instance_id = '312'")
    assert outcome == "stop requested"                                  # the new owner records the end
    assert json.loads(evidence)["owner"] == other                       # never written back
    assert "taken over by another patrol" in err + json.dumps(report)
    titles = [str(m.get("title", "")) for m in patrol.hook.messages[told:] if "312" in str(m.get("title", ""))]
    assert not [t for t in titles if "FAILED" in t or "was stopped" in t], titles  # only "not confirmed yet" (12:40:30)
