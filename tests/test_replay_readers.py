"""The replay readers on the shapes real files take that the corpus does not cover."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from costctl.errors import UsageError
from costctl.policies import classify_sample
from costctl.replay.formats import detect_format
from costctl.replay.readers import read_gpu_log, read_train_log

MIB = 2**20
T0 = datetime(2026, 1, 1, 0, 0, 0, tzinfo=timezone.utc)


def _write(tmp_path: Path, text: str, name: str = "log.txt", encoding: str = "utf-8") -> Path:
    path = tmp_path / name
    path.write_bytes(text.encode(encoding))
    return path


def test_headerless_csv_with_units(tmp_path: Path) -> None:
    path = _write(tmp_path, "2026/01/01 00:00:00.000, 0, NVIDIA A100-SXM4-80GB, 97 %, 40000 MiB, 301.5 W\n"
                            "2026/01/01 00:00:05.000, 0, NVIDIA A100-SXM4-80GB, 3 %, 40000 MiB, 60.0 W\n")
    log = read_gpu_log(path)
    assert log.format == "nvidia-smi-csv" and len(log.samples) == 2
    g = log.samples[0].gpus[0]
    assert (g.index, g.name, g.utilization, g.memory_used_bytes, g.power_w) == (
        0, "NVIDIA A100-SXM4-80GB", 97, 40000 * MIB, 301.5)
    assert log.samples[1].time == datetime(2026, 1, 1, 0, 0, 5, tzinfo=timezone.utc)


def test_headerless_csv_without_units_needs_columns(tmp_path: Path) -> None:
    path = _write(tmp_path, "2026/01/01 00:00:00.000, 97, 40000\n2026/01/01 00:00:05.000, 3, 40000\n")
    with pytest.raises(UsageError, match="--gpu-log-columns"):
        read_gpu_log(path)
    log = read_gpu_log(path, columns=["timestamp", "utilization.gpu", "memory.used"])
    assert [s.gpus[0].utilization for s in log.samples] == [97, 3]
    assert log.samples[0].gpus[0].memory_used_bytes == 40000 * MIB


def test_not_available_and_not_supported_are_unknown_and_busy(tmp_path: Path) -> None:
    path = _write(tmp_path, "timestamp, index, utilization.gpu [%], memory.used [MiB], power.draw [W]\n"
                            "2026/01/01 00:00:00.000, 0, [N/A], [N/A], [Not Supported]\n"
                            "2026/01/01 00:00:05.000, 0, [Not Supported], 100 MiB, 20.5 W\n"
                            "2026/01/01 00:00:10.000, 0, 0 %, 100 MiB, 20.5 W\n")
    log = read_gpu_log(path)
    a, b, c = (s.gpus[0] for s in log.samples)
    assert a.utilization is None and a.memory_used_bytes is None and a.power_w is None and a.error
    assert b.utilization is None and b.memory_used_bytes == 100 * MIB and b.error
    assert c.utilization == 0 and c.error is None
    verdicts = [classify_sample(s, min_gpu_utilization=5, min_cpu_utilization=10).idle for s in log.samples]
    assert verdicts == [False, False, True]  # an unreadable metric never counts as idle


@pytest.mark.parametrize("encoding", ["utf-16-le", "utf-16-be", "utf-16", "utf-8-sig"])
def test_any_encoding_with_crlf(tmp_path: Path, encoding: str) -> None:
    text = "timestamp, utilization.gpu [%]\r\n2026/01/01 00:00:00.000, 7 %\r\n2026/01/01 00:00:01.000, 9 %\r\n"
    log = read_gpu_log(_write(tmp_path, text, encoding=encoding))
    assert [s.gpus[0].utilization for s in log.samples] == [7, 9]


def test_interleaved_gpus_identified_by_uuid(tmp_path: Path) -> None:
    path = _write(tmp_path, "timestamp, uuid, utilization.gpu [%]\n"
                            "2026/01/01 00:00:00.000, GPU-aaa, 90 %\n"
                            "2026/01/01 00:00:00.001, GPU-bbb, 0 %\n"
                            "2026/01/01 00:00:01.000, GPU-aaa, 80 %\n"
                            "2026/01/01 00:00:01.002, GPU-bbb, 1 %\n")
    log = read_gpu_log(path)
    assert len(log.samples) == 2
    assert [[(g.index, g.uuid, g.utilization) for g in s.gpus] for s in log.samples] == [
        [(0, "GPU-aaa", 90), (1, "GPU-bbb", 0)], [(0, "GPU-aaa", 80), (1, "GPU-bbb", 1)]]


def test_interleaved_gpus_without_identity_grouped_by_time(tmp_path: Path) -> None:
    path = _write(tmp_path, "timestamp, utilization.gpu [%]\n"
                            "2026/01/01 00:00:00.000, 90 %\n2026/01/01 00:00:00.001, 0 %\n"
                            "2026/01/01 00:00:01.000, 80 %\n2026/01/01 00:00:01.001, 2 %\n")
    log = read_gpu_log(path)
    assert [[g.utilization for g in s.gpus] for s in log.samples] == [[90, 0], [80, 2]]
    assert log.gpu_indices == [0, 1]


def test_missing_gpu_row_starts_next_sample(tmp_path: Path) -> None:
    path = _write(tmp_path, "timestamp, index, utilization.gpu [%]\n"
                            "2026/01/01 00:00:00.000, 0, 90 %\n2026/01/01 00:00:00.001, 1, 0 %\n"
                            "2026/01/01 00:00:01.000, 0, 80 %\n"
                            "2026/01/01 00:00:02.000, 0, 70 %\n2026/01/01 00:00:02.001, 1, 0 %\n")
    log = read_gpu_log(path)
    assert [len(s.gpus) for s in log.samples] == [2, 1, 2]


def test_garbage_rows_are_skipped_and_counted(tmp_path: Path) -> None:
    path = _write(tmp_path, "timestamp, utilization.gpu [%]\n2026/01/01 00:00:00.000, 7 %\n"
                            "this is not a row\n2026/01/01 00:00:0\n2026/01/01 00:00:02.000, 9 %\n")
    log = read_gpu_log(path)
    assert [s.gpus[0].utilization for s in log.samples] == [7, 9]
    assert log.skipped == 2


TABLE_SNAPSHOT = """Wed Jan  7 10:00:0{sec} 2026
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 550.54.15              Driver Version: 550.54.15      CUDA Version: 12.4     |
|-----------------------------------------+------------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |
| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |
|=========================================+========================+======================|
|   0  NVIDIA H100 80GB HBM3          On  |   00000000:4A:00.0 Off |                    0 |
| N/A   40C    P0            300W /  700W |   40000MiB /  81559MiB |     {u0}%      Default |
+-----------------------------------------+------------------------+----------------------+
|   1  NVIDIA H100 80GB HBM3          On  |   00000000:4B:00.0 Off |                    0 |
| N/A   30C    P0             N/A /  700W |       4MiB /  81559MiB |      N/A      Default |
+-----------------------------------------+------------------------+----------------------+

+-----------------------------------------------------------------------------------------+
| Processes:                                                                              |
|  GPU   GI   CI        PID   Type   Process name                              GPU Memory |
|=========================================================================================|
|    0   N/A  N/A      4242      C   python                                      39990MiB |
|    0   N/A  N/A      4243      C   python                                         10MiB |
+-----------------------------------------------------------------------------------------+
"""


def test_table_with_two_gpus_and_processes(tmp_path: Path) -> None:
    text = TABLE_SNAPSHOT.format(sec=0, u0=99) + TABLE_SNAPSHOT.format(sec=5, u0=0)
    log = read_gpu_log(_write(tmp_path, text.replace("\n", "\r\n"), "x.csv"))
    assert log.format == "nvidia-smi-table" and len(log.samples) == 2
    g0, g1 = log.samples[0].gpus
    assert (g0.index, g0.name, g0.utilization, g0.power_w) == (0, "NVIDIA H100 80GB HBM3", 99, 300)
    assert g0.memory_used_bytes == 40000 * MIB and g0.memory_total_bytes == 81559 * MIB
    assert g0.processes == (4242, 4243)
    assert (g1.utilization, g1.power_w, g1.processes) == (None, None, ())  # N/A: unknown, not 0
    assert log.samples[1].time == datetime(2026, 1, 7, 10, 0, 5, tzinfo=timezone.utc)


def test_table_without_date_lines_is_refused(tmp_path: Path) -> None:
    text = "\n".join(TABLE_SNAPSHOT.format(sec=0, u0=1).splitlines()[1:])
    with pytest.raises(UsageError, match="date lines"):
        read_gpu_log(_write(tmp_path, text))


def test_wandb_two_gpus_with_bytes(tmp_path: Path) -> None:
    rows = [{"system.gpu.0.gpu": 90, "system.gpu.1.gpu": 0, "system.gpu.0.memoryAllocatedBytes": 1024,
             "system.gpu.1.powerWatts": 50.5, "_timestamp": 1767225600.5}]
    log = read_gpu_log(_write(tmp_path, "\n".join(json.dumps(r) for r in rows) + "\n"))
    assert log.format == "wandb-system"
    g0, g1 = log.samples[0].gpus
    assert (g0.utilization, g0.memory_used_bytes, g1.utilization, g1.power_w) == (90, 1024, 0, 50.5)
    assert log.samples[0].time == datetime(2026, 1, 1, 0, 0, 0, 500000, tzinfo=timezone.utc)


def test_training_file_given_as_gpu_log(tmp_path: Path) -> None:
    path = _write(tmp_path, "epoch,loss,val_loss\n0,1.0,1.1\n")
    with pytest.raises(UsageError, match="--train-log"):
        read_gpu_log(path)


def test_gpu_log_given_as_training_log(tmp_path: Path) -> None:
    path = _write(tmp_path, "timestamp, utilization.gpu [%]\n2026/01/01 00:00:00.000, 7 %\n")
    with pytest.raises(UsageError, match="--gpu-log"):
        read_train_log(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no such file"):
        read_gpu_log(tmp_path / "nope.csv")


def test_empty_gpu_log(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no GPU sample"):
        read_gpu_log(_write(tmp_path, "timestamp, utilization.gpu [%]\n"))


def test_utf16_keras_csvlogger(tmp_path: Path) -> None:
    path = _write(tmp_path, "epoch,loss,val_loss\r\n0,1.5,1.6\r\n1,1.2,1.4\r\n", encoding="utf-16")
    log = read_train_log(path)
    assert log.format == "keras-csv"
    assert [(p.epoch, p.value) for p in log.train] == [(0.0, 1.5), (1.0, 1.2)]
    assert [p.value for p in log.eval] == [1.6, 1.4]


def test_console_with_ansi_and_tqdm_carriage_returns(tmp_path: Path) -> None:
    text = ("\x1b[32mEpoch 1/2\x1b[0m\n"
            " 10%|#         | 10/100 [00:01<00:09, 9.9it/s, loss=2.5]\r"
            " 20%|##        | 20/100 [00:02<00:08, 9.9it/s, loss=2.1]\r\n"
            "{'loss': 1.9, 'grad_norm': 1.0, 'learning_rate': 1e-05, 'epoch': 0.5}\n")
    log = read_train_log(_write(tmp_path, text))
    assert [p.value for p in log.train] == [2.5, 2.1, 1.9]
    assert [p.step for p in log.train][:2] == [10, 20]


def test_console_with_custom_loss_regex(tmp_path: Path) -> None:
    path = _write(tmp_path, "it=1 objective=3.5\nit=2 objective=3.25\n")
    log = read_train_log(path, loss_regex=r"it=(?P<step>\d+) objective=(?P<loss>\S+)")
    assert [(p.step, p.value) for p in log.train] == [(1, 3.5), (2, 3.25)]


@pytest.mark.parametrize(
    ("head", "fmt"),
    [
        ('{\n  "best_metric": null,\n  "log_history": []\n}', "hf-trainer-state"),
        ('{"iteration": 19, "total_loss": 1.0}\n', "detectron2-jsonl"),
        ('{"loss": 1.0, "iter": 50, "epoch": 1, "step": 50}\n', "mmengine-jsonl"),
        ('{"loss": 1.0, "global_step": 5}\n', "metrics-jsonl"),
        ('{"system.gpu.0.gpu": 3, "_timestamp": 1}\n', "wandb-system"),
        ("epoch,train/box_loss,val/box_loss\n", "yolo-csv"),
        ("step,train_loss\n", "lightning-csv"),
        ("epoch,loss\n", "keras-csv"),
        ("time,gpu_util,mem_used_mb\n", "gpu-csv"),
        ("timestamp, index, utilization.gpu [%]\n", "nvidia-smi-csv"),
        ("2026/01/01 00:00:00.000, 3 %\n", "nvidia-smi-csv"),
        ("iter 0: loss 4.2, time 10ms\n", "console"),
    ],
)
def test_format_from_content(head: str, fmt: str) -> None:
    assert detect_format(head) == fmt


def test_console_reader_matches_the_live_parser_across_chunk_boundaries(tmp_path: Path) -> None:
    from costctl.progress import LineParser
    from costctl.progress.lines import MAX_LINE_CHARS
    from costctl.replay import train_log

    filler = "x" * 100 + "\n"
    head = filler * ((train_log._READ_CHUNK - 1) // len(filler))
    head += "y" * (train_log._READ_CHUNK - 1 - len(head)) + "\r"  # a CRLF split across the first chunk end
    text = (head + "\niter 1: loss 2.5, time 1ms\r"
            + "z" * (MAX_LINE_CHARS + 10) + " loss 9.9\n"  # too long: skipped, as live
            + "iter 2: loss 2.25, time 1ms\r\n" + "{'loss': 2.0, 'epoch': 1.0}")  # no final newline
    path = tmp_path / "big.log"
    path.write_bytes(text.encode())
    live = LineParser()
    expected = live.feed(text, T0) + live.flush(T0)
    got = read_train_log(path).points
    assert [(p.value, p.step, p.epoch) for p in got] == [(p.value, p.step, p.epoch) for p in expected]
    assert [p.value for p in got] == [2.5, 2.25, 2.0]


def test_custom_gpu_csv_columns_by_name(tmp_path: Path) -> None:
    path = _write(tmp_path, "temp_c,gpu,elapsed_s,gpu_util_pct,mem_used_gb\n"
                            "40,0,0.5,90,1.5\n41,1,0.5,0,0.25\n42,0,1.5,80,1.5\n43,1,1.5,0,0.25\n")
    log = read_gpu_log(path, start=T0)
    assert log.format == "gpu-csv" and log.relative
    assert [[(g.index, g.utilization, g.memory_used_bytes) for g in s.gpus] for s in log.samples] == [
        [(0, 90, int(1.5 * 2**30)), (1, 0, 2**28)], [(0, 80, int(1.5 * 2**30)), (1, 0, 2**28)]]
    assert [s.time for s in log.samples] == [T0.replace(microsecond=500000), T0.replace(second=1, microsecond=500000)]


_CONSOLE = "iter 1: loss 2.5, time 1ms\r\niter 2: loss 2.25, time 1ms\r\n{'loss': 2.0, 'epoch': 1.0}\r\n"


def _live(data: bytes) -> list[tuple[float, int | None, float | None]]:
    from costctl.progress import LineParser

    live = LineParser()
    return [(p.value, p.step, p.epoch) for p in live.feed(data, T0) + live.flush(T0)]


@pytest.mark.parametrize("junk", [b"\xff\xfe", b"\xfe\xff", b"\xff\xfe\x00\xd8\x00\xd8garbage\x07\n"])
def test_a_bom_lookalike_on_utf8_reads_as_utf8_like_the_watch(tmp_path: Path, junk: bytes) -> None:
    """First bytes that look like a UTF-16 BOM on a UTF-8 (or junk) log: read as UTF-8, the
    points the live watch reads from the same bytes (found by the fresh-user trial: 0 points)."""
    data = junk + _CONSOLE.encode()
    path = tmp_path / "train.log"
    path.write_bytes(data)
    got = [(p.value, p.step, p.epoch) for p in read_train_log(path).points]
    assert got == _live(data)
    assert [v for v, _, _ in got] == [2.5, 2.25, 2.0]
    streamed = read_train_log(path, streamed=True)
    assert streamed.count("train") == 3


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be"])
def test_a_real_utf16_console_log_still_parses(tmp_path: Path, encoding: str) -> None:
    """Windows PowerShell's ``python train.py > train.log`` writes UTF-16LE with a BOM."""
    path = tmp_path / "train.log"
    path.write_bytes(_CONSOLE.encode(encoding))
    got = [(p.value, p.step, p.epoch) for p in read_train_log(path).points]
    assert got == _live(_CONSOLE.encode())


def test_encoding_is_trusted_only_when_the_text_decodes_as_it() -> None:
    from costctl.progress.encoding import decode_bytes, detect_encoding

    text = "timestamp, utilization.gpu [%]\r\n2026/01/01 00:00:00.000, 7 %\r\n"
    assert detect_encoding(b"\xff\xfe" + text.encode("utf-16-le")) == "utf-16"
    assert detect_encoding(b"\xfe\xff" + text.encode("utf-16-be")) == "utf-16"
    assert detect_encoding(text.encode("utf-16-le")) == "utf-16-le"
    assert detect_encoding(b"\xff\xfe") == "utf-16"  # an empty PowerShell file
    assert detect_encoding(b"\xff\xfe" + text.encode()) == "utf-8"  # CJK-looking "UTF-16": not a log
    assert detect_encoding(b"\xff\xfe\x00\xdc" + text.encode("utf-16-le")) == "utf-8"  # lone surrogate
    assert detect_encoding(b"\x00\x00\x00\x00" * 100) == "utf-8"  # NULs, not UTF-16 text
    # the head may end inside a character or a surrogate pair
    head = (b"\xff\xfe" + ("x" * 100 + "\U0001f600").encode("utf-16-le"))[:-1]
    assert detect_encoding(head) == "utf-16"
    assert decode_bytes(b"\xff\xfe" + text.encode()) == "\ufffd\ufffd" + text
