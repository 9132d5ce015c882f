"""A budget cap holds while the job floods its output: the ticks come on time (the output
pump never starves them), so the spend stops within a couple of sample intervals of the cap.
(The first version overspent a cap 2.1x at 5,000 lines/s.) Real watch, real child: realtime."""

from __future__ import annotations

import json
import subprocess
import sys
from decimal import Decimal

import pytest

from helpers import REPO, costctl_cmd, costctl_env, run_costctl

pytestmark = pytest.mark.realtime

FLOOD = (
    "import sys, time\n"
    "end = time.time() + 90\n"
    "i = 0\n"
    "w = sys.stdout.write\n"
    "while time.time() < end:\n"
    "    w(f'step {i} loss: {1.0 + (i % 97) / 1000:.4f}\\n'); i += 1\n"
)


def test_a_budget_cap_is_not_overspent_by_a_flooding_job(tmp_path):
    # 3600 USD/h = 1 USD per second of wall time; the cap is 4 USD.
    env = costctl_env(tmp_path, COSTCTL_INSTANCE__PRICE_PER_HOUR="3600", COSTCTL_INSTANCE__CURRENCY="USD",
                      COSTCTL_POLICIES__BUDGET__TOTAL="4", COSTCTL_POLICIES__IDLE__TIME_WINDOW="off")
    out = tmp_path / "out.txt"
    with out.open("wb") as fh:
        proc = subprocess.run(costctl_cmd("watch", "--no-pty", "--", sys.executable, "-c", FLOOD), env=env,
                              cwd=REPO, stdout=fh, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, timeout=120)
    err = proc.stderr.decode(errors="replace")
    assert "budget" in err, err[-3000:]
    bill = run_costctl("bill", "--format", "json", env=env)
    assert bill.returncode == 0, bill.stderr
    spent = Decimal(json.loads(bill.stdout)["totals"]["USD"])
    assert Decimal(4) <= spent <= Decimal("6.5"), (spent, err[-2000:])
