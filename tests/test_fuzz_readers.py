"""Property tests (Hypothesis) for the line parser and every log reader (issue 17, part 4):
arbitrary input gives either values within their documented ranges or a CostctlError, never
another exception.

The inputs are the readers' own shapes (an nvidia-smi query CSV, a custom GPU CSV, the
nvidia-smi dashboard, wandb system metrics, Lightning / Keras / YOLO CSVs, detectron2 / MMEngine
JSON lines, a trainer_state.json, console lines, OOM messages) with their numbers drawn from the
hostile kind (``inf``, ``nan``, ``1e400``, 400- and 5,000-digit integers, 2**64, negative
values, empty cells, cells longer than the csv module's 131,072-character field limit, deep
JSON nesting), plus arbitrary text. The documented ranges checked:

* progress points: a step and a total are absent or 0 .. 2**63 - 1; an epoch is absent or
  finite (a loss value may be any float: ``inf`` is a divergence);
* GPU readings: utilization 0-100 %, memory 0 .. 2**63 - 1 bytes, watts finite and >= 0, an
  index 0 .. 2**63 - 1; sample times within costctl.replay.times.TIME_MIN .. TIME_MAX;
* OOM events: sizes and the GPU index absent or 0 .. 2**63 - 1;
* costctl.numbers / costctl.jsonio: their own contracts.

Settings are applied per test (derandomized, a fixed number of examples, no deadline), so the
suite's runs are the same everywhere.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from costctl.errors import CostctlError
from costctl.jsonio import JsonTooDeep, loads
from costctl.numbers import INT64_MAX, as_count, as_float, finite, parse_count
from costctl.progress import lines
from costctl.progress.batch import NO_INT, PointBatch
from costctl.progress.metrics_file import MetricsFileFollower
from costctl.replay.gpu_smi_csv import iter_custom_gpu_csv, iter_smi_lines
from costctl.replay.gpu_smi_table import iter_table_lines
from costctl.replay.gpu_wandb import iter_wandb_lines
from costctl.replay.oom import match_oom
from costctl.replay.readers import read_train_log
from costctl.replay.times import TIME_MAX, TIME_MIN
from costctl.telemetry import smi_parse

_CHECKS = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture]
#: in-memory readers: a few milliseconds an example
FUZZ = settings(derandomize=True, deadline=None, max_examples=50, database=None, suppress_health_check=_CHECKS)
#: readers of a file (written per example, read twice): fewer examples
FUZZ_FILES = settings(derandomize=True, deadline=None, max_examples=25, database=None, suppress_health_check=_CHECKS)
ENGINES = ["python"] + (["native"] if lines._scan is not None else [])

# -- hostile values -------------------------------------------------------------------------
HUGE = "9" * 5000
#: a cell past the csv module's default field limit (131,072 characters)
LONG_CELL = "7" * 140_000
_numbers = st.one_of(
    st.sampled_from(["inf", "-inf", "nan", "NaN", "Infinity", "1e400", "-1e400", "1e-400", "-0", "0", "-5",
                     "9" * 19, "9" * 20, "9" * 400, HUGE, str(2**63), str(2**64), "-" + "9" * 400, "1." + "9" * 400,
                     "00000000000000000000000000005", "1e308", "4.9e-324", "", "[N/A]", "x", "\x00", "٣"]),
    st.integers(min_value=-(10**30), max_value=10**30).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
)
_cells = st.one_of(_numbers, _numbers, _numbers, st.just(LONG_CELL), st.text(max_size=12))


def _json_value(number: str) -> str:
    """A drawn number as JSON text: its own literal when JSON reads it as a number (huge
    integers included), else a JSON string."""
    try:
        value = loads(number)
    except ValueError:
        return json.dumps(number)
    return number if isinstance(value, (int, float)) and not isinstance(value, bool) else json.dumps(number)


_json_values = st.one_of(
    _numbers.map(_json_value),
    st.sampled_from(["NaN", "Infinity", "-Infinity", "true", "null", "[1, 2]", '{"a": 1}', '"0.5"',
                     "[" * 5000 + "]" * 5000, '{"a":' * 3000 + "1" + "}" * 3000]),
)


# -- range checks ---------------------------------------------------------------------------
def _count_ok(value: int | None) -> bool:
    return value is None or 0 <= value <= INT64_MAX


def check_batch(batch: PointBatch) -> None:
    assert len(batch.values) == len(batch.steps) == len(batch.epochs) == len(batch.totals) == len(batch.times)
    assert all(s == NO_INT or 0 <= s <= INT64_MAX for s in batch.steps)
    assert all(t == NO_INT or 0 <= t <= INT64_MAX for t in batch.totals)
    assert all(e != e or math.isfinite(e) for e in batch.epochs)


def check_points(points) -> None:
    for p in points:
        assert isinstance(p.value, float)
        assert _count_ok(p.step) and _count_ok(p.total), p
        assert p.epoch is None or math.isfinite(p.epoch), p


def check_samples(samples) -> None:
    for s in samples:
        assert TIME_MIN <= s.time < TIME_MAX
        for g in s.gpus:
            assert 0 <= g.index <= INT64_MAX
            assert g.utilization is None or 0.0 <= g.utilization <= 100.0, g
            assert _count_ok(g.memory_used_bytes) and _count_ok(g.memory_total_bytes), g
            assert g.power_w is None or (math.isfinite(g.power_w) and g.power_w >= 0), g
            assert g.processes is None or all(_count_ok(p) for p in g.processes)


def _read_or_usage_error(read) -> list:
    """Everything ``read()`` yields, or [] when it raised a CostctlError (one line for the user)."""
    try:
        return list(read())
    except CostctlError as exc:
        assert "\n" not in exc.message and len(exc.message) < 2000
        return []


# -- costctl.numbers and costctl.jsonio -------------------------------------------------------
@FUZZ
@given(st.one_of(_numbers, st.text(), st.integers(), st.floats(), st.none(), st.booleans(),
                 st.integers(min_value=10**300, max_value=10**400)))
def test_numbers_never_raise_and_keep_their_ranges(value) -> None:
    f = as_float(value)
    assert f is None or isinstance(f, float)
    g = finite(value, low=0.0, high=100.0)
    assert g is None or 0.0 <= g <= 100.0
    c = as_count(value)
    assert c is None or (isinstance(c, int) and 0 <= c <= INT64_MAX)
    if isinstance(value, str):
        p = parse_count(value)
        assert p is None or 0 <= p <= INT64_MAX
        if p is not None:
            assert p == int(value.strip())


@FUZZ
@given(st.one_of(_json_values, st.text(max_size=40), st.lists(_json_values, max_size=4).map(lambda v: "[" + ",".join(v) + "]")))
def test_jsonio_loads_raises_only_value_error(text: str) -> None:
    try:
        loads(text)
    except JsonTooDeep:
        pass
    except ValueError:
        pass


def test_jsonio_reads_huge_integers_as_floats_and_deep_nesting_as_too_deep() -> None:
    assert loads('{"step": ' + HUGE + "}") == {"step": math.inf}
    assert loads('{"step": -' + "9" * 400 + "}") == {"step": -math.inf}
    assert loads('{"step": ' + str(2**64) + "}") == {"step": float(2**64)}
    assert loads('{"step": 12}') == {"step": 12} and isinstance(loads("12"), int)
    with pytest.raises(JsonTooDeep):
        loads("[" * 100_000 + "]" * 100_000)


# -- the line parser --------------------------------------------------------------------------
_LINE_SHAPES = [
    "Epoch {a} loss: {x}", "step {a} loss: {x}", "step {a}/{b} loss: {x}", "Epoch {a}/{b}", "Epoch [{a}/{b}], Step [{c}/{d}], Loss: {x}",
    " 5%|#  | {a}/{b} [00:01<00:02, 5.0it/s, loss={x}]", "{{'loss': {x}, 'step': {a}, 'epoch': {c}}}",
    "{{'loss': {x}, 'grad_norm': {y}, 'learning_rate': 1e-05, 'epoch': {c}}}", "iter {a}: loss {x}, time 3ms, mfu 1%",
    "step {a}: train loss {x}, val loss {y}", "Epoch {a} | running_loss: {x} | kl_loss: {y}", "loss: {x}",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {x} MiB. GPU {a} has a total capacity of {y} GiB",
    "{a}/{b} [==>...] - 1s - loss: {x} - val_loss: {y}", "Epoch {a}: [D loss: {x}] [G loss: {y}]", "| grad norm: {x} | loss {y} | iteration {a}",
]
_lines = st.one_of(
    st.builds(lambda shape, a, b, c, d, x, y: shape.format(a=a, b=b, c=c, d=d, x=x, y=y),
              st.sampled_from(_LINE_SHAPES), _numbers, _numbers, _numbers, _numbers, _numbers, _numbers),
    st.text(max_size=60),
)


@FUZZ
@given(parts=st.lists(st.tuples(_lines, st.sampled_from(["\n", "\r", "\r\n"])), min_size=1, max_size=12),
       cut=st.integers(min_value=0, max_value=10_000), as_bytes=st.booleans())
@pytest.mark.parametrize("engine", ENGINES)
def test_line_parser_keeps_steps_totals_and_epochs_in_range_and_never_raises(engine: str, parts, cut: int,
                                                                             as_bytes: bool) -> None:
    text = "".join(line + end for line, end in parts)
    data = text.encode("utf-8", "surrogatepass") if as_bytes else text
    parser = lines.LineParser(engine=engine)
    batch = PointBatch()
    cut = min(cut, len(data))
    for piece in (data[:cut], data[cut:]):
        if piece:
            batch.extend(parser.feed_batch(piece, 0.0))
    batch.extend(parser.flush_batch(0.0))
    check_batch(batch)
    for line, _ in parts:
        check_points(lines.parse_line(line))
        header = lines.parse_epoch_header(line)
        assert header is None or (math.isfinite(float(header[0])) and (header[1] is None or header[1] >= 0))


@FUZZ
@given(parts=st.lists(st.tuples(_lines, st.sampled_from(["\n", "\r\n"])), min_size=1, max_size=10))
def test_both_engines_read_hostile_numbers_the_same(parts) -> None:
    if len(ENGINES) < 2:
        pytest.skip("the native scanner is not built")
    text = "".join(line + end for line, end in parts)
    cols = []
    for engine in ENGINES:
        parser = lines.LineParser(engine=engine)
        batch = parser.feed_batch(text.encode(), 0.0)
        batch.extend(parser.flush_batch(0.0))
        cols.append((list(batch.keys), list(batch.series), [repr(v) for v in batch.values], list(batch.steps),
                     [repr(e) for e in batch.epochs], list(batch.totals)))
    assert cols[0] == cols[1]


@FUZZ
@given(_lines)
def test_an_oom_line_keeps_its_sizes_and_gpu_in_range(line: str) -> None:
    event = match_oom(line)
    if event is not None:
        for value in (event.gpu_index, event.requested_bytes, event.total_bytes, event.free_bytes,
                      event.allocated_bytes, event.reserved_bytes):
            assert _count_ok(value)
        assert len(event.message) <= 2000


# -- GPU logs -----------------------------------------------------------------------------------
_SMI_HEADER = "timestamp, index, name, utilization.gpu [%], memory.total [MiB], memory.used [MiB], power.draw [W]"
_stamps = st.one_of(st.sampled_from(["2024/11/23 12:23:29.950", "2024/11/23 12:23:29.950", "9999/12/31 23:59:59.999",
                                     "0001/01/01 00:00:00.000", "2024/02/30 00:00:00", "2024/11/23 12:23:30"]), _cells)


@FUZZ_FILES
@given(rows=st.lists(st.tuples(_stamps, _cells, _cells, _cells, _cells, _cells), min_size=1, max_size=8),
       header=st.booleans())
def test_nvidia_smi_csv_rows_are_in_range_or_skipped(rows, header: bool) -> None:
    text = [_SMI_HEADER] if header else []
    text += [", ".join([t, i, "NVIDIA A6000", f"{u} %", f"{mt} MiB", f"{mu} MiB", f"{w} W"]) for t, i, u, mt, mu, w in rows]
    counts: dict[str, int] = {}
    samples = _read_or_usage_error(lambda: iter_smi_lines([line + "\n" for line in text], counts=counts))
    check_samples(samples)
    assert counts.get("skipped", 0) >= 0


@FUZZ_FILES
@given(rows=st.lists(st.tuples(_cells, _cells, _cells, _cells, _cells), min_size=1, max_size=8),
       absolute=st.booleans())
def test_custom_gpu_csv_rows_are_in_range_or_skipped(rows, absolute: bool) -> None:
    head = ("timestamp" if absolute else "elapsed_sec") + ",gpu,gpu_util_pct,mem_used_mb,power_w"
    body = [",".join(('"' + c + '"') if "," in c or '"' in c else c for c in row) for row in rows]
    samples = _read_or_usage_error(lambda: iter_custom_gpu_csv([line + "\n" for line in [head, *body]]))
    check_samples(samples)


_TABLE = """{date}
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 550.54.15              Driver Version: 550.54.15      CUDA Version: 12.4     |
| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |
| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |
|=========================================+========================+======================|
|   {index}  NVIDIA L40S                    On  |   00000000:4A:00.0 Off |                    0 |
| N/A   53C    P0            {power}W /  350W |   {used}MiB /  {total}MiB |     {util}%      Default |
+-----------------------------------------+------------------------+----------------------+
| Processes:                                                                              |
|    {index}   N/A  N/A   {pid}      C   python                                      11942MiB |
+-----------------------------------------------------------------------------------------+
"""


@FUZZ
@given(snaps=st.lists(st.tuples(st.sampled_from(["Tue Oct 29 19:00:23 2024", "Fri Dec 31 23:59:59 9999",
                                                "Mon Jan  1 00:00:00 0001", "Tue Oct 29 19:00:23 2024 junk"]),
                                _numbers, _numbers, _numbers, _numbers, _numbers, _numbers), min_size=1, max_size=4))
def test_nvidia_smi_dashboard_snapshots_are_in_range_or_skipped(snaps) -> None:
    text = "".join(_TABLE.format(date=d, index=i, power=w, used=mu, total=mt, util=u, pid=pid)
                   for d, i, w, mu, mt, u, pid in snaps)
    samples = _read_or_usage_error(lambda: iter_table_lines(text.splitlines(keepends=True)))
    check_samples(samples)


@FUZZ
@given(records=st.lists(st.tuples(_json_values, _json_values, _json_values, _json_values, _numbers), min_size=1, max_size=6))
def test_wandb_records_are_in_range_or_skipped(records) -> None:
    text = [f'{{"_timestamp": {ts}, "system.gpu.{idx if idx.isdigit() else 0}.gpu": {u}, '
            f'"system.gpu.0.memoryAllocatedBytes": {mem}, "system.gpu.0.powerWatts": {w}}}'
            for ts, u, mem, w, idx in records]
    counts: dict[str, int] = {}
    samples = _read_or_usage_error(lambda: iter_wandb_lines([line + "\n" for line in text], counts))
    check_samples(samples)


def test_smi_cells_out_of_range_are_parse_errors_never_other_exceptions() -> None:
    for cell in ("1e400 MiB", HUGE + " MiB", "-5 MiB", "inf", "nan %", "101 %", "-1 %", "-3 W", "1e400 W", HUGE):
        for parse in (smi_parse.parse_percent, smi_parse.parse_memory_bytes, smi_parse.parse_watts, smi_parse.parse_int):
            try:
                value = parse(cell)
            except smi_parse.SmiParseError as exc:
                assert len(str(exc)) < 200  # the cell is quoted cut to 60 characters
                continue
            assert value is None or (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0)


# -- training logs ------------------------------------------------------------------------------
_TRAIN_CSV = {
    "lightning": ("epoch,loss,step", "{a},{x},{b}"),
    "keras": ("epoch,loss,val_loss,lr", "{a},{x},{y},{b}"),
    "yolo": ("epoch,train/box_loss,val/box_loss,x/lr0", "{a},{x},{y},{b}"),
    "metrics": ("train_loss,grad_norm,note", "{x},{y},{b}"),
}
_JSONL = {
    "detectron2": '{{"iteration": {a}, "total_loss": {x}, "loss_cls": {y}, "lr": {b}}}',
    "mmengine": '{{"step": {a}, "iter": {b}, "loss": {x}, "grad_norm": {y}, "epoch": {b}}}',
    "metrics-jsonl": '{{"step": {a}, "loss": {x}, "eval_loss": {y}, "epoch": {b}, "_timestamp": {b}}}',
}


def _csv_cell(value: str) -> str:
    return '"' + value.replace('"', '""') + '"' if any(c in value for c in ',"\r\n') else value


def _check_train_log(path: Path) -> None:
    for streamed in (False, True):
        try:
            log = read_train_log(path, streamed=streamed)
        except CostctlError as exc:
            assert "\n" not in exc.message and len(exc.message) < 2000
            return
        check_points(log.iter_points())
        for name, series in log.series.items():
            assert isinstance(name, str) and all(isinstance(v, float) for _, v in series)


@FUZZ_FILES
@given(kind=st.sampled_from(sorted(_TRAIN_CSV)), rows=st.lists(st.tuples(_cells, _cells, _cells, _cells), min_size=1, max_size=6))
def test_training_csvs_keep_their_points_in_range(tmp_path_factory, kind: str, rows) -> None:
    head, row = _TRAIN_CSV[kind]
    body = [row.format(a=_csv_cell(a), b=_csv_cell(b), x=_csv_cell(x), y=_csv_cell(y)) for a, b, x, y in rows]
    path = tmp_path_factory.mktemp("csv") / "metrics.csv"
    path.write_text("\n".join([head, "0,0.5,0,1" if kind != "metrics" else "0.5,1,x", *body]) + "\n")
    _check_train_log(path)
    follower = MetricsFileFollower(path)
    check_points(follower.poll(TIME_MIN) + follower.flush(TIME_MIN))
    assert all(_count_ok(r[2]) for r in follower.take_grad_norms())


@FUZZ_FILES
@given(kind=st.sampled_from(sorted(_JSONL)),
       rows=st.lists(st.tuples(_json_values, _json_values, _json_values, _json_values), min_size=1, max_size=6))
def test_json_lines_logs_keep_their_points_in_range(tmp_path_factory, kind: str, rows) -> None:
    shape = _JSONL[kind]
    body = [shape.format(a=a, b=b, x=x, y=y) for a, b, x, y in rows]
    path = tmp_path_factory.mktemp("jsonl") / "metrics.json"
    path.write_text("\n".join([shape.format(a=1, b=1, x=0.5, y=0.5), *body]) + "\n")
    _check_train_log(path)
    follower = MetricsFileFollower(path)
    check_points(follower.poll(TIME_MIN) + follower.flush(TIME_MIN))


@FUZZ_FILES
@given(entries=st.lists(st.tuples(_json_values, _json_values, _json_values), min_size=1, max_size=6),
       summary=_json_values)
def test_trainer_state_keeps_its_points_in_range(tmp_path_factory, entries, summary: str) -> None:
    history = ", ".join(f'{{"step": {a}, "loss": {x}, "epoch": {b}, "grad_norm": {x}}}' for a, x, b in entries)
    path = tmp_path_factory.mktemp("hf") / "trainer_state.json"
    path.write_text(f'{{"global_step": {summary}, "log_history": [{{"step": 1, "loss": 0.5}}, {history}]}}')
    _check_train_log(path)
    follower = MetricsFileFollower(path)
    check_points(follower.poll(TIME_MIN))


@FUZZ_FILES
@given(parts=st.lists(_lines, min_size=1, max_size=10))
def test_console_logs_keep_their_points_in_range(tmp_path_factory, parts) -> None:
    path = tmp_path_factory.mktemp("console") / "train.log"
    path.write_text("\n".join(["loss: 0.5", *parts]) + "\n", encoding="utf-8", errors="surrogatepass")
    _check_train_log(path)


# -- what the fuzz found (named, so they hold whatever examples Hypothesis draws) ---------------
def test_a_headerless_smi_row_with_a_huge_cell_is_one_short_line() -> None:
    """A cell of 5,000 digits that no column kind fits is quoted cut short, not whole."""
    row = "2024/11/23 12:23:30.000, 1." + "7" * 5000 + ".5, NVIDIA A6000, 5 %, 10 MiB, 5 MiB, 12 W\n"
    with pytest.raises(CostctlError) as info:
        list(iter_smi_lines([row]))
    assert "\n" not in info.value.message and len(info.value.message) < 400
    assert "column 2" in info.value.message and "..." in info.value.message


def test_a_console_loss_that_falls_below_zero_reads(tmp_path: Path) -> None:
    """Losses 0.5, 0.0, -1.0: the new low after a minimum of exactly 0 is an improvement, no
    division by zero (the analyze reader, streamed and whole)."""
    path = tmp_path / "train.log"
    path.write_text("".join(f"Epoch {i} loss: {v}\n" for i, v in enumerate(["0.5", "0.0", "-1.0"])))
    _check_train_log(path)
    for streamed in (False, True):
        points = list(read_train_log(path, streamed=streamed).iter_points())
        assert [p.value for p in points] == [0.5, 0.0, -1.0]
