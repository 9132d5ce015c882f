"""``costctl watch`` in Simplified Chinese and in English, as the user's shell chooses (issue 16,
part 3): with ``LANG=zh_CN.UTF-8`` the idle autostop's reason and the end-of-run summary are
Chinese, with ``LANG=C`` English, money in each as the language writes it (``US$0.69/小时``,
``$0.69/h``). Real ``costctl watch`` processes on the simulated provider,
each with only the locale variables we set; a one-line job and a 2 s idle window keep them short.
The ledger keeps the reason, the stop's details and the outcome in English (machine data, like
the evidence) whatever the watch's language; ``bill --format json`` is the same in both languages."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from costctl.ledger.schema import DecisionRow

ROOT = Path(__file__).resolve().parent.parent
CJK = re.compile("[\u4e00-\u9fff]")
CONFIG = (
    "[watch]\n"
    'sample_interval = "1s"\n'
    "[policies.idle]\n"
    'time_window = "2s"\n'
    "count_ssh_sessions = false   # the host's own SSH sessions must not keep the watch busy\n"
)


def clean_env(tmp_path: Path, lang: str) -> dict[str, str]:
    """The environment of a costctl child under ``LANG=lang`` with its data and config in ``tmp_path``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COSTCTL_", "LC_", "LANG"))}
    env.update({"LANG": lang, "COSTCTL_DATA_DIR": str(tmp_path / "data"),
                "COSTCTL_CONFIG": str(tmp_path / "costctl.toml"), "PYTHONPATH": str(ROOT)})
    return env


def without_clock(data: object) -> object:
    """``data`` (parsed JSON) without the values that run on with the wall clock between two
    reads of one ledger: the money saved so far and the time it is counted to."""
    if isinstance(data, dict):
        return {k: without_clock(v) for k, v in data.items() if not k.startswith(("saved", "as_of"))}
    if isinstance(data, list):
        return [without_clock(v) for v in data]
    return data


def watch_idle(tmp_path: Path, lang: str) -> tuple[subprocess.CompletedProcess, DecisionRow, dict]:
    """Run ``costctl watch --on-exit guard -- <a job printing one loss>`` under ``LANG=lang``
    until the idle policy stops the simulated instance; returns the process, the idle decision
    as the ledger holds it, and the simulated provider's state."""
    (tmp_path / "costctl.toml").write_text(CONFIG)
    env = clean_env(tmp_path, lang)
    proc = subprocess.run(
        [sys.executable, "-m", "costctl", "watch", "--on-exit", "guard", "--",
         sys.executable, "-c", "print('loss: 0.5')"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    with Session(create_engine(f"sqlite:///{tmp_path / 'data' / 'costctl.db'}")) as s:
        idle = s.scalars(select(DecisionRow).where(DecisionRow.policy == "idle")).one()
    state = json.loads((tmp_path / "data" / "sim" / "state.json").read_text())
    return proc, idle, state


def test_the_idle_stop_and_the_summary_are_chinese_under_a_chinese_locale(tmp_path) -> None:
    proc, idle, state = watch_idle(tmp_path, "zh_CN.UTF-8")
    err = proc.stderr
    assert state["instances"]["sim-local"]["status"] == "stopped"
    # the reason, as said when the stop began and as the ledger keeps it
    reason = next(line for line in err.splitlines() if line.startswith("costctl idle："))
    assert "正在关停：自 " in reason and "起已空闲 2s" in reason and "所有现有信号" in reason, reason
    assert idle.action == "stop" and idle.reason.startswith("idle for 2s since ") and not CJK.search(idle.reason)
    assert not CJK.search(idle.outcome or "")
    assert "idle for" not in err and "every present signal" not in err
    # the evidence stays machine data: English keys, signal names and states, ISO times, the stop
    # route's label and the stop's history in English
    ev = idle.evidence
    assert ev["time_window_s"] == 2.0 and "cpu" in ev["signals"] and ev["idle_since"].endswith("Z")
    assert ev["stop_route"].startswith("API (") and ev["stop"]["state"] == "confirmed"
    assert [h["state"] for h in ev["stop"]["history"]] == ["requested", "confirmed"]
    assert not CJK.search(json.dumps(ev, ensure_ascii=False)), ev
    # machine output does not depend on the language of the watch nor of the reader
    bills = [subprocess.run([sys.executable, "-m", "costctl", "bill", "--format", "json"], env=clean_env(tmp_path, lang),
                            cwd=tmp_path, capture_output=True, text=True, timeout=60) for lang in ("C", "zh_CN.UTF-8")]
    assert all(b.returncode == 0 for b in bills), [b.stderr for b in bills]
    # the money saved runs on with the clock between the two bills (its values and "as_of"
    # aside), the rest is the same text
    same = [json.dumps(without_clock(json.loads(b.stdout)), ensure_ascii=False) for b in bills]
    assert same[0] == same[1] and "stop of sim instance sim-local requested (API (instance read))" in same[0], same
    assert not CJK.search(bills[0].stdout), bills[0].stdout
    # the stop's progress and the summary table
    assert "costctl：sim 上的实例 sim-local 已关停（已由 sim 确认" in err
    assert "costctl 运行" in err
    for label in ("时长", "花费", "关停途径", "loss 首个 / 最佳 / 最后", "检测到平台期的位置", "决策 idle", "关停"):
        assert label in err, label
    assert "0.5 / 0.5 / 0.5  [1 个点]" in err
    # money as Chinese writes it: the simulated RTX 4090's price on the first line, the spend in the summary
    assert re.search(r"^costctl：运行 \w+ 正在执行 .*（RTX 4090，US\$0\.69/小时）", err, re.M), err
    spend = next(line for line in err.splitlines() if " 花费 " in line)
    assert re.search(r"US\$0\.\d{2,4} ", spend) and "USD" not in err, spend
    summary = err[err.index("costctl 运行"):]
    assert "关停：自" in "".join(summary.replace("│", " ").split())  # the decision's row: its action, its reason
    for english in ("duration", "spend", "stop route", "loss first", "plateau detected", "decision idle",
                    "request"):
        assert english not in summary, english


def test_the_idle_stop_and_the_summary_are_english_under_lang_c(tmp_path) -> None:
    proc, idle, state = watch_idle(tmp_path, "C")
    err = proc.stderr
    assert state["instances"]["sim-local"]["status"] == "stopped"
    # the time in [watch] timezone (UTC here), to the second
    assert re.search(r"^costctl idle: stopping: idle for 2s since \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\+00:00: every "
                     r"present signal \(.*cpu.*\) "
                     r"stayed idle", err, re.M), err
    assert idle.reason.startswith("idle for 2s since ") and idle.reason in err
    assert "costctl: instance sim-local on sim is stopped (confirmed by sim; 1 stop request)" in err
    summary = err[err.index("costctl run "):]
    for label in ("duration", "spend", "stop route", "loss first / best / last", "plateau detected at",
                  "decision idle", "stop confirmed after 1 request:"):
        assert label in summary, label
    assert "0.5 / 0.5 / 0.5  [1 point]" in summary
    assert re.search(r"^costctl: run \w+ running .* \(RTX 4090, \$0\.69/h\)", err, re.M), err
    spend = next(line for line in summary.splitlines() if " spend " in line)
    assert re.search(r" \$0\.\d{2,4} ", spend) and "USD" not in err, spend
    assert not CJK.search(err), err
