"""Notifications from a whole watch (issue 16, part 4), against a local webhook on 127.0.0.1.

The watch runs in-process on a simulated clock (the provider's and the webhook's HTTP are
real; each message goes out through a real ``python -m costctl.notify.send`` child), and:

* the webhook receives, in order, the warning ``[notify] warn_before`` ahead of the idle
  autostop, then the stop done;
* with a provider that never confirms the stop, the webhook gets "not confirmed yet" at the first
  re-send and "STOP FAILED" at the deadline;
* while the webhook hangs (it holds every request for a minute), the provider receives the stop
  in the same turn of the loop as the decision (well within a second), and the stop's own
  notification goes out beside the hung one;
* a watch whose notifier runs never imports Apprise.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from costctl.ledger.schema import DecisionRow
from costctl.stopping import EXIT_STOP_FAILED
from costctl.watch import Watcher, WatchOptions
from helpers import REPO, costctl_env
from lifecycle_support import T0, FixedGpu, SimClock, drive, settings
from tests.fakes.webhook import FakeWebhook
from tests.provider_rigs import RIGS

TOKEN = "whk-4f9c2e7a1b3d5e6f"
IDLE_GPU = FixedGpu(used_bytes=0, total_bytes=24 * 2**30, utilization=0.0)


def _toml(url: str, *, instance: str = '[instance]\nprovider = "sim"\ngpu = "RTX 4090"\n', extra: str = "") -> str:
    return (instance + '[watch]\nsample_interval = "5s"\n[policies.idle]\ntime_window = "10m"\n'
            f'[notify]\nurls = ["{url}"]\nwarn_before = "5m"\nevents = ["stop_pending", "stop_done", "stop_failed"]\n'
            + extra)


def _watch(tmp_path: Path, toml: str, clock: SimClock, provider=None, lines: list[str] | None = None) -> Watcher:
    fd = os.open(os.devnull, os.O_WRONLY)
    w = Watcher(settings(tmp_path, toml), WatchOptions(command=[], quiet=True, status_line=False), clock=clock,
                sampler=IDLE_GPU, provider=provider, stdout_fd=fd, stderr_fd=fd)
    if lines is not None:
        w.say = lines.append
    return w


def _settled(w: Watcher, hook: FakeWebhook):
    """An ``on_step`` for :func:`drive`: before the simulated clock moves on, every message the
    watch handed to a sender has reached the webhook. Minutes of the watch's clock pass in
    milliseconds here, while a sender child takes about a second to start: this stands for the
    real minutes between a warning and its stop, so the order the webhook sees is the watch's."""
    def on_step(now):
        if w.notifier is not None:
            hook.wait_for(len(w.notifier.deliveries), timeout_s=60)
    return on_step


def _decisions(tmp_path: Path) -> list[DecisionRow]:
    engine = create_engine(f"sqlite:///{tmp_path / 'data' / 'costctl.db'}")
    with Session(engine) as db:
        rows = db.scalars(select(DecisionRow).order_by(DecisionRow.id)).all()
    engine.dispose()
    return rows


def test_the_webhook_gets_the_warning_before_the_autostop_then_the_stop_done(tmp_path):
    with FakeWebhook() as hook:
        clock = SimClock(T0)
        w = _watch(tmp_path, _toml(hook.json_url(TOKEN)), clock)
        assert drive(w, clock, step_s=5, max_real_s=120, on_step=_settled(w, hook)) == (0, "stopped")
        first, second = hook.wait_for(2)
        time.sleep(0.5)  # nothing else comes
        assert len(hook.messages) == 2, hook.titles()
    assert first["title"] == "sim-local will be stopped at 2026-06-01 08:10:00+00:00"
    assert "(5m from now) by the idle policy" in first["message"] and "costctl snooze 1h" in first["message"]
    assert first["type"] == "warning" and first["_path"] == f"/hook/{TOKEN}"
    assert second["title"] == "sim-local is stopped" and second["type"] == "success"
    assert "sim confirmed that instance sim-local is stopped after 1 stop request." in second["message"]
    assert "It was stopped because: idle for 10m" in second["message"]
    assert first["_at"] < second["_at"]
    rows = _decisions(tmp_path)
    warning = next(r for r in rows if r.action == "warn" and r.policy == "idle")
    stop = next(r for r in rows if r.action == "stop")
    # the warning came warn_before ahead of the stop, on the watch's clock
    assert (stop.time - warning.time).total_seconds() == 300
    assert warning.evidence["pending_stop"]["at"] == "2026-06-01T08:10:00Z"


def test_a_provider_that_never_confirms_gives_not_confirmed_then_stop_failed(tmp_path):
    with FakeWebhook() as hook:
        for rig in RIGS["vastai"](tmp_path / "p"):
            rig.fake.ignore_stops = True  # answers 200, never stops
            clock = SimClock(T0)
            instance = f'[instance]\nprovider = "vastai"\nid = "{rig.instance_id}"\n'
            stop = '[stop]\npoll_interval = "5s"\nresend_interval = "30s"\ndeadline = "3m"\n'
            w = _watch(tmp_path, _toml(hook.json_url(TOKEN), instance=instance, extra=stop), clock,
                       provider=rig.provider)
            assert drive(w, clock, step_s=5, max_real_s=120, on_step=_settled(w, hook)) == (EXIT_STOP_FAILED,
                                                                                            "stop failed")
            assert rig.stops_done() == 0
        messages = hook.wait_for(3)
    titles = [m["title"] for m in messages]
    assert titles == [f"{rig.instance_id} will be stopped at 2026-06-01 08:10:00+00:00",
                      f"The stop of {rig.instance_id} is not confirmed yet",
                      f"STOP FAILED: {rig.instance_id} may still be running and billing"], titles
    unconfirmed, failed = messages[1], messages[2]
    assert unconfirmed["type"] == "failure" and failed["type"] == "failure"
    assert "still running" in unconfirmed["message"] and "keeps trying until 2026-06-01 08:13:" in unconfirmed["message"]
    assert "not confirmed 180s after the first stop request" in failed["message"]
    assert f"`costctl stop {rig.instance_id}`" in failed["message"]


def test_a_hung_webhook_never_delays_the_stop(tmp_path):
    with FakeWebhook() as hook:
        hook.hang_s = 60.0  # every request is held a minute
        for rig in RIGS["vastai"](tmp_path / "p"):
            clock = SimClock(T0)
            instance = f'[instance]\nprovider = "vastai"\nid = "{rig.instance_id}"\n'
            w = _watch(tmp_path, _toml(hook.json_url(TOKEN), instance=instance), clock, provider=rig.provider)
            seen: dict[str, float] = {}

            def on_step(now):
                if "warned" not in seen and w.engine is not None and any(
                        d.key.startswith("stop-warning:") for d in w.summary.decisions):
                    seen["warned"] = time.monotonic()
                    hook.wait_for(1, timeout_s=30)  # the warning's request is in, held by the webhook
                    assert hook.in_flight == 1
                if "decided" not in seen and w.executor is not None and w.executor.stop is not None:
                    seen["decided"] = time.monotonic()
                if "decided" in seen and "sent" not in seen and rig.stop_requests() >= 1:
                    seen["sent"] = time.monotonic()
                    seen["in_flight"] = hook.in_flight

            assert drive(w, clock, step_s=5, max_real_s=60, on_step=on_step) == (0, "stopped")
            assert rig.stops_done() == 1
        assert seen["sent"] - seen["decided"] < 1.0, seen  # the stop reached the provider within a second
        assert seen["in_flight"] >= 1  # ... while the webhook still held the warning
        # the stop's own notification goes out beside the hung one (another sender child)
        both = hook.wait_for(2, timeout_s=30)
        assert hook.in_flight == 2
        assert both[1]["title"] == f"{rig.instance_id} is stopped"


_NO_APPRISE = r"""
import json, sys
from costctl.cli.main import main
code = main(sys.argv[1:])
print(json.dumps({"code": code, "apprise": sorted(m for m in sys.modules if m == "apprise" or m.startswith("apprise."))}))
"""


def test_a_watch_with_notifications_never_imports_apprise(tmp_path):
    """The job's end goes out through the sender child; the watch itself has no Apprise."""
    with FakeWebhook() as hook:
        env = costctl_env(tmp_path, COSTCTL_NOTIFY__URLS=json.dumps([hook.json_url(TOKEN)]))
        proc = subprocess.run([sys.executable, "-c", _NO_APPRISE, "watch", "--on-exit", "leave", "--no-pty",
                               "--quiet", "--", sys.executable, "-c", "print('loss: 1.0')"],
                              cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        result = json.loads(proc.stdout.splitlines()[-1])
        assert result == {"code": 0, "apprise": []}
        hook.wait_for(1)
        time.sleep(0.5)
        titles = hook.titles()
    assert "The job on sim-local finished" in titles, titles
    message = hook.messages[titles.index("The job on sim-local finished")]
    assert "exited with status 0" in message["message"] and "left running (--on-exit leave)" in message["message"]


PASSWORD = "pw-8d1e5b2c9a7f"
HEADER = "hdr-3a6b9c0d2e4f"


def test_the_webhook_token_appears_nowhere_in_output_logs_ps_or_the_ledger(tmp_path):
    """A real ``costctl watch`` (real clock) with a webhook URL carrying three secrets (the path,
    the password, a header): the webhook hangs, so the sender children are alive while ``ps`` is
    read. None of the secrets shows in the watch's output, any file of its data dir (run log,
    relay files, crash logs, the SQLite ledger) or the process list."""
    with FakeWebhook() as hook:
        hook.hang_s = 60.0
        url = f"json://bot:{PASSWORD}@127.0.0.1:{hook.port}/hook/{TOKEN}?+X-Api-Key={HEADER}"
        cfg = tmp_path / "cfg" / "costctl.toml"
        cfg.parent.mkdir()
        cfg.write_text(f'[notify]\nurls = ["{url}"]\ntimeout = "2s"\n')
        env = costctl_env(tmp_path / "data")
        proc = subprocess.Popen([sys.executable, "-m", "costctl", "watch", "--config", str(cfg), "--on-exit", "stop",
                                 "--no-pty", "--", sys.executable, "-c", "print('loss: 1.0')"],
                                cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        listings: list[str] = []
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:  # while the watch runs, and then its senders
            listings.append(subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout)
            if proc.poll() is not None and "costctl.notify.send" not in listings[-1]:
                break
            time.sleep(0.05)
        out, err = proc.communicate(timeout=60)
        hook.release()
    assert proc.returncode == 0, err.decode()
    assert any("costctl.notify.send" in listing for listing in listings), "ps never saw a sender child"
    assert hook.messages, "no notification reached the webhook"
    assert hook.messages[0]["_path"] == f"/hook/{TOKEN}"  # the URL was used as given
    assert hook.messages[0]["_headers"].get("X-Api-Key") == HEADER
    texts = {"stdout": out.decode(errors="replace"), "stderr": err.decode(errors="replace"),
             "ps": "\n".join(listings)}
    for path in (tmp_path / "data").rglob("*"):
        if path.is_file() and not path.is_socket():
            texts[str(path)] = path.read_bytes().decode("latin-1")
    import sqlite3

    with sqlite3.connect(tmp_path / "data" / "costctl.db") as db:
        texts["ledger"] = "\n".join(db.iterdump())
    assert "notify URL" not in texts["stderr"] or f"127.0.0.1:{hook.port}/..." in texts["stderr"]
    for secret in (TOKEN, PASSWORD, HEADER, url):
        leaks = [name for name, text in texts.items() if secret in text]
        assert not leaks, f"{secret} found in {leaks}"


def test_costctl_snooze_from_another_process_postpones_the_pending_stop_ten_minutes(tmp_path):
    with FakeWebhook() as hook:
        clock = SimClock(T0)
        toml = _toml(hook.json_url(TOKEN))
        fd = os.open(os.devnull, os.O_WRONLY)
        w = Watcher(settings(tmp_path, toml), WatchOptions(command=[], status_line=True), clock=clock,
                    sampler=IDLE_GPU, stdout_fd=fd, stderr_fd=fd)
        lines: list[str] = []
        w.say = lines.append
        seen: dict[str, object] = {}
        settle = _settled(w, hook)

        def on_step(now):
            settle(now)
            if "snoozed_at" not in seen and any(d.key.startswith("stop-warning:") for d in w.summary.decisions):
                proc = subprocess.run([sys.executable, "-m", "costctl", "snooze", "10m"], cwd=REPO,
                                      env=costctl_env(tmp_path / "other"), capture_output=True, text=True, timeout=60)
                seen.update(snoozed_at=now, answer=proc.stdout, code=proc.returncode, err=proc.stderr)
            if now == T0.replace(minute=12):  # past the stop's old time, before the snooze's end
                seen["status"] = w.status.text
                seen["stop_then"] = w.executor.stop

        assert drive(w, clock, step_s=5, max_real_s=120, on_step=on_step) == (0, "stopped")
        messages = hook.wait_for(4)
    assert seen["code"] == 0, seen["err"]
    snoozed_at = seen["snoozed_at"]
    assert T0.replace(minute=5) <= snoozed_at < T0.replace(minute=6)  # just after the warning
    until = snoozed_at + timedelta(minutes=10)
    assert f"watch {os.getpid()} (run " in seen["answer"]
    assert (f"snoozed the idle autostop of sim instance sim-local until {until:%Y-%m-%d %H:%M:%S}+00:00 (10m)"
            in seen["answer"])
    assert seen["stop_then"] is None  # 08:12: the old stop time (08:10) passed, nothing stopped
    assert "snoozed by" in str(seen["status"]) and f"stopping at {until:%H:%M}" in str(seen["status"])
    rows = _decisions(tmp_path)
    snooze = next(r for r in rows if r.action == "snooze")
    stop = next(r for r in rows if r.action == "stop")
    assert stop.time == until  # ten minutes after the snooze, on the simulated clock
    assert (stop.time - snooze.time).total_seconds() == 600
    by = snooze.evidence["by"]
    assert by["uid"] == os.getuid() and by["pid"] not in (0, os.getpid())
    assert snooze.evidence["until"] == until.isoformat().replace("+00:00", "Z") and snooze.evidence["granted_s"] == 600
    assert "the stop waited for a snooze by" in stop.reason and stop.evidence["snoozed"]["until"] == snooze.evidence["until"]
    titles = [m["title"] for m in messages]
    assert titles[:4] == ["sim-local will be stopped at 2026-06-01 08:10:00+00:00",
                          f"The autostop of sim-local was snoozed until {until:%Y-%m-%d %H:%M:%S}+00:00",
                          f"sim-local will be stopped at {until:%Y-%m-%d %H:%M:%S}+00:00",
                          "sim-local is stopped"], titles
    # the notifications after the snooze say so
    assert all("The autostop was snoozed by" in m["message"] for m in messages[2:4])


def test_the_jobs_end_is_told_before_the_idle_warning_its_exit_starts(tmp_path):
    """Re-trial finding: with an exit window shorter than warn_before, the job's exit posted the
    idle warning in its last tick and the job_end message after it: the webhook read "will be
    stopped" before "the job failed". The job's end comes first, then the warning, then the stop."""
    with FakeWebhook() as hook:
        clock = SimClock(T0)
        toml = _toml(hook.json_url(TOKEN)).replace(
            'events = ["stop_pending", "stop_done", "stop_failed"]',
            'events = ["stop_pending", "stop_done", "stop_failed", "job_end"]').replace(
            'time_window = "10m"\n', 'time_window = "10m"\nexit_window = "12s"\n')
        fd = os.open(os.devnull, os.O_WRONLY)
        w = Watcher(settings(tmp_path, toml), WatchOptions(command=[sys.executable, "-c", "raise SystemExit(3)"],
                                                           quiet=True, status_line=False),
                    clock=clock, sampler=IDLE_GPU, stdout_fd=fd, stderr_fd=fd)
        code, why = drive(w, clock, step_s=5, max_real_s=120, on_step=_settled(w, hook))
        assert (code, why) == (3, "stopped")
        events = [d.message.event.value for d in w.notifier.deliveries]
        hook.wait_for(len(events))
    assert events == ["job_end", "stop_pending", "stop_done"], events
    assert [m["title"] for m in hook.messages][0].startswith("The job on sim-local failed with exit status 3")
