"""A stop you can trust: transient failures of a stop are retried, permanent ones are not.

Each of the three HTTP adapters against its local fake (real HTTP on 127.0.0.1): the first stop
call fails once — HTTP 500, 502, a timeout (the stop happened, the answer came too late), a
dropped connection, a TCP reset, 429 with ``Retry-After``, a failure inside a 200 (RunPod
GraphQL ``errors[]``, an AutoDL error envelope) — and the stop must end with exactly one real
stop on the provider's side, the instance confirmed stopped, and the requests each fake received
counted. Sleeps are recorded, never slept (the wait between attempts is injected).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from costctl_providers.base import Status
from costctl_providers.errors import (
    AuthError, NotFoundError, ProviderResponseError, ProviderUnavailableError, RateLimitedError,
)
from tests.fakes.autodl import PRO
from tests.fakes.http import Reply
from tests.provider_rigs import LATE, RIGS, TIMEOUT, Rig, _autodl, _runpod, _vast


@pytest.fixture(params=sorted(RIGS))
def rig(request, tmp_path) -> Iterator[Rig]:
    yield from RIGS[request.param](tmp_path)


@pytest.fixture(params=sorted(RIGS))
def rig_short_timeout(request, tmp_path) -> Iterator[Rig]:
    yield from RIGS[request.param](tmp_path, timeout=TIMEOUT)


def _assert_stopped_once(rig: Rig, inst, *, stop_requests: int = 2) -> None:
    assert inst.status is Status.STOPPED
    assert rig.stops_done() == 1, "the stop took effect exactly once"
    assert rig.stop_requests() == stop_requests, "the failed stop call and its one retry"
    assert rig.provider.get_instance(rig.instance_id).status is Status.STOPPED  # confirmed


# ----------------------------------------------------------------------------- transient: retried


@pytest.mark.parametrize("status", [500, 502, 503, 504])
def test_first_stop_answered_5xx_is_retried_and_stops_once(rig, status):
    rig.inject(Reply.empty(status))
    _assert_stopped_once(rig, rig.provider.stop_instance(rig.instance_id))
    assert len(rig.sleeps) >= 1 and rig.sleeps[0] > 0  # backoff with jitter, recorded, not slept


def test_first_stop_timing_out_is_retried_and_stops_once(rig_short_timeout):
    rig = rig_short_timeout
    rig.delay_stop(LATE)  # carried out by the provider, answered after the client gave up
    _assert_stopped_once(rig, rig.provider.stop_instance(rig.instance_id))


@pytest.mark.parametrize("fault", ["disconnect", "reset"])
def test_first_stop_connection_dropped_is_retried_and_stops_once(rig, fault):
    rig.inject(Reply(close=True) if fault == "disconnect" else Reply(reset=True))
    _assert_stopped_once(rig, rig.provider.stop_instance(rig.instance_id))


def test_first_stop_rate_limited_waits_retry_after_and_stops_once(rig):
    rig.inject(Reply.empty(429, {"Retry-After": "2"}))
    _assert_stopped_once(rig, rig.provider.stop_instance(rig.instance_id))
    assert rig.sleeps[0] == 2.0  # the provider's Retry-After, not the backoff


@pytest.mark.parametrize("name", ["autodl", "runpod"])  # Vast has no transient failure inside a 200
def test_first_stop_failing_inside_a_200_is_retried_and_stops_once(tmp_path, name):
    for rig in RIGS[name](tmp_path):
        assert rig.in_200_error is not None
        rig.in_200_error()
        _assert_stopped_once(rig, rig.provider.stop_instance(rig.instance_id))


def test_status_reads_are_retried(rig):
    before = rig.status_reads()
    rig.inject_read(Reply.empty(503))
    rig.inject_read(Reply(reset=True))
    inst = rig.provider.stop_instance(rig.instance_id)
    assert inst.status is Status.STOPPED and rig.stops_done() == 1
    assert rig.stop_requests() == 1
    assert rig.status_reads() - before >= 3  # the two failures, then reads that worked


def test_persistent_5xx_on_stop_says_how_many_attempts(rig):
    for _ in range(6):
        rig.inject(Reply.empty(500))
    with pytest.raises(ProviderUnavailableError, match=rf"^{rig.name}: \S.* failed after 4 attempts: .*500") as err:
        rig.provider.stop_instance(rig.instance_id)
    assert err.value.attempts == 4 and rig.stop_requests() == 4 and rig.stops_done() == 0
    assert len(rig.sleeps) == 3


def test_retry_after_is_capped_and_the_cap_is_said(tmp_path):
    for r in _vast(tmp_path, retries=1, retry_after_max=5):
        for _ in range(3):
            r.inject(Reply.empty(429, {"Retry-After": "3600"}))
        with pytest.raises(RateLimitedError) as err:
            r.provider.stop_instance(r.instance_id)
        assert r.sleeps == [5]
        assert "failed after 2 attempts" in err.value.message
        assert "Retry-After 3600s, capped at 5s" in err.value.message
        assert err.value.retry_after_s == 3600


def test_the_retry_deadline_bounds_the_waits(tmp_path):
    for r in _vast(tmp_path, retries=10, retry_after_max=60, retry_deadline=100):
        for _ in range(10):
            r.inject(Reply.empty(503, {"Retry-After": "40"}))
        with pytest.raises(ProviderUnavailableError, match=r"failed after 3 attempts \(retry deadline 100s reached\)"):
            r.provider.stop_instance(r.instance_id)
        assert r.sleeps == [40, 40] and r.stop_requests() == 3


# ----------------------------------------------------------------------------- permanent: not retried


@pytest.mark.parametrize("status,error", [(400, ProviderResponseError), (401, AuthError), (403, AuthError),
                                          (404, NotFoundError)])
def test_permanent_statuses_on_stop_are_not_retried(rig, status, error):
    rig.inject(Reply.json({"error": "no"}, status=status))
    with pytest.raises(error, match=r"failed after 1 attempt: "):
        rig.provider.stop_instance(rig.instance_id)
    assert rig.stop_requests() == 1 and rig.sleeps == []


def test_a_permanent_graphql_error_is_not_retried(tmp_path):
    for r in _runpod(tmp_path):
        r.fake.inject_graphql_error("podStop", 'Variable "$podId" of required type "String!" was not provided.',
                                    code="GRAPHQL_VALIDATION_FAILED")
        with pytest.raises(ProviderResponseError, match="podStop failed after 1 attempt: GraphQL error: Variable"):
            r.provider.stop_instance(r.instance_id)
        assert r.stop_requests() == 1 and r.stops_done() == 0


def test_a_graphql_rate_limit_is_transient(tmp_path):
    for r in _runpod(tmp_path):
        r.fake.inject_graphql_error("podStop", "Rate limit exceeded", code="RATE_LIMITED", times=9)
        with pytest.raises(RateLimitedError, match="podStop failed after 4 attempts: GraphQL error: Rate limit"):
            r.provider.stop_instance(r.instance_id)
        assert r.stop_requests() == 4


@pytest.mark.parametrize("code,msg,transient", [
    ("InternalError", "系统繁忙,请稍后再试", True),
    ("TooManyRequests", "请求过于频繁", True),
    ("InternalError", "当前算力规格暂无库存, 请修改配置或稍等再试", False),  # no stock: permanent
    ("RequestParameterIsWrong", "请求参数错误", False),
    ("SomethingNew", "?", False),  # unknown codes are permanent
])
def test_autodl_envelope_codes_are_classified(tmp_path, code, msg, transient):
    for r in _autodl(tmp_path, retries=1):
        r.fake.inject_envelope(f"{PRO}/list", code, msg, times=2)
        with pytest.raises((ProviderUnavailableError, RateLimitedError, ProviderResponseError)) as err:
            r.provider.list_instances()
        assert getattr(err.value, "transient", False) is transient
        assert r.fake.server.count("POST", f"{PRO}/list") == (2 if transient else 1)
        assert f"list failed after {2 if transient else 1} attempt" in err.value.message


# ----------------------------------------------------------------------------- creates: never retried


def test_a_create_failing_inside_a_200_is_not_retried(tmp_path):
    for r in _runpod(tmp_path):
        r.fake.inject_graphql_error("podFindAndDeployOnDemand", "Internal server error", code="INTERNAL_SERVER_ERROR")
        with pytest.raises(ProviderUnavailableError,
                           match=r"podFindAndDeployOnDemand failed after 1 attempt \(not retried: .* not idempotent\)"):
            r.provider.create_on_demand(gpu_type_id="NVIDIA RTX A6000", image_name="runpod/pytorch")
        assert len(r.fake.requests_for("podFindAndDeployOnDemand")) == 1 and r.fake.created == 0
    for a in _autodl(tmp_path):
        a.fake.inject_envelope(f"{PRO}/create", "InternalError", "系统繁忙,请稍后再试")
        with pytest.raises(ProviderUnavailableError, match="create failed after 1 attempt"):
            a.provider.create_instance(gpu_spec_uuid="pro6000-p", image_uuid="image-x", cuda_v_from=118)
        assert a.fake.server.count("POST", f"{PRO}/create") == 1 and a.fake.created == 0
