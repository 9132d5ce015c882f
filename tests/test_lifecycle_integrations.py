"""Ready callbacks for the Hugging Face Trainer and PyTorch Lightning, on light stand-ins for the
frameworks (not installed here), and the all-ranks agreement on a real 2-process gloo group."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import textwrap
import threading
import time
import types
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest

from checkpoint_files import write_hf_checkpoint, write_torch_zip

REPO = Path(__file__).resolve().parents[1]


def _fresh(module_name: str, attr: str, monkeypatch):
    module = importlib.import_module(module_name)
    monkeypatch.delitem(module.__dict__, attr, raising=False)
    return module


def test_importing_the_integrations_imports_no_framework():
    code = ("import sys, costctl.integrations.hf, costctl.integrations.lightning; "
            "print(sorted(m for m in ('transformers', 'lightning', 'pytorch_lightning', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "[]"


def test_hf_callback_sets_should_save_on_request_and_acknowledges_after_the_save(tmp_path, monkeypatch):
    fake = types.ModuleType("transformers")

    class TrainerCallback:  # the real base class only provides no-op hooks
        pass

    fake.TrainerCallback = TrainerCallback
    monkeypatch.setitem(sys.modules, "transformers", fake)
    hf = _fresh("costctl.integrations.hf", "CostctlCheckpointCallback", monkeypatch)
    request = tmp_path / "request"
    monkeypatch.setenv("COSTCTL_CHECKPOINT_REQUEST", str(request))
    cb = hf.CostctlCheckpointCallback(check_every_n_steps=2)
    assert isinstance(cb, TrainerCallback)
    out = tmp_path / "out"
    args, control = SimpleNamespace(device="cpu", output_dir=str(out)), SimpleNamespace(should_save=False)
    cb.on_step_end(args, SimpleNamespace(global_step=2), control)
    assert control.should_save is False
    request.write_text(json.dumps({"requested_at": "2026-06-01T08:00:00+00:00"}))
    cb.on_step_end(args, SimpleNamespace(global_step=3), control)
    assert control.should_save is False  # checked every 2nd step only
    cb.on_step_end(args, SimpleNamespace(global_step=4), control)
    assert control.should_save is True and request.exists()
    before = time.time()
    cp = write_hf_checkpoint(out, 4)  # what Trainer._save_checkpoint wrote, trainer_state.json last
    cb.on_save(args, SimpleNamespace(global_step=4, is_world_process_zero=True), control)  # then on_save
    assert not request.exists()
    record = json.loads((tmp_path / "request.ack.json").read_text())
    assert record["request"] == "2026-06-01T08:00:00+00:00" and record["step"] == 4
    assert record["checkpoint"] == str(cp)
    started = datetime.fromisoformat(record["save_started_at"])
    ended = datetime.fromisoformat(record["save_ended_at"])
    assert started.tzinfo is not None and started.utcoffset() == timedelta(0)
    assert before - 1 <= started.timestamp() <= ended.timestamp()
    # a save of the Trainer's own (save_steps), not asked for: no acknowledgement record, but
    # reported in the saves file (costctl counts it for waste, Young/Daly and --resume)
    (tmp_path / "request.ack.json").unlink()
    saves = tmp_path / "saves.jsonl"
    monkeypatch.setenv("COSTCTL_CHECKPOINT_SAVES", str(saves))
    cb.on_step_end(args, SimpleNamespace(global_step=5), control)
    own = write_hf_checkpoint(out, 5)
    cb.on_save(args, SimpleNamespace(global_step=5), control)
    assert not (tmp_path / "request.ack.json").exists()
    (report,) = [json.loads(line) for line in saves.read_text().splitlines()]
    assert report["checkpoint"] == str(own) and report["step"] == 5 and "request" not in report
    assert datetime.fromisoformat(report["save_started_at"]) <= datetime.fromisoformat(report["save_ended_at"])
    # another rank (not world zero) leaves the acknowledgement to the one that writes trainer_state.json
    request.write_text("{}")
    cb.on_step_end(args, SimpleNamespace(global_step=6), control)
    cb.on_save(args, SimpleNamespace(global_step=6, is_world_process_zero=False), control)
    assert request.exists() and not (tmp_path / "request.ack.json").exists()
    with pytest.raises(ValueError):
        hf.CostctlCheckpointCallback(check_every_n_steps=0)


def test_lightning_callback_saves_on_every_rank_and_acknowledges(tmp_path, monkeypatch):
    lightning = types.ModuleType("lightning")
    pytorch = types.ModuleType("lightning.pytorch")
    callbacks = types.ModuleType("lightning.pytorch.callbacks")

    class Callback:
        pass

    callbacks.Callback = Callback
    for name, mod in (("lightning", lightning), ("lightning.pytorch", pytorch),
                      ("lightning.pytorch.callbacks", callbacks)):
        monkeypatch.setitem(sys.modules, name, mod)
    lt = _fresh("costctl.integrations.lightning", "CostctlCheckpoint", monkeypatch)
    request = tmp_path / "request"
    monkeypatch.setenv("COSTCTL_CHECKPOINT_REQUEST", str(request))

    class Strategy:
        def __init__(self, others: bool) -> None:
            self.others = others  # what the other ranks saw
            self.calls = []

        def reduce_boolean_decision(self, decision: bool, all: bool = True) -> bool:
            self.calls.append((decision, all))
            return decision or self.others if not all else decision and self.others

    saved = []
    trainer = SimpleNamespace(global_step=10, current_epoch=2, default_root_dir=str(tmp_path / "root"),
                              checkpoint_callback=None, strategy=Strategy(others=False),
                              save_checkpoint=lambda path: saved.append(path))
    cb = lt.CostctlCheckpoint()
    assert isinstance(cb, Callback)
    cb.on_train_batch_end(trainer, None, None, None, 0)
    assert saved == [] and trainer.strategy.calls == [(False, False)]
    # this rank did not see the file, another rank did: every rank saves
    trainer.strategy = Strategy(others=True)
    cb.on_train_batch_end(trainer, None, None, None, 0)
    assert saved == [str(tmp_path / "root" / "checkpoints" / "costctl-epoch=2-step=10.ckpt")]
    # with a ModelCheckpoint directory, that one is used; the request is acknowledged
    request.write_text("{}")
    trainer.checkpoint_callback = SimpleNamespace(dirpath=str(tmp_path / "mc"))
    trainer.strategy = Strategy(others=False)
    cb.on_train_batch_end(trainer, None, None, None, 0)
    assert saved[-1] == str(tmp_path / "mc" / "costctl-epoch=2-step=10.ckpt") and not request.exists()

    class OldStrategy:  # older Lightning: reduce_boolean_decision(decision) has no `all` (it ANDs)
        root_device = "cpu"

        def reduce_boolean_decision(self, decision: bool) -> bool:
            return decision

    trainer.strategy = OldStrategy()
    trainer.global_step = 11
    cb.on_train_batch_end(trainer, None, None, None, 0)
    assert len(saved) == 2  # no request: nothing saved (no process group: the local answer)
    request.write_text("{}")
    cb.on_train_batch_end(trainer, None, None, None, 0)
    assert saved[-1].endswith("costctl-epoch=2-step=11.ckpt") and not request.exists()


def _lightning(monkeypatch):
    lightning = types.ModuleType("lightning")
    pytorch = types.ModuleType("lightning.pytorch")
    callbacks = types.ModuleType("lightning.pytorch.callbacks")
    callbacks.Callback = type("Callback", (), {})
    for name, mod in (("lightning", lightning), ("lightning.pytorch", pytorch),
                      ("lightning.pytorch.callbacks", callbacks)):
        monkeypatch.setitem(sys.modules, name, mod)
    return _fresh("costctl.integrations.lightning", "CostctlCheckpoint", monkeypatch)


class AsyncCheckpointIO:
    """Lightning's AsyncCheckpointIO in miniature: the save goes to a one-thread executor."""

    def __init__(self, gate: threading.Event, fail: bool = False) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1)
        self._error = None
        self.gate, self.fail = gate, fail

    def save_checkpoint(self, path: str) -> None:
        def write() -> None:
            self.gate.wait(10)
            try:
                if self.fail:
                    raise OSError("disk full")
                write_torch_zip(Path(path))
            except BaseException as exc:
                self._error = exc

        self._executor.submit(write)


class Strategy:
    def __init__(self, io=None) -> None:
        self.checkpoint_io = io

    def reduce_boolean_decision(self, decision: bool, all: bool = True) -> bool:
        return decision


def _trainer(tmp_path, io, step=10):
    strategy = Strategy(io)
    return SimpleNamespace(global_step=step, current_epoch=1, default_root_dir=str(tmp_path), checkpoint_callback=None,
                           is_global_zero=True, strategy=strategy,
                           save_checkpoint=lambda path: (Path(path).parent.mkdir(parents=True, exist_ok=True),
                                                         io.save_checkpoint(path) if io else write_torch_zip(Path(path))))


def test_lightning_acknowledges_with_its_record_after_the_file_is_closed(tmp_path, monkeypatch):
    lt = _lightning(monkeypatch)
    request = tmp_path / "request"
    ack = tmp_path / "request.ack.json"
    monkeypatch.setenv("COSTCTL_CHECKPOINT_REQUEST", str(request))
    request.write_text(json.dumps({"requested_at": "2026-06-01T08:00:00+00:00"}))
    cb = lt.CostctlCheckpoint(dirpath=tmp_path / "ckpt")
    cb.on_train_batch_end(_trainer(tmp_path, None), None, None, None, 0)  # the default, synchronous CheckpointIO
    record = json.loads(ack.read_text())
    assert cb.acknowledged_by == ["sync"] and record["request"] == "2026-06-01T08:00:00+00:00"
    assert record["checkpoint"] == str(tmp_path / "ckpt" / "costctl-epoch=1-step=10.ckpt") and record["step"] == 10
    assert datetime.fromisoformat(record["save_started_at"]) <= datetime.fromisoformat(record["save_ended_at"])

    # asynchronous: the acknowledgement waits behind the save on the CheckpointIO's own thread
    ack.unlink()
    request.write_text(json.dumps({"requested_at": "2026-06-01T09:00:00+00:00"}))
    gate = threading.Event()
    io = AsyncCheckpointIO(gate)
    trainer = _trainer(tmp_path, io, step=20)
    cb.on_train_batch_end(trainer, None, None, None, 0)
    path = tmp_path / "ckpt" / "costctl-epoch=1-step=20.ckpt"
    assert cb.acknowledged_by[-1] == "executor" and not path.exists()
    assert not ack.exists() and request.exists()  # not yet: the file is not written
    trainer.global_step = 21
    cb.on_train_batch_end(trainer, None, None, None, 0)  # the same request: no second save
    assert len(cb.saved) == 2
    gate.set()
    io._executor.shutdown(wait=True)  # what Lightning's teardown does
    record = json.loads(ack.read_text())
    assert record["checkpoint"] == str(path) and record["request"] == "2026-06-01T09:00:00+00:00"
    assert not request.exists()
    assert datetime.fromisoformat(record["save_ended_at"]).timestamp() >= path.stat().st_mtime - 0.01

    # a failed async save is never acknowledged (costctl then times out)
    ack.unlink()
    request.write_text(json.dumps({"requested_at": "2026-06-01T10:00:00+00:00"}))
    gate2 = threading.Event()
    gate2.set()
    bad = AsyncCheckpointIO(gate2, fail=True)
    cb.on_train_batch_end(_trainer(tmp_path, bad, step=30), None, None, None, 0)
    bad._executor.shutdown(wait=True)
    assert not ack.exists() and request.exists()


def test_an_async_checkpoint_io_without_an_executor_is_acknowledged_once_the_file_is_whole(tmp_path, monkeypatch):
    lt = _lightning(monkeypatch)
    request = tmp_path / "request"
    ack = tmp_path / "request.ack.json"
    monkeypatch.setenv("COSTCTL_CHECKPOINT_REQUEST", str(request))
    request.write_text(json.dumps({"requested_at": "2026-06-01T08:00:00+00:00"}))
    gate = threading.Event()

    class AsyncCheckpointIO:  # an older shape: its own thread, no executor to queue on
        _error = None

        def save_checkpoint(self, path: str) -> None:
            def write() -> None:
                gate.wait(10)
                whole = write_torch_zip(tmp_path / "staging.bin").read_bytes()
                with open(path, "wb") as fh:
                    fh.write(whole[:100])  # the writer is half-way
                    fh.flush()
                    time.sleep(0.3)
                    fh.write(whole[100:])

            threading.Thread(target=write, daemon=True).start()

    cb = lt.CostctlCheckpoint(dirpath=tmp_path / "ckpt")
    cb.on_train_batch_end(_trainer(tmp_path, AsyncCheckpointIO()), None, None, None, 0)
    assert cb.acknowledged_by == ["watcher"]
    path = tmp_path / "ckpt" / "costctl-epoch=1-step=10.ckpt"
    gate.set()
    deadline = time.monotonic() + 20
    while not ack.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    record = json.loads(ack.read_text())
    assert record["checkpoint"] == str(path)
    # acknowledged after the last write (the half-way file sat unchanged for 0.3 s: not taken)
    assert datetime.fromisoformat(record["save_ended_at"]).timestamp() >= path.stat().st_mtime - 0.01


RANK = textwrap.dedent("""
    import os, sys
    sys.path.insert(0, {repo!r})
    import torch.distributed as dist
    rank = int(sys.argv[1])
    dist.init_process_group("gloo", init_method="file://" + {store!r}, rank=rank, world_size=2)
    from costctl import job
    from costctl.integrations._dist import any_rank
    print(int(job.checkpoint_requested()), int(any_rank(job.checkpoint_requested())))
    dist.destroy_process_group()
""")


def test_all_ranks_agree_when_only_one_sees_the_request(tmp_path):
    pytest.importorskip("torch")
    script = tmp_path / "rank.py"
    script.write_text(RANK.format(repo=str(REPO), store=str(tmp_path / "store")))
    (tmp_path / "request").write_text("{}")  # only rank 0 is pointed at an existing request file
    procs = [subprocess.Popen([sys.executable, str(script), str(r)], stdout=subprocess.PIPE, text=True,
                              env={"COSTCTL_CHECKPOINT_REQUEST": str(tmp_path / ("request" if r == 0 else "none")),
                                   "PATH": "/usr/bin:/bin"}) for r in (0, 1)]
    outs = [p.communicate(timeout=60)[0].split() for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    assert outs == [["1", "1"], ["0", "1"]]  # rank 1 saw nothing itself but saves with rank 0
