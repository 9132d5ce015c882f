"""When a patrol mark ends without its action (``cleared``): the instance the mark was for no
longer matches at a sweep that read it (busy again, stopped by hand, guarded by a watch), or it
is gone from an account the sweep read; never because its account could not be read (the mark
stays and nothing acts). A cleared mark's next match is a new episode: a new mark, a new
notification and a new grace. The fleet of tests/test_patrol_cli.py, its simulated clock, real
HTTP fakes, a real SQLite ledger."""

from __future__ import annotations

import json
from datetime import timedelta
from decimal import Decimal

import pytest

from tests.test_patrol_cli import observe, patrol, run, sweep, table  # noqa: F401 - the fixture

MARKS = "SELECT id, outcome, evidence FROM decisions WHERE policy = 'patrol:idle-unguarded' AND action = 'mark' " \
        "ORDER BY id"


def marks(p) -> list[tuple[int, str, dict]]:
    return [(i, outcome, json.loads(ev)) for i, outcome, ev in table(p, MARKS)]


def stops_of_312(p) -> list[tuple]:
    """The stop requests Vast saw for 312 (its intended status set to stopped)."""
    return [t for t in p.vast.transitions if t[0] == "312" and t[1] == "intended_status" and t[3] == "stopped"]


def idle_policy(report: dict) -> dict:
    [found] = [p for p in report["policies"] if p["name"] == "idle-unguarded"]
    return found


def marked(p, capsys) -> int:
    """12:00-12:30 observed, 12:30 ``--execute``: Vast 312 is marked (stop due 12:40); its id."""
    observe(p, capsys, 30)
    code, _report, err = sweep(capsys, "--execute")
    assert code == 0, err
    [(mark_id, outcome, _ev)] = marks(p)
    assert outcome == "marked"
    return mark_id


def busy(p) -> None:
    p.vast.instances["312"]["gpu_util"] = 55.0


def stopped_by_hand(p) -> None:
    p.vast.instances["312"].update(actual_status="stopped", intended_status="stopped", cur_state="stopped")


def guarded(p) -> None:
    with p.ledger() as ledger:  # a watch of this ledger starts on 312: its heartbeat is fresh
        pk = ledger.ensure_instance("vastai", "312", gpu="RTX 4090", gpu_count=1, billing="on-demand",
                                    price_per_hour=Decimal("0.4215"), currency="USD")
        run_id = ledger.start_run(pk, started_at=p.clock.now(), command=["python", "train.py"], log_path=None,
                                  host="gpu-box", pid=4343)
        ledger.accrue(run_id, p.clock.now(), Decimal("0.4215"), "USD")


@pytest.mark.parametrize("change, status, guard", [(busy, "running", "unwatched"),
                                                   (stopped_by_hand, "stopped", "unwatched"),
                                                   (guarded, "running", "guarded")])
def test_a_mark_whose_instance_no_longer_matches_is_cleared_with_what_was_seen(patrol, capsys, change, status,
                                                                               guard):
    mark_id = marked(patrol, capsys)
    patrol.clock.advance(300)                                           # 12:35, within the grace
    change(patrol)
    code, report, err = sweep(capsys, "--execute")
    assert code == 0, err
    [cleared] = idle_policy(report)["cleared"]
    reason = f"no longer matches (status {status}, guard {guard})"
    assert (cleared["id"], cleared["mark"], cleared["why"], cleared["reason"]) == (
        "312", mark_id, "no-longer-matches", reason)
    assert f"mark {mark_id} (patrol:idle-unguarded) cleared: {reason}" in err
    [(_id, outcome, ev)] = marks(patrol)
    assert outcome == "cleared" and ev["cleared_why"] == "no-longer-matches"
    assert ev["cleared_at"] == "2026-05-01T12:35:00Z"
    assert ev["cleared_seen"] == {"status": status, "guard": guard} and ev["cleared_reason"] == reason
    patrol.clock.advance(600)                                           # 12:45: the old grace is over
    code, report, _err = sweep(capsys, "--execute")
    # nothing acts on the cleared mark (a watch's heartbeat 10 minutes old is stale: a new mark, a new grace)
    assert {m["id"]: m["step"] for m in idle_policy(report)["matches"]}.get("312") in (None, "mark", "held")
    assert stops_of_312(patrol) == []


def test_busy_then_idle_again_starts_a_new_grace_and_notifies_again(patrol, capsys):
    first = marked(patrol, capsys)                                      # 12:30: marked, due 12:40
    told = len(patrol.hook.messages)
    patrol.clock.advance(300)                                           # 12:35: busy: cleared
    busy(patrol)
    sweep(capsys, "--execute")
    patrol.vast.instances["312"]["gpu_util"] = 0.0                      # idle again from 12:40
    steps = []
    for _ in range(7):                                                  # 12:40 .. 13:10
        patrol.clock.advance(300)
        code, report, err = sweep(capsys, "--execute")
        assert code == 0, err
        steps.append({m["id"]: m["step"] for m in idle_policy(report)["matches"]}.get("312"))
    # idle over 30 minutes again only at 13:10: a new mark then, not an action on the first mark
    assert steps == [None] * 6 + ["mark"]
    assert stops_of_312(patrol) == []
    [(one, cleared, _e1), (second, outcome, ev)] = marks(patrol)
    assert (one, cleared) == (first, "cleared") and outcome == "marked" and second != first
    assert ev["due_at"] == "2026-05-01T13:20:00Z"
    assert "312 will be stopped at 2026-05-01 13:20:00+00:00 (patrol policy idle-unguarded)" in \
        patrol.hook.titles()[told:]
    patrol.clock.advance(300)                                           # 13:15: the new grace runs
    code, report, _err = sweep(capsys, "--execute")
    assert {m["id"]: m["step"] for m in idle_policy(report)["matches"]}["312"] == "wait"
    assert stops_of_312(patrol) == []
    patrol.clock.advance(300)                                           # 13:20: due: stopped
    code, report, _err = sweep(capsys, "--execute")
    by = {m["id"]: m for m in idle_policy(report)["matches"]}
    assert (by["312"]["step"], by["312"]["state"], by["312"]["mark"]) == ("act", "confirmed", second)


def test_a_mark_of_an_instance_gone_from_a_provider_read_is_cleared(patrol, capsys):
    mark_id = marked(patrol, capsys)
    patrol.clock.advance(300)
    del patrol.vast.instances["312"]                                    # released by hand, or by its provider
    code, report, _err = run(capsys, "patrol")                          # a dry run says so, changes nothing
    assert code == 0 and f"vastai 312: would clear mark {mark_id}: vastai no longer lists instance 312 " \
        "(account default read at 2026-05-01 12:35:00+00:00)" in report
    assert marks(patrol)[0][1] == "marked"
    code, report, err = sweep(capsys, "--execute")
    assert code == 0, err
    [cleared] = idle_policy(report)["cleared"]
    assert (cleared["id"], cleared["mark"], cleared["why"]) == ("312", mark_id, "gone")
    [(_id, outcome, ev)] = marks(patrol)
    assert outcome == "cleared" and ev["cleared_why"] == "gone" and ev["cleared_seen"] == {
        "account": None, "listed": False}
    from costctl.ledger import live  # the dashboard's decisions list: the mark reads cleared, not marked

    with patrol.ledger() as ledger, ledger.engine.connect() as conn:
        shown = [(d.instance_id, d.action, d.outcome) for d in live.recent_decisions(conn) if d.action == "mark"]
    assert ("312", "mark", "cleared") in shown and ("312", "mark", "marked") not in shown
    code, report, _err = sweep(capsys, "--execute")                     # settled: said once
    assert idle_policy(report)["cleared"] == []


def test_a_mark_in_an_account_that_cannot_be_read_stays_and_nothing_acts(patrol, capsys, monkeypatch):
    mark_id = marked(patrol, capsys)
    monkeypatch.delenv("VAST_API_KEY")                                  # Vast's default account: unreadable
    for _ in range(3):                                                  # 12:35 .. 12:45: past the grace
        patrol.clock.advance(300)
        code, report, err = sweep(capsys, "--execute")
        assert code == 0, err
        assert idle_policy(report)["cleared"] == [] and idle_policy(report)["matches"] == []
    assert marks(patrol) == [(mark_id, "marked", marks(patrol)[0][2])]
    assert "cleared_why" not in marks(patrol)[0][2]
    assert stops_of_312(patrol) == [] and patrol.vast.instances["312"]["actual_status"] == "running"


def test_a_mark_stays_while_the_ledger_cannot_say_whether_the_instance_is_guarded():
    from tests.test_patrol_model import T, inst, policy, seen

    from costctl.fleet.model import GuardState
    from costctl.ledger.patrol_store import MARKED, PatrolDecision
    from costctl.patrol.model import to_clear

    mark = PatrolDecision(id=7, time=T, policy="patrol:p", action="mark", outcome=MARKED, key="",
                          evidence={"account": None})
    unguarded = policy(status="running", guarded=False)
    assert to_clear(unguarded, seen(inst(), guard=GuardState.UNKNOWN), [mark]) is None   # unknown: stays
    assert to_clear(policy(status="running", spend_over="5", currency="USD"), seen(inst(), guard=GuardState.UNKNOWN),
                    [mark]) is None                                                      # the ledger's spend: unknown
    cleared = to_clear(unguarded, seen(inst(), guard=GuardState.GUARDED), [mark])
    assert cleared is not None and (cleared.why, cleared.mark.id, cleared.evidence) == (
        "no-longer-matches", 7, {"status": "running", "guard": "guarded"})
    assert to_clear(policy(status="stopped"), seen(inst(), guard=GuardState.UNKNOWN), [mark]) is not None


def test_an_instance_restarted_during_the_grace_gets_a_new_mark_and_notice_not_the_old_stop(patrol, capsys):
    """A mark belongs to one running session: 312 is marked at 12:30 (stop due 12:40); at 12:35
    Vast says it was started 5 s ago (the user restarted it). That sweep clears the mark
    (``new-session``, with the session's start and the mark's time) and, as it still matches,
    marks it anew with a new notice (due 12:45): at 12:40 nothing is stopped."""
    first = marked(patrol, capsys)
    patrol.clock.advance(300)                                           # 12:35
    patrol.vast.instances["312"]["start_date"] = (patrol.clock.now() - timedelta(seconds=5)).timestamp()
    code, report, err = sweep(capsys, "--execute")
    assert code == 0, err
    [(old_id, old_outcome, old_ev), (new_id, new_outcome, _ev)] = marks(patrol)
    assert (old_id, old_outcome, new_outcome) == (first, "cleared", "marked") and new_id > first
    assert old_ev["cleared_why"] == "new-session"
    assert old_ev["cleared_seen"] == {"status": "running", "session_started_at": "2026-05-01T12:34:55Z",
                                      "marked_at": "2026-05-01T12:30:00Z"}
    assert "a new session" in old_ev["cleared_reason"]
    assert "policy idle-unguarded: stopped at 2026-05-01 12:40:00+00:00" in patrol.hook.messages[0]["message"]
    titles = [t for t in patrol.hook.titles() if t.startswith("312 will be stopped")]
    assert titles == ["312 will be stopped at 2026-05-01 12:45:00+00:00 (patrol policy idle-unguarded)"]

    patrol.clock.advance(300)                                           # 12:40: the old mark's due time
    code, report, err = sweep(capsys, "--execute")
    assert code == 0, err
    assert stops_of_312(patrol) == []
    assert idle_policy(report)["matches"][0]["step"] == "wait"
    assert [outcome for _i, outcome, _ev in marks(patrol)] == ["cleared", "marked"]


def test_a_crash_looping_instance_is_cleared_as_a_new_session_once_and_then_stopped(patrol, capsys):
    """312 restarts at every sweep (a container in a crash loop: its start moves on, it never
    reads stopped): the first restart clears the mark as ``new-session`` and the new mark says
    so (``follows_new_session_of``); the next restarts clear nothing, and it is stopped when the
    new mark's grace is over (12:45)."""
    first = marked(patrol, capsys)                                      # 12:30, due 12:40
    for _ in range(3):                                                  # 12:35, 12:40, 12:45
        patrol.clock.advance(300)
        patrol.vast.instances["312"]["start_date"] = (patrol.clock.now() - timedelta(seconds=5)).timestamp()
        code, report, err = sweep(capsys, "--execute")
        assert code == 0, err
    [(old_id, old_outcome, _old), (new_id, new_outcome, ev)] = marks(patrol)
    assert (old_id, old_outcome, new_outcome) == (first, "cleared", "acted")
    assert ev["follows_new_session_of"] == first and ev["due_at"] == "2026-05-01T12:45:00Z"
    by = {m["id"]: m for m in idle_policy(report)["matches"]}
    assert (by["312"]["step"], by["312"]["state"], by["312"]["mark"]) == ("act", "confirmed", new_id)
    assert len(stops_of_312(patrol)) == 1


def test_a_mark_that_followed_a_new_session_is_cleared_again_only_after_a_sweep_saw_it_down():
    from tests.test_patrol_model import T, inst, policy, readings, seen

    from costctl.ledger.patrol_store import MARKED, PatrolDecision
    from costctl.patrol.model import new_session_clear

    follows = PatrolDecision(id=8, time=T, policy="patrol:p", action="mark", outcome=MARKED, key="",
                             evidence={"follows_new_session_of": 7})
    plain = PatrolDecision(id=9, time=T, policy="patrol:p", action="mark", outcome=MARKED, key="", evidence={})
    restarted = inst(started=T + timedelta(minutes=6))
    running = readings(3, end=T + timedelta(minutes=10))                # 12:00, 12:05, 12:10: running
    down = [*readings(1, end=T + timedelta(minutes=5), status="stopped"),
            *readings(1, end=T + timedelta(minutes=10))]
    stop = policy(status="running")
    assert new_session_clear(stop, seen(restarted, observations=running), [follows]) is None      # crash loop
    assert new_session_clear(stop, seen(restarted, observations=running), [plain]) is not None    # first restart
    again = new_session_clear(stop, seen(restarted, observations=down), [follows])                 # seen down
    assert again is not None and again.why == "new-session"
