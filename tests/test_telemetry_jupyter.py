"""The Jupyter activity reader against a fake Jupyter server (real HTTP on 127.0.0.1).

The fake answers jupyter_server's documented shapes: ``GET /api/status`` ->
``{"started", "last_activity", "kernels", "connections"}`` and ``GET /api/kernels`` -> a list of
``{"id", "name", "last_activity", "execution_state", "connections"}``, with the token checked
the way jupyter_server's token authentication does (``Authorization: token <token>``: 403
otherwise). Servers are found through runtime files (``jpserver-<pid>.json``) in the test's
own runtime directory.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from costctl.records import SignalStatus
from costctl.telemetry.jupyter import JupyterActivity, base_url_of, find_servers, runtime_dir
from costctl.telemetry.sampler import Sampler
from tests.fakes.http import FakeHTTPServer, Reply

TOKEN = "fake-jupyter-token"
STATUS_AT = "2026-05-04T12:00:00.000000Z"


class FakeJupyter:
    """Routes of a Jupyter server on a FakeHTTPServer, with a base URL and a token."""

    def __init__(self, srv: FakeHTTPServer, base: str = "/", token: str = TOKEN) -> None:
        self.srv, self.base, self.token = srv, base, token
        self.status = {"started": "2026-05-04T09:00:00.000000Z", "last_activity": STATUS_AT, "kernels": 1,
                       "connections": 1}
        self.kernels = [{"id": "k1", "name": "python3", "last_activity": "2026-05-04T11:30:00.000000Z",
                         "execution_state": "idle", "connections": 1}]
        srv.route("GET", f"{base}api/status", self._answer(lambda: self.status))
        srv.route("GET", f"{base}api/kernels", self._answer(lambda: self.kernels))

    def _answer(self, body):  # type: ignore[no-untyped-def]
        def handler(req):  # type: ignore[no-untyped-def]
            if req.headers.get("Authorization") != f"token {self.token}":
                return Reply.json({"message": "Forbidden", "reason": None}, status=403)
            return body()
        return handler

    @property
    def port(self) -> int:
        return int(self.srv.url.rsplit(":", 1)[1])


def write_runtime(directory: Path, port: int, *, pid: int | None = None, base: str = "/", token: str = TOKEN,
                  name: str | None = None) -> Path:
    """A runtime file as jupyter_server writes it (``ServerApp.server_info``)."""
    pid = os.getpid() if pid is None else pid
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / (name or f"jpserver-{pid}.json")
    path.write_text(json.dumps({"base_url": base, "hostname": "localhost", "password": False, "pid": pid,
                                "port": port, "root_dir": "/root", "secure": False, "sock": "", "token": token,
                                "url": f"http://localhost:{port}{base}", "version": "2.14.0"}))
    return path


@pytest.fixture
def runtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    where = tmp_path / "runtime"
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(where))
    return where


def _when(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_runtime_dir_follows_the_jupyter_conventions(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    if importlib.util.find_spec("jupyter_core") is not None:
        pytest.skip("jupyter_core is installed: its jupyter_runtime_dir() decides (the same rules)")
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "rt"))
    assert runtime_dir() == tmp_path / "rt"
    monkeypatch.delenv("JUPYTER_RUNTIME_DIR")
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "data"))
    assert runtime_dir() == tmp_path / "data" / "runtime"
    monkeypatch.delenv("JUPYTER_DATA_DIR")
    if sys.platform.startswith("linux"):  # XDG_DATA_HOME is the test's own (tests/conftest.py)
        assert runtime_dir() == Path(os.environ["XDG_DATA_HOME"]) / "jupyter" / "runtime"


def test_reads_a_server_found_through_its_runtime_file(runtime: Path) -> None:
    with FakeHTTPServer() as srv:
        jup = FakeJupyter(srv, base="/lab-base/")
        write_runtime(runtime, jup.port, base="/lab-base/")
        reading = JupyterActivity().read()
        assert reading.status is SignalStatus.OK, reading.error
        assert reading.last_activity == _when(STATUS_AT)  # the later of the server's and the kernel's
        assert (reading.busy_kernels, reading.kernels, reading.connections) == (0, 1, 1)
        assert reading.servers == (f"http://127.0.0.1:{jup.port}/lab-base/",)
        for route in ("/lab-base/api/status", "/lab-base/api/kernels"):
            req = srv.last("GET", route)
            assert req.query.get("no_track_activity") == ["1"]  # our poll is not activity
            assert req.headers["Authorization"] == f"token {TOKEN}"
        assert srv.unexpected() == []


def test_a_busy_kernel_and_a_newer_kernel_activity(runtime: Path) -> None:
    with FakeHTTPServer() as srv:
        jup = FakeJupyter(srv)
        jup.kernels.append({"id": "k2", "name": "python3", "last_activity": "2026-05-04T12:07:00.5Z",
                            "execution_state": "busy", "connections": 2})
        write_runtime(runtime, jup.port)
        reading = JupyterActivity().read()
        assert reading.status is SignalStatus.OK
        assert reading.last_activity == datetime(2026, 5, 4, 12, 7, 0, 500000, tzinfo=timezone.utc)
        assert (reading.busy_kernels, reading.kernels, reading.connections) == (1, 2, 3)


def test_no_runtime_file_is_no_signal(runtime: Path) -> None:
    assert JupyterActivity().read().status is SignalStatus.ABSENT
    runtime.mkdir()
    assert JupyterActivity().read().status is SignalStatus.ABSENT


def test_a_runtime_file_of_a_dead_server_is_stale(runtime: Path) -> None:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    write_runtime(runtime, 9, pid=int(done.stdout))  # that process has exited
    assert find_servers(runtime) == []
    assert JupyterActivity().read().status is SignalStatus.ABSENT


def test_a_running_server_that_refuses_the_token_counts_as_busy(runtime: Path) -> None:
    with FakeHTTPServer() as srv:
        jup = FakeJupyter(srv)
        write_runtime(runtime, jup.port, token="not-the-token")
        reading = JupyterActivity().read()
        assert reading.status is SignalStatus.ERROR
        assert "HTTP 403" in reading.error and "jupyter_token" in reading.error
        assert "not-the-token" not in reading.error and TOKEN not in reading.error
        # the configured token (or $JUPYTER_TOKEN) wins over the runtime file's
        assert JupyterActivity(token=TOKEN).read().status is SignalStatus.OK


def test_jupyter_token_from_the_environment(runtime: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeHTTPServer() as srv:
        jup = FakeJupyter(srv)
        write_runtime(runtime, jup.port, token="")
        assert JupyterActivity().read().status is SignalStatus.ERROR
        monkeypatch.setenv("JUPYTER_TOKEN", TOKEN)
        assert JupyterActivity().read().status is SignalStatus.OK


def test_a_server_that_is_gone_but_whose_process_runs_counts_as_busy(runtime: Path) -> None:
    with FakeHTTPServer() as srv:
        port = FakeJupyter(srv).port
    write_runtime(runtime, port)  # our own pid: running, but nothing listens on the port any more
    reading = JupyterActivity(timeout=1.0).read()
    assert reading.status is SignalStatus.ERROR and "cannot be read" in reading.error


@pytest.mark.parametrize("breakage", ["not json", "wrong shape", "bad time", "500", "unix socket", "bad file"])
def test_every_malformed_answer_is_an_error_never_idle(runtime: Path, breakage: str) -> None:
    with FakeHTTPServer() as srv:
        jup = FakeJupyter(srv)
        if breakage == "not json":
            srv.inject("GET", "/api/kernels", Reply.text("<html>login</html>"))
        elif breakage == "wrong shape":
            jup.kernels = {"k1": "idle"}  # type: ignore[assignment]
        elif breakage == "bad time":
            jup.status["last_activity"] = "yesterday"
        elif breakage == "500":
            srv.inject("GET", "/api/status", Reply.text("boom", status=500))
        if breakage == "unix socket":
            write_runtime(runtime, 0)
        elif breakage == "bad file":
            runtime.mkdir(parents=True)
            (runtime / "jpserver-1.json").write_text("{not json")
        else:
            write_runtime(runtime, jup.port)
        reading = JupyterActivity().read()
        assert reading.status is SignalStatus.ERROR and reading.error


def test_an_explicit_url_is_read_and_its_failure_is_an_error(runtime: Path) -> None:
    with FakeHTTPServer() as srv:
        jup = FakeJupyter(srv)
        reading = JupyterActivity(f"http://127.0.0.1:{jup.port}/", token=TOKEN).read()
        assert reading.status is SignalStatus.OK and reading.kernels == 1
    assert JupyterActivity(f"http://127.0.0.1:{jup.port}/", token=TOKEN, timeout=1.0).read().status \
        is SignalStatus.ERROR


def test_a_reading_is_reused_for_the_reread_interval(runtime: Path) -> None:
    now = [0.0]
    with FakeHTTPServer() as srv:
        jup = FakeJupyter(srv)
        write_runtime(runtime, jup.port)
        reader = JupyterActivity(monotonic=lambda: now[0], reread=30.0)
        first = reader.read()
        now[0] = 29.0
        assert reader.read() is first and srv.count("GET", "/api/status") == 1
        jup.kernels[0]["execution_state"] = "busy"
        now[0] = 30.0
        assert reader.read().busy_kernels == 1 and srv.count("GET", "/api/status") == 2


def test_base_url_of_a_runtime_file() -> None:
    assert base_url_of({"port": 8888, "base_url": "/"}) == "http://127.0.0.1:8888/"
    assert base_url_of({"port": 8888, "base_url": "user/a", "secure": True}) == "https://127.0.0.1:8888/user/a/"
    assert base_url_of({"port": 0, "sock": "/tmp/jp.sock"}) is None


def test_the_sampler_carries_the_jupyter_signal(runtime: Path) -> None:
    with FakeHTTPServer() as srv:
        jup = FakeJupyter(srv)
        jup.kernels[0]["execution_state"] = "busy"
        write_runtime(runtime, jup.port)
        now = datetime(2026, 5, 4, 12, 10, tzinfo=timezone.utc)
        s = Sampler(None, None, jupyter=JupyterActivity()).sample(now)
        assert s.jupyter_status is SignalStatus.OK and s.jupyter_busy_kernels == 1
        assert s.jupyter_last_activity == _when(STATUS_AT)
        jup.token = "rotated"
        s = Sampler(None, None, jupyter=JupyterActivity()).sample(now + timedelta(seconds=5))
        assert s.jupyter_status is SignalStatus.ERROR and any(r.startswith("jupyter: ") for r in s.reasons)
    assert Sampler(None, None).sample(now).jupyter_status is SignalStatus.ABSENT


def test_the_watch_reads_jupyter_only_for_the_idle_fraction_policy(runtime: Path) -> None:
    from costctl.config import load_settings
    from costctl.watch.watcher import jupyter_source

    reader = jupyter_source(load_settings(overrides={}))
    assert isinstance(reader, JupyterActivity) and reader.url == "auto"
    assert jupyter_source(load_settings(overrides={"policies": {"idle_fraction": {"jupyter_url": "off"}}})) is None
    assert jupyter_source(load_settings(overrides={"policies": {"idle_fraction": {"time_window": "off"}}})) is None
    with FakeHTTPServer() as srv:
        jup = FakeJupyter(srv)
        s = load_settings(overrides={"policies": {"idle_fraction": {
            "jupyter_url": f"http://127.0.0.1:{jup.port}/", "jupyter_token": TOKEN}}})
        reading = jupyter_source(s).read()  # type: ignore[union-attr]
        assert reading.status is SignalStatus.OK and reading.kernels == 1
