"""Vast.ai adapter against the fake Vast API (real HTTP on 127.0.0.1, fresh port per test)."""

from __future__ import annotations

from datetime import datetime, timezone
from decimal import Decimal

import pytest

from costctl.errors import ConfigError, ProviderError
from costctl.money import Money
from costctl_providers._http import (
    AuthError,
    NotFoundError,
    ProviderResponseError,
    ProviderUnavailableError,
    RateLimitedError,
)
from costctl_providers.base import BillingMode, Status
from costctl_providers.registry import get_provider
from costctl_providers.vastai import ACTUAL_STATUS_TABLE, VastAIProvider
from costctl_providers.vastai.normalize import map_status
from tests.fakes.http import Reply
from tests.fakes.vastai import API_KEY, FakeVast


@pytest.fixture
def fake():
    with FakeVast() as f:
        f.add(312)
        yield f


@pytest.fixture
def sleeps() -> list[float]:
    return []


def make(fake: FakeVast, tmp_path, sleeps, *, key: str = API_KEY, **table) -> VastAIProvider:
    config = {"base_url": fake.url, "poll_interval": 0.01, "stop_timeout": 5, "timeout": 2, "backoff": 0.01, **table}
    return VastAIProvider(config, data_dir=tmp_path, env={"VAST_API_KEY": key}, sleep=sleeps.append)


# ----------------------------------------------------------------------------- list / price


def test_list_sends_bearer_and_normalizes(fake, tmp_path, sleeps):
    fake.add(313, dph_total=0.8123, num_gpus=2, gpu_name="RTX 3090")
    p = make(fake, tmp_path, sleeps)
    by_id = {i.id: i for i in p.list_instances()}

    req = fake.server.last("GET", "/api/v0/instances/")
    assert req.header("Authorization") == f"Bearer {API_KEY}"
    assert req.query == {"owner": ["me"]} and req.body == b""

    inst = by_id["312"]
    assert inst.provider == "vastai" and inst.currency == "USD"
    assert inst.price_per_hour == Decimal("0.4215")  # dph_total, exact
    assert isinstance(inst.price_per_hour, Decimal)
    assert inst.billing is BillingMode.ON_DEMAND and inst.bid_per_hour is None
    assert inst.status is Status.RUNNING and inst.status_raw == "running"
    assert inst.started_at == datetime.fromtimestamp(1668804745.1223178, tz=timezone.utc)
    assert inst.region == "Sweden, SE" and inst.gpu_raw == "RTX 4090"
    assert "jupyter_token" not in inst.raw and "hf_supersecret" not in repr(inst.raw)
    two = by_id["313"]
    assert two.gpu_count == 2 and two.price_per_hour == Decimal("0.8123")  # per instance, not per GPU
    assert fake.server.unexpected() == []


def test_interruptible_instance_is_spot_with_its_bid(fake, tmp_path, sleeps):
    fake.add(400, is_bid=True, dph_total=0.27)
    inst = make(fake, tmp_path, sleeps).get_instance("400")
    assert fake.server.last("GET", "/api/v0/instances/{id}/").path_params == {"id": "400"}
    assert inst.billing is BillingMode.SPOT and inst.bid_per_hour == Decimal("0.27")


# ----------------------------------------------------------------------------- status mapping


@pytest.mark.parametrize(
    ("actual", "intended", "is_bid", "status", "preempted"),
    [
        (None, "running", False, Status.PROVISIONING, False),
        ("loading", "running", False, Status.STARTING, False),
        ("running", "running", False, Status.RUNNING, False),
        ("frozen", "frozen", False, Status.RUNNING, False),  # "GPU charges apply"
        ("stopped", "stopped", False, Status.STOPPED, False),  # disk still billed
        ("exited", "running", False, Status.ERROR, False),
        ("rebooting", "running", False, Status.STARTING, False),
        ("unknown", "running", False, Status.UNKNOWN, False),
        ("offline", "running", False, Status.UNKNOWN, False),
        ("running", "stopped", False, Status.STOPPING, False),
        ("exited", "stopped", False, Status.STOPPED, False),
        ("stopped", "running", False, Status.STARTING, False),  # on-demand waiting to schedule
        ("stopped", "running", True, Status.STOPPED, True),  # outbid interruptible
        ("teleporting", "running", False, Status.UNKNOWN, False),
        (42, None, False, Status.PROVISIONING, False),
    ],
)
def test_status_rules(actual, intended, is_bid, status, preempted):
    assert map_status(actual, intended, is_bid=is_bid) == (status, preempted)


def test_status_table_values():
    assert all(isinstance(v, Status) for v in ACTUAL_STATUS_TABLE.values())


def test_unknown_state_from_the_api_does_not_crash(fake, tmp_path, sleeps):
    fake.add(500, actual="migrating")
    inst = make(fake, tmp_path, sleeps).get_instance("500")
    assert inst.status is Status.UNKNOWN and inst.status_raw == "migrating"


def test_outbid_instance_reports_stopped_and_preempted(fake, tmp_path, sleeps):
    fake.add(400, is_bid=True, dph_total=0.27)
    fake.outbid(400)
    inst = make(fake, tmp_path, sleeps).get_instance("400")
    assert inst.status is Status.STOPPED and inst.preempted and inst.raw["preempted"] is True
    assert inst.billing is BillingMode.SPOT


# ----------------------------------------------------------------------------- stop / start


def test_stop_puts_state_and_waits(fake, tmp_path, sleeps):
    fake.transition_reads = 2
    p = make(fake, tmp_path, sleeps)
    inst = p.stop_instance("312")
    put = fake.server.last("PUT", "/api/v0/instances/{id}/")
    assert put.json() == {"state": "stopped"} and put.path_params == {"id": "312"}
    assert put.header("Authorization") == f"Bearer {API_KEY}"
    assert inst.status is Status.STOPPED and not inst.preempted
    assert fake.transitions == [("312", "intended_status", "running", "stopped"),
                                ("312", "actual_status", "running", "stopped")]
    assert 0.01 in sleeps


def test_stop_is_a_noop_when_stopped(fake, tmp_path, sleeps):
    fake.add(401, actual="stopped", intended="stopped")
    assert make(fake, tmp_path, sleeps).stop_instance("401").status is Status.STOPPED
    assert fake.server.count("PUT") == 0


def test_stopping_a_preempted_instance_cancels_its_restart(fake, tmp_path, sleeps):
    fake.add(400, is_bid=True)
    fake.outbid(400)
    inst = make(fake, tmp_path, sleeps).stop_instance("400")
    assert fake.server.last("PUT", "/api/v0/instances/{id}/").json() == {"state": "stopped"}
    assert inst.status is Status.STOPPED and not inst.preempted
    assert fake.instances["400"]["intended_status"] == "stopped"


def test_start_puts_running(fake, tmp_path, sleeps):
    fake.add(402, actual="stopped", intended="stopped")
    p = make(fake, tmp_path, sleeps)
    inst = p.start_instance("402")
    assert fake.server.last("PUT", "/api/v0/instances/{id}/").json() == {"state": "running"}
    assert inst.status in (Status.STARTING, Status.RUNNING)
    p.start_instance("312")  # running already: no call
    assert fake.server.count("PUT") == 1


def test_5xx_on_stop_is_retried_and_stops_once(fake, tmp_path, sleeps):
    p = make(fake, tmp_path, sleeps)
    fake.server.inject_5xx("PUT", "/api/v0/instances/{id}/", status=502)
    assert p.stop_instance("312").status is Status.STOPPED
    assert fake.server.count("PUT", "/api/v0/instances/{id}/") == 2
    assert [t for t in fake.transitions if t[1] == "intended_status"] == [("312", "intended_status", "running", "stopped")]


def test_timeout_on_stop_is_retried_and_stops_once(fake, tmp_path, sleeps):
    p = make(fake, tmp_path, sleeps, timeout=0.3)
    fake.server.inject_delay("PUT", "/api/v0/instances/{id}/", 2.0, then=Reply.json({"success": True}))
    assert p.stop_instance("312").status is Status.STOPPED
    assert fake.server.count("PUT", "/api/v0/instances/{id}/") == 2
    assert [t for t in fake.transitions if t[1] == "intended_status"] == [("312", "intended_status", "running", "stopped")]


def test_destroy(fake, tmp_path, sleeps):
    inst = make(fake, tmp_path, sleeps).release_instance("312")
    assert fake.server.last("DELETE", "/api/v0/instances/{id}/").path_params == {"id": "312"}
    assert inst.status is Status.TERMINATED and "312" not in fake.instances


def test_unknown_instance_is_not_found(fake, tmp_path, sleeps):
    with pytest.raises(NotFoundError):
        make(fake, tmp_path, sleeps).get_instance("999")


# ----------------------------------------------------------------------------- bids / create


def test_change_bid(fake, tmp_path, sleeps):
    fake.add(400, is_bid=True, dph_total=0.27)
    inst = make(fake, tmp_path, sleeps).change_bid("400", Decimal("0.31"))
    req = fake.server.last("PUT", "/api/v0/instances/bid_price/{id}/")
    assert req.json() == {"client_id": "me", "price": 0.31} and req.path_params == {"id": "400"}
    assert inst.bid_per_hour == Decimal("0.31")
    with pytest.raises(ProviderError, match="outside"):
        make(fake, tmp_path, sleeps).change_bid("400", Decimal("40"))


def test_create_is_sent_once_even_on_5xx(fake, tmp_path, sleeps):
    p = make(fake, tmp_path, sleeps)
    fake.server.inject_5xx("PUT", "/api/v0/asks/{id}/", status=503)
    with pytest.raises(ProviderUnavailableError):
        p.create_instance("5002", image="pytorch/pytorch", bid_per_hour=Decimal("0.25"))
    assert fake.server.count("PUT", "/api/v0/asks/{id}/") == 1 and fake.created == 0
    new_id = p.create_instance("5002", image="pytorch/pytorch", bid_per_hour=Decimal("0.25"))
    assert fake.server.last("PUT", "/api/v0/asks/{id}/").json() == {
        "client_id": "me", "image": "pytorch/pytorch", "disk": 16, "price": 0.25}
    assert p.get_instance(new_id).status is Status.PROVISIONING


# ----------------------------------------------------------------------------- offers / account


def test_offers_on_demand_and_bid(fake, tmp_path, sleeps):
    offers = make(fake, tmp_path, sleeps).list_offers("RTX 4090")
    bodies = [r.json() for r in fake.server.calls("POST", "/api/v0/bundles/")]
    assert [b["type"] for b in bodies] == ["on-demand", "bid"]
    assert bodies[0] == {"type": "on-demand", "rentable": {"eq": True}, "rented": {"eq": False}, "limit": 64,
                         "order": [["dph_total", "asc"]], "verified": {"eq": True}, "gpu_name": {"eq": "RTX 4090"}}
    on_demand = [o for o in offers if o.billing is BillingMode.ON_DEMAND]
    bids = [o for o in offers if o.billing is BillingMode.SPOT]
    assert [o.price_per_hour for o in on_demand] == [Decimal("0.38"), Decimal("0.52")]
    assert [o.price_per_hour for o in bids] == [Decimal("0.22"), Decimal("0.31")]  # min_bid
    first = on_demand[0]
    assert first.currency == "USD" and first.gpu_memory_bytes == 24564 * 2**20 and first.reliability == 0.995
    assert first.price_per_gpu_hour == Decimal("0.38")


def test_balance_and_charges(fake, tmp_path, sleeps):
    p = make(fake, tmp_path, sleeps)
    assert p.balance() == Money(Decimal("27.36"), "USD")
    [charge] = p.billing_records()
    assert charge.instance_id == "123" and charge.amount == Money(Decimal("1.000"), "USD")
    assert charge.quantity == Decimal("10.000") and charge.rate == Decimal("0.1000")
    assert charge.when == datetime(2021, 9, 30, 21, 20, tzinfo=timezone.utc)  # 1633036800
    assert fake.server.last("GET", "/api/v0/invoices").query == {"type": ["charge"]}


# ----------------------------------------------------------------------------- errors


def test_401_names_the_key_without_printing_it(fake, tmp_path, sleeps):
    p = make(fake, tmp_path, sleeps, key="not-the-right-key-42")
    with pytest.raises(AuthError) as err:
        p.list_instances()
    assert "VAST_API_KEY" in str(err.value) and "not-the-right-key-42" not in str(err.value)


def test_success_false_envelope_is_typed(fake, tmp_path, sleeps):
    p = make(fake, tmp_path, sleeps)
    fake.server.inject("GET", "/api/v0/users/current/",
                       Reply.json({"success": False, "error": "server_error", "msg": "balance unavailable"}))
    with pytest.raises(ProviderResponseError, match="balance unavailable"):
        p.balance()


def test_429_is_retried_then_reported(fake, tmp_path, sleeps):
    p = make(fake, tmp_path, sleeps, retries=1)
    fake.server.inject_429("GET", "/api/v0/instances/", retry_after=3, times=2)
    with pytest.raises(RateLimitedError) as err:
        p.list_instances()
    assert err.value.retry_after_s == 3.0 and 3.0 in sleeps
    assert fake.server.count("GET", "/api/v0/instances/") == 2


def test_malformed_json(fake, tmp_path, sleeps):
    p = make(fake, tmp_path, sleeps)
    fake.server.inject_malformed_json("GET", "/api/v0/instances/")
    with pytest.raises(ProviderResponseError, match="malformed JSON"):
        p.list_instances()


# ----------------------------------------------------------------------------- config / registry


def test_config_errors(tmp_path):
    with pytest.raises(ConfigError, match=r"^\[providers.vastai\] unknown key 'api_key'$"):
        VastAIProvider({"api_key": "x"}, data_dir=tmp_path)
    with pytest.raises(ConfigError, match="base_url"):
        VastAIProvider({"base_url": "console.vast.ai"}, data_dir=tmp_path)


def test_registry_and_missing_key(fake, tmp_path, monkeypatch):
    monkeypatch.delenv("VAST_API_KEY", raising=False)
    p = get_provider("vastai", {"base_url": fake.url}, data_dir=tmp_path)
    assert isinstance(p, VastAIProvider)
    with pytest.raises(ConfigError, match="VAST_API_KEY"):
        p.list_instances()
    assert fake.server.calls() == []
