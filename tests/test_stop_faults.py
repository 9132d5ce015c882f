"""A stop you can trust, end to end: a whole watch against each HTTP adapter's local fake.

The idle policy stops the instance; the provider misbehaves on the first stop — HTTP 500, 502, a
timeout (the stop happened, the answer came late), a connection reset, 429 with Retry-After, a
failure inside a 200 (RunPod GraphQL ``errors[]``, an AutoDL error envelope) — and the watch must
end with exactly one confirmed stop and exit status 0. A provider that answers the stop with 200
and never stops the instance gets the stop again on a schedule, and the watch ends at its
``[stop] deadline`` (or on SIGTERM) with :data:`~costctl.stopping.EXIT_STOP_FAILED`, the run
``stop failed`` in ``costctl bill --format json`` and in the summary. Each test counts the
requests its fake received. The watch runs in-process on a simulated clock (real HTTP).
"""

from __future__ import annotations

import io
import json
import os
import re
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from costctl.ledger.schema import DecisionRow, Run, StopEventRow
from costctl.stopping import EXIT_STOP_FAILED
from costctl.watch import Watcher, WatchOptions
from helpers import costctl_env, run_costctl
from lifecycle_support import T0, FixedGpu, SimClock, drive, settings
from tests.fakes.http import Reply
from tests.provider_rigs import LATE, RIGS, TIMEOUT, Rig

STOP = """
[watch]
sample_interval = "5s"
[policies.idle]
time_window = "30s"
[stop]
poll_interval = "5s"
resend_interval = "30s"
deadline = "3m"
"""


def _watch(tmp_path: Path, rig: Rig, clock: SimClock) -> Watcher:
    s = settings(tmp_path, f'[instance]\nprovider = "{rig.name}"\nid = "{rig.instance_id}"\n' + STOP)
    fd = os.open(os.devnull, os.O_WRONLY)
    opts = WatchOptions(command=[], quiet=True, status_line=False)
    return Watcher(s, opts, clock=clock, provider=rig.provider, stdout_fd=fd, stderr_fd=fd,
                   sampler=FixedGpu(used_bytes=0, total_bytes=24 * 2**30, utilization=0.0))


def _db(tmp_path: Path) -> Session:
    return Session(create_engine(f"sqlite:///{tmp_path / 'data' / 'costctl.db'}"))


def _bill_row(tmp_path: Path) -> dict:
    proc = run_costctl("bill", "--by", "run", "--format", "json", env=costctl_env(tmp_path / "data"))
    assert proc.returncode == 0, proc.stderr.decode()
    (row,) = json.loads(proc.stdout)["rows"]
    return row


def _rig(name: str, tmp_path: Path, **table) -> Iterator[Rig]:
    return RIGS[name](tmp_path, **table)


FAULTS: dict[str, Callable[[Rig], None]] = {
    "500": lambda r: r.inject(Reply.empty(500)),
    "502": lambda r: r.inject(Reply.empty(502)),
    "timeout": lambda r: r.delay_stop(LATE),  # carried out, answered after the client gave up
    "reset": lambda r: r.inject(Reply(reset=True)),
    "429": lambda r: r.inject(Reply.empty(429, {"Retry-After": "2"})),
    "error-in-200": lambda r: r.in_200_error(),  # RunPod errors[], AutoDL envelope
}
CASES = [(name, fault) for name in sorted(RIGS) for fault in FAULTS
         if not (fault == "error-in-200" and name == "vastai")]  # Vast has no failure inside a 200


@pytest.mark.parametrize(("name", "fault"), CASES)
def test_a_stop_that_fails_once_ends_with_exactly_one_confirmed_stop_and_exit_0(tmp_path, name, fault):
    table = {"timeout": TIMEOUT} if fault == "timeout" else {}
    for rig in _rig(name, tmp_path / "p", **table):
        FAULTS[fault](rig)
        clock = SimClock(T0)
        w = _watch(tmp_path, rig, clock)
        code, status = drive(w, clock, step_s=5, max_real_s=60)
        assert (code, status) == (0, "stopped")
        assert rig.stops_done() == 1, "the stop took effect exactly once"
        assert rig.stop_requests() == 2, "the failed stop call and its one retry"
        assert rig.fake.server.unexpected() == []
    with _db(tmp_path) as db:
        states = [e.state for e in db.scalars(select(StopEventRow).order_by(StopEventRow.id))]
        run = db.scalars(select(Run)).one()
        stop = db.scalars(select(DecisionRow).where(DecisionRow.action == "stop")).one()
    assert states.count("confirmed") == 1 and states[-1] == "confirmed" and "failed" not in states
    assert run.status == "stopped"
    assert stop.outcome.startswith("stop confirmed: ") and stop.evidence["stop"]["state"] == "confirmed"
    row = _bill_row(tmp_path)
    assert row["status"] == "stopped" and row["stop_state"] == "confirmed" and row["stop_attempts"] == 1
    assert [e["state"] for e in row["stop_history"]] == states


def _lying(rig: Rig) -> None:
    rig.fake.ignore_stops = True


@pytest.mark.parametrize("name", sorted(RIGS))
def test_a_stop_answered_200_that_never_happens_is_resent_and_ends_stop_failed_at_the_deadline(tmp_path, name):
    for rig in _rig(name, tmp_path / "p"):
        _lying(rig)
        clock = SimClock(T0)
        w = _watch(tmp_path, rig, clock)
        code, status = drive(w, clock, step_s=5, max_real_s=60)
        assert (code, status) == (EXIT_STOP_FAILED, "stop failed")
        assert rig.stops_done() == 0
        # sent at the decision, then every resend_interval (30 s) while it read running, until
        # the 3 min deadline: 1 + 5 re-sends (the 6th would come at the deadline itself)
        sent = rig.stop_requests()
        assert 5 <= sent <= 7, sent
        out = io.StringIO()
        w.summary.print(w.run_id, "USD", out)
    text = " ".join(re.sub(r"[│┌┐└┘├┤─┬┴┼]", " ", out.getvalue()).split())  # the table's cells, unwrapped
    assert "stop failed after" in text and "the instance may still be running and billing" in text
    with _db(tmp_path) as db:
        events = db.scalars(select(StopEventRow).order_by(StopEventRow.id)).all()
        run = db.scalars(select(Run)).one()
    assert run.status == "stop failed"
    assert [e.state for e in events][-1] == "failed" and "not confirmed 180s after the first stop request" in events[-1].detail
    assert max(e.attempt for e in events) == sent
    assert sum(1 for e in events if e.state == "sent") == sent  # each request accepted, none carried out
    assert any("still running" in e.detail and "sending it again" in e.detail for e in events)
    row = _bill_row(tmp_path)
    assert row["status"] == "stop failed" and row["stop_state"] == "failed" and row["stop_attempts"] == sent
    assert row["stop_history"][0]["state"] == "requested" and row["stop_history"][-1]["state"] == "failed"


def test_sigterm_while_an_unconfirmed_stop_is_resent_ends_the_watch_stop_failed(tmp_path):
    for rig in _rig("vastai", tmp_path / "p"):
        _lying(rig)
        clock = SimClock(T0)
        w = _watch(tmp_path, rig, clock)

        def terminate_once_sent(now):
            stop = w.executor.stop if w.executor else None
            if stop is not None and stop.state == "sent" and w._signal is None:
                w._handle_signal(signal.SIGTERM, None)

        code, status = drive(w, clock, step_s=5, max_real_s=60, on_step=terminate_once_sent)
        assert (code, status) == (EXIT_STOP_FAILED, "stop failed")
    row = _bill_row(tmp_path)
    assert row["status"] == "stop failed" and row["stop_state"] == "failed"
    assert "the watch got SIGTERM, before the stop was confirmed" in row["stop_history"][-1]["detail"]


def test_a_stop_confirmed_after_a_resend_is_not_sent_again(tmp_path):
    for rig in _rig("runpod", tmp_path / "p"):
        _lying(rig)
        clock = SimClock(T0)
        w = _watch(tmp_path, rig, clock)

        def honest_after_two(now):
            if rig.stop_requests() >= 2:
                rig.fake.ignore_stops = False

        code, status = drive(w, clock, step_s=5, max_real_s=60, on_step=honest_after_two)
        assert (code, status) == (0, "stopped")
        assert rig.stops_done() == 1
        assert rig.stop_requests() == 3  # two ignored, the third worked; none after the confirmation
    assert _bill_row(tmp_path)["stop_state"] == "confirmed"


def test_the_real_watch_exits_69_when_the_provider_never_stops(tmp_path):
    """The CLI in real time (the stop in its own thread): a lying AutoDL, a 3 s deadline."""
    from tests.fakes.autodl import TOKEN, FakeAutoDL

    with FakeAutoDL() as fake:
        fake.add_pro("pro-1", payg_price=1880)
        fake.ignore_stops = True
        cfg = tmp_path / "costctl.toml"
        cfg.write_text(
            '[instance]\nprovider = "autodl"\nid = "pro-1"\n'
            '[stop]\npoll_interval = "1s"\nresend_interval = "1s"\ndeadline = "3s"\n'
            f'[providers.autodl]\nbase_url = "{fake.url}"\nretries = 0\n'
        )
        proc = run_costctl("watch", "--config", str(cfg), "--on-exit", "stop", "--", "true",
                           env=costctl_env(tmp_path, AUTODL_TOKEN=TOKEN), timeout=60)
        err = proc.stderr.decode()
        assert proc.returncode == EXIT_STOP_FAILED, err
        assert "STOP FAILED: instance pro-1 on autodl may still be running and billing" in err
        assert fake.status_of("pro-1") == "running"
        assert fake.server.count("POST", "/api/v1/dev/instance/pro/power_off") >= 2


def test_a_signal_after_the_stop_already_failed_still_ends_the_watch_stop_failed(tmp_path):
    """SIGTERM to the whole group (a service manager) fails the self-stop command and reaches the
    watch: the watch must end as the stop did (69), not as an interrupted job."""
    for rig in _rig("autodl", tmp_path / "p"):
        _lying(rig)
        clock = SimClock(T0)
        w = _watch(tmp_path, rig, clock)

        def fail_then_signal(now):
            stop = w.executor.stop if w.executor else None
            if stop is not None and stop.state == "sent" and w._signal is None:
                w.executor.stopping.cancel("the self-stop was killed by SIGTERM")  # the stop thread's end
                w._handle_signal(signal.SIGTERM, None)

        code, status = drive(w, clock, step_s=5, max_real_s=60, on_step=fail_then_signal)
        assert (code, status) == (EXIT_STOP_FAILED, "stop failed")
    assert _bill_row(tmp_path)["status"] == "stop failed"
