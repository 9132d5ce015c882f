"""``costctl watch --loss NAME`` with a NAME the output does not show: said once, while the job
runs, as soon as the other train series have shown ``MISSING_AFTER_POINTS`` points, in
analyze's words, naming the series it has; the watch goes on and a series that appears later
is watched from its first point."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from costctl.progress.output import OutputProgress
from costctl.progress.series import MISSING_AFTER_POINTS
from helpers import REPO, costctl_cmd, costctl_env

GAN = "[Epoch 0/200] [Batch {i}/938] [D loss: 0.69] [G loss: 0.70]\n"
SAID = "--loss 'Gloss': no such train loss series in the log (it has 'D loss', 'G loss')"


def test_the_output_reader_flags_a_missing_loss_name_after_enough_points() -> None:
    out = OutputProgress(loss="Gloss")
    lines_needed = MISSING_AFTER_POINTS // 2  # two train series per line
    for i in range(lines_needed - 1):
        out.parse("stdout", GAN.format(i=i).encode(), None)
    assert out.primary.missing is None  # not yet: 18 points
    out.parse("stdout", GAN.format(i=99).encode(), None)
    assert out.primary.missing == SAID
    wanted = OutputProgress(loss="G loss")
    for i in range(3 * lines_needed):
        wanted.parse("stdout", GAN.format(i=i).encode(), None)
    assert wanted.primary.missing is None  # the named one is there: nothing to say


JOB = r"""
import os, sys, time
go = sys.argv[1]
for i in range(15):
    print(f"[Epoch 0/200] [Batch {i}/938] [D loss: 0.69] [G loss: 0.70]", flush=True)
deadline = time.monotonic() + 60
while not os.path.exists(go) and time.monotonic() < deadline:  # the test lets it end
    time.sleep(0.05)
sys.exit(0 if os.path.exists(go) else 3)
"""


def test_a_real_watch_says_a_misspelled_loss_name_while_the_job_runs(tmp_path: Path) -> None:
    go = tmp_path / "go"
    proc = subprocess.Popen(
        costctl_cmd("watch", "--dry-run", "--on-exit", "leave", "--no-pty", "--loss", "Gloss", "--",
                    sys.executable, "-c", JOB, str(go)),
        env=costctl_env(tmp_path / "data"), cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True)
    seen: list[str] = []
    try:
        assert proc.stderr is not None
        for line in proc.stderr:  # the job waits for `go`: a line said now was said while it ran
            seen.append(line)
            if SAID in line:
                break
        go.touch()
        rest = proc.stderr.read()
        assert proc.wait(timeout=60) == 0, "".join(seen) + rest
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = "".join(seen) + rest
    said = [ln for ln in err.splitlines() if "--loss 'Gloss'" in ln]
    assert said == [f"costctl: {SAID}, after {MISSING_AFTER_POINTS} points of those in the job's output: the loss "
                    "policies watch no train loss until it appears (the watch goes on)"], err[-2000:]
