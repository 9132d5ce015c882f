"""Real checkpoint files for the tests, written by hand: a safetensors file (8-byte
little-endian header length, JSON header, tensor bytes), a torch-style zip archive (what
``torch.save`` writes: ``<name>/data.pkl`` and ``<name>/data/<n>`` members), a Hugging Face
``checkpoint-N/`` directory, and truncation."""

from __future__ import annotations

import json
import os
import struct
import zipfile
from pathlib import Path


def safetensors_bytes(tensors: dict[str, int] | None = None) -> bytes:
    """A safetensors file with float32 1-D tensors of the given element counts."""
    tensors = tensors or {"linear.weight": 64, "linear.bias": 8}
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    data = b""
    for name, count in tensors.items():
        raw = struct.pack(f"<{count}f", *(float(i) for i in range(count)))
        header[name] = {"dtype": "F32", "shape": [count], "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    head = json.dumps(header).encode()
    return struct.pack("<Q", len(head)) + head + data


def write_safetensors(path: Path, tensors: dict[str, int] | None = None) -> Path:
    path.write_bytes(safetensors_bytes(tensors))
    return path


def write_torch_zip(path: Path, payload: int = 4096) -> Path:
    """A zip laid out like ``torch.save``'s (stored, not compressed)."""
    stem = path.stem
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as zf:
        zf.writestr(f"{stem}/data.pkl", b"\x80\x02}q\x00.")
        zf.writestr(f"{stem}/data/0", os.urandom(payload))
        zf.writestr(f"{stem}/version", b"3\n")
    return path


def truncate(path: Path, keep: int) -> Path:
    """Cut ``path`` to its first ``keep`` bytes (a save killed part-way)."""
    with open(path, "r+b") as fh:
        fh.truncate(keep)
    return path


def write_hf_checkpoint(directory: Path, step: int, *, weights: bool = True, state: bool = True) -> Path:
    """``checkpoint-<step>/`` as the Trainer writes it: config.json, model.safetensors,
    optimizer.pt, then trainer_state.json last."""
    d = directory / f"checkpoint-{step}"
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_layer": 1}))
    if weights:
        write_safetensors(d / "model.safetensors")
        write_torch_zip(d / "optimizer.pt")
    if state:
        (d / "trainer_state.json").write_text(json.dumps({"global_step": step, "log_history": []}))
    return d
