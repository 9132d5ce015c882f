"""costctl watch keeps a bounded, exact progress record of a chatty job (real child, real
SQLite ledger): the store's rows and buckets add up to every line the job printed."""

from __future__ import annotations

import sys

from sqlalchemy import create_engine, func, select
from sqlalchemy.orm import Session

from costctl.ledger.progress_store import series_summaries
from costctl.ledger.schema import Progress, ProgressBucket
from helpers import costctl_env, run_costctl

LINES = 5_000


def test_a_chatty_job_leaves_a_bounded_exact_progress_record(tmp_path):
    env = costctl_env(tmp_path)
    job = (f"for i in range({LINES}):\n"
           "    print(f'step {i} loss: {2.0 + ((i * 7919) % 1000) / 1000:.4f}')\n")
    proc = run_costctl("watch", "--quiet", "--on-exit", "leave", "--", sys.executable, "-c", job, env=env)
    assert proc.returncode == 0, proc.stderr
    values = [2.0 + ((i * 7919) % 1000) / 1000 for i in range(LINES)]
    with Session(create_engine(f"sqlite:///{tmp_path / 'costctl.db'}")) as s:
        rows = s.scalar(select(func.count(Progress.id)))
        buckets = s.scalar(select(func.count(ProgressBucket.id)))
        run_id = s.scalar(select(Progress.run_id).limit(1))
        summary = series_summaries(s, run_id)[("train", "loss")]
    # the job ran for seconds: at most two 60 s intervals, 2 * 20 + 2 rows each
    assert rows + buckets <= 2 * 42 and buckets >= 1
    assert summary.count == LINES and summary.rows == rows
    assert summary.min == round(min(values), 4) and summary.max == round(max(values), 4)
    assert summary.first.value == values[0] and summary.last.value == round(values[-1], 4)
