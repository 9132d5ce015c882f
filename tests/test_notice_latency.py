"""Notice -> checkpoint request, fast at the defaults: the three in-guest sources against local
fakes of their metadata endpoints (tests/fakes/metadata.py), one kept-alive connection per
source, GCP long-polled, the watch's poll cadence within the documented ``[preemption]
poll_interval`` on simulated clocks. No wall-clock assertion here: benchmarks/bench_notice.py
measures the real latency."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone

import pytest
import requests
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from costctl.config import PreemptionConfig
from costctl.ledger.schema import CheckpointRow
from costctl_providers.notices import (
    GCP_LONG_POLL_S,
    AwsNoticeSource,
    AzureNoticeSource,
    GcpNoticeSource,
    NoticePoller,
    cloud_source,
)
from lifecycle_support import PY, T0, SimClock, drive, settings, watcher
from tests.fakes.metadata import FakeMetadata

SOURCES = {"aws": AwsNoticeSource, "gcp": GcpNoticeSource, "azure": AzureNoticeSource}


@pytest.fixture(params=sorted(SOURCES))
def fake(request):
    with FakeMetadata(request.param) as f:
        yield f


def test_each_fake_refuses_what_its_cloud_refuses(fake):
    """The fakes enforce the real services' headers, so the sources' passing requests mean
    the sources send them: no token / no Metadata-Flavor / no Metadata: true are refused."""
    path = {"aws": "/latest/meta-data/spot/instance-action", "gcp": "/computeMetadata/v1/instance/preempted",
            "azure": "/metadata/scheduledevents?api-version=2020-07-01"}[fake.kind]
    r = requests.get(fake.url + path, timeout=5)
    assert r.status_code == {"aws": 401, "gcp": 403, "azure": 400}[fake.kind]
    if fake.kind == "azure":
        r = requests.get(fake.url + "/metadata/scheduledevents", headers={"Metadata": "true"}, timeout=5)
        assert r.status_code == 400 and "api-version" in r.text
    if fake.kind == "aws":
        assert requests.put(fake.url + "/latest/api/token", timeout=5).status_code == 400  # no TTL header


def test_each_source_sees_the_notice_on_one_kept_alive_connection(fake):
    src = SOURCES[fake.kind](fake.url, timeout=5)
    fake.refused.clear()
    for _ in range(3):
        assert src.poll() is None
    fake.issue(notice_s=30)
    notice = src.poll()
    assert notice is not None and notice.source == fake.kind
    assert notice.action in ("terminate", "preempt")
    left = notice.seconds_left(datetime.now(timezone.utc))
    assert 0 < left <= 31
    assert fake.refused == []
    assert fake.connections == 1  # one TCP connection for every poll (and the AWS token)
    src.http.close()


def test_gcp_long_poll_is_answered_when_the_notice_is_set():
    with FakeMetadata("gcp") as fake:
        src = GcpNoticeSource(fake.url, timeout=5, long_poll_s=30)
        assert src.poll() is None  # a plain read first: it gives the ETag
        got = []
        t = threading.Thread(target=lambda: got.append(src.poll()))
        t.start()
        assert fake.wait_until_held()  # the server holds the call (timeout_sec=30) ...
        fake.issue(notice_s=30)
        t.join(20)
        assert not t.is_alive()
        assert got and got[0] is not None and got[0].action == "preempt"
        assert fake.held == ["changed"]  # ... and answers it on the change, not at its timeout
        # A change between two calls: the stale ETag is answered at once, without holding.
        fake.clear()
        assert src.poll() is None and fake.held[-1] == "etag"
        fake.issue(notice_s=30)
        assert src.poll() is not None and fake.held == ["changed", "etag", "etag"]
        assert src.poll(wait=False) is not None and len(fake.held) == 3  # a plain read is never held
        assert fake.refused == []


def test_a_long_polling_poller_reports_the_notice_from_its_own_thread_without_spinning():
    with FakeMetadata("gcp") as fake:
        seen = threading.Event()
        poller = NoticePoller(GcpNoticeSource(fake.url, timeout=5, long_poll_s=30), interval_s=1,
                              on_notice=lambda n: seen.set())
        assert poller.long_poll
        poller.start()
        try:
            assert fake.wait_until_held()
            fake.issue(notice_s=30)
            assert seen.wait(20)
        finally:
            poller.stop()
        # the plain read, the held call answered by the change, and at most the next held one
        assert fake.requests["/computeMetadata/v1/instance/preempted"] <= 3


def test_a_named_source_is_built_without_detection():
    for name, cls in SOURCES.items():
        found = cloud_source(name, aws_base_url="http://127.0.0.1:9", gcp_base_url="http://127.0.0.1:9",
                             azure_base_url="http://127.0.0.1:9")
        assert found.platform == name and isinstance(found.source, cls)
    assert cloud_source("gcp").source.long_poll_s == GCP_LONG_POLL_S
    with pytest.raises(ValueError, match="allowed: aws, gcp, azure"):
        cloud_source("sim")


SPOT = """
[instance]
provider = "sim"
billing = "spot"
[watch]
sample_interval = "5s"
"""
#: A job that, asked for a checkpoint, acknowledges and exits (the watch then ends).
SAVES = ("import time\nfrom costctl import job\nwhile not job.checkpoint_requested():\n    time.sleep(0.02)\n"
         "job.acknowledge_checkpoint()\n")


def test_the_watch_polls_notices_within_the_documented_interval_by_default(tmp_path):
    """The default ``poll_interval`` is what PreemptionConfig documents (1 s), and the watch's
    notice job fires at that cadence: consecutive fire times of its real APScheduler trigger,
    computed for a simulated 'now', are never further apart."""
    default = PreemptionConfig().poll_interval
    assert default == timedelta(seconds=1) and "default 1 s" in PreemptionConfig.__doc__
    s = settings(tmp_path, SPOT)
    clock = SimClock(T0)
    w = watcher(s, [PY, "-c", "pass"], clock, on_exit="leave")
    made = []
    drive(w, clock, on_step=lambda now: made.append(w.make_scheduler()) if not made else None, max_real_s=30)
    job = next(j for j in made[0].get_jobs() if j.id == "notices")
    assert job.executor == "threads" and job.max_instances == 1
    fire = job.trigger.get_next_fire_time(None, T0)
    gaps = []
    for _ in range(20):
        nxt = job.trigger.get_next_fire_time(fire, fire + timedelta(microseconds=1))
        gaps.append(nxt - fire)
        fire = nxt
    assert max(gaps) <= default


@pytest.mark.parametrize("kind", ["aws", "gcp", "azure"])
def test_a_notice_from_the_metadata_fake_is_a_checkpoint_request_within_one_poll(tmp_path, kind):
    """A real watch (real child, simulated clock) reading ``[preemption] source`` from the fake:
    the checkpoint request file appears on the first poll after the notice is issued, at most
    one ``poll_interval`` (simulated seconds) later. (A stepped watch reads GCP plainly: it
    polls in the caller's thread, which must not be held; run() long-polls in a thread.)"""
    with FakeMetadata(kind) as fake:
        s = settings(tmp_path, SPOT + f'[preemption]\nsource = "{kind}"\n{kind}_base_url = "{fake.url}"\n'
                     f'[checkpoint]\nperiodic = "off"\n')
        clock = SimClock(T0)
        w = watcher(s, [PY, "-c", SAVES], clock, on_exit="leave")
        marks: dict[str, datetime] = {}

        def on_step(now):
            if "issued" not in marks and now >= T0 + timedelta(seconds=3.6):
                fake.issue(notice_s=120, now=now)
                marks["issued"] = now

        drive(w, clock, step_s=0.25, on_step=on_step, max_real_s=60)
        assert fake.refused == []
    with Session(create_engine(f"sqlite:///{tmp_path / 'data' / 'costctl.db'}")) as db:
        (cp,) = db.scalars(select(CheckpointRow)).all()
    assert cp.reason == "preemption" and cp.outcome == "acknowledged"
    requested = cp.requested_at.replace(tzinfo=timezone.utc) if cp.requested_at.tzinfo is None else cp.requested_at
    assert marks["issued"] <= requested <= marks["issued"] + s.preemption.poll_interval

