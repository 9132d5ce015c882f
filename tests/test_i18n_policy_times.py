"""Times in the reasons people read (issue 16 part 3): the idle stop, the stall advice and a
snoozed stop show their times in the configured ``[watch] timezone``, to the second
(:func:`costctl.i18n.format_time`), in English and in Simplified Chinese; the decision's
evidence and its dedup key keep the exact ISO UTC time (microseconds included). The summary's
"the last: ..." head of a repeated reason is not cut inside such a time."""

from __future__ import annotations

import io
from datetime import datetime, timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from costctl import i18n
from costctl.config import load_settings
from costctl.policies import History, PolicyEngine
from costctl.policies.engine import Snooze
from costctl.records import Decision, GpuReading, ProgressPoint, SignalStatus, TelemetrySample

SHANGHAI = ZoneInfo("Asia/Shanghai")
#: 03:14:15.123456 on 5 December in Beijing; the reasons must show 2026-12-05 03:14:15+08:00.
T0 = datetime(2026, 12, 4, 19, 14, 15, 123456, tzinfo=timezone.utc)
LOCAL = "2026-12-05 03:14:15+08:00"
CONFIG = """
[watch]
timezone = "Asia/Shanghai"
sample_interval = "10s"
[policies.idle]
time_window = "1m"
count_ssh_sessions = false
[policies.stall]
stall_window = "1m"
"""


@pytest.fixture(autouse=True)
def _language_restored():
    before = i18n.language()
    yield
    i18n.set_language(before)


@pytest.fixture
def settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    path = tmp_path / "costctl.toml"
    path.write_text(CONFIG)
    return load_settings(path)


def _idle_stop(settings, *, snooze: Snooze | None = None) -> Decision:
    """Idle GPU samples every 10 s from T0 through the engine built from ``settings``, until the
    idle policy stops (after ``snooze`` when given)."""
    engine = PolicyEngine(settings, only=["idle"])
    if snooze is not None:
        engine.snooze(snooze)
    history = History(sample_interval=timedelta(seconds=10), started_at=T0)
    for k in range(100):
        now = T0 + timedelta(seconds=10 * k)
        history.add_sample(TelemetrySample(time=now, gpus=(GpuReading(index=0, utilization=0.0),),
                                           gpu_status=SignalStatus.OK))
        found = engine.evaluate(history, now)
        if found:
            (decision,) = found
            return decision
    raise AssertionError("the idle policy never fired")


@pytest.mark.parametrize("language, head", [
    ("en", f"idle for 1m since {LOCAL}: every present signal (gpu) stayed idle"),
    ("zh_CN", f"自 {LOCAL} 起已空闲 1m：所有现有信号（gpu）都保持空闲"),
])
def test_the_idle_stop_reason_shows_the_configured_zone_without_microseconds(settings, language, head):
    i18n.set_language(language)
    decision = _idle_stop(settings)
    assert decision.reason.startswith(head), decision.reason
    assert ".123456" not in decision.reason and "T19:14" not in decision.reason
    # what is stored for machines stays exact UTC
    assert decision.evidence["idle_since"] == "2026-12-04T19:14:15.123456Z"
    assert decision.key == "idle:2026-12-04T19:14:15.123456Z"


def test_the_stall_reason_shows_the_last_progress_in_the_configured_zone(settings):
    i18n.set_language("en")
    engine = PolicyEngine(settings, only=["stall"])
    history = History(sample_interval=timedelta(seconds=10), started_at=T0, progress_source=True,
                      child_running=True)
    history.add_progress(ProgressPoint(time=T0, value=1.0, step=1))
    found = engine.evaluate(history, T0 + timedelta(seconds=90))
    (decision,) = found
    assert decision.reason.endswith(f"last progress at {LOCAL}"), decision.reason
    assert decision.evidence["last_progress_at"] == "2026-12-04T19:14:15.123456Z"
    i18n.set_language("zh_CN")
    (chinese,) = PolicyEngine(settings, only=["stall"]).evaluate(history, T0 + timedelta(seconds=90))
    assert chinese.reason.endswith(f"最后一次进度在 {LOCAL}"), chinese.reason


def test_a_snoozed_stop_says_until_when_in_the_configured_zone(settings):
    i18n.set_language("en")
    until = T0 + timedelta(minutes=5, microseconds=500)
    decision = _idle_stop(settings, snooze=Snooze(until=until, by="alice", at=T0))
    assert decision.reason.endswith("(the stop waited for a snooze by alice until 2026-12-05 03:19:15+08:00)")
    assert decision.evidence["snoozed"]["until"] == "2026-12-04T19:19:15.123956Z"


def test_a_policy_built_on_its_own_shows_utc():
    """Without a context (a policy built directly, as tests and plugins do) times are UTC."""
    from costctl.config import IdleConfig
    from costctl.policies import IdlePolicy

    assert IdlePolicy(IdleConfig()).shown_time(T0) == "2026-12-04 19:14:15+00:00"


def test_the_summary_keeps_a_repeated_reasons_head_whole():
    """"fired N times; the last: HEAD": the head ends at the reason's first ": " (or "："), not at
    the colons of a time inside it."""
    from costctl.summary import RunSummary

    i18n.set_language("en")
    summary = RunSummary()
    for minute in (0, 1):
        summary.add_decision(Decision(T0, "idle", "advise",
                                      f"idle for 1m since 2026-12-05 03:1{minute}:15+08:00: every present signal"))
    out = io.StringIO()
    summary.print("0123456789", "USD", out)
    text = " ".join(out.getvalue().replace("│", " ").split())
    assert "the last: idle for 1m since 2026-12-05 03:11:15+08:00)" in text, text
