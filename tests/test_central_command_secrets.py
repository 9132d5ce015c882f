"""A run's command reaches the team's central ledger with its secrets masked (a trial found
``--hf-token hf_...`` in full in the shared PostgreSQL); the machine's own ledger keeps it as
typed (a resume or ``--attach`` runs it)."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import sqlalchemy as sa

from costctl.ledger import tables
from costctl.ledger.sync import CentralSync
from costctl.redaction import MASK, redact_argv
from outbox_support import local_ledger

TOKEN = "hf_" + "aB3" * 12
COMMAND = ["python", "train.py", "--hf-token", TOKEN, "--max-tokens", "512", f"--api-key=sk-proj-{'x9' * 12}",
           "--lr", "3e-4"]


def commands(engine: sa.Engine) -> list[list[str]]:
    with engine.connect() as conn:
        return [r.command for r in conn.execute(sa.select(tables.runs.c.command))]


def test_the_central_copy_of_a_run_has_its_commands_secrets_masked(tmp_path, db_url):
    with local_ledger(tmp_path / "a.db") as ledger:
        pk = ledger.ensure_instance("sim", "sim-1", gpu="RTX 4090", gpu_count=1, billing="on-demand",
                                    price_per_hour=Decimal("0.69"), currency="USD")
        ledger.start_run(pk, started_at=datetime(2026, 12, 5, 8, tzinfo=UTC), command=COMMAND, log_path=None,
                         host="a", pid=1)
        sync = CentralSync(ledger, db_url, say=[].append)
        try:
            sync.drain()
            central = commands(sync._engine())
        finally:
            sync.dispose()
        assert commands(ledger.engine) == [COMMAND]  # the machine's own: as typed
    assert central == [["python", "train.py", "--hf-token", MASK, "--max-tokens", "512", f"--api-key={MASK}",
                        "--lr", "3e-4"]]
    assert TOKEN not in repr(central)


def test_redact_argv_keeps_what_is_no_secret():
    argv = ["torchrun", "--nproc-per-node", "8", "train.py", "--tokens", "512", "--tokenizer", "gpt2", "--token", "-v"]
    assert redact_argv(argv) == argv
    assert redact_argv(["x", "--password", "hunter2", "HF_TOKEN=" + TOKEN]) == ["x", "--password", MASK, f"HF_TOKEN={MASK}"]
    assert redact_argv(None) is None
