"""Preemption-notice sources against local fake metadata servers, cloud detection, the poller.

Fake answers are shaped after the providers' documentation:
AWS EC2 User Guide "Spot Instance interruption notices" / "Use IMDSv2";
Google Cloud "Detect if a VM was preempted";
Azure "Scheduled Events for Linux VMs" (api-version 2020-07-01).
"""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone

import pytest

from costctl.clock import SimClock
from costctl.errors import ProviderError
from costctl_providers.notices import (
    AwsNoticeSource,
    AzureNoticeSource,
    GcpNoticeSource,
    Notice,
    NoticePoller,
    ProviderNoticeSource,
    detect_cloud,
    detect_marketplace,
)
from costctl_providers.sim import SimProvider
from tests.fakes.http import FakeHTTPServer, Reply

IMDS_TOKEN = "AQAEAImdsTokenValue=="


@pytest.fixture
def meta():
    with FakeHTTPServer() as server:
        yield server
        assert not server.errors, server.errors


def aws_routes(meta: FakeHTTPServer, *instance_action: Reply) -> None:
    meta.route("PUT", "/latest/api/token", Reply.text(IMDS_TOKEN))

    def action(req):
        if req.header("X-aws-ec2-metadata-token") != IMDS_TOKEN:
            return Reply.empty(401)
        return Reply.empty(404)

    meta.route("GET", "/latest/meta-data/spot/instance-action", action)
    meta.inject("GET", "/latest/meta-data/spot/instance-action", *instance_action)


def test_aws_404_means_no_notice_and_200_is_a_notice(meta):
    body = {"action": "terminate", "time": "2026-01-01T00:02:00Z"}
    aws_routes(meta, Reply.empty(404), Reply.json(body))
    src = AwsNoticeSource(meta.url, timeout=1)
    assert src.poll() is None
    notice = src.poll()
    assert notice == Notice("terminate", datetime(2026, 1, 1, 0, 2, tzinfo=timezone.utc), "aws")
    assert notice.raw == body
    put = meta.last("PUT", "/latest/api/token")
    assert put.header("X-aws-ec2-metadata-token-ttl-seconds") == "21600"
    gets = meta.calls("GET", "/latest/meta-data/spot/instance-action")
    assert [g.header("X-aws-ec2-metadata-token") for g in gets] == [IMDS_TOKEN, IMDS_TOKEN]
    assert meta.count("PUT") == 1  # the token is reused
    assert meta.unexpected() == []


def test_aws_expired_token_is_refreshed_once(meta):
    aws_routes(meta, Reply.empty(401))
    src = AwsNoticeSource(meta.url)
    assert src.poll() is None
    assert meta.count("PUT") == 2


def test_aws_malformed_answer_is_an_error(meta):
    aws_routes(meta, Reply.json({"action": "terminate"}))
    with pytest.raises(ProviderError, match="unexpected spot/instance-action answer"):
        AwsNoticeSource(meta.url).poll()


@pytest.mark.realtime  # a latency bound in real seconds
def test_notice_within_one_poll_interval(meta):
    """404 until the notice is issued, then 200 with a deadline: the poller reports it within
    one poll interval of its appearance, and only once."""
    deadline = "2026-03-01T12:00:00Z"
    issued = threading.Event()
    first_seen = threading.Event()
    meta.route("PUT", "/latest/api/token", Reply.text(IMDS_TOKEN))
    meta.route(
        "GET", "/latest/meta-data/spot/instance-action",
        lambda req: Reply.json({"action": "stop", "time": deadline}) if issued.is_set() else Reply.empty(404),
    )
    got: list[tuple[float, Notice]] = []

    def on_notice(n: Notice) -> None:
        got.append((time.monotonic(), n))
        first_seen.set()

    interval = 0.2
    poller = NoticePoller(AwsNoticeSource(meta.url), interval_s=interval, on_notice=on_notice).start()
    try:
        time.sleep(2.5 * interval)  # a few polls answered 404
        assert got == [] and meta.count("GET") >= 2
        issued.set()
        t_issued = time.monotonic()
        assert first_seen.wait(5)
        time.sleep(3 * interval)  # more polls see the same notice ...
    finally:
        poller.stop()
    assert len(got) == 1  # ... and it is reported once
    seen_at, notice = got[0]
    assert seen_at - t_issued <= interval + 0.25
    assert notice.action == "stop" and notice.deadline == datetime(2026, 3, 1, 12, tzinfo=timezone.utc)
    assert poller.latest == notice


def test_poll_once_reports_a_notice_on_the_poll_that_sees_it(meta):
    aws_routes(meta, Reply.empty(404), Reply.json({"action": "hibernate", "time": "2026-01-01T00:00:00+00:00"}))
    poller = NoticePoller(AwsNoticeSource(meta.url), interval_s=5)
    assert poller.poll_once() is None
    assert poller.poll_once().action == "hibernate"


def test_poller_keeps_errors_and_reports_no_notice(meta):
    meta.route("PUT", "/latest/api/token", Reply.empty(503))
    poller = NoticePoller(AwsNoticeSource(meta.url), interval_s=5)
    assert poller.poll_once() is None
    assert poller.last_error is not None and "503" in poller.last_error.message


def test_gcp_false_then_true(meta):
    answers = iter(["FALSE", "FALSE", "TRUE", "TRUE"])

    def preempted(req):
        assert req.header("Metadata-Flavor") == "Google"
        return Reply.text(next(answers), headers={"Metadata-Flavor": "Google"})

    meta.route("GET", "/computeMetadata/v1/instance/preempted", preempted)
    clock = SimClock()
    src = GcpNoticeSource(meta.url, clock=clock)
    assert src.poll() is None and src.poll() is None
    seen = clock.now()
    n1 = src.poll()
    clock.advance(5)
    n2 = src.poll()
    assert n1 == n2 == Notice("preempt", seen + timedelta(seconds=30), "gcp")


def test_azure_scheduled_events(meta):
    events = {
        "DocumentIncarnation": 3,
        "Events": [
            {"EventId": "A", "EventType": "Freeze", "ResourceType": "VirtualMachine", "Resources": ["vm1"],
             "EventStatus": "Scheduled", "NotBefore": "Mon, 19 Sep 2016 18:20:00 GMT"},
            {"EventId": "B", "EventType": "Preempt", "ResourceType": "VirtualMachine", "Resources": ["vm1"],
             "EventStatus": "Scheduled", "NotBefore": "Mon, 19 Sep 2016 18:29:47 GMT", "Description": "",
             "EventSource": "Platform", "DurationInSeconds": -1},
        ],
    }
    meta.route("GET", "/metadata/scheduledevents", lambda req: events if req.header("Metadata") == "true" else Reply.empty(400))
    meta.inject("GET", "/metadata/scheduledevents", Reply.json({"DocumentIncarnation": 2, "Events": []}))
    src = AzureNoticeSource(meta.url)
    assert src.poll() is None
    n = src.poll()
    assert n is not None and n.action == "preempt" and n.source == "azure"
    assert n.deadline == datetime(2016, 9, 19, 18, 29, 47, tzinfo=timezone.utc)
    assert n.raw["EventId"] == "B"
    assert all(r.query == {"api-version": ["2020-07-01"]} for r in meta.calls("GET"))


def test_sim_notice_source(tmp_path):
    clock = SimClock()
    p = SimProvider({"billing": "spot"}, data_dir=tmp_path, clock=clock)
    src = ProviderNoticeSource(p, "sim-local")
    assert src.poll() is None
    p.inject_preemption("sim-local", notice_s=90)
    n = NoticePoller(src, interval_s=1).poll_once()
    assert n is not None and n.source == "sim" and n.deadline == clock.now() + timedelta(seconds=90)
    assert n.seconds_left(clock.now()) == 90


# ----------------------------------------------------------------------------- detection


class Recording:
    """Three fake metadata servers (AWS/Azure share an address in reality; separate here)."""

    def __init__(self) -> None:
        self.aws = FakeHTTPServer().start()
        self.gcp = FakeHTTPServer().start()
        self.azure = FakeHTTPServer().start()

    def urls(self) -> dict[str, str]:
        return {"aws_base_url": self.aws.url, "gcp_base_url": self.gcp.url, "azure_base_url": self.azure.url}

    def total(self) -> int:
        return self.aws.count() + self.gcp.count() + self.azure.count()

    def stop(self) -> None:
        for s in (self.aws, self.gcp, self.azure):
            s.stop()


@pytest.fixture
def clouds():
    r = Recording()
    yield r
    r.stop()


@pytest.mark.parametrize("env,hostname,platform", [
    ({}, "autodl-container-1a2b3c4d5e", "autodl"),
    ({"VAST_CONTAINERLABEL": "C.123456"}, "abc", "vastai"),
    ({"CONTAINER_ID": "123456"}, "abc", "vastai"),
    ({"RUNPOD_POD_ID": "abcd1234"}, "abc", "runpod"),
])
def test_marketplaces_never_contact_a_metadata_address(clouds, env, hostname, platform):
    clouds.aws.route("PUT", "/latest/api/token", Reply.text(IMDS_TOKEN))  # even if one would answer
    d = detect_cloud(env=env, hostname=hostname, timeout=0.5, **clouds.urls())
    assert d.platform == platform and d.source is None
    assert clouds.total() == 0
    assert detect_marketplace(env, hostname) == platform


def test_sim_provider_uses_its_own_notices_and_no_metadata_address(clouds, tmp_path):
    p = SimProvider({"billing": "spot"}, data_dir=tmp_path)
    d = detect_cloud(env={}, hostname="laptop", provider=p, instance_id="sim-local", **clouds.urls())
    assert d.platform == "sim" and isinstance(d.source, ProviderNoticeSource)
    assert d.source.poll() is None
    assert clouds.total() == 0


def test_no_cloud_detected_means_no_source_and_no_polling(clouds):
    d = detect_cloud(env={}, hostname="laptop", timeout=0.5, **clouds.urls())
    assert d == type(d)(None, None)
    probes = clouds.total()
    assert probes == 3  # one probe each, at detection time (all answered 400: not a cloud)
    time.sleep(0.2)
    assert clouds.total() == probes  # and nothing polls afterwards


def test_aws_detected(clouds):
    aws_routes(clouds.aws, Reply.empty(404))
    d = detect_cloud(env={}, hostname="ip-10-0-0-1", timeout=0.5, **clouds.urls())
    assert d.platform == "aws" and isinstance(d.source, AwsNoticeSource)
    assert d.source.poll() is None


def test_gcp_detected_by_its_header(clouds):
    clouds.gcp.route("GET", "/computeMetadata/v1/", Reply.text("instance/\nproject/\n", headers={"Metadata-Flavor": "Google"}))
    d = detect_cloud(env={}, hostname="vm", timeout=0.5, **clouds.urls())
    assert d.platform == "gcp" and isinstance(d.source, GcpNoticeSource)


def test_azure_detected(clouds):
    clouds.azure.route("GET", "/metadata/instance", {"compute": {"vmId": "x"}, "network": {}})
    d = detect_cloud(env={}, hostname="vm", timeout=0.5, **clouds.urls())
    assert d.platform == "azure" and isinstance(d.source, AzureNoticeSource)


def test_aws_disabled_by_the_sdk_variable(clouds):
    aws_routes(clouds.aws, Reply.empty(404))
    d = detect_cloud(env={"AWS_EC2_METADATA_DISABLED": "true"}, hostname="vm", timeout=0.5, **clouds.urls())
    assert d.platform is None and clouds.aws.count() == 0


@pytest.mark.realtime  # a latency bound in real seconds
def test_detection_is_quick_when_metadata_hangs(clouds):
    for s, (m, p) in ((clouds.aws, ("PUT", "/latest/api/token")), (clouds.gcp, ("GET", "/computeMetadata/v1/")),
                      (clouds.azure, ("GET", "/metadata/instance"))):
        s.inject_delay(m, p, 5)
    t0 = time.monotonic()
    d = detect_cloud(env={}, hostname="vm", timeout=0.2, **clouds.urls())
    assert d.platform is None and time.monotonic() - t0 < 1.5
