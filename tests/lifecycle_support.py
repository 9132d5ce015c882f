"""Helpers for the lifecycle tests: settings from a TOML text, a simulated-clock driver for a
real :class:`~costctl.watch.Watcher` with real child processes, and a GPU sampler that reports
given readings (this machine has no GPU)."""

from __future__ import annotations

import os
import signal
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Callable

from costctl.clock import SimClock
from costctl.config import Settings, load_settings
from costctl.records import GpuReading, SignalStatus, TelemetrySample
from costctl.watch import Watcher, WatchOptions

from helpers import REPO

T0 = datetime(2026, 6, 1, 8, 0, 0, tzinfo=timezone.utc)
EXAMPLE = str(REPO / "examples" / "train_digits.py")
PY = sys.executable
GiB = 2**30


def settings(tmp_path: Path, toml: str) -> Settings:
    """Settings from ``toml`` with the data dir in ``tmp_path/data``."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    cfg = tmp_path / "costctl.toml"
    cfg.write_text(f'data_dir = "{tmp_path / "data"}"\n' + toml)
    return load_settings(cfg)


class FixedGpu:
    """A sampler reporting one GPU with the given memory use and utilization on every tick."""

    def __init__(self, used_bytes: int, total_bytes: int, utilization: float, name: str = "NVIDIA A100 80GB") -> None:
        self.reading = GpuReading(index=0, name=name, utilization=utilization, memory_used_bytes=used_bytes,
                                  memory_total_bytes=total_bytes)

    def sample(self, now: datetime) -> TelemetrySample:
        return TelemetrySample(time=now, gpus=(self.reading,), gpu_status=SignalStatus.OK, cpu_percent=None,
                               cpu_status=SignalStatus.ABSENT, source="fixed")


def log_text(w: Watcher) -> str:
    """What the job wrote so far (the run's log file)."""
    try:
        return Path(w.log_path).read_text(errors="replace")
    except (OSError, AttributeError):
        return ""


def drive(w: Watcher, clock: SimClock, *, step_s: float = 1.0, pause_s: float = 0.02, max_real_s: float = 60,
          on_step: Callable[[datetime], None] | None = None) -> tuple[int, str]:
    """Start ``w`` and run it to its end on ``clock``: each turn advances the clock ``step_s``
    simulated seconds and sleeps ``pause_s`` real seconds (the child runs in real time), polls
    notices and ticks when due (``[preemption] poll_interval``, ``[watch] sample_interval``) and
    calls :meth:`Watcher.step`. Returns :meth:`Watcher.finish`'s ``(exit status, status)``."""
    w.start()
    s = w.settings
    tick_every = timedelta(seconds=s.watch.sample_interval.total_seconds())
    poll_every = timedelta(seconds=s.preemption.poll_interval.total_seconds())
    next_tick = next_poll = clock.now()
    limit = time.monotonic() + max_real_s
    result = None
    try:
        while result is None:
            now = clock.now()
            if on_step is not None:
                on_step(now)
            if now >= next_poll:
                w.poll_notices(now)
                next_poll = now + poll_every
            if now >= next_tick:
                w.tick(now)
                next_tick = now + tick_every
            result = w.step()
            if result is None:
                if time.monotonic() > limit:
                    raise AssertionError(f"the watch did not end within {max_real_s}s; log:\n{log_text(w)[-2000:]}")
                time.sleep(pause_s)
                clock.advance(step_s)
    finally:
        if result is None and w.child is not None and w.child.running:
            try:
                os.killpg(w.child.pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    return w.finish(*result)


def watcher(s: Settings, command: list[str], clock: SimClock, *, sampler=None, devnull: int | None = None,
            **options) -> Watcher:
    """A quiet Watcher on ``clock`` whose child output goes to /dev/null (and the run log)."""
    fd = devnull if devnull is not None else os.open(os.devnull, os.O_WRONLY)
    opts = WatchOptions(command=command, quiet=True, status_line=False, **options)
    return Watcher(s, opts, clock=clock, sampler=sampler, stdout_fd=fd, stderr_fd=fd)


__all__ = ["EXAMPLE", "FixedGpu", "GiB", "PY", "SimClock", "T0", "drive", "log_text", "settings", "watcher"]
