"""A sweep's mark notices go out as one digest (so a big sweep never meets ``[notify]
max_per_hour``), and, when a notification channel is configured, a stop acts only on a mark
whose notice was delivered, its grace counted from the delivery. The fleet of
tests/test_patrol_cli.py (its simulated clock, real HTTP fakes, the real sender child to a local
webhook, a real SQLite ledger)."""

from __future__ import annotations

import json

from tests.test_patrol_cli import patrol, sweep, table  # noqa: F401 - the fixture

TEAM = '''
[[patrol.policies]]
name = "team-stop"
action = "stop"
grace = "1m"
filters = {label = "team-?", status = "running"}
'''
IDS = [str(400 + n) for n in range(20)]
#: a json:// URL nobody listens on (the discard port): every delivery fails
DEAD = 'urls = ["json://127.0.0.1:9/hook/nobody"]\ntimeout = "2s"'


def twenty(p) -> None:
    for n, iid in enumerate(IDS):
        p.vast.add(int(iid), gpu_util=50.0, label=f"team-{chr(97 + n)}")


def team_marks(p) -> list[dict]:
    return [json.loads(ev) for (ev,) in table(p, "SELECT evidence FROM decisions WHERE policy = 'patrol:team-stop' "
                                                 "AND action = 'mark' ORDER BY id")]


def steps(report: dict) -> dict[str, dict]:
    [team] = [p for p in report["policies"] if p["name"] == "team-stop"]
    return {m["id"]: m for m in team["matches"]}


def stop_requests(p) -> list[str]:
    return [t[0] for t in p.vast.transitions if t[1] == "intended_status" and t[3] == "stopped"]


def test_twenty_marks_are_told_in_one_delivered_digest(patrol, capsys):
    twenty(patrol)
    patrol.write_config(policies=TEAM)
    code, _report, err = sweep(capsys, "--execute")
    assert code == 0, err
    digests = [m for m in patrol.hook.messages if "marked by the patrol" in m["title"]]
    assert [m["title"] for m in digests] == [
        "20 instances marked by the patrol: they will be stopped or released unless snoozed"]
    lines = digests[0]["message"].splitlines()
    assert lines[0] == "- vastai instance 400 (account default): policy team-stop: stopped at 2026-05-01 12:01:00+00:00"
    assert lines[15] == "and 5 more" and sum(line.startswith("- ") for line in lines) == 15
    assert len(patrol.hook.messages) == 2                               # the digest and AutoDL's warning
    marks = team_marks(patrol)
    assert len(marks) == 20 and all(m["notified"] and m["notified_at"] == "2026-05-01T12:00:00Z" for m in marks)


def test_a_stop_waits_for_its_notice_to_be_delivered_and_the_grace_counts_from_then(patrol, capsys):
    twenty(patrol)
    patrol.write_config(policies=TEAM, notify=False)
    patrol.config.write_text(patrol.config.read_text().replace("[[patrol.policies]]",
                                                               f"[notify]\n{DEAD}\n\n[[patrol.policies]]", 1))
    code, _report, err = sweep(capsys, "--execute")                    # 12:00: marked; the notice fails
    assert code == 0, err
    assert all(m["notified"] is False and "notified_at" not in m for m in team_marks(patrol))
    assert "20 marks' notices were not delivered: their stops and releases wait until they are" in \
        " ".join(_report["notes"])
    for _ in range(2):                                                  # 12:01, 12:02: past the grace
        patrol.clock.advance(60)
        code, report, err = sweep(capsys, "--execute")
        assert code == 0, err
        for iid in IDS:
            assert steps(report)[iid]["step"] == "held"
            assert "a stop needs its mark's notification delivered first" in steps(report)[iid]["done"]
    assert stop_requests(patrol) == []                                  # nobody was told: nothing stopped
    patrol.write_config(policies=TEAM)                                  # 12:03: the channel is back
    patrol.clock.advance(60)
    code, report, err = sweep(capsys, "--execute")
    assert code == 0, err
    assert stop_requests(patrol) == [] and all(m["notified_at"] == "2026-05-01T12:03:00Z" for m in team_marks(patrol))
    assert [m["title"] for m in patrol.hook.messages if "marked by the patrol" in m["title"]] == [
        "20 instances marked by the patrol: they will be stopped or released unless snoozed"]
    patrol.clock.advance(60)                                            # 12:04: the grace from the delivery
    code, report, err = sweep(capsys, "--execute")
    assert code == 0, err
    assert {steps(report)[iid]["state"] for iid in IDS} == {"confirmed"}
    assert sorted(stop_requests(patrol)) == IDS
