"""Issue 18: in fleet mode (``[ledger] central_url``) ``costctl fleet``, ``costctl patrol`` and
``costctl snooze --instance`` read the team's central ledger, not this machine's SQLite file, so
a colleague's guarded instance shows as guarded; ``--db`` names another ledger; a central ledger
that cannot be read leaves every guard unknown and the patrol acts on nothing."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from costctl.ledger import Ledger
from costctl.paths import default_database_url
from tests.test_fleet_cli import by_id, fleet, fleet_json, run, _watch  # noqa: F401 - the fixture
from tests.test_patrol_cli import NOTHING, changes, patrol, sweep  # noqa: F401 - the fixture

DOWN = "postgresql+psycopg://costctl@127.0.0.1:1/team?connect_timeout=2"


def _central(fleet, url: str) -> None:
    fleet.write_config(ledger=f'central_url = "{url}"')


@pytest.mark.postgres
def test_fleet_reads_the_central_ledger_where_a_colleague_s_watch_guards(postgres_schema, fleet, capsys,
                                                                           monkeypatch):
    from tests.conftest import reset_postgres_schema
    from tests.test_fleet_cli import AUTODL_TOKEN, RUNPOD_KEY, TEAM_KEY, VAST_KEY

    # the session fixture puts the suite's isolation after the fleet's environment: set it again
    for name, value in (("COSTCTL_DATA_DIR", str(fleet.data)), ("VAST_API_KEY", VAST_KEY),
                        ("VAST_TEAM_KEY", TEAM_KEY), ("RUNPOD_API_KEY", RUNPOD_KEY), ("AUTODL_TOKEN", AUTODL_TOKEN)):
        monkeypatch.setenv(name, value)

    url, schema, admin = postgres_schema
    reset_postgres_schema(admin, schema)
    central = url.render_as_string(hide_password=False)
    with Ledger.open(central) as team:  # a colleague's watch on Vast 312, heartbeat 10 s ago
        _watch(team, "vastai", "312", seen_ago=timedelta(seconds=10))
    _central(fleet, central)
    code, report, err = fleet_json(capsys)
    assert code == 0 and report["ledger_error"] is None, err
    assert by_id(report)["312"]["guard"]["state"] == "guarded"
    fleet.ledger().close()  # this machine's own ledger: it knows no watch on 312
    code, report, _err = run(capsys, "fleet", "--format", "json", "--db", default_database_url(fleet.data))
    assert code == 0 and by_id(json.loads(report))["312"]["guard"]["state"] == "unwatched"


def test_fleet_with_an_unreadable_central_ledger_shows_every_guard_unknown(fleet, capsys):
    with fleet.ledger() as ledger:  # this machine's ledger would say "guarded": it is not the team's view
        _watch(ledger, "vastai", "312", seen_ago=timedelta(seconds=10))
    _central(fleet, DOWN)
    code, report, err = fleet_json(capsys)
    assert code == 0 and report["ledger_error"]
    assert {r["guard"]["state"] for r in report["instances"]} == {"unknown"}
    assert sum("the ledger cannot be read" in line for line in err.splitlines()) == 1


def test_patrol_with_an_unreadable_central_ledger_changes_nothing(patrol, capsys):
    patrol.write_config(ledger=f'central_url = "{DOWN}"')
    code, out, err = run_patrol(capsys, "--execute")
    assert code != 0 and "Traceback" not in err
    assert changes(patrol) == NOTHING and patrol.hook.messages == []


def run_patrol(capsys, *flags: str):
    from tests.test_patrol_cli import run as run_cli

    return run_cli(capsys, "patrol", "--format", "json", *flags)
