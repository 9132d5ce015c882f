"""Preemption notice -> checkpoint request latency of a real ``costctl watch``, at the defaults.

For each source — ``aws``, ``gcp``, ``azure`` (local fakes of their metadata endpoints,
tests/fakes/metadata.py, on 127.0.0.1; the watch reads them with ``[preemption] source`` and
``*_base_url``) and ``sim`` (the simulated provider's own notice) — it runs ``--runs`` times
(default 10): a fresh data dir, ``costctl watch`` of a sim spot instance running a small job
that, once it sees ``$COSTCTL_CHECKPOINT_REQUEST``, writes ``time.monotonic()`` and exits; after
the watch has polled for a while (``--settle`` seconds, default 3, plus a random 0..1 s so that the notice falls at any
phase of the poll cycle), the notice is issued and
``time.monotonic()`` taken (CLOCK_MONOTONIC is one clock for every process of the machine).
Latency = the job's time - the issue time: notice issued -> checkpoint request seen by the job
(the job checks every 5 ms, so that much is the job's, not costctl's).

Nothing but ``[instance] provider/billing`` and the fake's address is configured: the poll
interval is the default (``[preemption] poll_interval`` = 1 s; GCP long-polled). Target: a
median under 1 s per source.

Last line, one JSON object::

    {"runs": 10, "target_s": 1.0,
     "sources": {"aws": {"median_s": 0.51, "max_s": 0.98, "min_s": 0.02, "met": true}, ...}}

``median_s``/``max_s``/``min_s``: seconds. A measurement, not a test: nothing is asserted.

Usage::

    python benchmarks/bench_notice.py [--runs 10] [--sources aws,gcp,azure,sim] [--settle 3]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from _procfs import costctl_env, ensure_bytecode  # noqa: E402  (benchmarks/ is the script's own folder)
from tests.fakes.metadata import FakeMetadata  # noqa: E402

TARGET_S = 1.0
JOB = """
import sys, time
from pathlib import Path
from costctl import job
Path(sys.argv[1] + ".started").write_text("1")
while not job.checkpoint_requested():
    time.sleep(0.005)
Path(sys.argv[1]).write_text(repr(time.monotonic()))
job.acknowledge_checkpoint()
"""


def _env(work: Path, toml: str) -> dict[str, str]:
    cfg = work / "costctl.toml"
    cfg.write_text(toml)
    env = costctl_env(COSTCTL_DATA_DIR=str(work / "data"), COSTCTL_CONFIG=str(cfg),
                      COSTCTL_POLICIES__IDLE__COUNT_SSH_SESSIONS="false")
    return env


def _wait_file(path: Path, timeout_s: float) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if path.exists() and path.stat().st_size:
            return True
        time.sleep(0.002)
    return False


def measure(source: str, settle_s: float) -> float:
    """One measurement for ``source``: seconds from the notice to the job seeing the request."""
    with tempfile.TemporaryDirectory(prefix="bench-notice-") as tmp:
        work = Path(tmp)
        toml = '[instance]\nprovider = "sim"\nbilling = "spot"\n'
        fake = FakeMetadata(source) if source != "sim" else None
        if fake is not None:
            fake.__enter__()
            toml += f'[preemption]\nsource = "{source}"\n{source}_base_url = "{fake.url}"\n'
        marker = work / "requested"
        (work / "job.py").write_text(JOB)
        watch = subprocess.Popen(
            [sys.executable, "-m", "costctl", "watch", "--no-status", "--on-exit", "leave", "--",
             sys.executable, str(work / "job.py"), str(marker)],
            env=_env(work, toml), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            if not _wait_file(Path(str(marker) + ".started"), 60):
                raise RuntimeError(f"{source}: the job did not start")
            time.sleep(settle_s + random.uniform(0.0, 1.0))  # any phase of the poll cycle
            if fake is not None:
                issued = fake.issue(notice_s=120)
            else:
                from costctl_providers.sim import SimProvider

                sim = SimProvider({}, data_dir=work / "data")
                issued = time.monotonic()  # just before: the state is written inside the call
                sim.inject_preemption("sim-local", notice_s=120)
            if not _wait_file(marker, 30):
                raise RuntimeError(f"{source}: no checkpoint request within 30 s")
            return float(marker.read_text()) - issued
        finally:
            try:
                watch.wait(30)
            except subprocess.TimeoutExpired:
                watch.kill()
                watch.wait()
            if fake is not None:
                fake.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--sources", default="aws,gcp,azure,sim")
    ap.add_argument("--settle", type=float, default=3.0, help="seconds the watch polls before the notice")
    args = ap.parse_args()
    ensure_bytecode()
    result: dict[str, dict[str, float | bool]] = {}
    for source in args.sources.split(","):
        lat = [measure(source, args.settle) for _ in range(args.runs)]
        med = statistics.median(lat)
        result[source] = {"median_s": round(med, 4), "max_s": round(max(lat), 4), "min_s": round(min(lat), 4),
                          "met": med < TARGET_S}
        print(f"{source}: median {med:.3f} s, max {max(lat):.3f} s, min {min(lat):.3f} s over {len(lat)} runs",
              flush=True)
    print(json.dumps({"runs": args.runs, "target_s": TARGET_S, "sources": result}))


if __name__ == "__main__":
    main()
