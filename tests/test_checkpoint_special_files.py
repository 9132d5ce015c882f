"""A named pipe (FIFO), a socket or a device node among the checkpoints is never opened (opening
a FIFO blocks until a writer comes, and the blocked watch ignores SIGTERM while holding the
chain lock): the integrity checks look only at regular files and directories and name what they
skipped. The checks run in a child with a timeout, so a regression fails instead of hanging."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from checkpoint_files import write_hf_checkpoint, write_torch_zip
from helpers import costctl_env, run_costctl

CHECK = """
import json, sys
from costctl.checkpoint_integrity import check_checkpoint, is_complete
print(json.dumps([[*check_checkpoint(p), *is_complete(p)] for p in sys.argv[1:]]))
"""


def _check(*paths: Path) -> list[list]:
    proc = subprocess.run([sys.executable, "-c", CHECK, *map(str, paths)], capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr.decode()
    return json.loads(proc.stdout)


def test_a_fifo_a_socket_and_special_files_inside_checkpoints_are_skipped_unopened(tmp_path: Path) -> None:
    fifo = tmp_path / "step-99999.pt"
    os.mkfifo(fifo)
    sock_path = tmp_path / "s.safetensors"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(sock_path))
    hf = write_hf_checkpoint(tmp_path / "out", 10)
    (hf / "model.safetensors").unlink()
    os.mkfifo(hf / "model.safetensors")  # the weights a FIFO
    hf2 = write_hf_checkpoint(tmp_path / "out", 20)
    (hf2 / "trainer_state.json").unlink()
    os.mkfifo(hf2 / "trainer_state.json")
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "a.txt").write_text("x")
    os.mkfifo(plain / "b.npz")
    try:
        got = _check(fifo, sock_path, hf, hf2, plain)
    finally:
        sock.close()
    assert got[0][:2] == [False, "a named pipe (FIFO), not a regular file or a directory: not opened"]
    assert got[1][:2] == [False, "a socket, not a regular file or a directory: not opened"]
    assert got[2][:2] == [False, "model.safetensors is a named pipe (FIFO), not a regular file: not opened"]
    assert got[3][:2] == [False, "trainer_state.json unreadable: trainer_state.json is a named pipe (FIFO), "
                                 "not a regular file: not opened"]
    assert got[4][:2] == [False, "b.npz is a named pipe (FIFO), not a regular file: not opened"]
    assert all(row[2] is False for row in got)  # never complete by the stricter rule either


def test_resume_passes_over_a_fifo_in_the_checkpoint_folder_and_names_it(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    good = write_torch_zip(ckpt / "step-00010.pt", 5000)
    t = time.time() - 300
    os.utime(good, (t, t))
    fifo = ckpt / "step-99999.pt"
    os.mkfifo(fifo)
    cfg = tmp_path / "costctl.toml"
    cfg.write_text(f'[instance]\nprice_per_hour = "1.0"\n[checkpoint]\npath = "{ckpt}/*.pt"\n')
    cmd = [sys.executable, "-c", "import os; print('resumed from', os.environ['COSTCTL_RESUME_FROM'])"]
    proc = run_costctl("watch", "--config", str(cfg), "--on-exit", "leave", "--resume", "--", *cmd,
                       env=costctl_env(tmp_path / "data"), timeout=60)
    out, err = proc.stdout.decode(), proc.stderr.decode()
    assert proc.returncode == 0, err
    assert f"resumed from {good}" in out
    skips = [ln for ln in err.splitlines() if ln.startswith("costctl: skipped checkpoint")]
    assert skips == [f"costctl: skipped checkpoint {fifo} (a named pipe (FIFO), not a regular file or a "
                     "directory: not opened)"]
