"""Make a user-like costctl data dir (CI's sentinel): ``python tests/sentinel_ledger.py DIR``.

DIR gets a real SQLite ledger with one charged run on an instance of the "user's", a
``costctl.toml`` and simulated-provider state. .ci/run exports it as ``COSTCTL_DATA_DIR`` /
``COSTCTL_DATABASE_URL`` / ``COSTCTL_CONFIG`` and checks its files are unchanged after the suite.
"""

from __future__ import annotations

import sys
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path


def populate(url: str) -> None:
    """Migrate the ledger at ``url`` and record one finished run charged 2 h at 1.58 CNY/h."""
    from costctl.ledger import Ledger

    ledger = Ledger.open(url)
    try:
        pk = ledger.ensure_instance("sim", "users-own-instance", gpu="RTX 3090", gpu_count=1, billing="on-demand",
                                    price_per_hour=Decimal("1.58"), currency="CNY", region=None)
        t0 = datetime(2026, 11, 1, 3, 0, tzinfo=timezone.utc)
        run = ledger.start_run(pk, started_at=t0, command=["python", "train.py"], log_path="/nowhere.log",
                               host="users-host", pid=1)
        ledger.accrue(run, t0 + timedelta(hours=2), Decimal("1.58"), "CNY")
        ledger.finish_run(run, ended_at=t0 + timedelta(hours=2), exit_code=0, status="finished")
    finally:
        ledger.close()


def make(directory: Path) -> None:
    """``directory``: a ledger (:func:`populate`), a costctl.toml and sim state."""
    directory.mkdir(parents=True, exist_ok=True)
    populate(f"sqlite:///{directory / 'costctl.db'}")
    (directory / "costctl.toml").write_text('[watch]\ntimezone = "Asia/Shanghai"\n')
    (directory / "sim").mkdir(exist_ok=True)
    (directory / "sim" / "state.json").write_text('{"instances": {}}\n')


if __name__ == "__main__":
    make(Path(sys.argv[1]))
