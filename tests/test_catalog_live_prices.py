"""RunPod's four prices per GPU type, live through the RunPod adapter (real HTTP against the
local fake on 127.0.0.1) when a key exists, the dated table otherwise (issue 15, part 6)."""

from __future__ import annotations

import json
from datetime import date
from decimal import Decimal

import pytest

from costctl.catalog.prices import live_prices, load_price_table
from costctl.cli.main import main
from costctl.config import load_settings
from tests.fakes.http import Reply
from tests.fakes.runpod import API_KEY, FakeRunPod


@pytest.fixture
def fake():
    with FakeRunPod() as f:
        yield f


@pytest.fixture
def env(tmp_path, monkeypatch, fake):
    monkeypatch.setenv("COSTCTL_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "costctl.toml").write_text(
        f'[providers.runpod]\nbase_url = "{fake.url}"\ntimeout = 2\nretries = 1\nbackoff = 0.01\n')
    return tmp_path


def _settings(env):
    return load_settings(env / "costctl.toml")


def test_four_prices_per_gpu_type_labelled_by_billing_mode_and_tier(env, fake, monkeypatch):
    monkeypatch.setenv("RUNPOD_API_KEY", API_KEY)
    live = live_prices(_settings(env), seen=date(2026, 7, 1))
    assert live.providers == ("runpod",) and not live.problems
    got = {(e.gpu, e.billing, e.tier): e.price_per_gpu_hour for e in live.entries}
    # the fake's gpuTypes: RTX A6000 secure 0.79 / community 0.49 / secureSpot 0.39 / communitySpot 0.25
    assert got[("RTX A6000", "on-demand", "secure")] == Decimal("0.79")
    assert got[("RTX A6000", "on-demand", "community")] == Decimal("0.49")
    assert got[("RTX A6000", "spot", "secure")] == Decimal("0.39")
    assert got[("RTX A6000", "spot", "community")] == Decimal("0.25")
    # RTX 4090 without per-cloud spot prices: the lowest bid, no tier
    assert got[("RTX 4090", "spot", "")] == Decimal("0.2")
    assert all(e.seen == date(2026, 7, 1) and e.source == "runpod API (live)" for e in live.entries)
    req = fake.requests_for("gpuTypes")[-1]
    assert req.header("Authorization") == f"Bearer {API_KEY}"
    # live rows replace every dated RunPod row (one current list, not a mix of dates)
    table = load_price_table(_settings(env), live=live)
    runpod = [e for e in table.entries if e.provider == "runpod"]
    assert runpod and all(e.source == "runpod API (live)" for e in runpod)
    assert any(e.provider == "vastai" for e in table.entries)


def test_without_a_key_the_dated_table_is_used_and_nothing_is_asked(env, fake):
    live = live_prices(_settings(env))
    assert live.entries == () and live.providers == () and fake.requests_for("gpuTypes") == []
    runpod = [e for e in load_price_table(_settings(env), live=live).entries if e.provider == "runpod"]
    assert runpod and all(e.source.startswith("https://") and e.seen for e in runpod)


def test_cli_gpus_shows_live_runpod_prices(env, fake, monkeypatch, capsys):
    monkeypatch.setenv("RUNPOD_API_KEY", API_KEY)
    assert main(["gpus", "--provider", "runpod", "--format", "json"]) == 0
    rows = [r["price"] for r in json.loads(capsys.readouterr().out)]
    labels = {(r["gpu"], r["billing"], r["tier"]) for r in rows}
    assert ("RTX A6000", "spot", "community") in labels and ("RTX A6000", "on-demand", "secure") in labels
    assert all(r["source"] == "runpod API (live)" for r in rows)
    assert main(["gpus", "--provider", "runpod", "--offline", "--format", "json"]) == 0
    offline = [r["price"] for r in json.loads(capsys.readouterr().out)]
    assert offline and all(r["source"].startswith("https://") for r in offline)


def test_an_api_failure_falls_back_to_the_dated_table_with_one_note(env, fake, monkeypatch, capsys):
    monkeypatch.setenv("RUNPOD_API_KEY", API_KEY)
    fake.inject_for("gpuTypes", Reply.empty(500), times=5)  # every attempt of the adapter's retries
    assert main(["gpus", "--provider", "runpod", "--format", "json"]) == 0
    captured = capsys.readouterr()
    rows = [r["price"] for r in json.loads(captured.out)]
    assert rows and all(r["source"].startswith("https://") for r in rows)
    notes = [ln for ln in captured.err.splitlines() if ln.startswith("note: runpod: live prices unavailable")]
    assert len(notes) == 1 and "using the dated table" in notes[0]
    assert len(fake.requests_for("gpuTypes")) == 2  # the adapter's retry (retries = 1), then the table
