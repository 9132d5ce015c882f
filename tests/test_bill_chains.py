"""A resumed job's runs linked into one chain: ``Ledger.continued_run`` finds the run a
``--resume`` continues, ``costctl bill --by chain`` shows each chain as one line (runs,
preemptions, waste, spend: sums of its runs' bill rows) and ``--expand`` lists its runs;
``--limit`` bounds the chains shown, the totals cover all; migration 0007 keeps a populated
ledger's totals. SQLite file and PostgreSQL."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest
import sqlalchemy as sa

from costctl.cli.main import main
from costctl.ledger import Ledger, migrate, queries
from costctl.ledger.engine import make_engine

UTC = timezone.utc
T0 = datetime(2026, 5, 1, 8, 0, tzinfo=UTC)
RATE = Decimal("0.35")


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COSTCTL_DATA_DIR", str(tmp_path / "data"))
    for name in ("COSTCTL_DATABASE_URL", "COSTCTL_WATCH__TIMEZONE"):
        monkeypatch.delenv(name, raising=False)


def _run(ledger: Ledger, pk: int, start: datetime, seconds: int, status: str, *, command=None,
         continues=None, resumed_from=None, waste_s: int = 0, checkpoint: str | None = None) -> str:
    run = ledger.start_run(pk, started_at=start, command=command, log_path=None, host="h",
                           continues_run_id=continues, resumed_from=resumed_from)
    end = start + timedelta(seconds=seconds)
    ledger.accrue(run, end, RATE, "USD")
    if checkpoint is not None:
        cid = ledger.record_checkpoint_request(run, reason="preemption", requested_at=start + timedelta(seconds=10),
                                               deadline=end)
        ledger.complete_checkpoint(cid, outcome="saved", completed_at=start + timedelta(seconds=12),
                                   saved_at=start + timedelta(seconds=12), save_s=2.0, path=checkpoint)
    if waste_s:
        ledger.record_waste(run, start_at=end - timedelta(seconds=waste_s), end_at=end, rate_per_hour=RATE,
                            currency="USD", reason="preemption")
    ledger.finish_run(run, ended_at=end, exit_code=0 if status == "completed" else 143, status=status)
    return run


def _ledger_with_a_chain(url: str) -> tuple[list[str], str]:
    """A job preempted twice and resumed twice (3 linked runs), and an unrelated run after it."""
    with Ledger.open(url) as ledger:
        pk = ledger.ensure_instance("sim", "spot-1", gpu="RTX 4090", gpu_count=1, billing="spot",
                                    price_per_hour=RATE, currency="USD")
        a = _run(ledger, pk, T0, 3600, "preempted", waste_s=600, checkpoint="ckpt/a.pt")
        b = _run(ledger, pk, T0 + timedelta(hours=2), 1800, "preempted", continues=a, resumed_from="ckpt/a.pt",
                 waste_s=300, checkpoint="ckpt/b.pt")
        c = _run(ledger, pk, T0 + timedelta(hours=3), 900, "completed", continues=b, resumed_from="ckpt/b.pt")
        other = _run(ledger, pk, T0 + timedelta(hours=5), 360, "completed")
    return [a, b, c], other


def _amount(seconds: int) -> Decimal:
    return (RATE * seconds / 3600).quantize(Decimal("0.000001"))


def test_a_resumed_run_continues_the_run_that_saved_its_checkpoint_else_the_same_command(db_url, tmp_path):
    with Ledger.open(db_url) as ledger:
        pk = ledger.ensure_instance("sim", "i", gpu="T4", gpu_count=1, billing="spot", price_per_hour=RATE,
                                    currency="USD")
        cmd = ["python", "train.py"]
        first = _run(ledger, pk, T0, 60, "preempted", command=cmd, checkpoint=str(tmp_path / "ck" / "e3.pt"))
        _run(ledger, pk, T0 + timedelta(minutes=5), 60, "completed", command=["python", "other.py"])
        later = T0 + timedelta(hours=1)
        # the run that recorded saving it, whatever ran in between
        assert ledger.continued_run(str(tmp_path / "ck" / "e3.pt"), command=cmd, before=later) == first
        # the same file named relative to the job's working directory
        (tmp_path / "ck").mkdir()
        assert ledger.continued_run("ck/e3.pt", command=["x"], before=later) == first
        # no run saved it: the newest earlier run of the same command
        second = _run(ledger, pk, T0 + timedelta(minutes=10), 60, "preempted", command=cmd)
        assert ledger.continued_run("elsewhere.pt", command=cmd, before=later) == second
        assert ledger.continued_run("elsewhere.pt", command=["python", "new.py"], before=later) is None
        assert ledger.continued_run("elsewhere.pt", command=None, before=later) is None
        # a run started after ``before`` is not continued
        assert ledger.continued_run("elsewhere.pt", command=cmd, before=T0 + timedelta(minutes=7)) == first


def test_bill_by_chain_shows_the_job_as_one_line_with_its_preemptions_and_waste(db_url, capsys):
    (a, b, c), other = _ledger_with_a_chain(db_url)
    assert main(["bill", "--by", "chain", "--format", "json", "--db", db_url]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["by"] == "chain" and len(doc["rows"]) == 2
    chain, single = doc["rows"]
    assert chain["chain_id"] == a and chain["run_ids"] == [a, b, c] and chain["runs"] == 3
    assert (chain["preemptions"], chain["resumes"], chain["resumed_from"]) == (2, 2, "ckpt/b.pt")
    assert chain["status"] == "completed" and chain["exit_code"] == 0
    assert Decimal(chain["spend"]) == _amount(3600) + _amount(1800) + _amount(900)
    assert Decimal(chain["waste"]) == _amount(900) and chain["waste_s"] == 900.0
    assert chain["duration_s"] == 3600 + 1800 + 900
    assert chain["started_at"] == T0.isoformat() and chain["ended_at"] == (T0 + timedelta(hours=3, seconds=900)).isoformat()
    assert single["chain_id"] == other and single["runs"] == 1 and single["preemptions"] == 0
    # the rows add up to the totals, which equal the bill by run's
    assert sum(Decimal(r["spend"]) for r in doc["rows"]) == Decimal(doc["totals"]["USD"])
    assert main(["bill", "--format", "json", "--db", db_url]) == 0
    by_run = json.loads(capsys.readouterr().out)
    assert by_run["totals"] == doc["totals"]
    assert sum(Decimal(r["spend"]) for r in by_run["rows"] if r["run_id"] in (a, b, c)) == Decimal(chain["spend"])
    # the table: one line for the job; --expand lists its runs
    assert main(["bill", "--by", "chain", "--db", db_url]) == 0
    table = capsys.readouterr().out
    assert a[:12] in table and b[:12] not in table and "PREEMPTED" in table
    assert main(["bill", "--by", "chain", "--expand", "--db", db_url]) == 0
    expanded = capsys.readouterr().out
    assert all(r[:12] in expanded for r in (a, b, c)) and "Runs of the chains above" in expanded
    assert main(["bill", "--by", "chain", "--expand", "--format", "json", "--db", db_url]) == 0
    assert [r["run_id"] for r in json.loads(capsys.readouterr().out)["runs"]] == [a, b, c, other]


def test_chains_limit_and_window(db_url, capsys):
    (a, b, c), other = _ledger_with_a_chain(db_url)
    page = None
    assert main(["bill", "--by", "chain", "--limit", "1", "--format", "json", "--db", db_url]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["chain_id"] for r in doc["rows"]] == [other] and doc["chains_not_shown"] == 1
    total = _amount(3600) + _amount(1800) + _amount(900) + _amount(360)
    assert Decimal(doc["totals"]["USD"]) == total  # the totals cover the chain not shown
    # a window holding only the last two runs of the chain: the chain keeps its first run's id
    since = (T0 + timedelta(hours=1, minutes=30)).isoformat()
    until = (T0 + timedelta(hours=4)).isoformat()
    assert main(["bill", "--by", "chain", "--since", since, "--until", until, "--format", "json", "--db", db_url]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [(r["chain_id"], r["run_ids"]) for r in doc["rows"]] == [(a, [b, c])]
    assert Decimal(doc["totals"]["USD"]) == _amount(1800) + _amount(900)
    with Ledger.open(db_url) as ledger, ledger.session() as s:
        page = queries.chain_page(s, limit=None)
    assert page.chains_total == 2 and [r.runs for r in page.rows] == [3, 1]


def test_expand_goes_with_by_chain(capsys, tmp_path):
    assert main(["bill", "--expand"]) != 0
    err = capsys.readouterr().err
    assert "--expand goes with --by chain" in err and "Traceback" not in err


def test_a_link_cycle_in_a_hand_edited_ledger_does_not_hang_the_bill(db_url, capsys):
    (a, b, c), _ = _ledger_with_a_chain(db_url)
    engine = make_engine(db_url)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text("UPDATE runs SET continues_run_id = :c WHERE id = :a"), {"a": a, "c": c})
    finally:
        engine.dispose()
    assert main(["bill", "--by", "chain", "--format", "json", "--db", db_url]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert sum(r["runs"] for r in doc["rows"]) == 4
    assert sum(Decimal(r["spend"]) for r in doc["rows"]) == Decimal(doc["totals"]["USD"])


def test_0007_keeps_a_populated_ledger_and_downgrades_cleanly(db_url):
    engine = make_engine(db_url)
    try:
        migrate.upgrade(engine, "0006")
        old = Ledger(engine)
        pk = old.ensure_instance("sim", "i", gpu="T4", gpu_count=1, billing="spot", price_per_hour=RATE,
                                 currency="USD")
        run = old.start_run(pk, started_at=T0, command=["python", "t.py"], log_path=None, host="h")
        old.accrue(run, T0 + timedelta(seconds=7200), RATE, "USD")
        with engine.connect() as conn:
            before = [tuple(r) for r in conn.execute(sa.text("SELECT * FROM charges ORDER BY id"))]
        migrate.upgrade(engine, "head")
        cols = {c["name"] for c in sa.inspect(engine).get_columns("runs")}
        assert {"continues_run_id", "resumed_from"} <= cols
        assert "ix_runs_continues_run_id" in {ix["name"] for ix in sa.inspect(engine).get_indexes("runs")}
        ledger = Ledger(engine)
        with ledger.session() as s:
            page = queries.chain_page(s)
        assert [(r.chain_id, r.runs) for r in page.rows] == [(run, 1)]
        assert page.totals == {"USD": _amount(7200)}
        with engine.connect() as conn:
            assert [tuple(r) for r in conn.execute(sa.text("SELECT * FROM charges ORDER BY id"))] == before
        migrate.downgrade(engine, "0006")
        assert not {"continues_run_id", "resumed_from"} & {c["name"] for c in sa.inspect(engine).get_columns("runs")}
        migrate.upgrade(engine, "head")
        assert migrate.current_revision(engine) == migrate.head_revision()
    finally:
        engine.dispose()
