"""The shared HTTP layer (costctl_providers._http) against a real local fake server."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest

from costctl.clock import SimClock
from costctl_providers._http import (
    AuthError,
    HttpClient,
    NotFoundError,
    ProviderResponseError,
    ProviderUnavailableError,
    RateLimitedError,
    Redactor,
    StatusWaitError,
    wait_for_status,
)
from costctl_providers.base import BillingMode, Instance, Status
from tests.fakes.http import FakeHTTPServer, RecordedRequest, Reply

KEY = "vk_live_9f8e7d6c5b4a3210"


@pytest.fixture
def srv():
    with FakeHTTPServer() as server:
        yield server
        assert not server.errors, server.errors


def client(srv: FakeHTTPServer, **kw) -> tuple[HttpClient, list[float]]:
    slept: list[float] = []
    kw.setdefault("timeout", 2)
    kw.setdefault("backoff", 0.1)
    c = HttpClient(
        srv.url + "/api/v0",
        auth_header=("Authorization", f"Bearer {KEY}"),
        provider="vastai",
        credential_name="VAST_API_KEY",
        sleep=slept.append,
        **kw,
    )
    return c, slept


class FakeInstanceApi:
    """A tiny stateful instance API: PUT /api/v0/instances/{id}/ {"state": "stopped"}."""

    def __init__(self) -> None:
        self.state = "running"
        self.transitions = 0  # how many times the instance actually changed state

    def put(self, req: RecordedRequest):
        want = req.json()["state"]
        if want != self.state:
            self.state = want
            self.transitions += 1
        return {"success": True}


def test_stop_retried_after_5xx_and_applied_exactly_once(srv):
    api = FakeInstanceApi()
    srv.route("PUT", "/api/v0/instances/{id}/", api.put)
    srv.inject_5xx("PUT", "/api/v0/instances/{id}/", times=2, status=503)
    c, slept = client(srv)

    assert c.json("PUT", "/instances/42/", json={"state": "stopped"}, idempotent=True) == {"success": True}

    calls = srv.calls("PUT", "/api/v0/instances/{id}/")
    assert len(calls) == 3  # two 503s, then the one that worked
    assert api.state == "stopped" and api.transitions == 1
    assert all(r.path == "/api/v0/instances/42/" and r.json() == {"state": "stopped"} for r in calls)
    assert all(r.header("Authorization") == f"Bearer {KEY}" for r in calls)
    assert slept and all(s > 0 for s in slept)  # exponential backoff (urllib3: none before the first retry)


def test_stop_timeout_is_retried_and_instance_stopped_once(srv):
    api = FakeInstanceApi()
    state = {"calls": 0}

    def slow_first(req):
        state["calls"] += 1
        api.put(req)  # the provider applies the stop ...
        if state["calls"] == 1:
            return Reply(200, {"success": True}, delay=1.0)  # ... but answers too late
        return {"success": True}

    srv.route("PUT", "/api/v0/instances/{id}/", slow_first)
    c, _ = client(srv, timeout=0.2)
    assert c.json("PUT", "/instances/42/", json={"state": "stopped"}, idempotent=True) == {"success": True}
    assert srv.count("PUT", "/api/v0/instances/{id}/") == 2
    assert api.state == "stopped" and api.transitions == 1


def test_create_is_never_retried_on_5xx(srv):
    srv.route("PUT", "/api/v0/asks/{offer}/", {"success": True, "new_contract": 7})
    srv.inject_5xx("PUT", "/api/v0/asks/{offer}/", times=1, status=503)
    c, slept = client(srv)
    with pytest.raises(ProviderUnavailableError) as err:
        c.json("PUT", "/asks/123/", json={"image": "x"}, idempotent=False)
    assert srv.count("PUT", "/api/v0/asks/{offer}/") == 1
    assert slept == []
    assert "503" in err.value.message and "retries" not in err.value.message


def test_create_is_never_retried_on_timeout_and_says_it_may_have_happened(srv):
    srv.route("PUT", "/api/v0/asks/{offer}/", {"success": True})
    srv.inject_delay("PUT", "/api/v0/asks/{offer}/", 1.0)
    c, _ = client(srv, timeout=0.2)
    with pytest.raises(ProviderUnavailableError) as err:
        c.request("PUT", "/asks/123/", json={}, idempotent=False)
    assert srv.count("PUT", "/api/v0/asks/{offer}/") == 1
    assert "timed out" in err.value.message and "may have been carried out" in err.value.message


def test_create_is_not_retried_on_429_either(srv):
    srv.route("POST", "/api/v0/create", {"ok": True})
    srv.inject_429("POST", "/api/v0/create", retry_after=1)
    c, slept = client(srv)
    with pytest.raises(RateLimitedError) as err:
        c.request("POST", "/create", json={}, idempotent=False)
    assert srv.count("POST", "/api/v0/create") == 1 and slept == []
    assert err.value.retry_after_s == 1


def test_401_names_the_credential_and_never_prints_it(srv, caplog):
    srv.route("GET", "/api/v0/instances/", Reply.json({"error": f"invalid key {KEY}"}, status=401))
    c, _ = client(srv)
    caplog.set_level(logging.DEBUG)
    with pytest.raises(AuthError) as err:
        c.json("GET", "/instances/", idempotent=True)
    msg = err.value.message
    assert "VAST_API_KEY was rejected (401)" in msg
    assert KEY not in msg and KEY not in str(err.value)
    assert err.value.__cause__ is None and err.value.__context__ is None  # no chained requests error
    assert KEY not in caplog.text
    assert srv.count() == 1  # an auth failure is not retried
    assert err.value.exit_code == 1


def test_403_is_an_auth_error_too(srv):
    srv.route("GET", "/api/v0/x", Reply.empty(403))
    c, _ = client(srv)
    with pytest.raises(AuthError, match=r"VAST_API_KEY was rejected \(403\)"):
        c.request("GET", "/x", idempotent=True)


def test_429_retry_after_is_honoured_then_succeeds(srv):
    srv.route("GET", "/api/v0/instances/", {"instances": []})
    srv.inject_429("GET", "/api/v0/instances/", retry_after=7)
    c, slept = client(srv)
    assert c.json("GET", "/instances/", idempotent=True) == {"instances": []}
    assert slept == [7]
    assert srv.count() == 2


def test_retry_after_is_capped(srv):
    srv.route("GET", "/api/v0/i", {})
    srv.inject_429("GET", "/api/v0/i", retry_after=3600)
    c, slept = client(srv, max_retry_after=5)
    c.json("GET", "/i", idempotent=True)
    assert slept == [5]


def test_persistent_429_becomes_rate_limited_error(srv):
    srv.inject_429("GET", "/api/v0/i", retry_after=2, times=10)
    c, slept = client(srv, retries=2)
    with pytest.raises(RateLimitedError) as err:
        c.json("GET", "/i", idempotent=True)
    assert srv.count() == 3 and slept == [2, 2]
    assert "rate limited (429)" in err.value.message and err.value.retry_after_s == 2


def test_persistent_5xx_becomes_provider_unavailable(srv):
    srv.inject_5xx("GET", "/api/v0/i", times=10, status=502)
    c, _ = client(srv, retries=3)
    with pytest.raises(ProviderUnavailableError, match=r"vastai: GET /i failed after 4 attempts: server error 502$") as err:
        c.json("GET", "/i", idempotent=True)
    assert srv.count() == 4 and err.value.attempts == 4


def test_500_is_retried_like_the_other_transient_statuses(srv):
    srv.route("GET", "/api/v0/i", {"ok": 1})
    srv.inject_5xx("GET", "/api/v0/i", times=1, status=500)
    c, slept = client(srv)
    assert c.json("GET", "/i", idempotent=True) == {"ok": 1}
    assert srv.count() == 2 and len(slept) == 1


def test_501_is_permanent(srv):
    srv.inject_5xx("GET", "/api/v0/i", times=3, status=501)
    c, slept = client(srv)
    with pytest.raises(ProviderUnavailableError, match=r"failed after 1 attempt: server error 501") as err:
        c.json("GET", "/i", idempotent=True)
    assert srv.count() == 1 and slept == [] and err.value.transient is False


def test_read_timeouts_exhaust_retries(srv):
    srv.inject_delay("GET", "/api/v0/i", 1.0, times=5)
    c, _ = client(srv, timeout=0.1, retries=2)
    with pytest.raises(ProviderUnavailableError, match=r"GET /i failed after 3 attempts: timed out after 0.1s$"):
        c.json("GET", "/i", idempotent=True)
    assert srv.count() == 3


def test_dropped_connection_is_retried_for_idempotent_calls(srv):
    srv.route("GET", "/api/v0/i", {"ok": 1})
    srv.inject_disconnect("GET", "/api/v0/i")
    c, _ = client(srv)
    assert c.json("GET", "/i", idempotent=True) == {"ok": 1}
    assert srv.count() == 2


def test_connection_refused():
    with FakeHTTPServer() as s:
        url = s.url  # a port that was just free and is now closed
    c = HttpClient(url, provider="runpod", timeout=0.5, retries=1, sleep=lambda s: None)
    with pytest.raises(ProviderUnavailableError, match="runpod: GET /x failed after 2 attempts: could not connect"):
        c.request("GET", "/x", idempotent=True)


def test_malformed_json(srv):
    srv.inject_malformed_json("GET", "/api/v0/i")
    c, _ = client(srv)
    with pytest.raises(ProviderResponseError, match="malformed JSON in the answer to GET /i"):
        c.json("GET", "/i", idempotent=True)


def test_404_is_not_found(srv):
    srv.route("GET", "/api/v0/instances/{id}/", Reply.json({"error": "no such instance"}, status=404))
    c, _ = client(srv)
    with pytest.raises(NotFoundError, match=r"GET /instances/9/ failed after 1 attempt: not found \(404\)"):
        c.json("GET", "/instances/9/", idempotent=True)


def test_ok_statuses_are_returned(srv):
    srv.route("GET", "/api/v0/i", Reply.empty(404))
    c, _ = client(srv)
    assert c.request("GET", "/i", idempotent=True, ok_statuses={404}).status_code == 404


def test_other_4xx_echoing_the_secret_is_redacted(srv):
    srv.route("POST", "/api/v0/i", Reply.json({"error": "bad request", "echo": f"Authorization: Bearer {KEY}"}, status=422))
    c, _ = client(srv)
    with pytest.raises(ProviderResponseError) as err:
        c.json("POST", "/i", json={"a": 1}, idempotent=False)
    assert KEY not in err.value.message and "422" in err.value.message
    assert err.value.status == 422


def test_a_secret_the_cut_of_an_echoed_answer_falls_inside_is_masked_before_the_cut(srv):
    # the quoted answer is cut to 120 characters: the key straddles the cut, and only a mask
    # applied before the cut hides its first half
    secret = "sk-live-0123456789abcdefFEDCBA"
    body = '{"msg": "' + "x" * 100 + " " + secret + ' was refused"}'
    assert body.index(secret) < 117 < body.index(secret) + len(secret)
    srv.route("GET", "/api/v0/i", Reply(status=400, body=body.encode(), headers={"Content-Type": "application/json"}))
    c, _ = client(srv, secrets=[secret])
    with pytest.raises(ProviderResponseError) as err:
        c.json("GET", "/i", idempotent=True)
    assert "400" in err.value.message and "sk-live-0123" not in err.value.message and "***" in err.value.message


def test_envelope_error_helper_redacts(srv):
    c, _ = client(srv, secrets=["console-jwt-abcdef"])
    err = c.response_error("token console-jwt-abcdef refused (code AuthFailed)")
    assert isinstance(err, ProviderResponseError)
    assert err.message == "vastai: token *** refused (code AuthFailed)"


def test_query_params_and_json_body_are_sent(srv):
    srv.route("POST", "/api/v0/bundles/", lambda req: {"offers": [], "echo": req.json()})
    srv.route("GET", "/api/v0/instances/", lambda req: {"q": req.query})
    c, _ = client(srv)
    assert c.json("POST", "/bundles/", json={"gpu_name": {"eq": "RTX 4090"}}, idempotent=True)["echo"] == {
        "gpu_name": {"eq": "RTX 4090"}
    }
    assert c.json("GET", "/instances/", params={"owner": "me"}, idempotent=True) == {"q": {"owner": ["me"]}}
    assert srv.unexpected() == []


def test_unexpected_request_gets_400(srv):
    c, _ = client(srv)
    with pytest.raises(ProviderResponseError, match="answered 400"):
        c.json("GET", "/nothing-here", idempotent=True)
    assert [r.path for r in srv.unexpected()] == ["/api/v0/nothing-here"]


def test_redactor():
    r = Redactor(["s3cr3t-token", "ab"])  # too short to redact safely: ignored
    assert r("x s3cr3t-token y") == "x *** y"
    assert r("Authorization: Bearer other-value-123") == "Authorization: Bearer ***"
    assert r("{'Authorization': 'abcdef'}") == "{'Authorization': '***'}"
    assert r("ab cd") == "ab cd"


def _inst(status: Status) -> Instance:
    return Instance(
        provider="fake", id="i-1", gpu="RTX 4090", gpu_raw="RTX 4090", gpu_count=1,
        billing=BillingMode.ON_DEMAND, price_per_hour=None, currency="USD", status=status, status_raw=status.value,
    )


def test_wait_for_status_polls_until_stopped():
    clock = SimClock()
    seq = iter([Status.STOPPING, Status.STOPPING, Status.STOPPED])
    start = clock.now()
    got = wait_for_status(lambda: _inst(next(seq)), {Status.STOPPED}, timeout_s=60, poll_s=5,
                          clock=clock, sleep=clock.advance)
    assert got.status is Status.STOPPED
    assert clock.now() - start == timedelta(seconds=10)


def test_wait_for_status_stops_on_failure_status():
    clock = SimClock()
    seq = iter([Status.STOPPING, Status.ERROR])
    with pytest.raises(StatusWaitError, match="is error") as err:
        wait_for_status(lambda: _inst(next(seq)), {Status.STOPPED}, timeout_s=60, poll_s=5,
                        clock=clock, sleep=clock.advance)
    assert err.value.last is not None and err.value.last.status is Status.ERROR


def test_wait_for_status_times_out():
    clock = SimClock()
    with pytest.raises(StatusWaitError, match="still stopping after 30s"):
        wait_for_status(lambda: _inst(Status.STOPPING), {Status.STOPPED}, timeout_s=30, poll_s=10,
                        clock=clock, sleep=clock.advance)
    assert clock.now() - SimClock().now() == timedelta(seconds=30)


def test_wait_for_status_tolerates_transient_errors():
    clock = SimClock()
    answers = [ProviderUnavailableError("fake: 503"), _inst(Status.STOPPED)]

    def get():
        a = answers.pop(0)
        if isinstance(a, Exception):
            raise a
        return a

    assert wait_for_status(get, {Status.STOPPED}, timeout_s=60, poll_s=1, clock=clock,
                           sleep=clock.advance).status is Status.STOPPED


def test_wait_for_status_against_fake_server(srv):
    """Stop, then poll a fake status endpoint until it reports stopped."""
    statuses = iter(["stopping", "stopping", "stopped"])
    srv.route("GET", "/api/v0/instances/{id}/", lambda req: {"actual_status": next(statuses)})
    c, _ = client(srv)
    clock = SimClock()

    def get():
        raw = c.json("GET", "/instances/5/", idempotent=True)["actual_status"]
        return _inst(Status(raw))

    assert wait_for_status(get, {Status.STOPPED}, timeout_s=30, poll_s=2, clock=clock,
                           sleep=clock.advance).status is Status.STOPPED
    assert srv.count("GET") == 3


def test_backoff_is_exponential_with_bounded_jitter(srv):
    srv.route("GET", "/api/v0/i", {"ok": 1})
    srv.inject_5xx("GET", "/api/v0/i", times=3, status=503)
    c, slept = client(srv, retries=3, backoff=1.0, backoff_max=30)
    assert c.json("GET", "/i", idempotent=True) == {"ok": 1}
    assert len(slept) == 3
    for n, s in enumerate(slept):  # backoff × 2^n plus up to `backoff` of jitter
        assert 2 ** n <= s <= 2 ** n + 1.0


def test_backoff_wait_is_capped(srv):
    srv.route("GET", "/api/v0/i", {"ok": 1})
    srv.inject_5xx("GET", "/api/v0/i", times=2, status=502)
    c, slept = client(srv, retries=2, backoff=10.0, backoff_max=12, deadline=600)
    c.json("GET", "/i", idempotent=True)
    assert slept[0] <= 12 and slept[1] == 12


def test_zero_retries_means_one_attempt(srv):
    srv.inject_5xx("GET", "/api/v0/i", times=2, status=503)
    c, slept = client(srv, retries=0)
    with pytest.raises(ProviderUnavailableError, match="failed after 1 attempt: server error 503"):
        c.json("GET", "/i", idempotent=True)
    assert srv.count() == 1 and slept == []
