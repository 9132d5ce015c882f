"""Format checks of checkpoints on disk (costctl.checkpoint_integrity), on real files written
by hand: safetensors headers against file sizes, torch zip end records, Hugging Face
directories (trainer_state.json and whole weights, shards), markers; no torch needed."""

from __future__ import annotations

import json
import struct

from costctl.checkpoint_integrity import MARKER, check_checkpoint, is_complete, known_format, marker_path
from checkpoint_files import safetensors_bytes, truncate, write_hf_checkpoint, write_safetensors, write_torch_zip


def test_a_whole_safetensors_file_passes_and_a_cut_one_names_both_sizes(tmp_path):
    f = write_safetensors(tmp_path / "model.safetensors", {"w": 1000, "b": 10})
    size = f.stat().st_size
    ok, why = check_checkpoint(f)
    assert ok and "2 tensors" in why
    (n,) = struct.unpack("<Q", f.read_bytes()[:8])
    assert size == 8 + n + 4 * 1010  # the file as the format says
    truncate(f, 4096)
    ok, why = check_checkpoint(f)
    assert not ok and why == f"model.safetensors truncated: header says {size:,} bytes, file has 4,096"
    truncate(f, 20)  # cut inside the header itself
    ok, why = check_checkpoint(f)
    assert not ok and why.startswith("model.safetensors truncated: header says") and "file has 20" in why
    truncate(f, 3)
    assert check_checkpoint(f) == (False, "model.safetensors truncated: 3 bytes, shorter than its 8-byte header length")


def test_a_safetensors_header_that_is_not_json_or_lies_fails(tmp_path):
    f = tmp_path / "a.safetensors"
    f.write_bytes(struct.pack("<Q", 4) + b"nope" + b"\0" * 16)
    assert check_checkpoint(f) == (False, "a.safetensors has a header that is not JSON")
    head = json.dumps({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, "16"]}}).encode()
    f.write_bytes(struct.pack("<Q", len(head)) + head + b"\0" * 16)
    ok, why = check_checkpoint(f)
    assert not ok and "bad entry for tensor 'w'" in why
    f.write_bytes(struct.pack("<Q", 2**40) + b"{}")
    ok, why = check_checkpoint(f)
    assert not ok and "implausible" in why


def test_torch_zip_archives_pass_whole_and_fail_cut(tmp_path):
    f = write_torch_zip(tmp_path / "epoch-3.pt", payload=20000)
    ok, why = check_checkpoint(f)
    assert ok and "zip archive, 3 members" in why
    size = f.stat().st_size
    truncate(f, size - 10)  # the end-of-central-directory record is written last: now it is gone
    ok, why = check_checkpoint(f)
    assert not ok and why.startswith("epoch-3.pt truncated or corrupt")
    g = write_torch_zip(tmp_path / "last.ckpt")
    truncate(g, 100)
    assert not check_checkpoint(g)[0]
    empty = tmp_path / "empty.pt"
    empty.write_bytes(b"")
    assert check_checkpoint(empty) == (False, "empty.pt is empty (0 bytes)")
    pickle = tmp_path / "notzip.bin"
    pickle.write_bytes(b"\x80\x04junk")
    ok, why = check_checkpoint(pickle)
    assert not ok and "not a torch zip archive" in why
    legacy = tmp_path / "legacy.pt"
    legacy.write_bytes(b"\x80\x02\x8a\x0a" + (0x1950A86A20F9469CFC6C).to_bytes(10, "little") + b".rest")
    assert check_checkpoint(legacy)[0]


def test_hugging_face_directories_need_trainer_state_and_whole_weights(tmp_path):
    whole = write_hf_checkpoint(tmp_path, 30)
    ok, why = check_checkpoint(whole)
    assert ok and "trainer_state.json" in why
    only_config = write_hf_checkpoint(tmp_path, 40, weights=False, state=False)
    ok, why = check_checkpoint(only_config)
    assert not ok and why == "no trainer_state.json (transformers writes it last): has config.json"
    no_weights = write_hf_checkpoint(tmp_path, 50, weights=False)
    ok, why = check_checkpoint(no_weights)
    assert not ok and why.startswith("no weights file")
    cut = write_hf_checkpoint(tmp_path, 60)
    truncate(cut / "model.safetensors", 100)
    ok, why = check_checkpoint(cut)
    assert not ok and why.startswith("model.safetensors truncated")
    cut_optimizer = write_hf_checkpoint(tmp_path, 70)
    truncate(cut_optimizer / "optimizer.pt", 50)
    ok, why = check_checkpoint(cut_optimizer)
    assert not ok and why.startswith("optimizer.pt truncated")
    bad_state = write_hf_checkpoint(tmp_path, 80)
    (bad_state / "trainer_state.json").write_text('{"global_step": 8')
    assert check_checkpoint(bad_state) == (False, "trainer_state.json is not valid JSON (cut short?)")


def test_sharded_weights_need_every_listed_shard_whole(tmp_path):
    d = write_hf_checkpoint(tmp_path, 10, weights=False)
    shards = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    (d / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {}, "weight_map": {"a.weight": shards[0], "b.weight": shards[1], "a.bias": shards[0]}}))
    write_safetensors(d / shards[0])
    ok, why = check_checkpoint(d)
    assert not ok and why == f"model.safetensors.index.json lists 2 shards, missing: {shards[1]}"
    (d / shards[1]).write_bytes(safetensors_bytes()[:50])
    ok, why = check_checkpoint(d)
    assert not ok and why.startswith(f"{shards[1]} truncated")
    write_safetensors(d / shards[1])
    ok, why = check_checkpoint(d)
    assert ok and "2 weights file(s)" in why


def test_markers_unknown_formats_and_the_stricter_rule_for_new_checkpoints(tmp_path):
    arrays = tmp_path / "state.npz"
    arrays.write_bytes(b"some bytes")
    assert check_checkpoint(arrays)[0]  # for --resume: non-empty is all that can be told
    ok, why = is_complete(arrays)
    assert not ok and "no format check" in why  # to call a new save done: never by itself
    assert not known_format(arrays)
    marker_path(arrays).write_text("")
    assert marker_path(arrays).name == f".state.npz{MARKER}"
    assert is_complete(arrays)[0]
    custom = tmp_path / "run-7"
    custom.mkdir()
    (custom / "params.msgpack").write_bytes(b"x")
    assert check_checkpoint(custom)[0] and not is_complete(custom)[0]
    (custom / MARKER).write_text("")
    assert is_complete(custom) == (True, f"marked complete ({MARKER})")
    empty_dir = tmp_path / "nothing"
    empty_dir.mkdir()
    assert check_checkpoint(empty_dir) == (False, "empty directory")
    assert check_checkpoint(tmp_path / "gone.pt") == (False, "missing")
    hf = write_hf_checkpoint(tmp_path, 5)
    assert known_format(hf) and is_complete(hf)[0]
