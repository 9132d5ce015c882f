"""Each HTTP adapter wired to its local fake (real HTTP on 127.0.0.1), with the fake's stop route
and request counters: shared by the adapter retry tests and the watch's stop tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from costctl_providers.autodl import AutoDLProvider
from costctl_providers.runpod import RunPodProvider
from costctl_providers.vastai import VastAIProvider
from tests.fakes.autodl import PRO, TOKEN, FakeAutoDL
from tests.fakes.http import Reply
from tests.fakes.runpod import API_KEY as RUNPOD_KEY
from tests.fakes.runpod import FakeRunPod
from tests.fakes.vastai import API_KEY as VAST_KEY
from tests.fakes.vastai import FakeVast

AUTODL_ID = "pro-76419909953e"
POD = "pod000000001"
VAST_ID = "312"
TIMEOUT = 0.3  # the client's timeout in the timeout cases; the fake answers LATE seconds later
LATE = 1.5


@dataclass
class Rig:
    """One adapter wired to its fake, with the fake's stop route and counters."""

    name: str
    fake: Any
    provider: Any
    instance_id: str
    sleeps: list[float]
    inject: Callable[[Reply], None]          # the next stop call gets this reply
    delay_stop: Callable[[float], None]      # the next stop is carried out, answered late
    in_200_error: Callable[[], None] | None  # the next stop gets a transient failure inside a 200
    stop_requests: Callable[[], int]         # stop calls the fake received
    stops_done: Callable[[], int]            # stops that took effect on the fake
    status_reads: Callable[[], int]          # status reads the fake received
    inject_read: Callable[[Reply], None]     # the next status read gets this reply


def _config(url: str, **table: Any) -> dict[str, Any]:
    return {"base_url": url, "poll_interval": 0.01, "stop_timeout": 5, "timeout": 2, "backoff": 0.01,
            "retries": 3, **table}


def _autodl(tmp_path: Path, **table: Any) -> Iterator[Rig]:
    with FakeAutoDL() as fake:
        fake.add_pro(AUTODL_ID)
        sleeps: list[float] = []
        p = AutoDLProvider(_config(fake.url, **table), data_dir=tmp_path, env={"AUTODL_TOKEN": TOKEN},
                           sleep=sleeps.append, hostname=lambda: "laptop", run_command=_never_run)
        off = f"{PRO}/power_off"
        yield Rig(
            "autodl", fake, p, AUTODL_ID, sleeps,
            inject=lambda r: fake.server.inject("POST", off, r),
            delay_stop=lambda s: fake.server.delay_next("POST", off, s),
            in_200_error=lambda: fake.inject_envelope(off, "InternalError", "系统繁忙,请稍后再试"),
            stop_requests=lambda: fake.server.count("POST", off),
            stops_done=lambda: sum(1 for t in fake.transitions if t[2] == "shutting_down"),
            status_reads=lambda: fake.server.count("GET", f"{PRO}/status"),
            inject_read=lambda r: fake.server.inject("GET", f"{PRO}/status", r),
        )


def _vast(tmp_path: Path, **table: Any) -> Iterator[Rig]:
    with FakeVast() as fake:
        fake.add(int(VAST_ID))
        sleeps: list[float] = []
        p = VastAIProvider(_config(fake.url, **table), data_dir=tmp_path, env={"VAST_API_KEY": VAST_KEY},
                           sleep=sleeps.append)
        route = "/api/v0/instances/{id}/"
        yield Rig(
            "vastai", fake, p, VAST_ID, sleeps,
            inject=lambda r: fake.server.inject("PUT", route, r),
            delay_stop=lambda s: fake.server.delay_next("PUT", route, s),
            in_200_error=None,  # Vast has no transient failure inside a 200
            stop_requests=lambda: fake.server.count("PUT", route),
            stops_done=lambda: sum(1 for t in fake.transitions if t[1:] == ("intended_status", "running", "stopped")),
            status_reads=lambda: fake.server.count("GET", route),
            inject_read=lambda r: fake.server.inject("GET", route, r),
        )


def _runpod(tmp_path: Path, **table: Any) -> Iterator[Rig]:
    with FakeRunPod() as fake:
        fake.add(POD)
        sleeps: list[float] = []
        p = RunPodProvider(_config(fake.url, **table), data_dir=tmp_path, env={"RUNPOD_API_KEY": RUNPOD_KEY},
                           sleep=sleeps.append)
        yield Rig(
            "runpod", fake, p, POD, sleeps,
            inject=lambda r: fake.inject_for("podStop", r),
            delay_stop=lambda s: fake.delay_op("podStop", s),
            in_200_error=lambda: fake.inject_graphql_error("podStop", "Internal server error: please try again",
                                                           code="INTERNAL_SERVER_ERROR"),
            stop_requests=lambda: len(fake.requests_for("podStop")),
            stops_done=lambda: sum(1 for t in fake.transitions if t[2] == "EXITED"),
            status_reads=lambda: len(fake.requests_for("pod")),
            inject_read=lambda r: fake.inject_for("pod", r),
        )


RIGS = {"autodl": _autodl, "vastai": _vast, "runpod": _runpod}


def _never_run(argv):  # pragma: no cover - a test failing here means the adapter ran a command
    raise AssertionError(f"the adapter ran {argv!r}")
