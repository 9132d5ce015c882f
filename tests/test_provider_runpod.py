"""RunPod adapter against the fake RunPod GraphQL API (real HTTP on 127.0.0.1, fresh port per test)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest

from costctl.clock import SimClock
from costctl.errors import ConfigError, ProviderError
from costctl.money import Money
from costctl_providers._http import (
    AuthError,
    NotFoundError,
    ProviderResponseError,
    ProviderUnavailableError,
)
from costctl_providers.base import BillingMode, Status
from costctl_providers.registry import get_provider
from costctl_providers.runpod import STATUS_TABLE, RunPodProvider
from costctl_providers.runpod.normalize import bid_per_instance_hour, map_status
from tests.fakes.http import Reply
from tests.fakes.runpod import API_KEY, FakeRunPod, gql_error

POD = "abc123xyz456"


@pytest.fixture
def fake():
    with FakeRunPod() as f:
        f.add(POD)
        yield f


@pytest.fixture
def sleeps() -> list[float]:
    return []


def make(fake: FakeRunPod, tmp_path, sleeps, *, key: str = API_KEY, clock=None, **table) -> RunPodProvider:
    config = {"base_url": fake.url, "poll_interval": 0.01, "stop_timeout": 5, "timeout": 2, "backoff": 0.01, **table}
    return RunPodProvider(config, data_dir=tmp_path, env={"RUNPOD_API_KEY": key}, sleep=sleeps.append, clock=clock)


# ----------------------------------------------------------------------------- list / price


def test_list_posts_graphql_with_bearer_header(fake, tmp_path, sleeps):
    fake.add("twogpu000001", gpus=2, cost=0.88)
    clock = SimClock(datetime(2026, 5, 1, 12, 0, tzinfo=timezone.utc))
    p = make(fake, tmp_path, sleeps, clock=clock)
    by_id = {i.id: i for i in p.list_instances()}

    req = fake.server.last("POST", "/graphql")
    assert req.header("Authorization") == f"Bearer {API_KEY}"
    assert req.query == {}  # the key is never in the URL
    assert req.header("Content-Type") == "application/json"
    body = req.json()
    assert set(body) == {"query"}
    q = body["query"]
    assert "myself" in q and "pods" in q
    for field in ("id", "desiredStatus", "costPerHr", "gpuCount", "podType", "gpuDisplayName"):
        assert field in q
    assert "env" not in q.split()

    inst = by_id[POD]
    assert inst.provider == "runpod" and inst.currency == "USD"
    assert inst.price_per_hour == Decimal("0.44") and inst.billing is BillingMode.ON_DEMAND
    assert inst.status is Status.RUNNING and inst.gpu_raw == "RTX A6000"
    assert inst.started_at == datetime(2026, 5, 1, 11, 0, tzinfo=timezone.utc)  # now - uptime
    assert "env" not in inst.raw and "rn51hunbpgtltcpac3ol" not in repr(inst.raw)
    assert by_id["twogpu000001"].price_per_hour == Decimal("0.88") and by_id["twogpu000001"].gpu_count == 2
    assert fake.server.unexpected() == []


def test_get_sends_pod_id_as_a_variable(fake, tmp_path, sleeps):
    p = make(fake, tmp_path, sleeps)
    assert p.get_instance(POD).id == POD
    body = fake.server.last("POST", "/graphql").json()
    assert body["variables"] == {"podId": POD} and POD not in body["query"]
    with pytest.raises(NotFoundError):
        p.get_instance("nope")


# ----------------------------------------------------------------------------- status mapping


@pytest.mark.parametrize(
    ("desired", "runtime", "status"),
    [
        ("CREATED", None, Status.PROVISIONING),
        ("RUNNING", None, Status.RUNNING),
        ("RUNNING", True, Status.RUNNING),
        ("RUNNING", False, Status.STARTING),  # asked to run, container not up yet
        ("RESTARTING", None, Status.STARTING),
        ("EXITED", False, Status.STOPPED),
        ("EXITED", True, Status.STOPPING),  # asked to stop, container still up
        ("PAUSED", None, Status.STOPPED),
        ("DEAD", None, Status.ERROR),
        ("TERMINATED", None, Status.TERMINATED),
        ("MIGRATING", None, Status.UNKNOWN),
        (None, None, Status.UNKNOWN),
    ],
)
def test_status_rules(desired, runtime, status):
    assert map_status(desired, has_runtime=runtime) is status


def test_table_values():
    assert all(isinstance(v, Status) for v in STATUS_TABLE.values())


def test_unknown_state_from_the_api(fake, tmp_path, sleeps):
    fake.add("weird0000001", desired="HIBERNATING")
    inst = make(fake, tmp_path, sleeps).get_instance("weird0000001")
    assert inst.status is Status.UNKNOWN and inst.status_raw == "HIBERNATING"


# ----------------------------------------------------------------------------- stop / start


def test_stop_then_poll_until_exited(fake, tmp_path, sleeps):
    fake.transition_reads = 2
    p = make(fake, tmp_path, sleeps)
    inst = p.stop_instance(POD)
    [stop] = fake.requests_for("podStop")
    assert stop.json()["variables"] == {"podId": POD}
    assert stop.header("Authorization") == f"Bearer {API_KEY}"
    assert inst.status is Status.STOPPED and inst.status_raw == "EXITED"
    assert fake.transitions == [(POD, "RUNNING", "EXITED")]
    assert len(fake.requests_for("pod")) >= 3 and 0.01 in sleeps


def test_stop_is_a_noop_when_exited(fake, tmp_path, sleeps):
    fake.add("stopped00001", desired="EXITED")
    assert make(fake, tmp_path, sleeps).stop_instance("stopped00001").status is Status.STOPPED
    assert fake.requests_for("podStop") == []


def test_start_on_demand_resumes_with_gpu_count(fake, tmp_path, sleeps):
    fake.add("stopped00002", desired="EXITED", gpus=2, cost=0.98)
    p = make(fake, tmp_path, sleeps)
    inst = p.start_instance("stopped00002")
    [resume] = fake.requests_for("podResume")
    assert resume.json()["variables"] == {"podId": "stopped00002", "gpuCount": 2}
    assert inst.status in (Status.STARTING, Status.RUNNING)
    p.start_instance(POD)  # running already
    assert len(fake.requests_for("podResume")) == 1


def test_start_spot_bids_per_gpu(fake, tmp_path, sleeps):
    fake.add("spot00000001", desired="EXITED", gpus=2, cost=0.5, pod_type="INTERRUPTABLE")
    p = make(fake, tmp_path, sleeps)
    inst = p.start_instance("spot00000001")
    [bid] = fake.requests_for("podBidResume")
    assert bid.json()["variables"] == {"podId": "spot00000001", "bidPerGpu": 0.25, "gpuCount": 2}
    assert inst.billing is BillingMode.SPOT and inst.bid_per_hour == Decimal("0.50")


def test_5xx_on_stop_is_retried_and_stops_once(fake, tmp_path, sleeps):
    p = make(fake, tmp_path, sleeps)
    real = fake._graphql
    state = {"failed": False}

    def flaky(req):
        if "podStop" in (req.json().get("query") or "") and not state["failed"]:
            state["failed"] = True
            return Reply.empty(502)
        return real(req)

    fake.server.route("POST", "/graphql", flaky)
    assert p.stop_instance(POD).status is Status.STOPPED
    assert sum("podStop" in r.json()["query"] for r in fake.server.calls("POST", "/graphql")) == 2
    assert fake.transitions == [(POD, "RUNNING", "EXITED")]


def test_timeout_on_stop_is_retried_and_stops_once(fake, tmp_path, sleeps):
    p = make(fake, tmp_path, sleeps, timeout=0.3)
    real = fake._graphql
    state = {"delayed": False}

    def slow(req):
        reply = real(req)
        if "podStop" in (req.json().get("query") or "") and not state["delayed"]:
            state["delayed"] = True
            reply.delay = 2.0  # carried out, answered after the client gave up
        return reply

    fake.server.route("POST", "/graphql", slow)
    assert p.stop_instance(POD).status is Status.STOPPED
    assert sum("podStop" in r.json()["query"] for r in fake.server.calls("POST", "/graphql")) == 2
    assert fake.transitions == [(POD, "RUNNING", "EXITED")]


def test_terminate(fake, tmp_path, sleeps):
    inst = make(fake, tmp_path, sleeps).release_instance(POD)
    assert fake.requests_for("podTerminate")[0].json()["variables"] == {"podId": POD}
    assert inst.status is Status.TERMINATED and POD not in fake.pods


# ----------------------------------------------------------------------------- create / prices


def test_rent_interruptable_price_is_bid_times_gpu_count(fake, tmp_path, sleeps):
    p = make(fake, tmp_path, sleeps)
    inst = p.create_spot(gpu_type_id="NVIDIA RTX A6000", bid_per_gpu=Decimal("0.2"), gpu_count=2,
                         image_name="runpod/pytorch", cloud_type="SECURE")
    [req] = fake.requests_for("podRentInterruptable")
    assert req.json()["variables"] == {"bidPerGpu": 0.2, "gpuCount": 2, "gpuTypeId": "NVIDIA RTX A6000",
                                       "imageName": "runpod/pytorch", "name": "costctl", "volumeInGb": 40,
                                       "containerDiskInGb": 40}
    assert "cloudType: SECURE" in req.json()["query"]
    assert inst.billing is BillingMode.SPOT
    assert inst.bid_per_hour == Decimal("0.4")  # 0.2 per GPU × 2 GPUs
    assert inst.price_per_hour == Decimal("0.4")
    assert bid_per_instance_hour(Decimal("0.35"), 4) == Decimal("1.40")


def test_create_is_never_retried(fake, tmp_path, sleeps):
    p = make(fake, tmp_path, sleeps)
    fake.server.inject_5xx("POST", "/graphql", status=503)
    with pytest.raises(ProviderUnavailableError):
        p.create_spot(gpu_type_id="NVIDIA RTX A6000", bid_per_gpu=Decimal("0.2"), image_name="runpod/pytorch")
    assert fake.server.count("POST", "/graphql") == 1 and fake.created == 0
    with pytest.raises(ProviderError, match="cloud_type"):
        p.create_on_demand(gpu_type_id="x", image_name="y", cloud_type="MOON")  # type: ignore[arg-type]


def test_create_on_demand(fake, tmp_path, sleeps):
    inst = make(fake, tmp_path, sleeps).create_on_demand(gpu_type_id="NVIDIA RTX A6000", image_name="runpod/pytorch")
    assert inst.billing is BillingMode.ON_DEMAND and inst.price_per_hour == Decimal("0.49")
    assert inst.status is Status.STARTING  # RUNNING desired, no runtime yet
    assert len(fake.requests_for("podFindAndDeployOnDemand")) == 1


def test_offers_per_instance_hour(fake, tmp_path, sleeps):
    offers = make(fake, tmp_path, sleeps).list_offers("a6000")
    prices = {o.id: o.price_per_hour for o in offers}
    assert prices == {
        "NVIDIA RTX A6000:secure:on-demand": Decimal("0.79"),
        "NVIDIA RTX A6000:community:on-demand": Decimal("0.49"),
        "NVIDIA RTX A6000:secure:spot": Decimal("0.39"),
        "NVIDIA RTX A6000:community:spot": Decimal("0.25"),
    }
    assert all(o.currency == "USD" and o.gpu_memory_bytes == 48 * 2**30 for o in offers)
    rtx4090 = make(fake, tmp_path, sleeps).list_offers("4090")
    spot = [o for o in rtx4090 if o.billing is BillingMode.SPOT]
    assert [o.price_per_hour for o in spot] == [Decimal("0.2")]  # lowestPrice.minimumBidPrice


def test_balance(fake, tmp_path, sleeps):
    assert make(fake, tmp_path, sleeps).balance() == Money(Decimal("41.2"), "USD")


# ----------------------------------------------------------------------------- errors


def test_401_names_the_key_without_printing_it(fake, tmp_path, sleeps):
    p = make(fake, tmp_path, sleeps, key="rp_WRONGWRONGWRONG")
    with pytest.raises(AuthError) as err:
        p.list_instances()
    assert "RUNPOD_API_KEY" in str(err.value) and "rp_WRONGWRONGWRONG" not in str(err.value)


def test_graphql_errors_are_typed(fake, tmp_path, sleeps):
    p = make(fake, tmp_path, sleeps)
    fake.server.inject("POST", "/graphql", gql_error("Something went wrong with the GPU lookup", "gpuTypes"))
    with pytest.raises(ProviderResponseError, match="Something went wrong with the GPU lookup"):
        p.list_offers()
    fake.server.inject("POST", "/graphql", gql_error("You do not have permission to access this pod", "pod"))
    with pytest.raises(AuthError, match="RUNPOD_API_KEY"):
        p.get_instance(POD)
    with pytest.raises(NotFoundError, match="Pod not found"):
        p.graphql("mutation Stop($podId: String!) { podStop(input: {podId: $podId}) { id } }",
                  {"podId": "ghost"}, idempotent=True)


def test_malformed_json(fake, tmp_path, sleeps):
    p = make(fake, tmp_path, sleeps)
    fake.server.inject_malformed_json("POST", "/graphql")
    with pytest.raises(ProviderResponseError, match="malformed JSON"):
        p.list_instances()


# ----------------------------------------------------------------------------- config / registry


def test_config_and_registry(fake, tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match=r"^\[providers.runpod\] unknown key 'apikey'$"):
        RunPodProvider({"apikey": "x"}, data_dir=tmp_path)
    monkeypatch.delenv("RUNPOD_API_KEY", raising=False)
    p = get_provider("runpod", {"base_url": fake.url}, data_dir=tmp_path)
    assert isinstance(p, RunPodProvider)
    with pytest.raises(ConfigError, match="RUNPOD_API_KEY"):
        p.list_instances()
    assert fake.server.calls() == []


def test_started_at_uses_the_clock(fake, tmp_path, sleeps):
    clock = SimClock(datetime(2026, 1, 1, tzinfo=timezone.utc))
    inst = make(fake, tmp_path, sleeps, clock=clock).get_instance(POD)
    assert inst.started_at == clock.now() - timedelta(seconds=3600)
