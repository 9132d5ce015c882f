"""The idle-fraction policy on the corpus's real GPU logs and on the policy scenario suite.

Fires on: the corpus's forgotten-instance log (``gpu_query_forgotten_idle.csv``), through the
replay engine and through ``costctl analyze``; the suite's open notebook.

Never fires on a busy trace:

* corpus GPU logs of working jobs: ``gpu_query_2gpu_a6000.csv``, ``gpu_query_rtx4090_vlm.csv``,
  ``gpu_query_repeated_header.csv``, ``gpu_query_utf16_crlf.csv``,
  ``gpu_custom_elapsed_dcconv.csv``, ``wandb_events_system.jsonl``. Each is shorter than the
  1-hour window, so each is also replayed tiled end to end past 2 hours (the same job running
  longer), where a window is covered. (``gpu_nvsmi_table_slurm_l40s.log`` is left out: it ends
  with 7.5 minutes of idle after its job, 12 minutes in all: not a busy trace.)
* every scenario of ``benchmarks/scenarios/`` while its work lasts (before ``work_until``), the
  data-loading-bound job (GPU idle between bursts, CPU busy) included; the ones busy to their end
  (``hung_job``, ``spot_preemption``, ``second_gpu_unused_recorded``) never.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from costctl.cli.main import main
from costctl.config import Settings
from costctl.replay.engine import replay_timeline
from costctl.replay.readers import read_gpu_log
from costctl.replay.timeline import nominal_interval

from replay_support import corpus_file  # noqa: E402 - skips, or fails under CI, when absent

SCENARIOS = Path(__file__).resolve().parents[1] / "benchmarks" / "scenarios"

BUSY_CORPUS = ("gpu_query_2gpu_a6000.csv", "gpu_query_rtx4090_vlm.csv", "gpu_query_repeated_header.csv",
               "gpu_query_utf16_crlf.csv", "gpu_custom_elapsed_dcconv.csv", "wandb_events_system.jsonl")


def _scenario_module():  # type: ignore[no-untyped-def]
    if "scenario" in sys.modules:
        return sys.modules["scenario"]
    spec = importlib.util.spec_from_file_location("scenario", SCENARIOS / "scenario.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["scenario"] = mod
    spec.loader.exec_module(mod)
    return mod


def _fires(samples, interval: timedelta, settings: Settings | None = None, **kw):  # type: ignore[no-untyped-def]
    run = replay_timeline(settings or Settings(), samples, sample_interval=interval, **kw)
    return [d for d in run.decisions if d.policy == "idle_fraction"]


def _tiled(samples, interval: timedelta, until: timedelta):  # type: ignore[no-untyped-def]
    """``samples`` repeated end to end (each copy shifted by the span plus one interval) until
    the whole lasts ``until``."""
    span = samples[-1].time - samples[0].time
    out, k = list(samples), 1
    while out[-1].time - out[0].time < until:
        out += [replace(s, time=s.time + k * (span + interval)) for s in samples]
        k += 1
    return out


def test_forgotten_instance_log_fires_once_in_its_final_idle_stretch() -> None:
    log = read_gpu_log(corpus_file("gpu_query_forgotten_idle.csv"))
    samples = log.samples
    assert len(samples) == 1639  # SOURCES.md
    interval = nominal_interval(samples, None)
    fired = _fires(samples, interval)
    assert len(fired) == 1
    (d,) = fired
    final_start = datetime.fromisoformat("2026-02-02T02:33:37.502+00:00")  # SOURCES.md: the final 0 % run
    # the tail of the work leaves the 1-hour window until at most 6 minutes of it are busy
    assert final_start + timedelta(minutes=50) <= d.time <= final_start + timedelta(hours=1)
    assert d.evidence["busy_fraction"] <= 0.1 and d.evidence["signals"] == ["gpu"]
    # the 26-minute pause mid-run (01:39) is not called idle: the hour around it holds work
    assert d.time > final_start


def test_analyze_lists_the_rule_on_the_forgotten_instance_log(capsys: pytest.CaptureFixture[str],
                                                              tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    code = main(["analyze", "--gpu-log", str(corpus_file("gpu_query_forgotten_idle.csv")), "--price", "2.5",
                 "--currency", "CNY", "--format", "json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    d = json.loads(out)
    assert "idle_fraction" in d["policies"]
    mine = [x for x in d["decisions"] if x["policy"] == "idle_fraction"]
    assert len(mine) == 1 and mine[0]["action"] == "advise"
    assert mine[0]["time"].startswith("2026-02-02T03:2")  # 51 minutes into the final idle stretch


@pytest.mark.parametrize("name", BUSY_CORPUS)
def test_busy_corpus_logs_never_fire(name: str) -> None:
    samples = read_gpu_log(corpus_file(name)).samples
    interval = nominal_interval(samples, None)
    assert _fires(samples, interval) == []
    longer = _tiled(samples, interval, timedelta(hours=2))
    assert longer[-1].time - longer[0].time >= timedelta(hours=2)  # a 1-hour window is covered
    assert _fires(longer, interval) == []


def test_a_tiled_log_can_fire_when_its_job_is_idle() -> None:
    """The tiling is no blindfold: the forgotten instance's idle tail, tiled, fires again."""
    samples = read_gpu_log(corpus_file("gpu_query_forgotten_idle.csv")).samples
    tail = [s for s in samples if s.time >= datetime.fromisoformat("2026-02-02T02:33:37.502+00:00")]
    interval = nominal_interval(samples, None)
    fired = _fires(_tiled(tail[:400], interval, timedelta(hours=2)), interval)
    assert len(fired) == 1


def _scenarios():  # type: ignore[no-untyped-def]
    return _scenario_module().load_all(SCENARIOS)


@pytest.mark.parametrize("name", sorted(p.stem for p in SCENARIOS.glob("*.json")))
def test_no_scenario_is_called_idle_while_its_work_lasts(name: str) -> None:
    s = next(x for x in _scenarios() if x.name == name)
    fired = _fires(s.samples(count_ssh=True), s.interval, progress=s.progress(), rate=s.rate, job=s.job)
    assert all(d.time >= s.work_until for d in fired), [d.time - s.start for d in fired]
    if name in ("hung_job", "spot_preemption", "second_gpu_unused_recorded", "data_loader_bound"):
        assert not [d for d in fired if d.time <= (s.job[1] if s.job and s.job[1] else s.end)]
    if name == "open_notebook_h200":  # the case: caught within the hour after the person left
        assert len(fired) == 1 and fired[0].time - s.work_until <= timedelta(hours=1)


def test_the_data_loader_scenario_is_kept_busy_by_its_cpu() -> None:
    from costctl.records import SignalStatus

    s = next(x for x in _scenarios() if x.name == "data_loader_bound")
    samples = s.samples(count_ssh=True)
    gpu = [u.gpus[0].utilization for u in samples if u.time < s.work_until]
    assert sum(u < 5 for u in gpu) / len(gpu) > 0.9  # the GPU idles between bursts
    assert all(d.time >= s.work_until for d in _fires(samples, s.interval, job=s.job))
    no_cpu = [replace(u, cpu_percent=None, cpu_status=SignalStatus.ABSENT) for u in samples]
    early = [d for d in _fires(no_cpu, s.interval, job=s.job) if d.time < s.work_until]
    assert early  # without its CPU the job would be called idle: the CPU signal is what holds it
