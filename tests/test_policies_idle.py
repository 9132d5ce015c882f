"""The idle policy driven through telemetry traces on a simulated clock.

Each trace is a list of samples (and progress points) at offsets from T0. The driver moves a
SimClock one second at a time, adds every record whose time has come, and evaluates the policy;
the test asserts the exact second at which it first fires (or that it never does).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

import pytest

from costctl.clock import SimClock
from costctl.config import IdleConfig
from costctl.policies import History, IdlePolicy, classify_sample
from costctl.records import GpuReading, ProgressPoint, SignalStatus, TelemetrySample

T0 = datetime(2026, 1, 1, 3, 0, tzinfo=timezone.utc)
INTERVAL = 5  # seconds
WINDOW = 60  # seconds
OK, ABSENT, ERROR, UNKNOWN = SignalStatus.OK, SignalStatus.ABSENT, SignalStatus.ERROR, SignalStatus.UNKNOWN


def at(sec: float) -> datetime:
    return T0 + timedelta(seconds=sec)


def gpu(t: float, *utils: float | None, status: SignalStatus = OK, error: str | None = None,
        cpu: float | None = None, cpu_status: SignalStatus | None = None,
        ssh: int | None = None) -> TelemetrySample:
    """A sample with one GpuReading per utilization given (None = unreadable)."""
    readings = tuple(GpuReading(index=i, utilization=u, error=error) for i, u in enumerate(utils))
    return TelemetrySample(
        time=at(t), gpus=readings, gpu_status=status,
        cpu_percent=cpu, cpu_status=cpu_status if cpu_status is not None else (OK if cpu is not None else ABSENT),
        ssh_sessions=ssh, ssh_status=OK if ssh is not None else ABSENT, source="trace",
    )


def cpu_only(t: float, cpu: float | None, status: SignalStatus = OK) -> TelemetrySample:
    return TelemetrySample(time=at(t), gpu_status=ABSENT, cpu_percent=cpu, cpu_status=status, source="cpu")


def no_signal(t: float) -> TelemetrySample:
    return TelemetrySample(time=at(t))


def every(start: int, stop: int, make, step: int = INTERVAL) -> list[TelemetrySample]:
    """Samples at start, start+step, ... <= stop."""
    return [make(t) for t in range(start, stop + 1, step)]


@dataclass
class Trace:
    samples: list[TelemetrySample]
    end: int  # evaluate every second from 0 to end inclusive
    progress: list[ProgressPoint] = field(default_factory=list)
    progress_source: bool = False
    window: str | None = f"{WINDOW}s"
    config: dict = field(default_factory=dict)


def drive(trace: Trace) -> list[tuple[float, str]]:
    """Run the trace; return (second, key) for the first time each distinct decision key appears."""
    clock = SimClock(T0)
    history = History(sample_interval=timedelta(seconds=INTERVAL), started_at=T0,
                      progress_source=trace.progress_source)
    policy = IdlePolicy(IdleConfig(time_window=trace.window, **trace.config))
    samples = sorted(trace.samples, key=lambda s: s.time)
    progress = sorted(trace.progress, key=lambda p: p.time)
    fired: list[tuple[float, str]] = []
    seen: set[str] = set()
    for second in range(trace.end + 1):
        clock.set(at(second))
        now = clock.now()
        while samples and samples[0].time <= now:
            history.add_sample(samples.pop(0))
        while progress and progress[0].time <= now:
            history.add_progress(progress.pop(0))
        decision = policy.evaluate(history, now)
        if decision is not None and decision.key not in seen:
            seen.add(decision.key)
            fired.append(((now - T0).total_seconds(), decision.key))
            assert decision.policy == "idle" and decision.action == "stop"
            assert decision.time == now
    return fired


def idle_gpu(t: float) -> TelemetrySample:
    return gpu(t, 0.0)


def loss_at(t: float, value: float = 1.0) -> ProgressPoint:
    return ProgressPoint(time=at(t), value=value)


# (id, trace, expected first-fire second or None)
CASES = [
    # A whole window idle from the first sample: fires exactly W after it, at that sample's time.
    ("whole-window-idle", Trace(every(0, 120, idle_gpu), end=120), WINDOW),
    # Busy until 30 s: the stretch starts at the first idle sample (35 s).
    ("idle-after-busy", Trace(every(0, 30, lambda t: gpu(t, 80.0)) + every(35, 150, idle_gpu), end=150), 35 + WINDOW),
    # A gap of exactly 2 intervals is tolerated.
    ("gap-of-2-intervals-ok", Trace(every(0, 40, idle_gpu) + every(50, 120, idle_gpu), end=120), WINDOW),
    # A gap over 2 intervals (40 -> 51) breaks the stretch; a new one starts at 51.
    ("gap-over-2-intervals", Trace(every(0, 40, idle_gpu) + every(51, 106, idle_gpu), end=110), None),
    ("gap-then-whole-window", Trace(every(0, 40, idle_gpu) + every(51, 131, idle_gpu), end=131), 51 + WINDOW),
    # The sample at the window's end is busy.
    ("busy-sample-at-end", Trace(every(0, 55, idle_gpu) + [gpu(60, 50.0)], end=62), None),
    # Monitoring began less than W ago (first sample at 3 s, last evaluation at 62 s).
    ("partly-covered-start", Trace(every(3, 58, idle_gpu) + [idle_gpu(62)], end=62), None),
    ("covered-once-anchor-is-W-old", Trace(every(3, 63, idle_gpu), end=70), 63),
    # Progress keeps arriving while the GPU is idle.
    ("progress-still-arriving", Trace(every(0, 150, idle_gpu), end=150, progress_source=True,
                                      progress=[loss_at(t) for t in range(7, 150, 20)]), None),
    # Progress stops at 40 s: a point in [now-W, now] is busy, so the first idle window is
    # [41, 101] (the anchor is the sample at 40, the newest at 100 is fresh).
    ("progress-stops", Trace(every(0, 150, idle_gpu), end=150, progress_source=True,
                             progress=[loss_at(t) for t in (0, 20, 40)]), 40 + WINDOW + 1),
    # Progress only counts when a progress source exists.
    ("progress-without-source-ignored", Trace(every(0, 120, idle_gpu), end=120,
                                              progress=[loss_at(t) for t in (0, 20, 40)]), WINDOW),
    # The process tree is busy on CPU (and at exactly the threshold counts as busy).
    ("cpu-busy", Trace(every(0, 150, lambda t: gpu(t, 0.0, cpu=150.0)), end=150), None),
    ("cpu-at-threshold", Trace(every(0, 150, lambda t: gpu(t, 0.0, cpu=10.0)), end=150), None),
    ("cpu-idle", Trace(every(0, 150, lambda t: gpu(t, 0.0, cpu=2.0)), end=150), WINDOW),
    ("cpu-unknown", Trace(every(0, 150, lambda t: gpu(t, 0.0, cpu=None, cpu_status=UNKNOWN)), end=150), None),
    ("cpu-error-with-stale-zero", Trace(every(0, 150, lambda t: gpu(t, 0.0, cpu=0.0, cpu_status=ERROR)), end=150),
     None),
    ("cpu-stand-in-idle", Trace(every(0, 150, lambda t: cpu_only(t, 0.0)), end=150), WINDOW),
    ("cpu-stand-in-first-reading-unknown",
     Trace([cpu_only(0, None, UNKNOWN)] + every(5, 150, lambda t: cpu_only(t, 0.0)), end=150), 5 + WINDOW),
    # A present GPU signal that fails to read.
    ("gpu-status-error", Trace(every(0, 150, lambda t: gpu(t, status=ERROR)), end=150), None),
    ("gpu-status-unknown-with-zero-readings", Trace(every(0, 150, lambda t: gpu(t, 0.0, status=UNKNOWN)), end=150),
     None),
    ("gpu-utilization-none", Trace(every(0, 150, lambda t: gpu(t, None)), end=150), None),
    ("gpu-reading-error", Trace(every(0, 150, lambda t: gpu(t, 0.0, error="NVMLError_Unknown")), end=150), None),
    ("gpu-error-mid-window", Trace(every(0, 150, lambda t: gpu(t, status=ERROR) if t == 40 else idle_gpu(t)),
                                   end=150), 45 + WINDOW),
    # Disabled, and no signal at all.
    ("time-window-off", Trace(every(0, 300, idle_gpu), end=300, window="off"), None),
    ("no-signal-at-all", Trace(every(0, 300, no_signal), end=300), None),
    # Two GPUs: costctl needs ALL of them idle (dstack would stop on the idle one).
    ("two-gpus-one-busy", Trace(every(0, 150, lambda t: gpu(t, 0.0, 97.0)), end=150), None),
    ("two-gpus-both-idle", Trace(every(0, 150, lambda t: gpu(t, 0.0, 4.9)), end=150), WINDOW),
    # The newest sample must be fresh: the sampler stops at 40 s, evaluations go on.
    ("stale-newest-sample", Trace(every(0, 40, idle_gpu), end=200), None),
    # SSH sessions when counted.
    ("ssh-session-open", Trace(every(0, 150, lambda t: gpu(t, 0.0, ssh=1)), end=150), None),
    ("ssh-none-open", Trace(every(0, 150, lambda t: gpu(t, 0.0, ssh=0)), end=150), WINDOW),
]


@pytest.mark.parametrize("trace,expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_idle_fires_exactly_when_a_whole_window_is_idle(trace: Trace, expected: int | None) -> None:
    fired = drive(trace)
    if expected is None:
        assert fired == []
    else:
        assert fired, "expected the idle policy to fire"
        assert fired[0][0] == expected
        assert len(fired) == 1, "one idle stretch must give one decision key"


def test_two_stretches_fire_twice_with_distinct_keys() -> None:
    samples = every(0, 70, idle_gpu) + [gpu(75, 90.0)] + every(80, 160, idle_gpu)
    fired = drive(Trace(samples, end=160))
    assert [sec for sec, _ in fired] == [WINDOW, 80 + WINDOW]
    assert fired[0][1] != fired[1][1]


def test_decision_evidence_names_stretch_window_signals_and_maxima() -> None:
    history = History(sample_interval=timedelta(seconds=INTERVAL), progress_source=True)
    for t in range(0, 61, INTERVAL):
        history.add_sample(gpu(t, 1.0 + t / 100, 3.0, cpu=4.0 + (t == 30)))
    policy = IdlePolicy(IdleConfig(time_window="60s"))
    decision = policy.evaluate(history, at(60))
    assert decision is not None
    ev = decision.evidence
    assert ev["idle_since"] == "2026-01-01T03:00:00Z"
    assert ev["window_start"] == "2026-01-01T03:00:00Z" and ev["window_end"] == "2026-01-01T03:01:00Z"
    assert ev["signals"] == ["gpu", "cpu", "progress"]
    assert ev["max_gpu_utilization"] == {"0": 1.6, "1": 3.0}
    assert ev["max_cpu_percent"] == 5.0
    assert ev["samples"] == 13
    assert decision.key == "idle:2026-01-01T03:00:00Z"
    assert "idle for 1m" in decision.reason


def test_the_reason_rounds_measured_percentages_and_the_evidence_keeps_them_exact() -> None:
    history = History(sample_interval=timedelta(seconds=INTERVAL))
    for t in range(0, 61, INTERVAL):
        history.add_sample(gpu(t, 2.85275 if t == 30 else 0.0, cpu=6.5687 if t == 30 else 0.0))
    decision = IdlePolicy(IdleConfig(time_window="60s")).evaluate(history, at(60))
    assert decision is not None
    assert "max GPU utilization 2.9 % (< " in decision.reason and "max CPU 6.6 % (< " in decision.reason
    assert "2.85275" not in decision.reason and "6.5687" not in decision.reason
    assert decision.evidence["max_cpu_percent"] == 6.5687


def test_action_advise_is_passed_through() -> None:
    history = History(sample_interval=timedelta(seconds=INTERVAL))
    for t in range(0, 61, INTERVAL):
        history.add_sample(idle_gpu(t))
    decision = IdlePolicy(IdleConfig(time_window="60s", action="advise")).evaluate(history, at(60))
    assert decision is not None and decision.action == "advise"


def test_child_exit_then_guard_fires() -> None:
    """While the child runs and prints loss the machine is busy; after it exits the tree reads
    0 % CPU and no progress arrives, so the guard stops the instance W after the last loss line."""
    samples = [gpu(t, 95.0 if t < 100 else 0.0, cpu=100.0 if t < 100 else 0.0) for t in range(0, 300, INTERVAL)]
    progress = [loss_at(t) for t in range(2, 100, 10)]
    fired = drive(Trace(samples, end=300, progress=progress, progress_source=True))
    assert [sec for sec, _ in fired] == [100 + WINDOW]


def test_samples_are_trimmed_but_windows_still_fire() -> None:
    """A long run keeps a bounded number of samples; the stretch and its key survive trimming."""
    history = History(sample_interval=timedelta(seconds=1), retention=timedelta(seconds=30))
    policy = IdlePolicy(IdleConfig(time_window="10s"))
    history.keep_at_least(policy.retention(history.sample_interval))
    fired = []
    for t in range(0, 5000):
        history.add_sample(gpu(t, 50.0 if t < 4000 else 0.0))
        d = policy.evaluate(history, at(t))
        if d is not None:
            fired.append((t, d.key))
    assert len(history.samples) <= 31
    assert fired[0] == (4010, "idle:2026-01-01T04:06:40Z")
    assert {key for _, key in fired} == {fired[0][1]}


def test_classify_sample_reports_signals_and_busy_parts() -> None:
    verdict = classify_sample(gpu(0, 0.0, 40.0, cpu=1.0), min_gpu_utilization=5, min_cpu_utilization=10)
    assert verdict.idle is False and verdict.signals == ("gpu", "cpu") and verdict.busy == ("gpu1",)
    verdict = classify_sample(no_signal(0), min_gpu_utilization=5, min_cpu_utilization=10)
    assert verdict.idle is None and verdict.signals == ()
    verdict = classify_sample(gpu(0, status=OK), min_gpu_utilization=5, min_cpu_utilization=10)
    assert verdict.idle is False and verdict.busy == ("gpu",)  # OK but no readings: unreadable


def test_history_rejects_out_of_order_samples() -> None:
    history = History(sample_interval=timedelta(seconds=1))
    history.add_sample(idle_gpu(10))
    with pytest.raises(ValueError, match="time order"):
        history.add_sample(idle_gpu(10))


def test_an_idle_stretch_builds_its_evidence_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Once a stretch has been idle a whole window, every later evaluation of the same stretch
    returns the decision already made (same key, reported once) instead of scanning the whole
    window again per sample (60 % of ``analyze --gpu-log``'s time on a long idle log); a new
    stretch after busy work gets a new decision with its own evidence."""
    built: list[datetime] = []
    original = IdlePolicy._decision

    def counting(self, history, now, since, window):
        built.append(since)
        return original(self, history, now, since, window)

    monkeypatch.setattr(IdlePolicy, "_decision", counting)
    samples = every(0, 600, lambda t: gpu(t, 0.0)) + every(605, 700, lambda t: gpu(t, 95.0)) \
        + every(705, 1200, lambda t: gpu(t, 0.0))
    fired = drive(Trace(samples, end=1200))
    assert len(fired) == 2
    assert len(built) == 2 and built[0] == at(0) and built[1] == at(705)
