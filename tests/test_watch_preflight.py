"""Issue 11, part 3: the preflight. A watch proves that it can stop its instance before the job
starts (an accepted credential, or a self-stop on this very instance), else it refuses with one
line, exit status 2, nothing started — unless ``--advise-only`` asks for a watch that stops
nothing. The ledger is opened before any instance is started. Part 6: a timed-out
``before_stop`` hook has its whole process group ended.

Real ``costctl watch`` processes against the local fake AutoDL API (real HTTP on 127.0.0.1);
an AutoDL container is simulated with ``$AUTODL_CONTAINER_HOSTNAME`` (the adapter's documented
override of the hostname it recognises a container by) and a fake ``shutdown`` on PATH.
"""

from __future__ import annotations

import os
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import psutil
import pytest
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from costctl.clock import SimClock
from costctl.config import HooksConfig, Settings, load_settings
from costctl.errors import ConfigError
from costctl.executor import Executor
from costctl.ledger.schema import DecisionRow, Run, StopEventRow
from costctl.protocols import RunState
from costctl.records import Action, Decision
from costctl.statusline import StatusLine
from costctl.stopping import StopRoute
from costctl.summary import RunSummary
from costctl.watch.instance import resolve_instance
from costctl_providers.autodl import AutoDLProvider
from costctl_providers.capabilities import SelfStop
from helpers import costctl_env, run_costctl
from tests.fakes.autodl import TOKEN, FakeAutoDL

ID = "pro-76419909953e"
OUTSIDE = "ci-laptop"  # a hostname that is no AutoDL container
T0 = datetime(2026, 6, 1, 8, 0, 0, tzinfo=timezone.utc)


def _config(tmp_path: Path, url: str, *, extra_instance: str = "", with_id: bool = True) -> Path:
    cfg = tmp_path / "costctl.toml"
    cfg.write_text(
        "[instance]\n"
        'provider = "autodl"\n'
        + (f'id = "{ID}"\n' if with_id else "")
        + 'price_per_hour = "1.88"\n'
        'currency = "CNY"\n'
        + extra_instance
        + "[policies.idle]\n"
        'time_window = "1h"\n'
        "[providers.autodl]\n"
        f'base_url = "{url}"\n'
        "timeout = 2\n"
        "retries = 0\n"
        "poll_interval = 0.05\n"
        "stop_timeout = 10\n"
    )
    return cfg


def _env(tmp_path: Path, *, hostname: str = OUTSIDE, token: str | None = None, path_dir: Path | None = None,
         **extra: str) -> dict[str, str]:
    env = costctl_env(tmp_path, AUTODL_CONTAINER_HOSTNAME=hostname, **extra)
    env.pop("AUTODL_TOKEN", None)
    if token is not None:
        env["AUTODL_TOKEN"] = token
    if path_dir is not None:
        env["PATH"] = f"{path_dir}{os.pathsep}{env.get('PATH', '')}"
    return env


def _job(marker: Path) -> list[str]:
    """A job whose only side effect is creating ``marker``."""
    return [sys.executable, "-c", f"open({str(marker)!r}, 'w').write('ran'); print('loss: 0.5')"]


def _fake_shutdown(tmp_path: Path, name: str = "shutdown", *, power_off: bool = True) -> tuple[Path, Path]:
    """A directory holding an executable ``name`` that records its argv in a file (returned) and,
    with ``power_off``, does what powering the machine off does to the watch: SIGKILLs it (its
    parent)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    called = tmp_path / f"{name}.called"
    script = bin_dir / name
    off = "kill -9 $PPID\n" if power_off else ""
    script.write_text(f"#!/bin/sh\necho \"$@\" > '{called}'\n{off}exit 0\n")
    script.chmod(0o755)
    return bin_dir, called


def _assert_refused(proc, tmp_path: Path, marker: Path, *needles: str) -> str:
    err = proc.stderr.decode()
    assert proc.returncode == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err and "--advise-only" in lines[0]
    for needle in needles:
        assert needle in lines[0], lines[0]
    assert not marker.exists(), "the job ran"
    assert not (tmp_path / "costctl.db").exists(), "the ledger was touched"
    return lines[0]


# ----------------------------------------------------------------------------- refusals


def test_no_token_outside_a_container_refuses_before_the_job_starts(tmp_path):
    marker = tmp_path / "job-ran"
    with FakeAutoDL() as fake:
        fake.add_pro(ID)
        proc = run_costctl("watch", "--config", str(_config(tmp_path, fake.url)), "--", *_job(marker),
                           env=_env(tmp_path), timeout=60)
        line = _assert_refused(proc, tmp_path, marker, f"refusing to watch autodl instance {ID}",
                               "no credential for autodl: set AUTODL_TOKEN",
                               "not running on an instance of autodl")
        assert line.startswith("costctl: ")
        assert fake.server.calls("POST") == [] and fake.server.calls("GET") == []
        assert fake.status_of(ID) == "running"


def test_a_rejected_token_refuses_before_the_job_starts(tmp_path):
    marker = tmp_path / "job-ran"
    with FakeAutoDL() as fake:
        fake.add_pro(ID)
        proc = run_costctl("watch", "--config", str(_config(tmp_path, fake.url)), "--", *_job(marker),
                           env=_env(tmp_path, token="not-the-token"), timeout=60)
        _assert_refused(proc, tmp_path, marker, "the credential was rejected", "AUTODL_TOKEN was rejected")
        assert b"not-the-token" not in proc.stderr
        assert not [c for c in fake.server.calls("POST") if c.path.endswith("/power_on")]


def test_a_dry_run_refuses_the_same_way(tmp_path):
    marker = tmp_path / "job-ran"
    with FakeAutoDL() as fake:
        fake.add_pro(ID)
        proc = run_costctl("watch", "--dry-run", "--config", str(_config(tmp_path, fake.url)), "--",
                           *_job(marker), env=_env(tmp_path), timeout=60)
        _assert_refused(proc, tmp_path, marker, "no credential for autodl")


def test_inside_a_container_without_an_executable_self_stop_refuses(tmp_path):
    marker = tmp_path / "job-ran"
    with FakeAutoDL() as fake:
        cfg = _config(tmp_path, fake.url, extra_instance=f'self_stop = "{tmp_path}/missing/poweroff --now"\n')
        proc = run_costctl("watch", "--config", str(cfg), "--", *_job(marker),
                           env=_env(tmp_path, hostname=f"autodl-container-{ID}"), timeout=60)
        _assert_refused(proc, tmp_path, marker, f"'{tmp_path}/missing/poweroff' is not an executable command")


# ----------------------------------------------------------------------------- routes accepted


def test_inside_a_simulated_container_the_self_stop_route_is_accepted(tmp_path):
    marker = tmp_path / "job-ran"
    bin_dir, called = _fake_shutdown(tmp_path)
    with FakeAutoDL() as fake:
        fake.add_pro(ID)
        proc = run_costctl("watch", "--on-exit", "stop", "--config", str(_config(tmp_path, fake.url)), "--",
                           *_job(marker), env=_env(tmp_path, hostname=f"autodl-container-{ID}", path_dir=bin_dir),
                           timeout=60)
        err = proc.stderr.decode()
        assert proc.returncode == -9, err  # the "machine" powered off under the watch
        assert marker.exists()
        assert f"costctl: stop route: self-stop via shutdown (this is autodl instance {ID}; shutdown is " \
               f"{bin_dir / 'shutdown'})" in err
        assert "costctl: self-stop sent: the preflight chose the instance's self-stop; running shutdown" in err
        # no token: the on-exit stop ran the container's shutdown, never the API
        assert called.exists() and fake.status_of(ID) == "running"
        assert not [c for c in fake.server.calls("POST") if c.path.endswith("/power_off")]
    engine = create_engine(f"sqlite:///{tmp_path / 'costctl.db'}")
    with Session(engine) as s:
        stop = s.scalars(select(DecisionRow).where(DecisionRow.policy == "on-exit")).one()
        events = s.scalars(select(StopEventRow).order_by(StopEventRow.id)).all()
        run = s.scalars(select(Run)).one()
    assert stop.action == "stop" and stop.evidence["stop_route"] == "self-stop via shutdown"
    # in the ledger before the command ran (nothing is written after a power-off): the state,
    # and the run's end with the charges up to the self-stop
    assert [e.state for e in events] == ["requested", "self-stop sent"] and {e.decision_id for e in events} == {stop.id}
    assert run.status == "self-stop sent" and run.ended_at is not None


def test_a_self_stop_that_returns_while_the_machine_keeps_running_is_a_failed_stop(tmp_path):
    marker = tmp_path / "job-ran"
    bin_dir, called = _fake_shutdown(tmp_path, power_off=False)
    with FakeAutoDL() as fake:
        fake.add_pro(ID)
        cfg = _config(tmp_path, fake.url)
        cfg.write_text(cfg.read_text() + '[stop]\nself_stop_grace = "1s"\n')
        proc = run_costctl("watch", "--on-exit", "stop", "--config", str(cfg), "--",
                           *_job(marker), env=_env(tmp_path, hostname=f"autodl-container-{ID}", path_dir=bin_dir),
                           timeout=60)
        err = proc.stderr.decode()
        assert proc.returncode == 69, err
        assert called.exists()
        assert "STOP FAILED" in err and "the self-stop returned but this machine is still running" in err
    engine = create_engine(f"sqlite:///{tmp_path / 'costctl.db'}")
    with Session(engine) as s:
        events = s.scalars(select(StopEventRow).order_by(StopEventRow.id)).all()
        run = s.scalars(select(Run)).one()
    assert [e.state for e in events] == ["requested", "self-stop sent", "self-stop sent", "failed"]
    assert run.status == "stop failed"


def test_a_configured_self_stop_command_is_used(tmp_path):
    marker = tmp_path / "job-ran"
    bin_dir, called = _fake_shutdown(tmp_path, "my-poweroff")
    with FakeAutoDL() as fake:
        cfg = _config(tmp_path, fake.url, extra_instance=f"self_stop = \"'{bin_dir}/my-poweroff' --now\"\n")
        proc = run_costctl("watch", "--on-exit", "stop", "--config", str(cfg), "--", *_job(marker),
                           env=_env(tmp_path, hostname=f"autodl-container-{ID}"), timeout=60)
        err = proc.stderr.decode()
        assert proc.returncode == -9, err  # powered off
        assert f"stop route: self-stop via {bin_dir}/my-poweroff --now" in err
        assert called.read_text().strip() == "--now"


def test_an_accepted_token_is_the_api_route(tmp_path):
    marker = tmp_path / "job-ran"
    with FakeAutoDL() as fake:
        fake.add_pro(ID)
        proc = run_costctl("watch", "--on-exit", "leave", "--config", str(_config(tmp_path, fake.url)), "--",
                           *_job(marker), env=_env(tmp_path, token=TOKEN), timeout=60)
        err = proc.stderr.decode()
        assert proc.returncode == 0, err
        assert "costctl: stop route: API (credential accepted)" in err and marker.exists()


# ----------------------------------------------------------------------------- --advise-only


def test_advise_only_runs_the_job_and_says_nothing_will_be_stopped(tmp_path):
    marker = tmp_path / "job-ran"
    with FakeAutoDL() as fake:
        fake.add_pro(ID)
        proc = run_costctl("watch", "--advise-only", "--on-exit", "stop", "--config",
                           str(_config(tmp_path, fake.url)), "--", *_job(marker), env=_env(tmp_path), timeout=60)
        err = proc.stderr.decode()
        assert proc.returncode == 0, err
        assert marker.exists()
        start, _, summary = err.partition("costctl run ")
        assert "costctl advise-only: this watch stops nothing" in err
        assert "stop route: none (--advise-only: nothing will be stopped)" in err
        assert "costctl on-exit advice (advise-only, nothing is stopped): would stop" in err
        assert "nothing was stopped" in err.split("duration")[-1]  # the summary table
        assert fake.server.calls("POST") == []  # no API call, let alone a power_off
    engine = create_engine(f"sqlite:///{tmp_path / 'costctl.db'}")
    with Session(engine) as s:
        rows = {r.policy: r for r in s.scalars(select(DecisionRow))}
    assert rows["advise-only"].action == "warn"
    assert rows["on-exit"].action == "advise" and rows["on-exit"].outcome == "advise-only: nothing stopped"
    assert rows["on-exit"].evidence["would"] == "stop"


def test_advise_only_turns_every_stop_into_advice(tmp_path):
    log = _Log()
    ex = Executor(log=log, clock=SimClock(T0), hooks=HooksConfig(before_stop="exit 1"), job=_NoJob(),
                  instances=_NeverStop(), run=_Run(), say=lambda _: None, advise_only=True)
    for policy, action in (("budget", Action.STOP), ("idle", Action.STOP), ("downsize", Action.DOWNSIZE)):
        assert ex.handle(Decision(time=T0, policy=policy, action=action, reason="r", key=policy)) \
            == "advise-only: nothing stopped"
    assert [d.action for d, _ in log.rows] == [Action.ADVISE] * 3 and ex.stop is None


def test_status_line_and_summary_say_advise_only(tmp_path, capsys):
    line = StatusLine(True, badge="ADVISE-ONLY: nothing is stopped")
    line.update(" costctl | 0:00:05 | 0 CNY ")
    assert "[ADVISE-ONLY: nothing is stopped] | costctl | 0:00:05" in capsys.readouterr().err
    summ = RunSummary(advise_only=True, stop_route="none (--advise-only: nothing will be stopped)")
    summ.add_decision(Decision(time=T0, policy="idle", action=Action.ADVISE, reason="idle for 1h",
                               evidence={"advise_only": True, "would": "stop"}, key="idle"))
    summ.print("abcdef123456", "CNY", sys.stderr)
    out = capsys.readouterr().err
    assert "nothing was stopped" in out and "advise (would stop; advise-only): idle for 1h" in out
    assert summ.as_dict()["advise_only"] is True
    route = RunSummary(stop_route="API (credential accepted)")
    route.print("abcdef123456", "CNY", sys.stderr)
    assert "API (credential accepted)" in capsys.readouterr().err


# ----------------------------------------------------------------------------- unit: the routes


def _autodl(tmp_path: Path, url: str, *, hostname: str, token: str | None = None, **table) -> AutoDLProvider:
    env = {"AUTODL_TOKEN": token} if token else {}
    return AutoDLProvider({"base_url": url, "retries": 0, **table}, data_dir=tmp_path, env=env,
                          hostname=lambda: hostname)


def test_self_stop_command_names_what_is_missing(tmp_path, monkeypatch):
    bin_dir, _ = _fake_shutdown(tmp_path)
    monkeypatch.setenv("PATH", str(bin_dir))
    prov = _autodl(tmp_path, "http://127.0.0.1:9", hostname=f"autodl-container-{ID}")
    assert prov.self_stop_command(ID) == SelfStop(("shutdown",), f"this is autodl instance {ID}; shutdown is "
                                                                 f"{bin_dir / 'shutdown'}")
    other = prov.self_stop_command("pro-other")
    assert not other and other.reason == f"this machine is autodl instance {ID}, not pro-other"
    outside = _autodl(tmp_path, "http://127.0.0.1:9", hostname=OUTSIDE).self_stop_command(ID)
    assert not outside and "no hostname autodl-container-*" in outside.reason
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert "'shutdown' is not an executable command here" in prov.self_stop_command(ID).reason


def test_the_container_hostname_override_is_read_from_the_adapters_environment(tmp_path):
    prov = AutoDLProvider({}, data_dir=tmp_path, env={"AUTODL_CONTAINER_HOSTNAME": f"autodl-container-{ID}"})
    assert prov.detect_self() == ID


def test_instance_self_stop_seeds_the_shutdown_command(tmp_path):
    from costctl.cloud import open_provider

    s = Settings(data_dir=str(tmp_path), instance={"provider": "autodl", "self_stop": "sudo /sbin/poweroff -f"})
    prov = open_provider(s)
    assert list(prov.self_stop_argv()) == ["sudo", "/sbin/poweroff", "-f"]
    # the table's own key wins
    s = Settings(data_dir=str(tmp_path), instance={"provider": "autodl", "self_stop": "x"},
                 providers={"autodl": {"shutdown_command": ["halt"]}})
    assert list(open_provider(s).self_stop_argv()) == ["halt"]


@pytest.mark.parametrize("value, message", [
    ("shutdown\x00now", "without NUL bytes"),
    ("'unclosed", "a shell could split (no closing quotation)"),
    ("   ", "expected a command"),
])
def test_instance_self_stop_is_validated(tmp_path, value, message):
    cfg = tmp_path / "costctl.toml"
    cfg.write_text('[instance]\nself_stop = "' + value.replace("\x00", "\\u0000") + '"\n')
    with pytest.raises(ConfigError, match="instance.self_stop") as info:
        load_settings(cfg)
    assert message in info.value.message and "\n" not in info.value.message


def test_a_provider_that_cannot_be_reached_is_no_proven_route(tmp_path):
    with FakeAutoDL() as fake:
        fake.add_pro(ID)
        fake.server.stop()  # nothing answers
        prov = _autodl(tmp_path, fake.url, hostname=OUTSIDE, token=TOKEN, timeout=0.5)
        settings = Settings(instance={"provider": "autodl", "id": ID, "price_per_hour": "1.88", "currency": "CNY"})
        said: list[str] = []
        with pytest.raises(ConfigError, match=f"API: instance {ID} could not be read, so no credential is proven"):
            resolve_instance(settings, prov, say=said.append)
        assert said == []
        resolved = resolve_instance(settings, prov, say=said.append, advise_only=True)
        assert resolved.route.kind == "none" and resolved.instance is None and str(resolved.rate.amount) == "1.88"
        assert len(said) == 1 and "using the configured price" in said[0]


# ----------------------------------------------------------------------------- ledger before start


def test_a_ledger_that_cannot_be_opened_leaves_a_stopped_instance_stopped(tmp_path):
    marker = tmp_path / "job-ran"
    (tmp_path / "costctl.db").mkdir()  # the ledger's file is a directory: it cannot be opened
    with FakeAutoDL() as fake:
        fake.add_pro(ID, status="shutdown")
        cfg = _config(tmp_path, fake.url, with_id=False)  # the instance is detected: this container
        env = _env(tmp_path, hostname=f"autodl-container-{ID}", token=TOKEN)
        proc = run_costctl("watch", "--config", str(cfg), "--", *_job(marker), env=env, timeout=60)
        assert proc.returncode == 1, proc.stderr.decode()
        assert "costctl: " in proc.stderr.decode() and "Traceback" not in proc.stderr.decode()
        assert not marker.exists()
        assert fake.status_of(ID) == "shutdown"
        assert not [c for c in fake.server.calls("POST") if c.path.endswith("/power_on")]
        # the same watch with a ledger that opens starts the instance it runs on
        (tmp_path / "costctl.db").rmdir()
        proc = run_costctl("watch", "--on-exit", "leave", "--config", str(cfg), "--", *_job(marker),
                           env=env, timeout=60)
        assert proc.returncode == 0, proc.stderr.decode()
        assert [c for c in fake.server.calls("POST") if c.path.endswith("/power_on")]


# ----------------------------------------------------------------------------- before_stop hook


class _Log:
    def __init__(self) -> None:
        self.rows: list[tuple[Decision, str]] = []

    def record(self, decision, outcome, *, dry_run=False, say=True):
        self.rows.append((decision, outcome))


class _NoJob:
    running = False
    exists = False

    def end(self, sig=None):
        raise AssertionError("no job")


class _NeverStop:
    name = "fake"

    def stop_instance(self, instance_id, *, wait=True):
        raise AssertionError("advise-only must not stop")


class _Stops:
    name = "fake"

    def stop_instance(self, instance_id, *, wait=True):
        from costctl_providers.base import BillingMode, Instance, Status

        return Instance(provider="fake", id=instance_id, gpu=None, gpu_raw=None, gpu_count=1,
                        billing=BillingMode.ON_DEMAND, price_per_hour=None, currency="USD", status=Status.STOPPED)


class _Run:
    stopped_at = None

    @property
    def state(self):
        return RunState(provider="fake", instance_id="i-1", instance=None, rate=None, gpu_name=None, gpu_count=1,
                        billing="on-demand", instance_pk=1, run_id="r", run_started_at=T0)

    def mark_stopped(self, when):
        pass


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_timed_out_before_stop_hook_has_its_whole_group_ended(tmp_path):
    pid_file = tmp_path / "grandchild.pid"
    hook = f"sleep 300 & echo $! > '{pid_file}'; wait"
    log = _Log()
    ex = Executor(log=log, clock=SimClock(T0), hooks=HooksConfig(before_stop=hook, before_stop_timeout="1s"),
                  job=_NoJob(), instances=_Stops(), run=_Run(), say=lambda _: None,
                  route=StopRoute("api", "instance read"))
    assert ex.handle(Decision(time=T0, policy="idle", action=Action.STOP, reason="idle", key="idle")) == "stop requested"
    outcome = ex.run_stop().outcome
    assert "before_stop timed out after 1s (its process group was ended)" in outcome
    assert "stop confirmed: fake reports instance i-1 stopped after 1 stop request" in outcome
    grandchild = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while not _gone(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(grandchild), "the hook's grandchild outlived the timeout"
    [(recorded, _)] = log.rows
    assert ex.stop.hook["ok"] is False
    assert recorded.evidence["stop_route"] == "API (instance read)"


def test_a_before_stop_hook_that_finishes_is_recorded(tmp_path):
    log = _Log()
    ex = Executor(log=log, clock=SimClock(T0), hooks=HooksConfig(before_stop="echo synced"), job=_NoJob(),
                  instances=_Stops(), run=_Run(), say=lambda _: None, log_path=str(tmp_path / "run.log"))
    ex.handle(Decision(time=T0, policy="idle", action=Action.STOP, reason="idle", key="idle"))
    [(recorded, outcome)] = log.rows
    assert outcome == "stop requested"  # recorded at once; the hook runs in the stop's first step
    assert ex.run_stop().outcome.startswith("before_stop succeeded")
    assert ex.stop.hook["output_tail"] == "synced\n"
    assert "synced" in (tmp_path / "run.log").read_text()
    assert timedelta(seconds=60) == HooksConfig().before_stop_timeout
