"""GPU telemetry through the ``nvidia-smi`` command, the fallback when NVML cannot be used.

Runs ``nvidia-smi --query-gpu=index,name,uuid,utilization.gpu,memory.used,memory.total,power.draw
--format=csv,noheader,nounits`` once per read. nvidia-smi costs 10-20 ms per call (against
~0.1 ms for an NVML call) and can hang for seconds on a sick driver, so every call has a
deadline: past it the whole process group of the call is killed and the read is ERROR — the
caller is never blocked longer than the deadline (plus the kill).

Exit statuses (nvidia-smi(1) "RETURN VALUE", the same codes as NVML's ``nvmlReturn_t``):
9 = NVIDIA driver is not loaded, 12 = NVML shared library not found, 6 = not found (prints
"No devices were found"). :meth:`NvidiaSmiGpuSource.probe` treats those as "no NVIDIA GPU";
any other failure is an ERROR read (counts as busy).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
from typing import Callable

from costctl.records import SignalStatus
from costctl.telemetry.base import GpuRead
from costctl.telemetry.smi_parse import (
    LIVE_QUERY_FIELDS,
    SmiParseError,
    columns_for,
    iter_rows,
    reading_from_row,
)

#: default deadline for one nvidia-smi call, in seconds.
DEFAULT_TIMEOUT_S = 5.0

#: nvidia-smi exit statuses that mean "this machine has no usable NVIDIA GPU" (absent).
ABSENT_EXIT_CODES = frozenset({6, 9, 12})


class NvidiaSmiGpuSource:
    """Reads every GPU by running nvidia-smi with a deadline.

    Args:
        binary: the nvidia-smi executable (name looked up on PATH, or a path).
        timeout: deadline for one call, in seconds (default 5).

    Reads are serialised by a lock. The command runs in its own session (process group), so a
    hung nvidia-smi and anything it started are killed together at the deadline.
    """

    name = "nvidia-smi"

    def __init__(self, binary: str | os.PathLike[str] = "nvidia-smi", *, timeout: float = DEFAULT_TIMEOUT_S) -> None:
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
        self.binary = os.fspath(binary)
        self.timeout = float(timeout)
        self._columns = columns_for(LIVE_QUERY_FIELDS)
        self._lock = threading.Lock()

    @property
    def argv(self) -> list[str]:
        """The command line run on each read."""
        return [
            self.binary,
            "--query-gpu=" + ",".join(LIVE_QUERY_FIELDS),
            "--format=csv,noheader,nounits",
        ]

    @classmethod
    def probe(
        cls,
        binary: str | os.PathLike[str] = "nvidia-smi",
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        log: Callable[[str], None] | None = None,
    ) -> NvidiaSmiGpuSource | None:
        """Return a source when nvidia-smi runs (or is there but fails), None when absent.

        None when ``binary`` is not found on PATH / not executable, when it exits with 6, 9 or
        12 (no devices, driver not loaded, NVML library missing), or when it lists no GPU.
        A source is returned for anything else, including a timeout: its reads are then ERROR
        (busy) until nvidia-smi recovers.
        """
        say = log or (lambda _line: None)
        resolved = shutil.which(os.fspath(binary))
        if resolved is None:
            say(f"nvidia-smi: {os.fspath(binary)!r} not found on PATH")
            return None
        source = cls(resolved, timeout=timeout)
        outcome = source._run()
        if isinstance(outcome, GpuRead):  # timeout or could not start
            say(f"nvidia-smi is present but failed: {outcome.error}")
            return source
        returncode, stdout, stderr = outcome
        if returncode in ABSENT_EXIT_CODES:
            say(f"nvidia-smi: {_first_line(stdout, stderr) or f'exit status {returncode}'}")
            return None
        if returncode != 0:
            say(f"nvidia-smi is present but failed: {_failure(returncode, stdout, stderr)}")
            return source
        read = source._parse(stdout)
        if read.status is SignalStatus.OK and not read.gpus:
            say("nvidia-smi: no GPUs listed")
            return None
        say(f"nvidia-smi: {len(read.gpus)} NVIDIA GPU(s)")
        return source

    def read(self) -> GpuRead:
        """Run nvidia-smi once and parse its rows.

        Returns:
            OK with one reading per GPU (``[N/A]`` / ``[Not Supported]`` fields are None; an
            unreadable utilization sets the reading's ``error``); ERROR when the command times
            out, cannot start, exits non-zero, or prints a row that does not parse.
        """
        with self._lock:
            outcome = self._run()
        if isinstance(outcome, GpuRead):
            return outcome
        returncode, stdout, stderr = outcome
        if returncode != 0:
            return GpuRead(SignalStatus.ERROR, error=_failure(returncode, stdout, stderr))
        return self._parse(stdout)

    def close(self) -> None:
        """Nothing to release (each read is its own process)."""

    def _run(self) -> tuple[int, str, str] | GpuRead:
        try:
            proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                text=True,
                encoding="utf-8",
                errors="replace",
            )
        except OSError as exc:
            return GpuRead(SignalStatus.ERROR, error=f"cannot run {self.binary}: {exc}")
        try:
            stdout, stderr = proc.communicate(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            return GpuRead(
                SignalStatus.ERROR,
                error=f"nvidia-smi did not answer within {self.timeout:g} s (killed)",
            )
        return proc.returncode, stdout, stderr

    def _parse(self, stdout: str) -> GpuRead:
        readings = []
        try:
            for row in iter_rows(stdout.splitlines(), self._columns):
                readings.append(reading_from_row(row))
        except SmiParseError as exc:
            return GpuRead(SignalStatus.ERROR, error=f"unexpected nvidia-smi output: {exc}")
        readings.sort(key=lambda r: r.index)
        return GpuRead(SignalStatus.OK, tuple(readings))

    def __enter__(self) -> NvidiaSmiGpuSource:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _kill_group(proc: subprocess.Popen[str]) -> None:
    """SIGKILL the call's process group, reap it, close its pipes; bounded, never raises."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=1.0)
    except subprocess.TimeoutExpired:  # pragma: no cover - a process stuck in the kernel (D state)
        pass
    for pipe in (proc.stdout, proc.stderr):
        if pipe is not None:
            try:
                pipe.close()
            except OSError:  # pragma: no cover
                pass


def _first_line(*texts: str) -> str:
    for text in texts:
        for line in (text or "").splitlines():
            if line.strip():
                return line.strip()
    return ""


def _failure(returncode: int, stdout: str, stderr: str) -> str:
    detail = _first_line(stderr, stdout)
    if returncode < 0:
        status = f"killed by signal {-returncode}"
    else:
        status = f"exit status {returncode}"
    return f"nvidia-smi failed ({status})" + (f": {detail}" if detail else "")
