"""A sweep's stops go side by side: a provider that never confirms delays no other instance's
stop, and a patrol stop not confirmed yet is told on the notification channels as a watch's is.
The fleet of tests/test_patrol_cli.py (real HTTP fakes, a real SQLite ledger, the real sender
child to a local webhook), its simulated clock; ``[stop] deadline`` 5m, ``unconfirmed_after``
2m (the default)."""

from __future__ import annotations

from datetime import datetime, timedelta

from costctl.clock import ensure_utc
from tests.fleet_world import NOW
from tests.test_patrol_cli import patrol, sweep, table  # noqa: F401 - the fixture

TEAM = '''
[[patrol.policies]]
name = "team-stop"
action = "stop"
grace = "1m"
filters = {label = "team-?", status = "running"}
'''
VAST = ["320", "321", "322", "323", "324"]
POD = "pod000000009"


def _stop_events(p) -> list[tuple[str, str, datetime]]:
    """``(instance, state, time)`` of every patrol stop event, in the order stored."""
    rows = table(p, "SELECT i.provider_instance_id, e.state, e.time FROM stop_events e "
                    "JOIN decisions d ON d.id = e.decision_id JOIN instances i ON i.id = d.instance_pk ORDER BY e.id")
    return [(iid, state, ensure_utc(datetime.fromisoformat(str(t)))) for iid, state, t in rows]


def test_a_provider_that_never_confirms_delays_no_other_instance_s_stop(patrol, capsys):
    for n, iid in enumerate(VAST):                                     # A..E on Vast, listed first
        patrol.vast.add(int(iid), gpu_util=50.0, label=f"team-{'abcde'[n]}")
    patrol.runpod.add(POD, gpu_util=[50], cpu_percent=40)              # F on RunPod, after them
    patrol.runpod.pods[POD]["name"] = "team-f"
    patrol.write_config(policies=TEAM)
    code, _report, err = sweep(capsys, "--execute")                    # 12:00 marked, due 12:01
    assert code == 0, err
    patrol.vast.ignore_stops = True                                    # Vast answers success, stops nothing
    patrol.clock.advance(60)
    acted = patrol.clock.now()
    code, report, err = sweep(capsys, "--execute")                     # 12:01 act on all six

    states = {m["id"]: m["state"] for p in report["policies"] for m in p["matches"]}
    assert states == {**{iid: "failed" for iid in VAST}, POD: "confirmed"}
    events = _stop_events(patrol)
    [(_, _, confirmed_at)] = [e for e in events if e[0] == POD and e[1] == "confirmed"]
    failed = [e for e in events if e[1] == "failed"]
    assert sorted(e[0] for e in failed) == VAST
    # F's stop was confirmed within a minute of the act, long before even one Vast deadline (5m)
    assert confirmed_at - acted < timedelta(minutes=1)
    assert all(at - acted >= timedelta(minutes=5) for _, _, at in failed)
    assert events.index((POD, "confirmed", confirmed_at)) < min(events.index(e) for e in failed)
    # each was its own stop, each begun at the act
    begun = {iid: at for iid, state, at in reversed(events)}
    assert set(begun) == {*VAST, POD} and all(at == acted for at in begun.values())
    outcomes = table(patrol, "SELECT outcome FROM decisions WHERE action = 'stop' ORDER BY id")
    assert len(outcomes) == 6 and sum(o.startswith("stop confirmed") for (o,) in outcomes) == 1

    # each Vast stop not confirmed yet was told once, as a watch's is, before it failed
    titles = patrol.hook.titles()
    # the six marks were told in one digest, a line each
    [digest] = [m["message"] for m in patrol.hook.messages if m["title"].startswith("6 instances marked")]
    for iid in VAST:
        assert f"vastai instance {iid} (account default): policy team-stop: stopped at 2026-05-01 12:01" in digest
        told = [t for t in titles if iid in t]
        assert told == [f"The patrol's stop of {iid} is not confirmed yet (patrol policy team-stop)",
                        f"PATROL STOP FAILED: {iid} may still be running and billing"]
    [body] = [m["message"] for m in patrol.hook.messages if m["title"].startswith("The patrol's stop of 320")]
    assert "vastai does not confirm the stop of instance 320 yet" in body
    assert "until 2026-05-01 12:06:00+00:00" in body and "account default" in body
    assert f"{POD} was stopped by patrol policy team-stop" in titles
    assert not any(POD in t and "not confirmed" in t for t in titles)
