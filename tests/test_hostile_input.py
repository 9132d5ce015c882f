"""Issue 17, parts 2 and 3: every case the fault suite found, as a named regression test.

Part 2, no thread of costctl dies on input: numbers of 4,300+ digits after "Epoch", "step", a
tqdm total or an OOM's "GPU N" (Python's int-from-string limit) used to kill the output-reading
thread; a step above 2**63 or a huge integer in an HF dict or a metrics file failed every tick
(and ended the watch with exit 70, the run never closed); the metrics follower, the samplers and
the notice poller survive any exception, each said once with its traceback in the crash log.

Part 3, readers that never crash: ``costctl analyze`` on a 10 MB CSV field, infinite memory
values, deeply nested JSON and 400-digit integers reads the rest and counts what it skips; a file
it cannot read at all is one line naming the file, the line and what was expected.

(``--price 1e400`` and durations of 1e400 are the options' bounds: tests/test_cli_* of part 1.)
"""

from __future__ import annotations

import json
import math
import sys
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from costctl.cli.main import main
from costctl.errors import ProviderError
from costctl.ledger.schema import Progress, Run
from costctl.progress import lines
from costctl.progress.batch import NO_INT, PointBatch
from costctl.progress.metrics_file import MetricsFileFollower
from costctl.records import GpuReading, SignalStatus
from costctl.replay.oom import match_oom
from costctl.telemetry.base import GpuRead
from costctl.telemetry.sampler import Sampler
from costctl.watch.pump import ParsePump
from costctl_providers.notices import Notice, NoticePoller
from lifecycle_support import PY, T0, FixedGpu, SimClock, drive, settings, watcher

HUGE = "9" * 5000  # past int()'s 4,300-digit limit
BIG = "9" * 400
ENGINES = ["python"] + (["native"] if lines._scan is not None else [])
UTC = timezone.utc


def _read(text: str, engine: str) -> PointBatch:
    parser = lines.LineParser(engine=engine)
    batch = parser.feed_batch(text.encode(), 0.0)
    batch.extend(parser.flush_batch(0.0))
    return batch


def _points(batch: PointBatch) -> list[tuple[float, int, float, int]]:
    return [(v, s, e, t) for v, s, e, t in zip(batch.values, batch.steps, batch.epochs, batch.totals)]


# -- part 2: job output ---------------------------------------------------------------------------
@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("line", [
    f"Epoch {HUGE} loss: 0.5", f"step {HUGE} loss: 0.5", f"step 5/{HUGE} loss: 0.5", f"iter {HUGE}: loss 0.5000, time 3ms, mfu 1%",
    f" 5%|#  | 5/{HUGE} [00:01<00:02, 5.0it/s, loss=0.5]", f" 5%|#  | {HUGE}/9 [00:01<00:02, 5.0it/s, loss=0.5]",
    f"Epoch [{HUGE}/80], Step [100/600], Loss: 0.5", f"Epoch [3/80], Step [100/{HUGE}], Loss: 0.5",
    f"{{'loss': 0.5, 'step': {HUGE}}}", f"{{'loss': 0.5, 'epoch': {HUGE}}}",
])
def test_job_output_numbers_of_4300_digits_are_no_numbers_and_the_reader_goes_on(engine: str, line: str) -> None:
    """Epoch, step, a tqdm total, a per-epoch step count of 5,000 digits: the loss is read, the
    number is absent (no step, no total, no epoch), and the next line is read as ever."""
    batch = _read(f"loss: 0.1\n{line}\nstep 7 loss: 0.25\n", engine)
    first, (v, step, epoch, total), last = _points(batch)
    assert first[0] == 0.1 and v == 0.5 and last[:2] == (0.25, 7)
    assert step in (NO_INT, 5, 100) and total in (NO_INT, 9, 80, 600) and (epoch != epoch or epoch < 100)
    assert all(p.step in (None, 5, 100) and p.total in (None, 9, 80, 600) for p in lines.parse_line(line))


@pytest.mark.parametrize("engine", ENGINES)
def test_job_output_epoch_header_of_4300_digits_is_no_header(engine: str) -> None:
    batch = _read(f"Epoch 2/9\nloss: 0.5\nEpoch {HUGE}/{HUGE}\nloss: 0.4\nEpoch 3/{HUGE}\nloss: 0.3\n", engine)
    assert [(v, e, t) for v, _, e, t in _points(batch)] == [(0.5, 2.0, 9), (0.4, 2.0, 9), (0.3, 3.0, NO_INT)]
    assert lines.parse_epoch_header(f"Epoch {HUGE}/3") is None


def test_job_output_oom_gpu_index_of_4300_digits_is_an_oom_without_a_gpu_index() -> None:
    line = (f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU {HUGE} has a total "
            f"capacity of 79.11 GiB of which 3.40 MiB is free.")
    event = match_oom(line)
    assert event is not None and event.gpu_index is None and event.requested_bytes == 20 * 2**20
    assert event.total_bytes == round(79.11 * 2**30) and len(event.message) <= 2000
    huge = match_oom(f"CUDA out of memory. Tried to allocate {HUGE} MiB (GPU 0; {BIG} GiB total capacity)")
    assert huge is not None and huge.requested_bytes is None and huge.total_bytes is None and huge.gpu_index == 0


@pytest.mark.parametrize("engine", ENGINES)
def test_job_output_step_past_2_63_in_an_hf_dict_is_no_step(engine: str) -> None:
    for step in (str(2**63), str(2**64), "1e30", BIG, HUGE):
        (v, s, _, _), = _points(_read(f"{{'loss': 0.5, 'grad_norm': 1.0, 'step': {step}}}\n", engine))
        assert (v, s) == (0.5, NO_INT)


JOB_HOSTILE = f"""
import json, os, sys, time
big, huge = "9" * 400, "9" * 5000
print("step 1 loss: 0.9", flush=True)
print("Epoch " + huge + " loss: 0.8", flush=True)
print("step " + huge + " loss: 0.8", flush=True)
print(" 5%|#  | 5/" + huge + " [00:01<00:02, 5.0it/s, loss=0.8]", flush=True)
print("Epoch " + huge + "/" + huge, flush=True)
print("{{'loss': 0.7, 'grad_norm': " + huge + ", 'step': " + str(2**64) + "}}", flush=True)
print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 MiB. GPU " + huge + " has a total capacity of 1 GiB", flush=True)
print("step 2 loss: 0.6", flush=True)
mf = sys.argv[1] if len(sys.argv) > 1 else None
if mf:
    with open(mf, "w") as fh:
        fh.write(json.dumps({{"loss": 0.5, "step": 2**64}}) + "\\n")
        fh.write('{{"loss": 0.5, "step": ' + huge + '}}\\n')
        fh.write('{{"loss": ' + big + ', "step": 3, "grad_norm": ' + huge + '}}\\n')
        fh.write('{{"loss": 0.4, "step": 4, "epoch": ' + big + '}}\\n')
        fh.write('{{"a":' * 5000 + '1' + '}}' * 5000 + '\\n')
        fh.write(json.dumps({{"loss": 0.3, "step": 5}}) + "\\n")
time.sleep(0.3)
"""

WATCH = """
[instance]
provider = "sim"
gpu = "RTX 4090"
[watch]
sample_interval = "5s"
[policies.idle]
time_window = "6h"
"""


def _ledger(tmp_path: Path):
    return Session(create_engine(f"sqlite:///{tmp_path / 'data' / 'costctl.db'}"))


def _said(w) -> list[str]:
    said: list[str] = []
    w.say = said.append  # type: ignore[method-assign] - the quiet watch's lines, kept
    return said


def test_a_job_printing_4300_digit_numbers_and_a_step_past_2_63_keeps_running_and_its_run_is_closed(tmp_path: Path) -> None:
    """The output thread reads on (no error said), the later losses reach the policies and the
    ledger, no step past int64 reaches an INTEGER column, and the run ends as the job did."""
    s = settings(tmp_path, WATCH)
    clock = SimClock(T0)
    w = watcher(s, [PY, "-c", JOB_HOSTILE], clock, sampler=FixedGpu(2**30, 24 * 2**30, 90.0), on_exit="leave")
    said = _said(w)
    code, status = drive(w, clock, step_s=5, max_real_s=60)
    assert code == 0 and w.thread_errors == {} and not any("error" in line for line in said), said
    with _ledger(tmp_path) as db:
        rows = db.execute(select(Progress.value_finite, Progress.step)).all()
        run = db.scalars(select(Run)).one()
    assert [v for v, _ in rows] == [0.9, 0.8, 0.8, 0.8, 0.7, 0.6]
    assert [st for v, st in rows if st is not None] == [1, 5, 2]  # the tqdm bar's 5 of a 5,000-digit total
    assert run.ended_at is not None and run.exit_code == 0


def test_a_huge_integer_in_a_metrics_file_never_fails_a_tick_and_the_run_is_closed(tmp_path: Path) -> None:
    """2**64 and 5,000-digit steps, a 400-digit loss, a 400-digit epoch, a line nested 5,000
    deep: no tick fails, the loss values are read (the 400-digit one is no number, skipped: issue 17),
    no step past int64 is stored, and the run closes with the job's exit status."""
    metrics = tmp_path / "metrics.jsonl"
    s = settings(tmp_path, WATCH)
    clock = SimClock(T0)
    w = watcher(s, [PY, "-c", JOB_HOSTILE, str(metrics)], clock, sampler=FixedGpu(2**30, 24 * 2**30, 90.0),
                metrics_file=metrics, on_exit="leave")
    said = _said(w)
    code, _ = drive(w, clock, step_s=5, max_real_s=60)
    assert code == 0 and not w._tick_error_reported and w.thread_errors == {}, said
    with _ledger(tmp_path) as db:
        rows = db.execute(select(Progress.value_finite, Progress.value_special, Progress.step, Progress.epoch)).all()
        run = db.scalars(select(Run)).one()
    assert rows == [(0.5, None, None, None), (0.5, None, None, None), (0.4, None, 4, None), (0.3, None, 5, None)]
    assert run.ended_at is not None and run.exit_code == 0
    assert not any("divergence" in line for line in said)  # a huge number is no number (issue 17)


def test_a_metrics_cell_over_131072_characters_keeps_the_rest_of_the_read(tmp_path: Path) -> None:
    path = tmp_path / "metrics.csv"
    path.write_text("step,train_loss,note\n1,0.5,x\n2,0.4,\"" + "y" * 300_000 + "\"\n3,0.3,x\n")
    follower = MetricsFileFollower(path)
    assert [(p.step, p.value) for p in follower.poll(T0)] == [(1, 0.5), (2, 0.4), (3, 0.3)]
    with path.open("a") as fh:
        fh.write("4,0.2," + "z" * 200_000 + "\n")
    assert [(p.step, p.value) for p in follower.poll(T0)] == [(4, 0.2)]


# -- part 2: threads that survive ---------------------------------------------------------------
class _Log:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.fh = path.open("ab")

    def write(self, data: bytes) -> int:
        off = self.fh.tell()
        self.fh.write(data)
        self.fh.flush()
        return off


def test_the_output_reader_survives_a_parser_exception_said_once_and_reads_on(tmp_path: Path) -> None:
    """A parse that raises (any bug, any bytes) is reported once; the stream starts clean at its
    next line end (a gap: the broken line is not glued to the next) and every later piece is parsed."""
    parser = lines.LineParser()
    calls = {"n": 0}

    def parse(stream: str, data: bytes, now: datetime) -> PointBatch:
        calls["n"] += 1
        if b"boom" in data:
            raise ValueError("a bug in a parser")
        return parser.feed_batch(data, now)

    errors: list[BaseException] = []
    got: list[PointBatch] = []
    log = _Log(tmp_path / "run.log")
    pump = ParsePump(log.path, parse, got.append, lambda: T0, on_error=errors.append,
                     on_gap=lambda stream, at_line_start=False: parser.gap(at_line_start=at_line_start))
    for piece in (b"loss: 0.9\nloss: 0.", b"boom\n", b"8 half a line\nloss: 0.7\n", b"boom again\n", b"loss: 0.6\n",
                  b"loss: 0.5\nloss: 0.4 boom", b"5 the rest\nloss: 0.3\n"):
        pump.put_range("stdout", log.write(piece), len(piece))
        assert pump.wait_idle(10)
    pump.close()
    # "loss: 0." + "8 half a line" is never read as 0.8; 0.6 right after a failed whole line is
    # read; the line a failed piece cut ("loss: 0.4 boom" + "5 the rest") is dropped whole
    assert [v for b in got for v in b.values] == [0.9, 0.7, 0.6, 0.3]
    assert len(errors) == 1 and pump.failed_pieces == 3 and calls["n"] == 7


def test_the_watch_says_an_output_error_once_with_its_traceback_in_the_crash_log(tmp_path: Path) -> None:
    s = settings(tmp_path, WATCH)
    w = watcher(s, [], SimClock(T0), sampler=FixedGpu(2**30, 24 * 2**30, 90.0), on_exit="leave")
    said = _said(w)
    for _ in range(3):
        try:
            raise ValueError("x" * 10_000)
        except ValueError as exc:
            w._output_failed(exc)
    assert len(said) == 1 and w.thread_errors == {"output": 3} and len(said[0]) < 600
    crash = said[0].split("(traceback in ")[1].split(")")[0]
    assert "Traceback" in Path(crash).read_text()


def test_a_metrics_follower_that_raises_is_said_once_and_every_tick_goes_on(tmp_path: Path, monkeypatch) -> None:
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text('{"loss": 0.5, "step": 1}\n')

    def poll(self, now):
        raise RecursionError("a reader bug")

    monkeypatch.setattr(MetricsFileFollower, "poll", poll)
    s = settings(tmp_path, WATCH)
    clock = SimClock(T0)
    w = watcher(s, [PY, "-c", "import time; time.sleep(1.0)"], clock, sampler=FixedGpu(2**30, 24 * 2**30, 90.0),
                metrics_file=metrics, on_exit="leave")
    said = _said(w)
    code, _ = drive(w, clock, step_s=5, max_real_s=60)
    assert code == 0 and not w._tick_error_reported
    assert w.thread_errors["metrics-file"] >= 2
    assert [line for line in said if "metrics file" in line and "RecursionError" in line].__len__() == 1
    with _ledger(tmp_path) as db:
        run = db.scalars(select(Run)).one()
    assert run.ended_at is not None and run.exit_code == 0


class _RaisingGpu:
    name = "nvml"

    def __init__(self) -> None:
        self.reads = 0

    def read(self) -> GpuRead:
        self.reads += 1
        if self.reads < 3:
            raise OverflowError("int too large to convert")
        return GpuRead(SignalStatus.OK, (GpuReading(index=0, utilization=50.0),))

    def close(self) -> None:
        pass


def test_a_sampler_source_that_raises_reads_busy_and_is_reported_with_the_exception() -> None:
    failed: list[tuple[str, BaseException]] = []
    sampler = Sampler(_RaisingGpu(), None, on_error=lambda source, exc: failed.append((source, exc)))
    first, second, third = (sampler.sample(T0 + timedelta(seconds=i)) for i in range(3))
    assert first.gpu_status is SignalStatus.ERROR and "OverflowError" in first.reasons[0]
    assert third.gpu_status is SignalStatus.OK and [s for s, _ in failed] == ["gpu", "gpu"]


def test_the_watch_says_a_sampler_failure_once_per_source(tmp_path: Path) -> None:
    s = settings(tmp_path, WATCH)
    w = watcher(s, [], SimClock(T0), sampler=FixedGpu(2**30, 24 * 2**30, 90.0), on_exit="leave")
    said = _said(w)
    for source in ("gpu", "gpu", "cpu", "gpu"):
        w._sampler_failed(source, OverflowError("int too large"))
    assert len(said) == 2 and "gpu reading failed" in said[0] and "counts as busy" in said[0]


class _FlakySource:
    name = "flaky"

    def __init__(self) -> None:
        self.polls = 0

    def poll(self) -> Notice | None:
        self.polls += 1
        if self.polls == 1:
            raise TypeError("an answer no parser expected")
        if self.polls == 2:
            raise ProviderError("unreachable")
        return Notice("terminate", datetime(2026, 1, 1, tzinfo=UTC), self.name)


def test_the_notice_poller_thread_survives_an_unexpected_exception() -> None:
    notices: list[Notice] = []
    errors: list[BaseException] = []
    poller = NoticePoller(_FlakySource(), 0.01, on_notice=notices.append, on_error=errors.append)
    assert poller.poll_once() is None and isinstance(poller.last_error, ProviderError)
    assert [type(e) for e in errors] == [TypeError]
    poller.start()
    try:
        deadline = time.monotonic() + 10
        while not notices and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        poller.stop()
    assert len(notices) == 1 and poller.last_error is None


def test_the_notice_poller_thread_survives_an_on_notice_that_raises() -> None:
    seen = threading.Event()

    def on_notice(notice: Notice) -> None:
        seen.set()
        raise RuntimeError("the handler's bug")

    class Once:
        name = "once"

        def poll(self) -> Notice | None:
            return Notice("terminate", datetime(2026, 1, 1, tzinfo=UTC), self.name)

    poller = NoticePoller(Once(), 0.01, on_notice=on_notice).start()
    try:
        assert seen.wait(10)
        time.sleep(0.05)
        assert poller._thread is not None and poller._thread.is_alive()
    finally:
        poller.stop()


# -- part 3: analyze ------------------------------------------------------------------------------
SMI_HEADER = "timestamp, index, name, utilization.gpu [%], memory.total [MiB], memory.used [MiB]"


def _smi_rows(n: int = 12, start: int = 0) -> list[str]:
    t0 = datetime(2024, 11, 23, 12, 0, 0)
    return [f"{t0 + timedelta(seconds=i):%Y/%m/%d %H:%M:%S}.000, 0, NVIDIA A6000, {90 if i % 2 else 0} %, 49140 MiB, 15 MiB"
            for i in range(start, start + n)]


def _analyze_json(capsys, *args: str) -> dict:
    assert main(["analyze", *args, "--format", "json"]) == 0, capsys.readouterr().err
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return json.loads(out)


def _analyze_error(capsys, *args: str) -> str:
    code = main(["analyze", *args])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err and "internal error" not in err, err
    return err


def _gpu_samples(d: dict) -> int:
    return d["gpu_log"]["samples"]


def test_analyze_a_10_mb_csv_field_in_a_gpu_log_skips_that_row_and_reads_every_other(tmp_path: Path, capsys) -> None:
    rows = _smi_rows()
    rows[5] = rows[5].replace("NVIDIA A6000", '"' + "x" * 10_000_000 + '"')
    rows[7] = rows[7].replace("90 %", "9" * 300_000 + " %")  # past the csv module's limit, unquoted
    log = tmp_path / "gpu.csv"
    log.write_text("\n".join([SMI_HEADER, *rows]) + "\n")
    d = _analyze_json(capsys, "--gpu-log", str(log), "--compare")
    assert _gpu_samples(d) == 11 and d["gpu_log"]["skipped"] == 1
    custom = tmp_path / "custom.csv"
    custom.write_text("elapsed_sec,gpu_util_pct,mem_used_mb,note\n" + "".join(
        f"{i},{0 if i % 2 else 80},500,{'y' * 300_000 if i == 3 else 'x'}\n" for i in range(10)))
    assert _gpu_samples(_analyze_json(capsys, "--gpu-log", str(custom), "--compare")) == 10


def test_analyze_a_3_mb_line_in_a_console_log_is_skipped_and_counted(tmp_path: Path, capsys) -> None:
    console = tmp_path / "train.log"
    console.write_text("step 1 loss: 0.9\n" + "z" * 3_000_000 + "\nstep 2 loss: 0.8\nstep 3 loss " + "7" * 300_000 + "\n")
    d = _analyze_json(capsys, "--train-log", str(console))
    assert d["train_log"]["train_points"] == 2 and d["train_log"]["long_lines_skipped"] == 2


def test_analyze_infinite_memory_values_are_no_readings(tmp_path: Path, capsys) -> None:
    """inf, 1e400, 400 digits, negative and NaN memory: those nvidia-smi rows are skipped and
    counted (the analysis of the rest as ever); a wandb memory of 1e400 is no memory value."""
    rows = _smi_rows()
    for i, cell in zip((2, 3, 4, 6, 8), ("inf MiB", "1e400 MiB", f"{BIG} MiB", "-5 MiB", "nan MiB")):
        rows[i] = rows[i].replace("49140 MiB", cell)
    log = tmp_path / "gpu.csv"
    log.write_text("\n".join([SMI_HEADER, *rows]) + "\n")
    d = _analyze_json(capsys, "--gpu-log", str(log), "--compare")
    assert _gpu_samples(d) == 7 and d["gpu_log"]["skipped"] == 5
    wandb = tmp_path / "wandb-events.jsonl"
    wandb.write_text("".join(json.dumps({"system.gpu.0.gpu": 50.0, "_timestamp": 1700000000 + i}).replace(
        "}", f', "system.gpu.0.memoryAllocatedBytes": {"1e400" if i == 2 else 10**9}}}') + "\n" for i in range(6)))
    assert _gpu_samples(_analyze_json(capsys, "--gpu-log", str(wandb))) == 6


def test_analyze_deeply_nested_json_lines_are_skipped_and_the_rest_read(tmp_path: Path, capsys) -> None:
    deep = '{"a":' * 100_000 + "1" + "}" * 100_000
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text("\n".join([json.dumps({"step": 1, "loss": 0.9}), deep, json.dumps({"step": 2, "loss": 0.8})]) + "\n")
    assert _analyze_json(capsys, "--train-log", str(metrics))["train_log"]["train_points"] == 2
    wandb = tmp_path / "wandb-events.jsonl"
    wandb.write_text("\n".join([json.dumps({"system.gpu.0.gpu": 50.0, "_timestamp": 1700000000}), deep,
                                json.dumps({"system.gpu.0.gpu": 0.0, "_timestamp": 1700000010})]) + "\n")
    d = _analyze_json(capsys, "--gpu-log", str(wandb))
    assert _gpu_samples(d) == 2 and d["gpu_log"]["skipped"] == 1
    first = tmp_path / "deep-first.jsonl"  # the format is told from the first lines
    first.write_text(deep + "\n" + json.dumps({"step": 1, "loss": 0.9}) + "\n")
    assert main(["analyze", "--train-log", str(first), "--format", "json"]) in (0, 2)
    assert "Traceback" not in capsys.readouterr().err


def test_analyze_400_digit_integers_are_no_counts(tmp_path: Path, capsys) -> None:
    rows = _smi_rows()
    rows[2] = rows[2].replace(", 0, NVIDIA", f", {BIG}, NVIDIA")
    rows[5] = rows[5].replace("90 %", f"{BIG} %")
    gpu = tmp_path / "gpu.csv"
    gpu.write_text("\n".join([SMI_HEADER, *rows]) + "\n")
    d = _analyze_json(capsys, "--gpu-log", str(gpu), "--compare")
    assert _gpu_samples(d) == 10 and d["gpu_log"]["skipped"] == 2
    jsonl = tmp_path / "metrics.jsonl"
    jsonl.write_text("".join(json.dumps({"step": s, "loss": 0.5}) + "\n" for s in (1, 2)) +
                     f'{{"step": {BIG}, "loss": 0.4}}\n{{"step": {HUGE}, "loss": {BIG}}}\n')
    series = _analyze_json(capsys, "--train-log", str(jsonl))["train_log"]
    # a record whose step is no count is skipped, counted: the others keep their steps (tester's finding 6)
    assert series["train_points"] == 2 and series["bad_step_records_skipped"] == 2
    state = tmp_path / "trainer_state.json"
    state.write_text(f'{{"global_step": {HUGE}, "log_history": [{{"step": 1, "loss": 0.5}}, {{"step": {BIG}, "loss": 0.4, '
                     f'"epoch": {BIG}, "grad_norm": {HUGE}}}]}}')
    state_log = _analyze_json(capsys, "--train-log", str(state))["train_log"]
    assert state_log["train_points"] == 1 and state_log["bad_step_records_skipped"] == 1
    console = tmp_path / "train.log"
    console.write_text(f"step 1 loss: 0.5\nstep {HUGE} loss: 0.4\nEpoch {HUGE}/{HUGE}\nloss: 0.3\n"
                       f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {HUGE} MiB. GPU {HUGE} has a total capacity of 1 GiB\n")
    assert _analyze_json(capsys, "--train-log", str(console))["train_log"]["train_points"] == 3


def test_analyze_times_outside_the_years_a_replay_computes_with_are_skipped(tmp_path: Path, capsys) -> None:
    rows = _smi_rows()
    rows[-1] = "9999/12/31 23:59:59.999" + rows[-1][23:]
    gpu = tmp_path / "gpu.csv"
    gpu.write_text("\n".join([SMI_HEADER, *rows]) + "\n")
    assert _gpu_samples(_analyze_json(capsys, "--gpu-log", str(gpu), "--compare")) == 11
    custom = tmp_path / "custom.csv"
    custom.write_text("elapsed_sec,gpu_util_pct\n0,50\n1e18,0\n5,0\ninf,0\nnan,0\n10,0\n")
    assert _gpu_samples(_analyze_json(capsys, "--gpu-log", str(custom), "--compare")) == 3
    wandb = tmp_path / "wandb-events.jsonl"
    wandb.write_text("".join(json.dumps({"system.gpu.0.gpu": 5.0, "_timestamp": t}) + "\n"
                             for t in (1700000000, 1e300, 1700000005)) + '{"system.gpu.0.gpu": 5, "_timestamp": NaN}\n')
    assert _gpu_samples(_analyze_json(capsys, "--gpu-log", str(wandb), "--compare")) == 2
    train = tmp_path / "metrics.csv"
    train.write_text(f"step,loss\n1,0.5\n2,0.4\n{10**18},0.3\n")
    d = _analyze_json(capsys, "--gpu-log", str(gpu), "--train-log", str(train), "--start-time", "2024-11-23T12:00:00",
                      "--step-rate", "1")
    assert d["train_log"]["train_points"] == 3


def test_analyze_a_gpu_log_it_cannot_read_at_all_names_the_file_the_line_and_what_was_expected(tmp_path: Path,
                                                                                                capsys) -> None:
    bad = tmp_path / "gpu.csv"
    bad.write_text(SMI_HEADER + "\n" + "\n".join(f"{BIG}, 0, NVIDIA A6000, 5 %, 1 MiB, 1 MiB" for _ in range(3)) + "\n")
    err = _analyze_error(capsys, "--gpu-log", str(bad))
    assert str(bad) in err and "line 2" in err and "timestamp" in err
    headerless = tmp_path / "noheader.csv"
    headerless.write_text("2024/11/23 12:00:00.000, 0, 5, 7\n")
    err = _analyze_error(capsys, "--gpu-log", str(headerless))
    assert str(headerless) in err and "line 1" in err and "--gpu-log-columns" in err
    wandb = tmp_path / "wandb-events.jsonl"
    wandb.write_text("\n".join(json.dumps({"system.gpu.0.gpu": 5.0, "_timestamp": "x"}) for _ in range(2)) + "\n")
    err = _analyze_error(capsys, "--gpu-log", str(wandb))
    assert str(wandb) in err and "line 1" in err and "_timestamp" in err
    state = tmp_path / "trainer_state.json"
    state.write_text('{"log_history": [{"loss": 0.5,,}]}')
    err = _analyze_error(capsys, "--train-log", str(state))
    assert str(state) in err and "line 1" in err and "trainer_state.json" in err
