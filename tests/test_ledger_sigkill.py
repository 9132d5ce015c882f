"""A process that loops accrue() is killed with SIGKILL: nothing is lost up to its last accrual,
and a new run on the same instance never charges a second twice."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from decimal import Decimal

from sqlalchemy import select

from costctl.ledger import Ledger
from costctl.ledger.schema import Charge, Run

T0 = datetime(2026, 5, 1, 0, 0, tzinfo=timezone.utc)
RATE = Decimal("1.37")

# Accrues one simulated second per iteration, forever, printing each committed second.
CHILD = """
import sys
from datetime import datetime, timedelta
from decimal import Decimal
from costctl.ledger import Ledger

url, run_id, t0, rate = sys.argv[1], sys.argv[2], datetime.fromisoformat(sys.argv[3]), Decimal(sys.argv[4])
ledger = Ledger.open(url)
second = 0
while True:
    second += 1
    ledger.accrue(run_id, t0 + timedelta(seconds=second), rate, "USD")
    print(second, flush=True)
"""


def test_sigkilled_accrual_loop_loses_nothing_and_restart_never_double_charges(db_url):
    with Ledger.open(db_url) as ledger:
        pk = ledger.ensure_instance(
            "sim", "sim-kill", gpu="A100", gpu_count=1, billing="on-demand", price_per_hour=RATE, currency="USD"
        )
        killed_run = ledger.start_run(pk, started_at=T0, command=["python", "train.py"], log_path=None, host=None)

    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, db_url, killed_run, T0.isoformat(), str(RATE)],
        stdout=subprocess.PIPE,
        text=True,
    )
    printed = 0
    try:
        assert child.stdout is not None
        for line in child.stdout:
            printed = int(line)
            if printed >= 25:
                break
        assert printed >= 25, "the child stopped accruing before it was killed"
        os.kill(child.pid, signal.SIGKILL)
        # read through the text wrapper: lines the loop above read ahead into its buffer count
        # too (communicate(timeout=...) reads the raw pipe and would miss them)
        rest = child.stdout.read()
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == -signal.SIGKILL
    printed = max([printed] + [int(x) for x in rest.split()])

    with Ledger.open(db_url) as ledger:
        with ledger.session() as s:
            killed = s.get(Run, killed_run)
            before = list(s.scalars(select(Charge).order_by(Charge.start_at)))
        # One extended row from the run's start to its last committed accrual (the kill may
        # land after a commit and before the print, so at most one second past the last print).
        assert [(c.start_at, c.rate_per_hour) for c in before] == [(T0, RATE)]
        charged_to = before[0].end_at
        assert charged_to == killed.last_seen_at, "charges must reach the last accrual"
        assert (charged_to - T0).total_seconds() in (printed, printed + 1)
        assert killed.ended_at is None and killed.status == "running"

        # A new watch on the same instance, whose run starts before the killed one's last charge.
        new_run = ledger.start_run(pk, started_at=T0 + timedelta(seconds=5), command=None, log_path=None, host=None)
        assert ledger.accrue(new_run, charged_to - timedelta(seconds=1), RATE, "USD") == 0
        assert ledger.accrue(new_run, charged_to + timedelta(seconds=30), RATE, "USD") == RATE * 30 / 3600

        with ledger.session() as s:
            after = list(s.scalars(select(Charge).order_by(Charge.start_at)))
        intervals = [(c.start_at, c.end_at) for c in after]
        for (_, end), (start, _) in zip(intervals, intervals[1:]):
            assert start >= end, f"a second was charged twice: {intervals}"
        assert intervals == [(T0, charged_to), (charged_to, charged_to + timedelta(seconds=30))]
        assert ledger.spend(run_id=killed_run) == {"USD": RATE * Decimal(int((charged_to - T0).total_seconds())) / 3600}
        assert ledger.spend() == {"USD": RATE * Decimal(int((charged_to - T0).total_seconds()) + 30) / 3600}
