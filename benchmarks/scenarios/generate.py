"""Write the scenario files of the policy suite (``benchmarks/scenarios/*.json``).

Run once; the files are committed and their labels FROZEN (they were written before any policy
tuning, so the suite cannot be fitted to the rules it judges)::

    python benchmarks/scenarios/generate.py            # rewrites every *.json here

Synthetic traces are drawn with ``random.Random(SEED)`` per scenario, so a rerun writes the same
bytes. Recorded traces are read from ``../shared/corpus`` (see SOURCES.md there) with costctl's
own reader and copied into the scenario file, so the suite does not depend on the corpus later.

A scenario file (JSON, one object):

* ``name``, ``title``, ``description``, ``source`` (``synthetic (seed N)`` or the corpus file);
* ``start``: ISO 8601 UTC of the first sample; every other time is seconds after it;
* ``end_s``: when the instance ends anyway if no rule stops it (the user comes back and stops it,
  the provider terminates it); billing ends there;
* ``sample_interval_s``: the recorder's period;
* ``billing``: ``price_per_hour`` (decimal string, per instance-hour, all GPUs), ``currency``,
  ``mode`` (``on-demand`` / ``spot``), ``granularity`` (``per-second``);
* ``recorded``: which signals the trace has: ``gpu``, ``cpu`` (percent of one core of the job's
  process tree; after the job exits it reads 0), ``ssh`` (open SSH sessions);
* ``samples``: columns ``t_s`` (seconds), ``gpu`` (one list of utilization percents per sample,
  one value per GPU), ``cpu`` and ``ssh`` (null when not recorded);
* ``job``: the watched command (``start_s``, ``exit_s`` or null when it never exits within the
  trace, ``exit_status``, ``command``), or null when no command runs under the watch (a notebook
  guarded with ``costctl watch``);
* ``progress``: ``[t_s, loss]`` pairs (train loss as the job printed it);
* ``spot``: ``notice_s`` and ``terminated_s`` for a spot preemption, else null;
* ``labels`` (frozen): ``work_until_s`` — until when work was still to come (a stop before it
  is a FALSE STOP: the user lost work or came back to a stopped instance); ``oracle_stop_s`` —
  the stop a policy with perfect hindsight makes (billing ends there); ``why``.
"""

from __future__ import annotations

import json
import math
import random
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
CORPUS = HERE.parents[1].parent / "shared" / "corpus"
SEED = 13
INTERVAL = 10  # seconds between synthetic samples
H = 3600
M = 60


def _iso(when: datetime) -> str:
    return when.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


class Trace:
    """Builds one synthetic trace sample by sample."""

    def __init__(self, name: str, start: str, end_s: int, seed_offset: int) -> None:
        self.name = name
        self.start = start
        self.end_s = end_s
        self.rng = random.Random(SEED * 1000 + seed_offset)
        self.t: list[int] = list(range(0, end_s + 1, INTERVAL))
        self.gpu: list[list[float]] = [[0.0] for _ in self.t]
        self.cpu: list[float] = [0.0 for _ in self.t]
        self.ssh: list[int] = [0 for _ in self.t]
        self.progress: list[list[float]] = []

    def span(self, a: int, b: int) -> range:
        """Sample indices with ``a <= t < b``."""
        return range(a // INTERVAL, min(len(self.t), (b + INTERVAL - 1) // INTERVAL))

    def gpu_busy(self, a: int, b: int, mean: float = 95.0, sd: float = 3.0, lo: float = 0.0, hi: float = 100.0) -> None:
        for k in self.span(a, b):
            self.gpu[k] = [round(min(hi, max(lo, self.rng.gauss(mean, sd))))]

    def gpu_idle(self, a: int, b: int, top: int = 0) -> None:
        for k in self.span(a, b):
            self.gpu[k] = [float(self.rng.randint(0, top))]

    def cpu_level(self, a: int, b: int, mean: float, sd: float) -> None:
        for k in self.span(a, b):
            self.cpu[k] = round(max(0.0, self.rng.gauss(mean, sd)), 1)

    def ssh_open(self, a: int, b: int, n: int = 1) -> None:
        for k in self.span(a, b):
            self.ssh[k] = n

    def loss(self, a: int, b: int, every: int, f) -> None:  # type: ignore[no-untyped-def]
        t = a + every
        while t < b:
            self.progress.append([t, round(f(t), 6)])
            t += every

    def to_dict(self, **rest) -> dict:  # type: ignore[no-untyped-def]
        return {
            "name": self.name, **{k: rest.pop(k) for k in ("title", "description")},
            "source": f"synthetic (benchmarks/scenarios/generate.py, seed {SEED})",
            "start": self.start, "end_s": self.end_s, "sample_interval_s": INTERVAL,
            "billing": rest.pop("billing"),
            "recorded": {"gpu": True, "cpu": True, "ssh": True},
            "samples": {"t_s": self.t, "gpu": self.gpu, "cpu": self.cpu, "ssh": self.ssh},
            "job": rest.pop("job"), "progress": self.progress, "spot": rest.pop("spot", None),
            "labels": rest.pop("labels"),
        }


def _billing(price: str, mode: str = "on-demand") -> dict:
    return {"price_per_hour": price, "currency": "USD", "mode": mode, "granularity": "per-second"}


def _decay(rng: random.Random, start: float, floor: float, tau: float, noise: float = 0.01):  # type: ignore[no-untyped-def]
    return lambda t: (floor + (start - floor) * math.exp(-t / tau)) * (1 + rng.uniform(-noise, noise))


def forgotten_instance() -> dict:
    """Training 18:00-03:00, the job exits, the card sits idle until the user comes in at 09:00."""
    tr = Trace("forgotten_instance", "2026-03-06T18:00:00Z", 15 * H, 1)
    exit_s = 9 * H
    tr.gpu_busy(0, exit_s)
    tr.cpu_level(0, exit_s, 180, 20)
    tr.ssh_open(0, 20 * M)
    tr.gpu_idle(exit_s, tr.end_s)
    tr.loss(0, exit_s, 60, _decay(tr.rng, 3.0, 0.8, 4 * H))
    return tr.to_dict(
        title="the forgotten instance",
        description="a 9 h run ends at 03:00 (exit 0); nobody is there; the card idles until 09:00",
        billing=_billing("2.49"),
        job={"start_s": 0, "exit_s": exit_s, "exit_status": 0, "command": "python train.py"},
        labels={"work_until_s": exit_s, "oracle_stop_s": exit_s,
                "why": "the job exited at 03:00 and nothing else ran; 09:00 is when the user stops it by hand"},
    )


def hung_job() -> dict:
    """Two hours of training, then an NCCL hang: GPU reads 100 %, no progress, the job never exits."""
    tr = Trace("hung_job", "2026-03-10T20:00:00Z", 10 * H, 2)
    hang = 2 * H
    tr.gpu_busy(0, hang)
    tr.cpu_level(0, hang, 150, 20)
    tr.gpu_busy(hang, tr.end_s, mean=100, sd=0)
    tr.cpu_level(hang, tr.end_s, 100, 2)  # one thread spinning in the collective
    tr.loss(0, hang + 1, 60, _decay(tr.rng, 2.5, 1.0, 2 * H))
    last = tr.progress[-1][0]
    return tr.to_dict(
        title="a hung job at 100 % GPU",
        description="NCCL hang after 2 h: kernels spin at 100 %, one CPU core polls, no loss line for 8 h",
        billing=_billing("9.80"),
        job={"start_s": 0, "exit_s": None, "exit_status": None, "command": "torchrun --nproc-per-node 8 train.py"},
        labels={"work_until_s": last, "oracle_stop_s": last,
                "why": "no progress after the last loss line; the job never recovers; 06:00 the user kills it"},
    )


def plateaued_run() -> dict:
    """The loss stops improving after 3 h; the run goes on to its scheduled 10 h, then the card idles."""
    tr = Trace("plateaued_run", "2026-03-12T08:00:00Z", 12 * H, 3)
    onset, exit_s = 3 * H, 10 * H
    tr.gpu_busy(0, exit_s)
    tr.cpu_level(0, exit_s, 160, 20)
    tr.ssh_open(0, 10 * M)
    tr.ssh_open(exit_s - 0, exit_s)
    rng = tr.rng
    tr.loss(0, onset + 1, 120, lambda t: 2.0 - 0.4 * t / onset)  # strictly improving until the onset
    best = tr.progress[-1][1]
    tr.loss(onset, exit_s, 120, lambda t: best * (1.0005 + rng.uniform(0, 0.01)))  # never better again
    return tr.to_dict(
        title="a plateaued run",
        description="the train loss stops improving at 11:00; the run keeps going until 18:00, then the card idles until 20:00",
        billing=_billing("2.49"),
        job={"start_s": 0, "exit_s": exit_s, "exit_status": 0, "command": "python train.py --epochs 100"},
        labels={"work_until_s": onset, "oracle_stop_s": onset,
                "why": "the loss never improves after 11:00 (ReduceLROnPlateau's rule): the rest of the run is waste"},
    )


def spot_preemption() -> dict:
    """A spot run gets a 2-minute notice at 5 h, checkpoints for 60 s, exits; the provider terminates it."""
    notice = 5 * H
    tr = Trace("spot_preemption", "2026-03-14T01:00:00Z", notice + 120, 4)
    exit_s = notice + 60
    tr.gpu_busy(0, notice)
    tr.cpu_level(0, notice, 170, 20)
    tr.gpu_idle(notice, exit_s, top=3)
    tr.cpu_level(notice, exit_s, 95, 5)  # writing the checkpoint
    tr.loss(0, notice, 60, _decay(tr.rng, 3.0, 1.1, 3 * H))
    return tr.to_dict(
        title="a spot preemption",
        description="2-minute notice at 06:00 (AWS-style), checkpoint written in 60 s, job exits, terminated at 06:02",
        billing=_billing("0.98", "spot"),
        job={"start_s": 0, "exit_s": exit_s, "exit_status": 143, "command": "python train.py --resume auto"},
        spot={"notice_s": notice, "terminated_s": notice + 120},
        labels={"work_until_s": exit_s, "oracle_stop_s": exit_s,
                "why": "the checkpoint is written until the job exits; the provider ends billing at termination"},
    )


def oom_crash() -> dict:
    """The job dies of CUDA OOM after 25 minutes; the card idles until the user looks 6 h later."""
    tr = Trace("oom_crash", "2026-03-16T13:00:00Z", 6 * H + 25 * M, 5)
    crash = 25 * M
    tr.gpu_busy(0, crash, mean=98, sd=2)
    tr.cpu_level(0, crash, 120, 15)
    tr.ssh_open(0, 5 * M)
    tr.loss(0, crash, 30, _decay(tr.rng, 4.0, 2.0, 30 * M))
    return tr.to_dict(
        title="an OOM crash",
        description="torch.OutOfMemoryError at 13:25, exit 1; the user had left at 13:05",
        billing=_billing("3.99"),
        job={"start_s": 0, "exit_s": crash, "exit_status": 1, "command": "python finetune.py --batch-size 64"},
        labels={"work_until_s": crash, "oracle_stop_s": crash,
                "why": "the job crashed; nothing runs after it; the user stops the instance at 19:25"},
    )


def too_big_card() -> dict:
    """A dataloader-bound job uses 15-30 % of the card for 6 h, with 6-minute CPU-bound evals at ~5 %."""
    tr = Trace("too_big_card", "2026-03-18T09:00:00Z", 7 * H, 6)
    exit_s = 6 * H
    tr.gpu_busy(0, exit_s, mean=22, sd=5, lo=12, hi=30)
    tr.cpu_level(0, exit_s, 380, 40)
    for h in range(1, 6):
        tr.gpu_idle(h * H, h * H + 6 * M, top=8)  # evaluation: metrics on the CPU
        tr.cpu_level(h * H, h * H + 6 * M, 100, 5)
    tr.ssh_open(0, 15 * M)
    tr.loss(0, exit_s, 60, _decay(tr.rng, 1.5, 0.4, 3 * H))
    return tr.to_dict(
        title="a too-big card",
        description="an H100 used at 15-30 % (dataloader-bound), hourly 6-minute evals at < 10 % GPU; exits at 15:00",
        billing=_billing("3.99"),
        job={"start_s": 0, "exit_s": exit_s, "exit_status": 0, "command": "python train.py"},
        labels={"work_until_s": exit_s, "oracle_stop_s": exit_s,
                "why": "the run works (slowly) until it exits; the evals are work; 16:00 the user stops it"},
    )


def long_setup() -> dict:
    """50 minutes of CPU-bound preprocessing at 0 % GPU, then 3 h of training."""
    tr = Trace("long_setup", "2026-03-20T10:00:00Z", 5 * H, 7)
    setup, exit_s = 50 * M, 50 * M + 3 * H
    tr.gpu_idle(0, setup)
    tr.cpu_level(0, setup, 700, 60)  # tokenizing on 8 cores
    tr.gpu_busy(setup, exit_s)
    tr.cpu_level(setup, exit_s, 200, 20)
    tr.ssh_open(0, 10 * M)
    tr.loss(setup, exit_s, 60, lambda t: 2.5 * math.exp(-(t - setup) / (2 * H)) + 0.6)
    return tr.to_dict(
        title="a long setup phase",
        description="tokenizing the dataset on 8 CPU cores for 50 min with the GPU at 0 %, then 3 h of training",
        billing=_billing("2.49"),
        job={"start_s": 0, "exit_s": exit_s, "exit_status": 0, "command": "python prepare.py && python train.py"},
        labels={"work_until_s": exit_s, "oracle_stop_s": exit_s,
                "why": "the setup is work (it MUST NOT be stopped); the job exits at 13:50; 15:00 the user stops it"},
    )


def notebook_returns() -> dict:
    """A notebook session: work, a 2 h lunch with the SSH session left open, more work, then the user logs off."""
    tr = Trace("notebook_returns", "2026-03-23T09:00:00Z", 9 * H, 8)
    lunch, back, leave = 1 * H, 3 * H, 5 * H
    for a, b in ((0, lunch), (back, leave)):
        for k in tr.span(a, b):  # cells run in bursts
            busy = (tr.t[k] // 60) % 7 < 3
            tr.gpu[k] = [float(tr.rng.randint(60, 100)) if busy else float(tr.rng.randint(0, 2))]
            tr.cpu[k] = round(tr.rng.uniform(80, 120) if busy else tr.rng.uniform(0, 4), 1)
    tr.cpu_level(lunch, back, 1.0, 0.5)
    tr.cpu_level(leave, tr.end_s, 1.0, 0.5)
    tr.ssh_open(0, leave)  # the laptop stays connected through lunch
    return tr.to_dict(
        title="a notebook left open (the user comes back)",
        description="Jupyter over SSH; lunch 10:00-12:00 with the session open and the GPU idle; back at 12:00; logs off at 14:00",
        billing=_billing("1.19"),
        job=None,
        labels={"work_until_s": leave, "oracle_stop_s": leave,
                "why": "the user comes back at 12:00 (a stop during lunch is a false stop); after 14:00 nobody uses it; 18:00 the nightly cleanup"},
    )


def notebook_abandoned() -> dict:
    """A notebook session: work until 11:00, the laptop closes (SSH drops), the kernel holds the card overnight."""
    tr = Trace("notebook_abandoned", "2026-03-24T09:00:00Z", 24 * H, 9)
    leave = 2 * H
    for k in tr.span(0, leave):
        busy = (tr.t[k] // 60) % 5 < 2
        tr.gpu[k] = [float(tr.rng.randint(50, 100)) if busy else float(tr.rng.randint(0, 2))]
        tr.cpu[k] = round(tr.rng.uniform(80, 120) if busy else tr.rng.uniform(0, 4), 1)
    tr.cpu_level(leave, tr.end_s, 1.0, 0.5)
    tr.ssh_open(0, leave)
    return tr.to_dict(
        title="a notebook left open (nobody comes back)",
        description="Jupyter over SSH until 11:00; the laptop closes, the session drops, the kernel keeps the model on the card",
        billing=_billing("1.19"),
        job=None,
        labels={"work_until_s": leave, "oracle_stop_s": leave,
                "why": "nobody comes back; the instance runs until the user notices it the next morning"},
    )


def open_notebook_h200() -> dict:
    """Issue 15's notebook left open on an H200: 9 minutes of work, then 2 h 23 m with the kernel
    holding the card and a brief spike every few minutes; JupyterLab in the browser, no SSH."""
    tr = Trace("open_notebook_h200", "2026-04-07T14:00:00Z", 2 * H + 32 * M, 10)
    leave = 9 * M
    for k in tr.span(0, leave):  # cells run in bursts
        busy = (tr.t[k] // 60) % 3 < 2
        tr.gpu[k] = [float(tr.rng.randint(60, 100)) if busy else float(tr.rng.randint(0, 2))]
        tr.cpu[k] = round(tr.rng.uniform(80, 120) if busy else tr.rng.uniform(0, 4), 1)
    tr.cpu_level(leave, tr.end_s, 1.0, 0.5)
    last_busy = max(tr.t[k] for k in tr.span(0, leave) if tr.gpu[k][0] >= 60)
    t = last_busy + tr.rng.uniform(120, 300)
    while t < tr.end_s:  # a 40-65 % spike of a few seconds every 2-5 minutes: one sample each
        tr.gpu[int(t) // INTERVAL] = [float(tr.rng.randint(40, 65))]
        t += tr.rng.uniform(120, 300)
    return tr.to_dict(
        title="a notebook left open with sparse spikes",
        description="JupyterLab on an H200: work until 14:09, then the open kernel wakes the GPU for a few seconds "
                    "every 2-5 minutes until the user stops the instance at 16:32; no SSH session",
        billing=_billing("3.99"),
        job=None,
        labels={"work_until_s": leave, "oracle_stop_s": leave,
                "why": "nobody runs a cell after 14:09; the spikes are the open kernel, not work (issue 15)"},
    )


def data_loader_bound() -> dict:
    """A data-loading-bound job: the GPU runs a burst every 1.5-3 minutes and idles between while
    the loader's workers keep 3 cores busy; it logs to its own file (no loss line costctl reads)."""
    tr = Trace("data_loader_bound", "2026-04-08T09:00:00Z", 3 * H, 11)
    exit_s = 2 * H + 30 * M
    t = tr.rng.uniform(90, 180)
    while t < exit_s:
        tr.gpu[int(t) // INTERVAL] = [float(tr.rng.randint(85, 99))]
        t += tr.rng.uniform(90, 180)
    tr.cpu_level(0, exit_s, 320, 40)
    tr.ssh_open(0, 10 * M)
    return tr.to_dict(
        title="a data-loading-bound job",
        description="video decoding on 3 CPU cores starves the GPU: a burst every 1.5-3 minutes, idle between; "
                    "no loss line on stdout; exits at 11:30",
        billing=_billing("2.49"),
        job={"start_s": 0, "exit_s": exit_s, "exit_status": 0, "command": "python train.py --log-file run.log"},
        labels={"work_until_s": exit_s, "oracle_stop_s": exit_s,
                "why": "the job works (slowly) until it exits at 11:30; 12:00 the user stops the instance"},
    )


def _recorded(name: str, file: str, **rest) -> dict:  # type: ignore[no-untyped-def]
    sys.path.insert(0, str(HERE.parents[1]))
    from costctl.replay.readers import read_gpu_log

    log = read_gpu_log(CORPUS / file)
    samples = log.samples
    t0 = samples[0].time
    t_s = [round((s.time - t0).total_seconds(), 3) for s in samples]
    gpu = [[g.utilization if g.utilization is not None else None for g in sorted(s.gpus, key=lambda g: g.index)]
           for s in samples]
    gaps = sorted(b - a for a, b in zip(t_s, t_s[1:]) if b > a)
    interval = round(gaps[len(gaps) // 2], 3)
    labels = rest.pop("labels")
    job = rest.pop("job")
    return {
        "name": name, "title": rest.pop("title"), "description": rest.pop("description"),
        "source": f"recorded: shared/corpus/{file} (see SOURCES.md there)",
        "start": _iso(t0), "end_s": t_s[-1], "sample_interval_s": interval,
        "billing": rest.pop("billing"), "recorded": {"gpu": True, "cpu": False, "ssh": False},
        "samples": {"t_s": t_s, "gpu": gpu, "cpu": None, "ssh": None},
        "job": job, "progress": [], "spot": None, "labels": labels(t_s, gpu),
    }


def forgotten_recorded() -> dict:
    def labels(t_s: list[float], gpu: list[list[float]]) -> dict:
        k = len(gpu)
        while k > 0 and gpu[k - 1][0] == 0:
            k -= 1
        return {"work_until_s": t_s[k], "oracle_stop_s": t_s[k],
                "why": "the final 0 % run (rows 345..1639, 02:33:37 on) follows the last work; memory drops to "
                       "1047 MiB: the job had ended; nothing ran after it until the log stops at 07:57:08"}

    data = _recorded(
        "forgotten_recorded", "gpu_query_forgotten_idle.csv",
        title="the forgotten instance (recorded)",
        description="a real nvidia-smi log: work until 02:33, then 5.4 h at 0 % to the end of the file",
        billing=_billing("2.99"), job=None, labels=labels,
    )
    data["job"] = {"start_s": 0, "exit_s": data["labels"]["work_until_s"], "exit_status": 0,
                   "command": "(recorded; the job's exit is taken at the first sample of the final 0 % run)"}
    return data


def second_gpu_unused_recorded() -> dict:
    def labels(t_s: list[float], gpu: list[list[float]]) -> dict:
        return {"work_until_s": t_s[-1], "oracle_stop_s": t_s[-1],
                "why": "GPU 0 trains (mean 91 %) for the whole log; GPU 1 was allocated but never used"}

    data = _recorded(
        "second_gpu_unused_recorded", "gpu_query_2gpu_a6000.csv",
        title="a second GPU never used (recorded)",
        description="a real 2-GPU nvidia-smi log: GPU 0 busy for 8 min, GPU 1 at 0 % throughout",
        billing=_billing("1.58"), job=None, labels=labels,
    )
    data["job"] = {"start_s": 0, "exit_s": None, "exit_status": None,
                   "command": "(recorded; the job runs for the whole log)"}
    return data


SCENARIOS = (forgotten_instance, forgotten_recorded, hung_job, plateaued_run, spot_preemption, oom_crash,
             too_big_card, long_setup, notebook_returns, notebook_abandoned, second_gpu_unused_recorded,
             open_notebook_h200, data_loader_bound)


def main() -> None:
    """Write every scenario file next to this script."""
    for make in SCENARIOS:
        data = make()
        path = HERE / f"{data['name']}.json"
        path.write_text(json.dumps(data, separators=(",", ":")) + "\n", encoding="utf-8")
        print(f"{path.name}: {len(data['samples']['t_s'])} samples, {len(data['progress'])} progress points")


if __name__ == "__main__":
    main()
