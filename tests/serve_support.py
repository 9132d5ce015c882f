"""A populated ledger for ``costctl serve``'s tests, and a server on 127.0.0.1 in a thread.

:func:`populate` records, relative to a simulated present ``now``:

* ``done``: a finished USD run on vastai:123456 (2x RTX 4090), charged 3661 s at 0.45/h, with a
  confirmed idle stop, busy GPU samples, a few loss points;
* ``killed``: a USD run on the same instance whose watch died 2 h before ``now`` (never ended,
  heartbeat stale), charged 600 s, with a stop that failed;
* ``live``: a CNY run on autodl:abc-uuid (RTX 3090) still watched (heartbeat 20 s before
  ``now``), charged 1800 s at 2.18/h: its GPU read busy until ``now - 600 s`` and idle since,
  the newest GPU reading 3 percent, and an advice whose reason, evidence and outcome carry
  secrets (:data:`SECRETS`) for the redaction tests.
"""

from __future__ import annotations

import json
import re
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from zoneinfo import ZoneInfo

USD_RATE = Decimal("0.45")
CNY_RATE = Decimal("2.18")
NOW = datetime(2026, 3, 1, 16, 0, 0, tzinfo=timezone.utc)
#: The secrets planted in the live run's advice: a notify URL's token, a bearer token, a key's value.
NOTIFY_URL = "json://127.0.0.1:9/hook/notify-url-secret-0123"
BEARER = "bearer-secret-4567"
API_KEY = "apikey-secret-89ab"
SECRETS = ("notify-url-secret-0123", BEARER, API_KEY)
#: A serve token for the child-process tests (passed through COSTCTL_SERVE__TOKEN).
TOKEN_ENV_VALUE = "env-serve-token-0123456789"


@dataclass(frozen=True)
class Populated:
    """The runs :func:`populate` recorded (ids) and the present it used."""

    done: str
    killed: str
    live: str
    now: datetime


def _sample(when: datetime, gpus: list[float | None], cpu: float | None):
    from costctl.records import GpuReading, SignalStatus, TelemetrySample

    return TelemetrySample(time=when, gpus=tuple(GpuReading(index=i, utilization=u) for i, u in enumerate(gpus)),
                           gpu_status=SignalStatus.OK, cpu_percent=cpu, cpu_status=SignalStatus.OK, source="nvml")


def populate(url: str, now: datetime = NOW) -> Populated:
    """Record the runs of the module docstring in the ledger at ``url`` (migrated first)."""
    from costctl.ledger import Ledger
    from costctl.records import Decision, ProgressPoint

    def at(seconds: float) -> datetime:
        return now + timedelta(seconds=seconds)

    with Ledger.open(url) as ledger:
        vast = ledger.ensure_instance("vastai", "123456", gpu="RTX 4090", gpu_count=2, billing="spot",
                                      price_per_hour=USD_RATE, currency="USD")
        autodl = ledger.ensure_instance("autodl", "abc-uuid", gpu="RTX 3090", gpu_count=1, billing="on-demand",
                                        price_per_hour=CNY_RATE, currency="CNY")
        killed = ledger.start_run(vast, started_at=at(-7800), command=None, log_path=None, host="h")
        ledger.accrue(killed, at(-7500), USD_RATE, "USD")
        ledger.accrue(killed, at(-7200), USD_RATE, "USD")
        failed = ledger.record_decision(killed, Decision(time=at(-7300), policy="budget", action="stop",
                                                         reason="budget cap reached", evidence={"cap": "1.00"}))
        for state, dt in (("requested", 0), ("sent", 1), ("failed", 900)):
            ledger.record_stop_event(killed, decision_id=failed, time=at(-7300 + dt), state=state, attempt=3,
                                     detail="the provider kept answering running")

        done = ledger.start_run(vast, started_at=at(-7200), command=["python", "train.py"], log_path=None, host="h")
        for s in (-7195, -5400, -3600, -3539):
            ledger.accrue(done, at(s), USD_RATE, "USD")
        ledger.record_samples(done, [_sample(at(-7000 + 60 * k), [97.0, 95.0], 110.0) for k in range(5)])
        ledger.record_progress(done, [ProgressPoint(time=at(-7000 + 60 * k), value=2.0 - 0.1 * k, step=k)
                                      for k in range(5)])
        stop = ledger.record_decision(done, Decision(time=at(-3600), policy="idle", action="stop",
                                                     reason="idle for 30m", evidence={"idle_since": at(-5400).isoformat()}))
        for state, dt in (("requested", 0), ("sent", 1), ("confirmed", 30)):
            ledger.record_stop_event(done, decision_id=stop, time=at(-3600 + dt), state=state, attempt=1)
        ledger.finish_run(done, ended_at=at(-3539), exit_code=0, status="succeeded")

        live = ledger.start_run(autodl, started_at=at(-1820), command=["python", "train.py"], log_path=None,
                                host=None)
        ledger.record_samples(live, [_sample(at(-1800 + 60 * k), [88.0], 150.0) for k in range(21)])  # to -600
        ledger.record_samples(live, [_sample(at(-540 + 60 * k), [3.0], 2.0) for k in range(9)])  # -540 .. -60
        ledger.record_progress(live, [ProgressPoint(time=at(-1700 + 100 * k), value=1.5 - 0.05 * k, step=100 * k)
                                      for k in range(11)])  # the newest at -700
        ledger.record_decision(live, Decision(
            time=at(-120), policy="idle", action="advise",
            reason=f"idle 8m; notify failed: POST {NOTIFY_URL} with Authorization: Bearer {BEARER}",
            evidence={"idle_since": at(-600).isoformat(), "api_key": API_KEY, "target": NOTIFY_URL,
                      "headers": {"Authorization": f"Bearer {BEARER}"}, "samples": 8}))
        ledger.accrue(live, at(-20), CNY_RATE, "CNY")
    return Populated(done, killed, live, now)


@dataclass(frozen=True)
class Answer:
    """An HTTP answer: status, headers (lower-case names) and body."""

    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode("utf-8")


def request(base: str, path: str, *, method: str = "GET", headers: dict[str, str] | None = None,
            data: bytes | None = None) -> Answer:
    """One real HTTP request to ``base + path`` (no redirects followed, errors returned as answers)."""
    req = urllib.request.Request(base + path, method=method, headers=headers or {}, data=data)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return Answer(resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read())
    except urllib.error.HTTPError as err:
        return Answer(err.code, {k.lower(): v for k, v in err.headers.items()}, err.read())


@contextmanager
def serving(url: str, *, now: datetime = NOW, token: str | None = None, secrets: tuple[str, ...] = (),
            tz: str = "Asia/Shanghai", **app_options: object) -> Iterator[str]:
    """``costctl serve``'s app on 127.0.0.1 (a free port) in a thread, reading the ledger at
    ``url`` with a simulated present ``now`` (``app_options``: more :class:`ServeApp` arguments);
    yields its base URL (``http://127.0.0.1:PORT``)."""
    from costctl.serve.app import ServeApp
    from costctl.serve.data import Thresholds
    from costctl.serve.redaction import Redactor
    from costctl.serve.server import make_server
    from costctl.serve.source import LedgerSource

    source = LedgerSource(url)
    app = ServeApp(source, token=token, tz=ZoneInfo(tz), thresholds=Thresholds(), redactor=Redactor(secrets),
                   clock=lambda: now, **app_options)  # type: ignore[arg-type]
    server = make_server("127.0.0.1", 0, app)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
        source.close()


def bill_json(url: str, *args: str) -> dict:
    """``costctl bill --format json --db URL ARGS`` in this process, parsed."""
    import contextlib
    import io

    from costctl.cli.main import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["bill", "--format", "json", "--db", url, *args])
    assert code == 0
    return json.loads(out.getvalue())


@contextmanager
def serve_child(*args: str, env: dict[str, str], timeout: float = 60) -> Iterator[tuple[object, str]]:
    """``costctl serve ARGS`` as a real child process; yields ``(process, base URL)`` once it printed
    the line it listens with; stopped with SIGTERM after, its exit status then in
    ``process.returncode`` and all it wrote on stderr in ``process.stderr_text``."""
    import select
    import subprocess
    import time

    from helpers import REPO, costctl_cmd

    proc = subprocess.Popen(costctl_cmd("serve", *args), env=env, cwd=REPO, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    seen = b""
    try:
        deadline = time.monotonic() + timeout
        listening = re.compile(rb"(http://[0-9a-f.:\[\]]+:\d+)/")
        while not listening.search(seen):
            left = deadline - time.monotonic()
            if left <= 0 or proc.poll() is not None:
                raise AssertionError(f"costctl serve did not start: rc={proc.poll()} stderr={seen!r}")
            ready, _w, _x = select.select([proc.stderr], [], [], left)
            if ready:
                chunk = proc.stderr.read1(4096)  # type: ignore[union-attr]
                if not chunk:
                    continue
                seen += chunk
        yield proc, listening.search(seen).group(1).decode()  # type: ignore[union-attr]
    finally:
        if proc.poll() is None:
            proc.terminate()
        try:
            _out, rest = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            _out, rest = proc.communicate()
        proc.stderr_text = (seen + rest).decode("utf-8", "replace")  # type: ignore[attr-defined]
