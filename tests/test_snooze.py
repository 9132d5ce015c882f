"""``costctl snooze`` (issue 16, part 5): the engine holds the idle autostop (never a budget
cap), the watch's control socket answers only its own user (``SO_PEERCRED``) and is mode 0600
in a 0700 runtime dir, the watch's handler caps a snooze at ``[snooze] max`` and refuses a stop
under way, and the CLI says when no watch runs."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
import threading
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest

from costctl.clock import SimClock
from costctl.config import BudgetConfig, IdleConfig, SnoozeConfig
from costctl.money import Money
from costctl.policies import BudgetPolicy, History, IdlePolicy, PolicyEngine
from costctl.policies.base import PolicyContext
from costctl.policies.engine import Snooze
from costctl.records import GpuReading, SignalStatus, TelemetrySample
from costctl.snooze import ControlServer, Peer, peer_of, request, socket_path
from costctl.watch.snoozing import SnoozeControl
from helpers import REPO, costctl_env

T0 = datetime(2026, 6, 1, 8, 0, tzinfo=timezone.utc)


class _Sections:
    def __init__(self, **sections):
        self.__dict__.update(sections)


def _engine(**sections) -> PolicyEngine:
    defaults = {"idle": IdleConfig(time_window="10m"), "budget": BudgetConfig()}
    defaults.update(sections)
    return PolicyEngine(policies=_Sections(**defaults), context=PolicyContext(sample_interval=timedelta(minutes=1)),
                        only=["idle", "budget"])


def _tick(history: History, clock: SimClock, util: float = 0.0) -> None:
    history.add_sample(TelemetrySample(time=clock.now(), gpus=(GpuReading(index=0, utilization=util),),
                                       gpu_status=SignalStatus.OK))


def _run(engine: PolicyEngine, history: History, clock: SimClock, minutes: int, util: float = 0.0):
    """One sample and one evaluation per minute; returns the decisions with their minute."""
    out = []
    for _ in range(minutes):
        clock.advance(60)
        _tick(history, clock, util)
        out += [(int((clock.now() - T0).total_seconds() // 60), d) for d in engine.evaluate(history, clock.now())]
    return out


def _history(clock: SimClock) -> History:
    history = History(sample_interval=timedelta(minutes=1), started_at=clock.now(), retention=timedelta(hours=2))
    _tick(history, clock)
    return history


# ------------------------------------------------------------------ the engine
def test_a_snooze_holds_the_idle_stop_until_it_ends_and_the_stop_says_so():
    clock = SimClock(T0)
    engine, history = _engine(), _history(clock)
    assert _run(engine, history, clock, 5) == []
    engine.snooze(Snooze(until=T0 + timedelta(minutes=25), by="alice (uid 1000, pid 42)", at=clock.now()))
    pending = engine.next_stop(history, clock.now())
    assert pending.at == T0 + timedelta(minutes=25) and pending.progress == "idle 5m of 10m, snoozed by alice (uid 1000, pid 42)"
    assert _run(engine, history, clock, 10) == []  # 08:10 (the idle stop's time) passed: held
    held = engine.next_stop(history, clock.now())
    assert held.at == T0 + timedelta(minutes=25) and held.progress.startswith("idle stop due, snoozed by alice")
    assert engine.next_due(history, clock.now()) == T0 + timedelta(minutes=25)  # a tick is due at its end
    decided = _run(engine, history, clock, 15)
    assert [(m, d.action) for m, d in decided] == [(25, "stop")]
    stop = decided[0][1]
    assert stop.time == T0 + timedelta(minutes=25)
    assert "(the stop waited for a snooze by alice (uid 1000, pid 42) until 2026-06-01 08:25:00+00:00)" in stop.reason
    assert stop.evidence["snoozed"]["until"] == "2026-06-01T08:25:00Z"


def test_an_idle_stretch_that_ends_during_the_snooze_is_not_stopped_at_the_snooze_end():
    clock = SimClock(T0)
    engine, history = _engine(), _history(clock)
    engine.snooze(Snooze(until=T0 + timedelta(minutes=20), by="bob", at=T0))
    assert _run(engine, history, clock, 12) == []  # due at 08:10, held
    assert _run(engine, history, clock, 1, util=90.0) == []  # the job got busy at 08:13
    assert engine.next_stop(history, clock.now()) is None  # nothing held any more
    assert _run(engine, history, clock, 9) == []  # 08:20, the snooze's end, passed: nothing due
    decided = _run(engine, history, clock, 3)  # the new stretch (from 08:14) is 10m old at 08:24
    assert [(m, d.key) for m, d in decided] == [(24, "idle:2026-06-01T08:14:00Z")]
    assert "snoozed" not in decided[0][1].evidence


def test_snooze_off_lets_a_held_stop_come_at_the_next_evaluation():
    clock = SimClock(T0)
    engine, history = _engine(), _history(clock)
    engine.snooze(Snooze(until=T0 + timedelta(hours=1), by="carol", at=T0))
    assert _run(engine, history, clock, 12) == []
    engine.snooze(None)
    assert [d.action for _, d in _run(engine, history, clock, 1)] == ["stop"]


def test_a_budget_cap_is_never_snoozed():
    clock = SimClock(T0)
    engine = _engine(budget=BudgetConfig(total="1"))
    history = _history(clock)
    engine.snooze(Snooze(until=T0 + timedelta(hours=4), by="dave", at=T0))
    history.spend_total = Money(Decimal("1.5"), "USD")
    history.rate = Money(Decimal("1"), "USD")
    decided = _run(engine, history, clock, 1, util=90.0)
    assert [(d.policy, d.action) for _, d in decided] == [("budget", "stop")]


# ------------------------------------------------------------------ the control socket
def test_the_socket_is_0600_in_a_0700_dir_of_this_user_and_answers_with_the_peers_credentials():
    seen: list[Peer] = []

    def handler(req, peer):
        seen.append(peer)
        return {"ok": True, "message": f"got {req['op']}"}

    server = ControlServer(handler)
    server.start()
    try:
        path = server.path
        assert path == socket_path()
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700 and path.parent.stat().st_uid == os.getuid()
        assert request(path, {"op": "status"}) == {"ok": True, "message": "got status"}
        assert seen == [Peer(pid=os.getpid(), uid=os.getuid(), gid=os.getgid())]
    finally:
        server.close()
    assert not path.exists()


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to connect as another user")
def test_a_peer_of_another_uid_is_refused():
    import shutil
    import tempfile
    from pathlib import Path

    calls: list[dict] = []
    open_dir = Path(tempfile.mkdtemp(prefix="costctl-peer-", dir="/tmp"))  # reachable by the other uid
    open_dir.chmod(0o777)
    server = ControlServer(lambda req, peer: calls.append(req) or {"ok": True}, path=open_dir / "w.sock")
    server.start()
    os.chmod(server.path, 0o666)  # only the credential check stands in the way now
    try:
        child = ("import os, socket, sys\nos.setgid(65534); os.setuid(65534)\n"
                 "s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])\n"
                 "print(s.recv(4096).decode())\n")  # refused before it could even ask
        proc = subprocess.run([sys.executable, "-c", child, str(server.path)], capture_output=True, text=True,
                              timeout=30)
    finally:
        server.close()
        shutil.rmtree(open_dir, ignore_errors=True)
    assert proc.returncode == 0, proc.stderr
    assert '"ok": false' in proc.stdout and "answers only uid 0" in proc.stdout
    assert calls == []


def test_the_client_refuses_a_socket_served_by_another_user(tmp_path, monkeypatch):
    a, b = socket.socketpair()
    with a, b:
        assert peer_of(a).uid == os.getuid()
    import costctl.snooze as snooze_mod

    monkeypatch.setattr(snooze_mod.os, "getuid", lambda: 12345)  # we pretend to be someone else
    server = ControlServer(lambda req, peer: {"ok": True}, path=tmp_path / "x.sock")
    monkeypatch.undo()
    server.start()
    try:
        monkeypatch.setattr(snooze_mod.os, "getuid", lambda: 12345)
        with pytest.raises(PermissionError):
            request(server.path, {"op": "status"})
    finally:
        monkeypatch.undo()
        server.close()


# ------------------------------------------------------------------ the watch's handler
class _Recorder:
    def __init__(self):
        self.decisions = []

    def record(self, decision, outcome, **kw):
        self.decisions.append((decision, outcome))


def _control(engine, *, stopping=None, max_="1h"):
    clock = SimClock(T0)
    return SnoozeControl(engine=engine, recorder=_Recorder(), clock=clock, config=SnoozeConfig(max=max_),
                         lock=threading.RLock(), pending=lambda now: None, stopping=lambda: stopping,
                         where=lambda: {"provider": "sim", "instance": "box-1", "run": "abcd1234"}, tz=timezone.utc)


def test_a_snooze_is_capped_at_the_configured_maximum_and_recorded_with_who_and_when():
    engine = _engine()
    control = _control(engine)
    peer = Peer(pid=4242, uid=os.getuid(), gid=os.getgid())
    answer = control.handle({"op": "snooze", "seconds": 3 * 3600}, peer)
    assert answer["ok"] and answer["granted_s"] == 3600
    assert "3h was asked; [snooze] max allows 1h." in answer["message"]
    assert "Budget caps and a failed stop are never snoozed." in answer["message"]
    assert engine.snoozed.until == T0 + timedelta(hours=1) and "pid 4242" in engine.snoozed.by
    (decision, outcome), = control.recorder.decisions
    assert decision.action == "snooze" and outcome == "snoozed" and decision.time == T0
    assert decision.evidence["by"]["pid"] == 4242 and decision.evidence["by"]["uid"] == os.getuid()
    off = control.handle({"op": "off"}, peer)
    assert off["ok"] and engine.snoozed is None and "lifted the snooze" in off["message"]
    assert [d.key.split(":")[1] for d, _ in control.recorder.decisions] == ["2026-06-01T08", "off"]


def test_a_stop_under_way_is_not_snoozed():
    engine = _engine()
    control = _control(engine, stopping="sent")
    answer = control.handle({"op": "snooze", "seconds": 600}, Peer(pid=1, uid=os.getuid(), gid=0))
    assert answer["ok"] is False and "already being stopped (sent)" in answer["error"]
    assert engine.snoozed is None and control.recorder.decisions == []


@pytest.mark.parametrize("req", [{"op": "snooze"}, {"op": "snooze", "seconds": -5}, {"op": "dance"}])
def test_a_bad_request_is_answered_and_changes_nothing(req):
    engine = _engine()
    control = _control(engine)
    answer = control.handle(req, Peer(pid=1, uid=os.getuid(), gid=0))
    assert answer["ok"] is False and answer["error"]
    assert engine.snoozed is None and control.recorder.decisions == []


# ------------------------------------------------------------------ the command
def test_snooze_with_no_watch_running_says_so_and_exits_1(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "costctl", "snooze", "10m"], cwd=REPO, env=costctl_env(tmp_path),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert proc.stderr.startswith("costctl: no running costctl watch of this user on this machine")


def test_a_stale_socket_is_removed_and_a_bad_duration_is_one_line(tmp_path):
    stale = socket_path(999999)
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(stale))
    s.close()  # bound, nobody listens
    proc = subprocess.run([sys.executable, "-m", "costctl", "snooze", "10m"], cwd=REPO, env=costctl_env(tmp_path),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and not stale.exists()
    bad = subprocess.run([sys.executable, "-m", "costctl", "snooze", "a while"], cwd=REPO,
                         env=costctl_env(tmp_path), capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2
    assert bad.stderr == ("costctl: snooze 'a while': expected a duration like 10m, 1h or 1h30m (at most 4h, the "
                          "configured [snooze] max), off, or status\n")


def test_a_bad_duration_names_the_configured_maximum_not_a_fixed_one(tmp_path):
    """Tester finding: ``snooze banana`` said "(at most 7 days)" while ``[snooze] max`` was 4h."""
    bad = subprocess.run([sys.executable, "-m", "costctl", "snooze", "banana"], cwd=REPO,
                         env=costctl_env(tmp_path, COSTCTL_SNOOZE__MAX="90m"), capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode == 2
    assert bad.stderr == ("costctl: snooze 'banana': expected a duration like 10m, 1h or 1h30m (at most 90m, the "
                          "configured [snooze] max), off, or status\n")
    assert "7 days" not in bad.stderr
    off = subprocess.run([sys.executable, "-m", "costctl", "snooze", "8d"], cwd=REPO,
                         env=costctl_env(tmp_path, COSTCTL_SNOOZE__MAX="off"), capture_output=True, text=True,
                         timeout=60)
    assert off.returncode == 2
    assert off.stderr == "costctl: snooze '8d': expected a duration like 10m, 1h or 1h30m, off, or status\n"


# ------------------------------------------------------------------ what a snooze and its lifting say
def _live_control(engine, history, clock, **kw):
    return SnoozeControl(engine=engine, recorder=_Recorder(), clock=clock, config=SnoozeConfig(max="4h"),
                         lock=threading.RLock(), pending=lambda now: engine.next_stop(history, now),
                         stopping=lambda: None, tz=timezone.utc,
                         where=lambda: {"provider": "sim", "instance": "box-1", "run": "abcd1234"},
                         unsnoozable=lambda now: engine.next_stop(history, now, snoozable=False), **kw)


def _notice(recorded_decision):
    from costctl.decisions import RecordedDecision
    from costctl.notify.events import Context, decision_message

    return decision_message(RecordedDecision(decision=recorded_decision, outcome="snooze lifted", run_id="abcd1234",
                                             dry_run=False, ledger_id=None),
                            Context(provider="sim", instance="box-1", run="abcd1234", host="vm"))


def test_lifting_a_snooze_after_the_idle_window_ran_out_says_the_stop_is_due_now():
    """Tester finding: ``snooze off`` after the window ran out answered "no stop is pending" and
    the webhook heard only "snooze lifted"; the stop came 2 s later with no warning."""
    clock = SimClock(T0)
    engine, history = _engine(), _history(clock)
    engine.snooze(Snooze(until=T0 + timedelta(hours=1), by="carol", at=T0))
    assert _run(engine, history, clock, 12) == []  # the idle stop was due at 08:10: held
    control = _live_control(engine, history, clock)
    answer = control.handle({"op": "off"}, Peer(pid=77, uid=os.getuid(), gid=0))
    assert answer["ok"] and "No stop is pending" not in answer["message"]
    assert "the idle stop it held is due now, and the instance is stopped within moments" in answer["message"]
    (decision, outcome), = control.recorder.decisions
    assert outcome == "snooze lifted" and decision.evidence["due_now"] == "idle"
    assert "due now" in decision.reason
    message = _notice(decision)
    assert message.title == "The snooze of the autostop of box-1 was lifted: it is stopped now"
    assert "due now" in message.body
    assert [d.action for _, d in _run(engine, history, clock, 1)] == ["stop"]  # and it does come


def test_lifting_a_snooze_before_the_idle_stop_is_due_names_its_time():
    clock = SimClock(T0)
    engine, history = _engine(), _history(clock)
    engine.snooze(Snooze(until=T0 + timedelta(hours=1), by="carol", at=T0))
    assert _run(engine, history, clock, 3) == []
    control = _live_control(engine, history, clock)
    answer = control.handle({"op": "off"}, Peer(pid=77, uid=os.getuid(), gid=0))
    (decision, _outcome), = control.recorder.decisions
    assert "Pending: idle 3m of 10m" in decision.reason and "stopping at 08:10" in decision.reason
    assert "No stop is pending" not in answer["message"] and "stopping at 08:10" in answer["message"]


def test_a_snooze_while_a_budget_cap_is_pending_says_the_cap_still_comes():
    """Tester finding: after ``costctl snooze 5h`` the webhook said "the autostop was snoozed"
    while the budget stop still came."""
    clock = SimClock(T0)
    engine = _engine(budget=BudgetConfig(total="1"))
    history = _history(clock)
    history.spend_total = Money(Decimal("0.5"), "USD")
    history.rate = Money(Decimal("1"), "USD")
    assert _run(engine, history, clock, 1, util=90.0) == []
    cap = engine.next_stop(history, clock.now(), snoozable=False)
    assert cap is not None and cap.policy == "budget"
    control = _live_control(engine, history, clock)
    answer = control.handle({"op": "snooze", "seconds": 3600}, Peer(pid=78, uid=os.getuid(), gid=0))
    assert answer["ok"]
    (decision, _outcome), = control.recorder.decisions
    assert "the budget stop still comes at" in decision.reason
    assert decision.evidence["still_pending"]["policy"] == "budget"
    title = _notice(decision).title
    assert title.startswith("The idle autostop of box-1 was snoozed until") and "the budget stop still comes" in title
