"""Issue 18: a Vast listing item without ``id`` was listed as id "None" (patrol could address
``vastai:None``), and an id listed twice showed twice with conflicting status. Items without an id
are skipped and counted in the account's row; a duplicate id is one row, flagged, that the
patrol does not act on."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone


from costctl.fleet.collect import unique_instances
from costctl.fleet.model import AccountRead, build_report
from costctl.patrol.model import Seen, Step, match, plan
from costctl.config import PatrolConfig, PatrolPolicyConfig
from costctl_providers.vastai.normalize import instance_from_payload
from tests.fakes.http import Reply
from tests.fakes.vastai import instance as vast_item
from tests.test_fleet_cli import by_id, fleet, fleet_json  # noqa: F401 - the fixture

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=timezone.utc)


def test_fleet_skips_and_counts_items_without_an_id_and_shows_a_duplicate_once_flagged(fleet, capsys):
    no_id = vast_item(998)
    del no_id["id"]
    null_id = {**vast_item(999), "id": None}
    items = [vast_item(312), no_id, null_id, vast_item(313, actual="stopped", intended="stopped"), vast_item(313)]
    fleet.vast.server.route("GET", "/api/v0/instances/", Reply.json({"instances_found": 5, "instances": items}))
    code, report, err = fleet_json(capsys)
    assert code == 0, err
    [vast] = [a for a in report["accounts"] if (a["provider"], a["account"]) == ("vastai", None)]
    assert (vast["instances"], vast["skipped"], vast["duplicates"]) == (2, 2, ["313"])
    assert any("2 listed item(s) without an instance id skipped" in n for n in vast["notes"])
    ids = [r["id"] for r in report["instances"] if (r["provider"], r["account"]) == ("vastai", None)]
    assert ids == ["312", "313"] and "None" not in ids and "" not in ids
    rows = by_id(report)
    assert rows["313"]["duplicate"] is True and rows["313"]["status"] == "stopped"  # the first item, flagged
    assert rows["312"]["duplicate"] is False
    assert "listed more than once" in err


def test_unique_instances_keeps_the_first_of_each_id_in_order():
    a, b, c = (instance_from_payload(vast_item(i)) for i in (1, 2, 1))
    blank = instance_from_payload({**vast_item(3), "id": " "})
    assert blank.id == ""
    assert unique_instances([a, blank, b, c]) == ((a, b), 1, ("1",))


def test_the_patrol_never_marks_a_duplicate():
    inst = instance_from_payload(vast_item(313))
    read = AccountRead("vastai", None, (inst,), duplicates=("313",))
    row = build_report([read], {}, now=NOW, guard_lag=timedelta(seconds=30)).rows[0]
    assert row.duplicate
    seen = Seen(row=row, known=True, observations=(), gpu_readable=True, cpu_readable=False)
    policy = PatrolPolicyConfig(name="p", action="stop", grace="10m", filters={"status": "running"})
    found = match(policy, seen, now=NOW, interval=timedelta(minutes=5))
    held = plan(found, [], PatrolConfig(act_on="all"), now=NOW, in_flight_horizon=timedelta(minutes=5))
    assert held.step is Step.HELD and "more than once" in held.why
