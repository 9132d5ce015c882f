"""Issue 18: a Vast release confirmed by the instance disappearing after costctl's DELETE is
"released, confirmed" in the decision's outcome, the notification and the live lines, never
"gone: the provider no longer knows the instance" nor "stopping:"."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

from tests.test_patrol_cli import NOW, VAST_ROUTE, observe, patrol, sweep, table  # noqa: F401 - the fixture

POLICY = '''
[[patrol.policies]]
name = "vast-disks"
action = "release"
allow_release = true
grace = "10m"
filters = {provider = "vastai", stopped_for = "10m"}
'''


def test_a_vast_release_confirmed_by_the_instance_disappearing_is_said_as_released(patrol, capsys):
    patrol.write_config(policies=POLICY)
    with patrol.ledger() as ledger:  # a watch of this ledger ran on Vast 313 and ended: in scope
        pk = ledger.ensure_instance("vastai", "313", gpu="RTX 4090", gpu_count=1, billing="on-demand",
                                    price_per_hour=Decimal("0.4215"), currency="USD")
        run = ledger.start_run(pk, started_at=NOW - timedelta(days=2), command=None, log_path=None, host="h")
        ledger.finish_run(run, ended_at=NOW - timedelta(days=1), exit_code=0, status="finished")
    observe(patrol, capsys, 15)
    code, report, err = sweep(capsys, "--execute")            # mark and notify
    assert code == 0, err
    patrol.clock.advance(330)                                 # a dry run between keeps the observations unbroken
    sweep(capsys)
    patrol.clock.advance(330)                                 # past the grace after the delivered notice
    code, report, err = sweep(capsys, "--execute")
    assert code == 0, err
    [done] = [m for p in report["policies"] for m in p["matches"] if m["id"] == "313"]
    assert patrol.vast.server.count("DELETE", VAST_ROUTE) >= 1 and "313" not in patrol.vast.instances
    assert (done["step"], done["state"]) == ("act", "confirmed")
    assert done["done"].startswith("released, confirmed: vastai no longer holds instance 313 after 1 release")
    [(outcome,)] = table(patrol, "SELECT outcome FROM decisions WHERE action = 'release'")
    assert outcome.startswith("released, confirmed") and "gone" not in outcome
    assert "313 was released by patrol policy vast-disks" in patrol.hook.titles()
    assert not any("no longer exists" in t for t in patrol.hook.titles())
    assert "stopping" not in err and "costctl patrol: released, confirmed: vastai no longer holds instance 313" in err


def test_an_instance_already_down_when_acted_on_counts_no_request(patrol, capsys, monkeypatch):
    """Issue 18: "stop confirmed ... after 1 stop request(s)" for a stop never sent. When the
    verified stop finds the instance down before sending anything (stopped between the listing
    and the act), the outcome says so and counts no request."""
    from types import SimpleNamespace

    from costctl.patrol import sweep as sweep_module

    monkeypatch.setattr(sweep_module, "begin_stop", lambda **kw: SimpleNamespace(
        stopping=None, stop=SimpleNamespace(state="confirmed", attempts=0,
                                            detail="vastai reports instance 312 stopped")))
    observe(patrol, capsys, 30)
    sweep(capsys, "--execute")                                # mark
    patrol.clock.advance(600)
    code, report, err = sweep(capsys, "--execute")            # act: the instance is down already
    [done] = [m for p in report["policies"] for m in p["matches"] if m["id"] == "312"]
    assert done["done"] == "not acted on: vastai reads instance 312 stopped already; no request was sent"
    [(outcome,)] = table(patrol, "SELECT outcome FROM decisions WHERE action = 'stop' AND policy = "
                                 "'patrol:idle-unguarded'")
    assert outcome == done["done"] and "request(s)" not in outcome
    assert not any("312 was stopped" in t for t in patrol.hook.titles())
