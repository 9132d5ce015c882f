"""``costctl serve``'s instances table from the fleet: the configured provider accounts read as
``costctl fleet`` reads them (local fake providers over real HTTP on 127.0.0.1), cached, each
account's read limited, the page served by the real server from a real SQLite ledger.

The page shows every instance the accounts report (guarded or not, the ledger knowing it or
not), the time of the read, each account that could not be read with its error (a provider
that hangs: its "no answer within" line, the page not waiting for it), the last good table
when a later read fails, the ledger's table (saying so) before any good read, and no
credential; nothing is written to a provider.
"""

from __future__ import annotations

import json
from datetime import timedelta
from html import unescape

import pytest

from costctl.clock import SimClock
from costctl.config import load_settings
from costctl.fleet.collect import collect
from costctl.paths import default_database_url
from costctl.serve.fleet_view import FleetCache, fleet_configured
from tests.fakes.autodl import PRO
from tests.fakes.http import Reply
from tests.serve_support import request, serving
from tests.test_fleet_cli import NOW, SECRETS, _watch, fleet  # noqa: F401 - the fixture

TZ = "UTC"


def _page(fleet, cache: FleetCache | None) -> str:  # noqa: F811
    url = default_database_url(fleet.data)
    with serving(url, now=NOW, tz=TZ, secrets=SECRETS, fleet=cache) as base:
        answer = request(base, "/")
    assert answer.status == 200
    text = unescape(answer.text)
    for secret in SECRETS:
        assert secret not in text
    return text


def _instances_section(text: str) -> str:
    return text[text.index('id="instances-section"'):text.index("</main>")]


def _cache(fleet, limit_s: float | None = None) -> FleetCache:  # noqa: F811
    """The cache over the fleet's config, read anew for each read (a test changes it between)."""
    return FleetCache(lambda: collect(load_settings(fleet.config), clock=SimClock(NOW), limit_s=limit_s))


def test_the_page_lists_the_fleet_with_unguarded_instances_the_ledger_does_not_know(fleet):  # noqa: F811
    with fleet.ledger() as ledger:
        _watch(ledger, "vastai", "312", seen_ago=timedelta(seconds=4))
    cache = _cache(fleet)
    cache.refresh()
    section = _instances_section(_page(fleet, cache))
    assert 'data-source="fleet"' in section
    for iid in ("312", "313", "700", "pod000000001", "pod000000002", "pro-76419909953e", "sim-local"):
        assert f"<td>{iid}</td>" in section
    row_312 = section[section.index("<td>312</td>"):].split("</tr>", 1)[0]
    row_313 = section[section.index("<td>313</td>"):].split("</tr>", 1)[0]
    assert "guarded (heartbeat 0:00:04 ago)" in row_312
    assert "<td>unguarded</td>" in row_313          # the ledger has never heard of it
    assert "Provider accounts read at 2026-05-01 12:00:00." in section
    assert "cannot be read" not in section
    # read-only: listings only
    assert fleet.vast.transitions == [] and fleet.runpod.transitions == [] and fleet.autodl.transitions == []


def test_a_provider_that_hangs_is_shown_unreadable_and_the_others_are_listed(fleet):  # noqa: F811
    fleet.write_config(autodl_timeout=30)
    fleet.config.write_text(fleet.config.read_text() + '\n[serve]\nfleet_timeout = "1s"\n')
    fleet.autodl.server.inject_delay("POST", f"{PRO}/list", 4)
    settings = load_settings(fleet.config)
    cache = FleetCache.from_settings(settings, clock=SimClock(NOW))
    cache.refresh()                      # returns at the 1 s limit, not when the fake answers
    section = _instances_section(_page(fleet, cache))
    assert "autodl: cannot be read: no answer within 1 seconds (the limit of one fleet read)" in section
    assert "<td>312</td>" in section and "<td>pod000000001</td>" in section
    assert "pro-76419909953e" not in section


def test_a_provider_error_is_shown_with_the_table(fleet):  # noqa: F811
    fleet.runpod.inject_for("pods", Reply.empty(503))
    cache = _cache(fleet)
    cache.refresh()
    section = _instances_section(_page(fleet, cache))
    line = next(li for li in section.split("<li>")[1:] if li.startswith("runpod"))
    assert line.startswith("runpod: cannot be read: ") and "503" in line
    assert "<td>312</td>" in section and "pod000000001" not in section


def test_the_last_good_table_stays_when_every_account_fails_later(fleet, monkeypatch):  # noqa: F811
    cache = _cache(fleet)
    cache.refresh()
    for var in ("VAST_API_KEY", "VAST_TEAM_KEY", "RUNPOD_API_KEY", "AUTODL_TOKEN"):
        monkeypatch.setenv(var, "wrong-key-000")
    fleet.write_config(**{"providers.sim": 'currency = "usd"\ngpus = 2'})  # the sim's table: an unknown key
    cache.refresh()
    section = _instances_section(_page(fleet, cache))
    assert 'data-source="fleet"' in section and "<td>312</td>" in section
    assert "the table is the last good read" in section
    assert section.count("cannot be read") == 5


def test_before_any_good_read_the_ledger_s_table_is_shown_and_said_to_be(fleet, monkeypatch):  # noqa: F811
    with fleet.ledger() as ledger:
        _watch(ledger, "vastai", "312", seen_ago=timedelta(seconds=4))
    for var in ("VAST_API_KEY", "VAST_TEAM_KEY", "RUNPOD_API_KEY", "AUTODL_TOKEN"):
        monkeypatch.setenv(var, "wrong-key-000")
    fleet.write_config(**{"providers.sim": 'currency = "usd"\ngpus = 2'})
    cache = _cache(fleet)
    section = _instances_section(_page(fleet, cache))
    assert "The provider accounts are being read" in section and 'data-source="ledger"' in section
    cache.refresh()
    section = _instances_section(_page(fleet, cache))
    assert 'data-source="ledger"' in section and "<td>312</td>" in section and "<td>313</td>" not in section
    assert "could not be read yet; the instances this ledger has charged are shown instead" in section
    assert section.count("cannot be read") == 5


def test_a_read_that_raises_is_shown_and_the_refresher_goes_on():
    from costctl.errors import ConfigError

    calls = []

    def read():
        calls.append(1)
        raise ConfigError("the config cannot be read: token=abc123secret")

    cache = FleetCache(read, refresh_s=3600)
    cache.refresh()
    view = cache.view()
    assert view.rows is None and not view.reading and "cannot be read" in (view.error or "")


def test_the_background_refresher_reads_at_start(fleet):  # noqa: F811
    cache = FleetCache.from_settings(load_settings(fleet.config), clock=SimClock(NOW))
    cache.start()
    cache.stop()                      # the first read still happens; the thread ends after it
    assert cache._thread is not None
    cache._thread.join(30)
    view = cache.view()
    assert not view.reading and view.rows is not None and len(view.rows) == 7


def test_no_provider_configured_is_no_fleet(tmp_path, fleet):  # noqa: F811
    empty = tmp_path / "empty.toml"
    empty.write_text("")
    assert not fleet_configured(load_settings(empty))
    assert fleet_configured(load_settings(fleet.config))
    section = _instances_section(_page(fleet, None))
    assert "`costctl fleet` lists every instance" in section and "fleet-status" not in section


def test_serve_fleet_settings_are_bounded(tmp_path):
    from costctl.errors import ConfigError

    path = tmp_path / "c.toml"
    path.write_text('[serve]\nfleet_refresh = "1s"\n')
    with pytest.raises(ConfigError):
        load_settings(path)
    path.write_text("")
    serve = load_settings(path).serve
    assert serve.fleet_refresh == timedelta(seconds=60) and serve.fleet_timeout == timedelta(seconds=20)


def test_an_unreadable_account_never_shows_a_key_cut_short(fleet):  # noqa: F811
    # Vast's 400 echoes the team key where the 120-character cut of the quoted answer falls
    from tests.test_fleet_cli import LIST, TEAM_KEY, _leaks

    msg = "x" * 81 + " key " + TEAM_KEY + " was refused"
    assert json.dumps({"msg": msg}).index(TEAM_KEY) < 117 < json.dumps({"msg": msg}).index(TEAM_KEY) + len(TEAM_KEY)
    fleet.vast.server.inject("GET", LIST, *[Reply.json({"msg": msg}, status=400)] * 2)
    cache = _cache(fleet)
    cache.refresh()
    section = _instances_section(_page(fleet, cache))
    lines = [li for li in section.split("<li>")[1:] if li.startswith("vastai")]
    assert len(lines) == 2 and all("answered 400" in li for li in lines)
    assert _leaks(section) == []
