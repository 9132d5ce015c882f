"""bench_bill: ``costctl bill`` in every grouping and format on big ledgers, SQLite and PostgreSQL.

Builds ledgers of 100 k, 1 M and 10 M charge rows (``--sizes``), with 5 telemetry samples per
charge (50 M at the 10 M size: they only need to exist — bill must not read them), the
15-minute rollups and run summaries that the accrual and ``finish_run`` keep, on SQLite (a file)
and on PostgreSQL (``--postgres URL``, else ``$COSTCTL_TEST_POSTGRES_URL``; skipped when
unreachable). Generation is in SQL (a recursive CTE on SQLite, ``generate_series`` on
PostgreSQL, one transaction, indexes built after the rows). The shape: 20 instances in USD
and CNY, runs of 1,000 charges of 9 s each 1 s apart (a charge row per accrual, as when the rate
or the watch changes), 3 rates, about 1.1 M instance-hours at 10 M rows; every closed run ends
with an idle stop (decided a minute before its end, idle for its last 10 minutes, confirmed at
its end: a decision and two stop events), so the WASTE and SAVED columns are computed for every
run (10 k stops at 10 M rows).

Each ``costctl bill --by run|instance|day|gpu --format table|json|csv --db URL`` (and one
``--since/--until`` window cutting buckets and charges, ``--by day`` in America/New_York, and
``--plot FILE.png`` by run, matplotlib's import included) runs
``--repeat`` times (median kept) in a fresh child process per run, which imports the CLI and
runs the same command once on an empty SQLite ledger (so lazy imports, start-up's business, are
done), then times ``costctl.cli.main.main([...])`` in-process on the big ledger (stdout to
/dev/null) and reports its own peak RSS (``VmHWM``). The child's whole wall time (start-up
and the warm-up included) is reported too.

Ledgers are cached under ``--cache`` (default ``$TMPDIR/costctl-bench-bill``): ``--reuse`` uses a
cached ledger of the right size when present (and keeps what it builds), ``--keep`` keeps what it
builds; otherwise they are deleted at the end.

Figures (LAST LINE, one JSON object)::

    {"results": [{"backend": "sqlite"|"postgresql", "charges": int, "samples": int,
                  "rollup_rows": int, "by": str, "format": str, "window": bool, "plot": bool,
                  "bill_s": float (median wall seconds of the bill call in-process),
                  "cpu_s": float (median CPU seconds of this process in that call; the
                            database server's own CPU is not in it),
                  "process_s": float (median wall seconds of the whole child process),
                  "peak_rss_mb": float (max peak RSS of the child, MiB)}...],
     "build_s": {"sqlite:100000": float seconds to generate, ...},
     "max_bill_s_at_largest": float, "target_s": 1.0, "totals_checked": bool}

Usage: ``python benchmarks/bench_bill.py [--sizes 100000,1000000] [--postgres URL] [--reuse]``.
Figures are noisy on a loaded machine: compare ratios, re-measure on a quiet one.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path

import sqlalchemy as sa
from _procfs import NEUTRAL_CWD, costctl_env, ensure_bytecode  # benchmarks/ is the script's own folder

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

T0_S = 1_767_225_600  # 2026-01-01T00:00:00Z
PER_RUN = 1000  # charges per run
CHARGE_S = 9  # seconds charged per row, then 1 s gap
STEP_S = 10
INSTANCES = 20
RUN_GAP_S = 60
SAMPLES_PER_CHARGE = 5
RATES = ("0.45", "1.2", "2.18")  # instance i: rate RATES[i % 3], USD for i % 3 < 2, CNY otherwise
GROUPINGS = ("run", "instance", "day", "gpu")
FORMATS = ("table", "json", "csv")

CHILD = r"""
import os, resource, sys, time, json, io
from costctl.cli.main import main
args, warm = json.loads(sys.argv[1]), sys.argv[2]
devnull = open(os.devnull, "w")
real = sys.stdout
sys.stdout = devnull
if "postgresql" in args[-1]:
    import psycopg  # noqa: F401  (the driver's import is start-up, not the bill)
main(["bill", "--by", args[2], "--format", args[4], "--db", warm])  # imports (start-up), on an empty ledger
t, cpu = time.perf_counter(), time.process_time()
code = main(args)
elapsed, cpu = time.perf_counter() - t, time.process_time() - cpu
sys.stdout = real
# VmHWM: this process's own peak (ru_maxrss would carry the parent's peak across fork + exec)
hwm = [line for line in open("/proc/self/status") if line.startswith("VmHWM:")]
rss = int(hwm[0].split()[1]) / 1024 if hwm else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"code": code, "bill_s": elapsed, "cpu_s": cpu, "rss_mb": rss}))
"""


def _shape(n: int) -> dict[str, int]:
    runs = max(1, n // PER_RUN)
    return {"charges": runs * PER_RUN, "runs": runs, "samples": runs * PER_RUN * SAMPLES_PER_CHARGE}


# Generator of charge k (0-based) in SQL: run r = k / PER_RUN, its instance r % INSTANCES, its
# slot on that instance j = r / INSTANCES; start = T0 + j * (PER_RUN*STEP + GAP) + (k % PER_RUN) * STEP.
def _charge_cols(k: str) -> dict[str, str]:
    r = f"({k} / {PER_RUN})"
    i = f"({r} % {INSTANCES})"
    start = f"({T0_S} + ({r} / {INSTANCES}) * {PER_RUN * STEP_S + RUN_GAP_S} + ({k} % {PER_RUN}) * {STEP_S})"
    rate = f"(CASE {i} % 3 WHEN 0 THEN '{RATES[0]}' WHEN 1 THEN '{RATES[1]}' ELSE '{RATES[2]}' END)"
    cur = f"(CASE WHEN {i} % 3 < 2 THEN 'USD' ELSE 'CNY' END)"
    return {"r": r, "i": i, "start": start, "rate": rate, "cur": cur}


def _run_id(expr: str, dialect: str) -> str:
    if dialect == "sqlite":
        return f"printf('%032d', {expr})"
    return f"lpad(({expr})::text, 32, '0')"


CHARGE_INDEXES = ("ix_charges_instance_pk_end_at", "ix_charges_run_id_end_at", "ix_charges_end_at")


def build(url: str, n: int) -> dict[str, int]:
    """Create and fill a ledger at ``url`` with the bench shape of about ``n`` charges."""
    from costctl.ledger import Ledger

    Ledger.open(url).close()  # migrations: the real schema
    shape = _shape(n)
    engine = sa.create_engine(url)
    dialect = engine.dialect.name
    c = _charge_cols("k")
    sec = (lambda e: f"strftime('%Y-%m-%d %H:%M:%S', {e}, 'unixepoch') || '.000000'") if dialect == "sqlite" \
        else (lambda e: f"to_timestamp({e})")
    if dialect == "sqlite":
        def series(name: str, count: int) -> str:
            return (f"WITH RECURSIVE s({name}) AS (SELECT 0 UNION ALL SELECT {name} + 1 FROM s "
                    f"WHERE {name} < {count - 1}) ")
        src = "FROM s"
    else:
        def series(name: str, count: int) -> str:
            return ""
        src = None
    if dialect == "sqlite":  # one big transaction: a rollback journal, not a WAL as big as the file
        with engine.connect() as conn:
            conn.exec_driver_sql("PRAGMA journal_mode=DELETE")
    with engine.begin() as conn:
        def ex(sql: str) -> None:
            # psycopg reads '%' as a placeholder: the modulo operator is '%%' there
            conn.exec_driver_sql(sql.replace("%", "%%") if dialect == "postgresql" else sql)

        if dialect == "sqlite":
            ex("PRAGMA synchronous=OFF")
            ex("PRAGMA cache_size=-262144")
        for ix in CHARGE_INDEXES + ("ix_samples_run_id_time", "ix_charge_rollups_bucket_s",
                                     "ix_charge_rollups_instance_pk_bucket_s"):
            ex(f"DROP INDEX IF EXISTS {ix}")
        ex("INSERT INTO instances (id, provider, provider_instance_id, gpu, gpu_count, billing, price_per_hour, "
           "currency, region, created_at) VALUES " + ", ".join(
               f"({i + 1}, 'bench', 'i{i}', '{('A100', 'RTX 4090', 'H100', 'T4')[i % 4]}', {1 + i % 2}, "
               f"'on-demand', '{RATES[i % 3]}', '{'USD' if i % 3 < 2 else 'CNY'}', NULL, "
               f"{'CURRENT_TIMESTAMP' if dialect == 'postgresql' else repr('2026-01-01 00:00:00.000000')})"
               for i in range(INSTANCES)))
        # runs (summarized; the newest run per instance still open)
        r = "k"
        slot = f"({r} / {INSTANCES})"
        start = f"({T0_S} + {slot} * {PER_RUN * STEP_S + RUN_GAP_S})"
        end = f"({start} + {(PER_RUN - 1) * STEP_S + CHARGE_S})"
        inst = f"({r} % {INSTANCES} + 1)"
        last = f"({r} >= {shape['runs'] - INSTANCES})"
        open_end = f"CASE WHEN {last} THEN NULL ELSE {sec(end)} END"
        gen = series("k", shape["runs"]) if dialect == "sqlite" else ""
        frm = src if dialect == "sqlite" else f"FROM generate_series(0, {shape['runs'] - 1}) AS g(k)"
        ex(f"{gen}INSERT INTO runs (id, instance_pk, command, host, log_path, started_at, ended_at, last_seen_at, "
           f"exit_code, status, pid, charged_until, gpu, gpu_count, billing, price_per_hour, price_currency, "
           f"peak_memory_bytes, memory_total_bytes, mean_utilization, gpu_samples, points) "
           f"SELECT {_run_id(r, dialect)}, {inst}, NULL, 'bench', NULL, {sec(start)}, {open_end}, {sec(end)}, "
           f"CASE WHEN {last} THEN NULL ELSE 0 END, CASE WHEN {last} THEN 'running' ELSE 'succeeded' END, NULL, "
           f"{sec(end)}, CASE WHEN {last} THEN NULL ELSE 'A100' END, CASE WHEN {last} THEN NULL ELSE 1 END, "
           f"CASE WHEN {last} THEN NULL ELSE 'on-demand' END, CASE WHEN {last} THEN NULL ELSE "
           f"{_charge_cols(f'({r} * {PER_RUN})')['rate']} END, CASE WHEN {last} THEN NULL ELSE "
           f"{_charge_cols(f'({r} * {PER_RUN})')['cur']} END, 4294967296, 85899345920, 20.0, 100, 1000 {frm}")
        gen = series("k", shape["charges"]) if dialect == "sqlite" else ""
        frm = src if dialect == "sqlite" else f"FROM generate_series(0, {shape['charges'] - 1}::bigint) AS g(k)"
        ex(f"{gen}INSERT INTO charges (run_id, instance_pk, start_at, end_at, rate_per_hour, currency, duration_us) "
           f"SELECT {_run_id(c['r'], dialect)}, {c['i']} + 1, {sec(c['start'])}, {sec(c['start'] + f' + {CHARGE_S}')}, "
           f"{c['rate']}, {c['cur']}, {CHARGE_S * 1_000_000} {frm}")
        # an idle stop on every closed run: decided at its end - 60 s, idle since its end - 600 s,
        # requested then confirmed at its end (decision ids 1..n in run order: the closed runs
        # are the first ones)
        closed = shape["runs"] - INSTANCES
        if closed > 0:
            if dialect == "sqlite":
                iso = lambda e: f"strftime('%Y-%m-%dT%H:%M:%SZ', {e}, 'unixepoch')"  # noqa: E731
                false = "0"
            else:
                iso = lambda e: f"to_char(to_timestamp({e}) AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')"  # noqa: E731
                false = "false"
            gen_d = series("k", closed) if dialect == "sqlite" else ""
            frm_d = src if dialect == "sqlite" else f"FROM generate_series(0, {closed - 1}) AS g(k)"
            ex(f"{gen_d}INSERT INTO decisions (id, run_id, time, policy, action, reason, evidence, outcome, dry_run, key) "
               f"SELECT k + 1, {_run_id(r, dialect)}, {sec(end + ' - 60')}, 'idle', 'stop', 'idle', "
               f"'{{\"idle_since\": \"' || {iso(end + ' - 600')} || '\"}}', 'stop confirmed', {false}, NULL {frm_d}")
            ex(f"{gen_d}INSERT INTO stop_events (run_id, decision_id, time, state, attempt, detail) "
               f"SELECT {_run_id(r, dialect)}, k + 1, {sec(end + ' - 60')}, 'requested', 0, NULL {frm_d} UNION ALL "
               f"SELECT {_run_id(r, dialect)}, k + 1, {sec(end)}, 'confirmed', 1, NULL {frm_d}")
        # rollups: each 9 s charge meets one or two 15-minute buckets
        s_us, e_us = f"({c['start']} * 1000000)", f"(({c['start']} + {CHARGE_S}) * 1000000)"
        b1, b2 = f"({c['start']} / 900 * 900)", f"(({c['start']} + {CHARGE_S}) / 900 * 900)"
        lo2 = f"({b2} * 1000000)"
        hi1 = f"(CASE WHEN {b2} > {b1} THEN {lo2} ELSE {e_us} END)"
        rid = _run_id(c["r"], dialect)
        ex(f"{gen}, pieces AS (SELECT {rid} AS run_id, {c['i']} + 1 AS pk, {c['rate']} AS rate, {c['cur']} AS cur, "
           f"{b1} AS b, {s_us} AS lo, {hi1} AS hi {frm} UNION ALL "
           f"SELECT {rid}, {c['i']} + 1, {c['rate']}, {c['cur']}, {b2}, {lo2}, {e_us} {frm} "
           f"WHERE {b2} > {b1} AND {e_us} > {lo2}) "
           "INSERT INTO charge_rollups (run_id, bucket_s, rate_per_hour, currency, instance_pk, duration_us, "
           "first_us, last_us) SELECT run_id, b, rate, cur, pk, sum(hi - lo), min(lo), max(hi) FROM pieces "
           "GROUP BY run_id, b, rate, cur, pk" if dialect == "sqlite" else
           f"WITH pieces AS (SELECT {rid} AS run_id, {c['i']} + 1 AS pk, {c['rate']} AS rate, {c['cur']} AS cur, "
           f"{b1} AS b, {s_us} AS lo, {hi1} AS hi {frm} UNION ALL "
           f"SELECT {rid}, {c['i']} + 1, {c['rate']}, {c['cur']}, {b2}, {lo2}, {e_us} {frm} "
           f"WHERE {b2} > {b1} AND {e_us} > {lo2}) "
           "INSERT INTO charge_rollups (run_id, bucket_s, rate_per_hour, currency, instance_pk, duration_us, "
           "first_us, last_us) SELECT run_id, b, rate, cur, pk, sum(hi - lo), min(lo), max(hi) FROM pieces "
           "GROUP BY run_id, b, rate, cur, pk")
        # samples: only need to exist (one GPU row per 2 s)
        gen = series("k", shape["samples"]) if dialect == "sqlite" else ""
        frm = src if dialect == "sqlite" else f"FROM generate_series(0, {shape['samples'] - 1}::bigint) AS g(k)"
        sc = _charge_cols(f"(k / {SAMPLES_PER_CHARGE})")
        ex(f"{gen}INSERT INTO samples (run_id, time, gpu_index, utilization, memory_used_bytes, memory_total_bytes, "
           f"power_w, status, source, error) SELECT {_run_id(sc['r'], dialect)}, "
           f"{sec(sc['start'] + f' + 2 * (k % {SAMPLES_PER_CHARGE})')}, 0, 20.0, 4294967296, 85899345920, NULL, "
           f"'ok', 'bench', NULL {frm}")
        ex("CREATE INDEX ix_charges_instance_pk_end_at ON charges (instance_pk, end_at)")
        ex("CREATE INDEX ix_charges_run_id_end_at ON charges (run_id, end_at)")
        ex("CREATE INDEX ix_charges_end_at ON charges (end_at)")
        ex("CREATE INDEX ix_charge_rollups_bucket_s ON charge_rollups (bucket_s)")
        ex("CREATE INDEX ix_charge_rollups_instance_pk_bucket_s ON charge_rollups (instance_pk, bucket_s)")
        ex("CREATE INDEX ix_samples_run_id_time ON samples (run_id, time)")
    with engine.begin() as conn:
        conn.exec_driver_sql("ANALYZE")
    if dialect == "sqlite":
        with engine.connect() as conn:
            conn.exec_driver_sql("PRAGMA journal_mode=WAL")  # as costctl runs it
    engine.dispose()
    return shape


def counts(url: str) -> dict[str, int]:
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        out = {t: int(conn.exec_driver_sql(f"SELECT count(*) FROM {t}").scalar_one())
               for t in ("charges", "samples", "charge_rollups")}
    engine.dispose()
    return out


def check_totals(url: str) -> bool:
    """The bill's totals (SQL over rollups) equal a plain SUM over every charge row."""
    from costctl.ledger import Ledger

    engine = sa.create_engine(url)
    with engine.connect() as conn:
        want: dict[str, Decimal] = {}
        for rate, cur, us in conn.exec_driver_sql(
                "SELECT rate_per_hour, currency, sum(duration_us) FROM charges GROUP BY rate_per_hour, currency"):
            want[cur] = want.get(cur, Decimal(0)) + Decimal(rate) * Decimal(int(us)) / Decimal(3_600_000_000)
    engine.dispose()
    with Ledger.open(url, create=False) as ledger:
        got = ledger.spend()
    return got == dict(sorted(want.items()))


def time_bill(url: str, args: list[str], repeat: int, env: dict[str, str]) -> dict[str, float]:
    bills, cpus, procs, rss = [], [], [], []
    for _ in range(repeat):
        t = time.perf_counter()
        out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(["bill", *args, "--db", url]), env["WARM_URL"]],
                             capture_output=True, text=True, env=env, timeout=600, cwd=NEUTRAL_CWD)
        procs.append(time.perf_counter() - t)
        if out.returncode != 0:
            raise SystemExit(f"bill failed: {args}: {out.stderr[-2000:]}")
        doc = json.loads(out.stdout.strip().splitlines()[-1])
        if doc["code"] != 0:
            raise SystemExit(f"bill exited {doc['code']}: {args}: {out.stderr[-2000:]}")
        bills.append(doc["bill_s"])
        cpus.append(doc["cpu_s"])
        rss.append(doc["rss_mb"])
    return {"bill_s": round(statistics.median(bills), 4), "cpu_s": round(statistics.median(cpus), 4),
            "process_s": round(statistics.median(procs), 4),
            "peak_rss_mb": round(max(rss), 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="100000,1000000,10000000", help="charge rows per ledger, comma-separated")
    ap.add_argument("--postgres", default=os.environ.get("COSTCTL_TEST_POSTGRES_URL"),
                    help="PostgreSQL server URL (a database costctl_bench_bill_N is created per size)")
    ap.add_argument("--sqlite-only", action="store_true")
    ap.add_argument("--postgres-only", action="store_true")
    ap.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "costctl-bench-bill"))
    ap.add_argument("--reuse", action="store_true", help="use cached ledgers of the right size; keep new ones")
    ap.add_argument("--keep", action="store_true", help="keep the generated ledgers")
    ap.add_argument("--repeat", type=int, default=3)
    opts = ap.parse_args()
    sizes = [int(s) for s in opts.sizes.split(",") if s]
    cache = Path(opts.cache)
    cache.mkdir(parents=True, exist_ok=True)
    ensure_bytecode()
    env = costctl_env(COSTCTL_DATA_DIR=str(cache / "data"), PYTHONPATH=str(REPO))
    env.pop("COSTCTL_DATABASE_URL", None)
    from costctl.ledger import Ledger

    env["WARM_URL"] = f"sqlite:///{cache / 'empty.db'}"
    Ledger.open(env["WARM_URL"]).close()
    backends: list[tuple[str, str]] = []
    made: list[tuple[str, object]] = []
    results, build_s = [], {}
    checked = True
    for n in sizes:
        targets = []
        if not opts.postgres_only:
            targets.append(("sqlite", f"sqlite:///{cache / f'ledger-{n}.db'}"))
        if opts.postgres and not opts.sqlite_only:
            base = sa.make_url(opts.postgres)
            name = f"costctl_bench_bill_{n}"
            admin = sa.create_engine(base.set(database="postgres"), isolation_level="AUTOCOMMIT")
            try:
                with admin.connect() as conn:
                    exists = conn.exec_driver_sql(f"SELECT 1 FROM pg_database WHERE datname = '{name}'").first()
                    if exists and not (opts.reuse and (cache / f"postgresql-{n}.built").exists()):
                        conn.exec_driver_sql(f'DROP DATABASE "{name}"')
                        exists = None
                    if not exists:
                        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
                targets.append(("postgresql", base.set(database=name).render_as_string(hide_password=False)))
            except sa.exc.OperationalError as exc:
                print(f"PostgreSQL unreachable, skipped: {str(exc).splitlines()[0]}", file=sys.stderr)
            finally:
                admin.dispose()
        for backend, url in targets:
            marker = cache / f"{backend}-{n}.built"
            if backend == "sqlite":
                path = Path(url.removeprefix("sqlite:///"))
                if not (opts.reuse and marker.exists() and path.exists()):
                    path.unlink(missing_ok=True)
                    marker.unlink(missing_ok=True)
                made.append(("file", path))
            else:
                made.append(("pg", url))
            if not (opts.reuse and marker.exists()):
                t = time.perf_counter()
                build(url, n)
                build_s[f"{backend}:{n}"] = round(time.perf_counter() - t, 1)
                marker.write_text("built\n")
            rows = counts(url)
            ok = check_totals(url)
            checked = checked and ok
            print(f"{backend} {n}: {rows} totals_match={ok} built_in={build_s.get(f'{backend}:{n}', 'cached')}s",
                  file=sys.stderr)
            cases = [(by, fmt, []) for by in GROUPINGS for fmt in FORMATS]
            window = ["--since", "2026-01-03T05:07:11.5+00:00", "--until", "2026-02-20T17:52:03+00:00"]
            cases += [(by, "json", window) for by in GROUPINGS]
            cases += [("run", "json", ["--plot", str(cache / "bench-plot.png")])]
            for by, fmt, extra in cases:
                case_env = dict(env)
                if by == "day":
                    case_env["COSTCTL_WATCH__TIMEZONE"] = "America/New_York"
                figures = time_bill(url, ["--by", by, "--format", fmt, *extra], opts.repeat, case_env)
                results.append({"backend": backend, "charges": rows["charges"], "samples": rows["samples"],
                                "rollup_rows": rows["charge_rollups"], "by": by, "format": fmt,
                                "window": "--since" in extra, "plot": "--plot" in extra, **figures})
                r = results[-1]
                label = "window" if r["window"] else "plot" if r["plot"] else ""
                print(f"{backend:10} {r['charges']:>9} {by:8} {fmt:5} {label:6} "
                      f"bill {r['bill_s']:7.3f} s  cpu {r['cpu_s']:6.3f} s  process {r['process_s']:6.2f} s  rss {r['peak_rss_mb']:6.1f} MiB",
                      flush=True)
    if not (opts.keep or opts.reuse):
        for kind, what in made:
            if kind == "file":
                Path(str(what)).unlink(missing_ok=True)
                for suffix in ("-wal", "-shm"):
                    Path(str(what) + suffix).unlink(missing_ok=True)
            else:
                u = sa.make_url(str(what))
                admin = sa.create_engine(u.set(database="postgres"), isolation_level="AUTOCOMMIT")
                with admin.connect() as conn:
                    conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{u.database}"')
                admin.dispose()
        for p in cache.glob("*.built"):
            p.unlink()
        shutil.rmtree(cache / "data", ignore_errors=True)
    largest = max((r["charges"] for r in results), default=0)
    print(json.dumps({
        "results": results, "build_s": build_s,
        "max_bill_s_at_largest": max((r["bill_s"] for r in results if r["charges"] == largest), default=None),
        "target_s": 1.0, "totals_checked": checked,
    }))


if __name__ == "__main__":
    main()
