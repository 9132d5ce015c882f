"""Is a checkpoint on disk whole? Cheap format checks, no torch import.

:func:`check_checkpoint` answers ``(ok, reason)`` for a file or a directory:

* **safetensors** (``*.safetensors``): an 8-byte little-endian header length ``N``, then ``N``
  bytes of JSON mapping tensor names to ``{"dtype", "shape", "data_offsets": [begin, end]}``
  (offsets relative to the byte after the header). Whole when ``8 + N <= size``, the header
  parses and every tensor's ``end`` lies inside the file (``8 + N + end <= size``).
* **torch files** (``*.pt``, ``*.pth``, ``*.bin``, ``*.ckpt``; what ``torch.save`` writes,
  Lightning's ``.ckpt`` included): a zip archive. Whole when the end-of-central-directory
  record is there and :class:`zipfile.ZipFile` opens it (the record is written last, so a cut
  file has none) and every member lies inside the file. A legacy (non-zip) ``torch.save``
  file is accepted from its pickle magic number alone.
* **Hugging Face checkpoint directories** (``checkpoint-N/``: any of ``trainer_state.json``,
  ``config.json``, ``model*.safetensors``, ``pytorch_model*.bin``, ``adapter_model.*``):
  whole when ``trainer_state.json`` parses (transformers writes it last in
  ``Trainer._save_checkpoint``), a weights file is present — ``model.safetensors``,
  ``pytorch_model.bin``, ``adapter_model.safetensors``/``.bin``, or a sharded
  ``*.index.json`` whose ``weight_map`` names shards that all exist — and every weights or
  torch file in it passes the checks above.
* **Other directories**: whole when not empty and every file of a known format in them passes.
* **Other files**: whole when not empty (no format to check).

Only regular files and directories are looked at: a named pipe (FIFO), a socket or a device
node is never opened (opening a FIFO blocks until a writer comes, ignoring signals) and is
reported as skipped (:func:`special_kind`), at the top level and inside a checkpoint directory.

An explicit marker makes any checkpoint complete: ``<dir>/.costctl-complete`` for a directory,
``.<name>.costctl-complete`` beside a file (both hidden, so never taken for checkpoints).

:func:`is_complete` is the stricter rule costctl uses to call a *new* checkpoint saved without
the job's acknowledgement: a marker, or a known format (safetensors, torch zip, HF directory)
that passes. An unknown format is never complete by itself, however long it stays unchanged.
"""

from __future__ import annotations

import json
import os
import stat
import struct
import zipfile
from pathlib import Path

__all__ = ["MARKER", "check_checkpoint", "is_complete", "known_format", "marker_path", "special_kind"]

#: Name of the explicit "this checkpoint is complete" marker inside a checkpoint directory.
MARKER = ".costctl-complete"
#: File name endings checked as torch (zip) archives.
TORCH_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt")
#: A safetensors header larger than this is taken as garbage, not read (bytes).
_MAX_HEADER = 100 * 1024 * 1024
#: The first bytes of a legacy (non-zip) torch.save file: pickle protocol 2, then the magic number.
_LEGACY_TORCH = b"\x80\x02\x8a\x0a" + (0x1950A86A20F9469CFC6C).to_bytes(10, "little")
_HF_SIGNS = ("trainer_state.json", "config.json", "model.safetensors", "pytorch_model.bin",
             "adapter_model.safetensors", "adapter_model.bin", "model.safetensors.index.json",
             "pytorch_model.bin.index.json", "training_args.bin")
_HF_WEIGHTS = ("model.safetensors", "pytorch_model.bin", "adapter_model.safetensors", "adapter_model.bin")
_HF_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")


def marker_path(path: str | os.PathLike[str]) -> Path:
    """Where the explicit completeness marker of checkpoint ``path`` goes (see the module docstring)."""
    p = Path(path)
    if p.is_dir():
        return p / MARKER
    return p.with_name(f".{p.name}{MARKER}")


def _n(value: int) -> str:
    return f"{value:,}"


_SPECIAL = ((stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISSOCK, "a socket"),
            (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def special_kind(path: str | os.PathLike[str]) -> str | None:
    """What ``path`` is when it is neither a regular file nor a directory (``"a named pipe
    (FIFO)"``, ``"a socket"``, a device), from ``stat`` (a symlink is followed; nothing is
    opened); None for a regular file, a directory, or a path that cannot be stat'ed."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    return next((what for test, what in _SPECIAL if test(mode)), "not a regular file")


def _not_regular(path: Path) -> str | None:
    """The skip reason for a path that is not a regular file (never opened), else None."""
    kind = special_kind(path)
    if kind is None and path.is_dir():
        kind = "a directory"
    return None if kind is None else f"{path.name} is {kind}, not a regular file: not opened"


def _read_text(path: Path) -> str:
    """A regular file's text; OSError for anything else (a FIFO is never opened)."""
    why = _not_regular(path)
    if why is not None:
        raise OSError(why)
    return path.read_text()


def check_safetensors(path: Path) -> tuple[bool, str]:
    """The safetensors header check (module docstring); ``reason`` names the file."""
    name = path.name
    if (why := _not_regular(path)) is not None:
        return False, why
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            head = fh.read(8)
            if len(head) < 8:
                return False, f"{name} truncated: {_n(size)} bytes, shorter than its 8-byte header length"
            (n,) = struct.unpack("<Q", head)
            if n > _MAX_HEADER:
                return False, f"{name} is not safetensors: header length {_n(n)} bytes is implausible"
            if 8 + n > size:
                return False, f"{name} truncated: header says {_n(8 + n)}+ bytes, file has {_n(size)}"
            raw = fh.read(n)
    except OSError as exc:
        return False, f"{name} unreadable: {exc.strerror or exc}"
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return False, f"{name} has a header that is not JSON"
    if not isinstance(header, dict):
        return False, f"{name} has a header that is not a JSON object"
    end = 0
    for key, info in header.items():
        if key == "__metadata__":
            continue
        offsets = info.get("data_offsets") if isinstance(info, dict) else None
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) for o in offsets)
                and 0 <= offsets[0] <= offsets[1]):
            return False, f"{name} has a bad entry for tensor {key!r} in its header"
        end = max(end, offsets[1])
    need = 8 + n + end
    if need > size:
        return False, f"{name} truncated: header says {_n(need)} bytes, file has {_n(size)}"
    return True, f"{name}: {len(header) - ('__metadata__' in header)} tensors, {_n(size)} bytes"


def check_torch(path: Path) -> tuple[bool, str]:
    """The torch-archive check (module docstring); ``reason`` names the file."""
    name = path.name
    if (why := _not_regular(path)) is not None:
        return False, why
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            start = fh.read(len(_LEGACY_TORCH))
    except OSError as exc:
        return False, f"{name} unreadable: {exc.strerror or exc}"
    if size == 0:
        return False, f"{name} is empty (0 bytes)"
    if start == _LEGACY_TORCH:
        return True, f"{name}: legacy torch.save format (only its header checked)"
    if not start.startswith(b"PK"):
        return False, f"{name} is not a torch zip archive (it starts with {start[:4]!r})"
    try:
        with zipfile.ZipFile(path) as zf:
            infos = zf.infolist()
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        return False, f"{name} truncated or corrupt ({_n(size)} bytes): {exc}"
    for info in infos:
        if info.header_offset + info.compress_size > size:
            return False, f"{name} truncated: member {info.filename} runs past the end ({_n(size)} bytes)"
    return True, f"{name}: zip archive, {len(infos)} members, {_n(size)} bytes"


def known_format(path: str | os.PathLike[str]) -> bool:
    """True for a safetensors file, a torch file or a Hugging Face checkpoint directory."""
    p = Path(path)
    if p.is_dir():
        return _is_hf_dir(p)
    return p.name.endswith(".safetensors") or p.name.endswith(TORCH_SUFFIXES)


def _is_hf_dir(p: Path) -> bool:
    return any((p / name).exists() for name in _HF_SIGNS) or any(p.glob("model-*-of-*.safetensors"))


def _check_file(p: Path) -> tuple[bool, str]:
    if (why := _not_regular(p)) is not None:
        return False, why
    if p.name.endswith(".safetensors"):
        return check_safetensors(p)
    if p.name.endswith(TORCH_SUFFIXES):
        return check_torch(p)
    try:
        size = p.stat().st_size
    except OSError as exc:
        return False, f"{p.name} unreadable: {exc.strerror or exc}"
    if size == 0:
        return False, f"{p.name} is empty (0 bytes)"
    return True, f"{p.name}: {_n(size)} bytes (no format check for this kind of file)"


def _check_hf_dir(p: Path) -> tuple[bool, str]:
    state = p / "trainer_state.json"
    if not state.exists():
        present = ", ".join(sorted(e.name for e in p.iterdir())) or "nothing"
        return False, f"no trainer_state.json (transformers writes it last): has {present}"
    try:
        json.loads(_read_text(state))
    except OSError as exc:
        return False, f"trainer_state.json unreadable: {exc.strerror or exc}"
    except (UnicodeDecodeError, json.JSONDecodeError):
        return False, "trainer_state.json is not valid JSON (cut short?)"
    weights = [p / name for name in _HF_WEIGHTS if (p / name).exists()]
    for index_name in _HF_INDEXES:
        index = p / index_name
        if not index.exists():
            continue
        try:
            shards = sorted(set(json.loads(_read_text(index))["weight_map"].values()))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, AttributeError):
            return False, f"{index_name} is not a valid shard index"
        missing = [s for s in shards if not (p / s).exists()]
        if missing:
            return False, f"{index_name} lists {len(shards)} shards, missing: {', '.join(missing)}"
        weights += [p / s for s in shards]
    if not weights:
        return False, "no weights file (model.safetensors, pytorch_model.bin, adapter_model.* or a shard index)"
    checked = {w.name for w in weights}
    others = [e for e in sorted(p.iterdir()) if e.name not in checked
              and (e.name.endswith(".safetensors") or e.name.endswith(TORCH_SUFFIXES))
              and (e.is_file() or special_kind(e) is not None)]
    for f in [*weights, *others]:
        ok, why = _check_file(f)
        if not ok:
            return False, why
    return True, f"Hugging Face checkpoint: trainer_state.json and {len(weights)} weights file(s) whole"


def check_checkpoint(path: str | os.PathLike[str]) -> tuple[bool, str]:
    """Whether the checkpoint at ``path`` (file or directory) is whole; see the module docstring.

    Returns:
        ``(ok, reason)``: ``reason`` is one line saying what was checked, or what is wrong
        (e.g. ``"model.safetensors truncated: header says 1,234,567 bytes, file has 4,096"``).
        Never raises for a missing or unreadable path (that is ``(False, reason)``).
    """
    p = Path(path)
    if not p.exists():
        return False, "missing"
    if (kind := special_kind(p)) is not None:
        return False, f"{kind}, not a regular file or a directory: not opened"
    if p.is_dir():
        if (p / MARKER).exists():
            return True, f"marked complete ({MARKER})"
        if _is_hf_dir(p):
            return _check_hf_dir(p)
        entries = [e for e in sorted(p.rglob("*")) if not e.name.startswith(".")]
        files = [e for e in entries if e.is_file()]
        special = [e for e in entries if special_kind(e) is not None]
        if special:
            return False, f"{special[0].relative_to(p)} is {special_kind(special[0])}, not a regular file: not opened"
        if not files:
            return False, "empty directory"
        for f in files:
            if f.name.endswith(".safetensors") or f.name.endswith(TORCH_SUFFIXES):
                ok, why = _check_file(f)
                if not ok:
                    return False, why
        return True, f"directory of {len(files)} files"
    if marker_path(p).exists():
        return True, f"marked complete ({marker_path(p).name})"
    return _check_file(p)


def is_complete(path: str | os.PathLike[str]) -> tuple[bool, str]:
    """The rule for calling a new checkpoint saved without the job's acknowledgement: a
    marker, or a known format that passes :func:`check_checkpoint`. ``(ok, reason)``."""
    p = Path(path)
    if marker_path(p).exists():
        return True, f"marked complete ({marker_path(p).name})"
    if not known_format(p):
        return False, f"{p.name}: no format check for it and no {MARKER} marker (waiting for the acknowledgement)"
    return check_checkpoint(p)
