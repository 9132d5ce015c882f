"""Load a scenario file of the policy suite (format: :mod:`generate`'s docstring) into costctl records.

:func:`load` gives a :class:`Scenario` with aware-UTC times, the price as :class:`~costctl.money.Money`,
and :meth:`Scenario.samples` builds the :class:`~costctl.records.TelemetrySample` list a live
``costctl watch`` would have seen with the given settings: the GPU signal always (every GPU,
never averaged), the CPU of the job's process tree when recorded, SSH sessions only when
``[policies.idle] count_ssh_sessions`` is on (the sampler reads them only then).
:func:`problems` checks a scenario's labels against its trace.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

from costctl.money import Money, cost_of
from costctl.records import GpuReading, ProgressPoint, SignalStatus, TelemetrySample

HERE = Path(__file__).resolve().parent


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(timezone.utc)


@dataclass(frozen=True, slots=True)
class Scenario:
    """One scenario: a trace and its frozen labels (times aware UTC).

    Attributes:
        name / title / description / source: as in the file.
        start / end: first sample; when the instance ends anyway (billing stops there).
        interval: the recorder's sampling period.
        rate: price per instance-hour (all GPUs).
        mode: ``on-demand`` or ``spot``.
        job: ``(start, exit)`` of the watched command (exit None: it runs to the end), or None.
        exit_status: the command's exit status when it exited.
        work_until: a stop before this time is a false stop.
        oracle_stop: the perfect-hindsight stop.
        spot_notice / terminated: the preemption notice and the provider's termination, if any.
        data: the raw file content.
    """

    name: str
    title: str
    description: str
    source: str
    start: datetime
    end: datetime
    interval: timedelta
    rate: Money
    mode: str
    job: tuple[datetime, datetime | None] | None
    exit_status: int | None
    work_until: datetime
    oracle_stop: datetime
    spot_notice: datetime | None
    terminated: datetime | None
    data: dict[str, Any]

    def at(self, seconds: float) -> datetime:
        """The time ``seconds`` after the start."""
        return self.start + timedelta(seconds=seconds)

    def samples(self, *, count_ssh: bool) -> list[TelemetrySample]:
        """The trace as telemetry samples (see the module docstring)."""
        cols = self.data["samples"]
        cpu, ssh = cols.get("cpu"), cols.get("ssh")
        out = []
        for k, t in enumerate(cols["t_s"]):
            gpus = tuple(GpuReading(index=i, utilization=u) for i, u in enumerate(cols["gpu"][k]))
            out.append(TelemetrySample(
                time=self.at(t), gpus=gpus, gpu_status=SignalStatus.OK if gpus else SignalStatus.ABSENT,
                cpu_percent=cpu[k] if cpu is not None else None,
                cpu_status=SignalStatus.OK if cpu is not None else SignalStatus.ABSENT,
                ssh_sessions=ssh[k] if ssh is not None and count_ssh else None,
                ssh_status=SignalStatus.OK if ssh is not None and count_ssh else SignalStatus.ABSENT,
                source="scenario",
            ))
        return out

    def progress(self) -> list[ProgressPoint]:
        """The job's train-loss points, on the time axis."""
        return [ProgressPoint(time=self.at(t), value=v, kind="train", name="loss", step=k + 1)
                for k, (t, v) in enumerate(self.data["progress"])]

    def ssh_counts(self) -> list[int] | None:
        """Open SSH sessions per sample (None: not recorded)."""
        return self.data["samples"].get("ssh")

    def spend_until(self, stop: datetime | None) -> Money:
        """What the instance costs from the start until ``stop`` (None or later than the end:
        until the end), per second: ``price x seconds / 3600``, Decimal."""
        until = self.end if stop is None or stop > self.end else max(stop, self.start)
        return Money(cost_of(self.rate.amount, until - self.start), self.rate.currency)

    def false_stop(self, stop: datetime | None) -> bool:
        """True when ``stop`` comes while work was still to come (before ``work_until``)."""
        return stop is not None and stop < self.work_until


def load(path: Path) -> Scenario:
    """Read one scenario file."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    start = _time(data["start"])
    at = lambda s: start + timedelta(seconds=s)  # noqa: E731
    job = data.get("job")
    spot = data.get("spot")
    billing = data["billing"]
    labels = data["labels"]
    return Scenario(
        name=data["name"], title=data["title"], description=data["description"], source=data["source"],
        start=start, end=at(data["end_s"]), interval=timedelta(seconds=data["sample_interval_s"]),
        rate=Money(Decimal(billing["price_per_hour"]), billing["currency"]), mode=billing["mode"],
        job=(at(job["start_s"]), at(job["exit_s"]) if job["exit_s"] is not None else None) if job else None,
        exit_status=job.get("exit_status") if job else None,
        work_until=at(labels["work_until_s"]), oracle_stop=at(labels["oracle_stop_s"]),
        spot_notice=at(spot["notice_s"]) if spot else None,
        terminated=at(spot["terminated_s"]) if spot else None,
        data=data,
    )


def load_all(directory: Path = HERE) -> list[Scenario]:
    """Every ``*.json`` scenario in ``directory``, by name."""
    return [load(p) for p in sorted(Path(directory).glob("*.json"))]


def problems(s: Scenario) -> list[str]:
    """What is inconsistent between a scenario's labels and its trace (empty: consistent)."""
    out = []
    cols = s.data["samples"]
    t = cols["t_s"]
    n = len(t)
    if any(b <= a for a, b in zip(t, t[1:])):
        out.append("sample times are not strictly increasing")
    if t[0] != 0:
        out.append("the first sample is not at 0 s")
    if s.end < s.at(t[-1]):
        out.append("end_s is before the last sample")
    for key in ("gpu", "cpu", "ssh"):
        col = cols.get(key)
        if (col is not None) != bool(s.data["recorded"][key]):
            out.append(f"recorded.{key} does not match the samples")
        if col is not None and len(col) != n:
            out.append(f"samples.{key} has {len(col)} values for {n} times")
    if not s.start <= s.work_until <= s.end:
        out.append("work_until is outside the trace (the false-stop boundary must lie in it)")
    if not s.start <= s.oracle_stop <= s.end:
        out.append("oracle_stop is outside the trace")
    if s.oracle_stop < s.work_until:
        out.append("the oracle stops before work_until: it would make a false stop")
    if s.job is not None:
        begin, exit_at = s.job
        if exit_at is not None and not begin <= exit_at <= s.end:
            out.append("the job exits outside the trace")
        if exit_at is not None and s.work_until > exit_at and s.data["job"].get("command", "").startswith("python"):
            out.append("work continues after the job exited")
    for pt, _ in s.data["progress"]:
        if s.at(pt) > s.end:
            out.append("a progress point lies after the end")
            break
    if s.spot_notice is not None:
        if s.terminated is None or not s.spot_notice < s.terminated:
            out.append("a spot notice must come before the termination")
        elif s.terminated != s.end:
            out.append("a terminated instance's trace must end at the termination")
    return out
