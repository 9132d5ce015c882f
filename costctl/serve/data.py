"""What ``costctl serve`` reads from the ledger for one scrape or one page, in one transaction.

Everything comes from the ledger's own read-side queries: spend from
:func:`costctl.ledger.queries.bill_by_instance` and :func:`~costctl.ledger.queries.run_page`
(what ``costctl bill --by instance`` and ``--by run`` show, so the figures agree), the charts
from :func:`costctl.ledger.timeline.spend_series`, the open runs, their readings and the
decisions from :mod:`costctl.ledger.live`. Money stays Decimal per currency here; it becomes a
float only where Prometheus needs one (:mod:`.metrics`) and text only where it is shown.

The ledger's instances table (:data:`InstanceSource`, :func:`ledger_instances`: the instances
the ledger has charged) is what the page shows when no provider is configured or before the
first good fleet read; otherwise the table is the fleet's (:mod:`costctl.serve.fleet_view`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import sqlalchemy as sa

    from ..ledger.live import DecisionRecord, IdleReading, NewestLoss, OpenRun, Reading
    from ..ledger.queries import InstanceBill, RunBill
    from ..ledger.timeline import SpendSeries

#: A run whose heartbeat (``runs.last_seen_at``) is older than this is not counted as live
#: (seconds): the watch's own rule for a run that still guards,
#: :data:`costctl.watch.chainlock.HEARTBEAT_STALE_S` (not imported: that loads the whole watch;
#: a test keeps the two equal).
HEARTBEAT_STALE_S = 300.0

#: Runs shown in the runs table (the newest), and runs drawn in the per-run chart (the newest).
RUNS_SHOWN, RUNS_CHARTED = 50, 10
#: Decisions shown (the newest).
DECISIONS_SHOWN = 50
#: Points per chart series at most (an SVG 640 units wide needs no more).
CHART_POINTS = 320


@dataclass(frozen=True, slots=True)
class LiveRun:
    """An open run as served: the run, whether its heartbeat is fresh (``live``), its spend and
    newest charged rate per currency (Decimal; from :func:`~costctl.ledger.queries.run_page`),
    its newest readings, how long it has read idle, and its newest training loss."""

    run: OpenRun
    live: bool
    spend: dict[str, Decimal]
    rate: dict[str, Decimal]
    readings: list[Reading]
    idle: IdleReading | None
    loss: NewestLoss | None


@dataclass(frozen=True, slots=True)
class Thresholds:
    """The idle thresholds readings are judged by: ``[policies.idle]`` of the serving costctl
    (percent; CPU: percent of one core)."""

    min_gpu_utilization: float = 5.0
    min_cpu_utilization: float = 10.0

    @classmethod
    def from_settings(cls, settings: Any) -> Thresholds:
        """``[policies.idle]``'s thresholds, or the idle policy's defaults when it is not configured."""
        idle = getattr(getattr(settings, "policies", None), "idle", None)
        default = cls()
        return cls(float(getattr(idle, "min_gpu_utilization", default.min_gpu_utilization)),
                   float(getattr(idle, "min_cpu_utilization", default.min_cpu_utilization)))


@dataclass(frozen=True, slots=True)
class MetricsData:
    """One scrape: spend per instance and currency over the whole ledger (``instances``), the
    open runs (``runs``; :attr:`LiveRun.live` says which count as live), decisions per
    ``(policy, action)`` and the stops that ended failed."""

    instances: list[InstanceBill]
    runs: list[LiveRun]
    decisions: dict[tuple[str, str], int]
    stop_failures: int


@dataclass(frozen=True, slots=True)
class DashboardData:
    """One page: :class:`MetricsData`'s figures, the newest runs (``run_rows``, oldest first, with
    ``runs_total`` runs in the ledger), the totals per currency over every run, the spend series
    per instance and per run (the newest :data:`RUNS_CHARTED`), the newest decisions and the
    instances table's rows."""

    metrics: MetricsData
    run_rows: list[RunBill]
    runs_total: int
    totals: dict[str, Decimal]
    by_instance: list[SpendSeries]
    by_run: list[SpendSeries]
    decisions: list[DecisionRecord]
    instances: list[Any] = field(default_factory=list)


#: Gives the instances table's rows from a read connection (see the module docstring).
InstanceSource = Callable[["sa.Connection"], Sequence[Any]]


def ledger_instances(conn: sa.Connection) -> list[InstanceBill]:
    """The instances the ledger has charged, with their spend per currency (``costctl bill --by
    instance`` over all time)."""
    from ..ledger.queries import bill_by_instance

    return bill_by_instance(conn)


def live_runs(conn: sa.Connection, now: datetime, thresholds: Thresholds) -> list[LiveRun]:
    """The open runs with their money and readings (a few statements per open run)."""
    from ..ledger import live
    from ..ledger.queries import run_page

    runs = live.open_runs(conn)
    if not runs:
        return []
    ids = [r.run_id for r in runs]
    page = run_page(conn, run_ids=ids, limit=None, with_totals=False, now=now)
    spend: dict[str, dict[str, Decimal]] = {}
    rate: dict[str, dict[str, Decimal]] = {}
    for row in page.rows:
        spend.setdefault(row.run_id, {})[row.currency] = row.spend
        if row.price_per_hour is not None:
            rate.setdefault(row.run_id, {})[row.currency] = row.price_per_hour
    readings = live.newest_readings(conn, ids)
    idle = live.idle_readings(conn, ids, min_gpu_utilization=thresholds.min_gpu_utilization,
                              min_cpu_utilization=thresholds.min_cpu_utilization)
    losses = live.newest_losses(conn, ids)
    return [LiveRun(r, r.heartbeat_age_s(now) <= HEARTBEAT_STALE_S, spend.get(r.run_id, {}), rate.get(r.run_id, {}),
                    readings.get(r.run_id, []), idle.get(r.run_id), losses.get(r.run_id)) for r in runs]


def read_metrics(conn: sa.Connection, now: datetime, thresholds: Thresholds) -> MetricsData:
    """:class:`MetricsData` from one read connection."""
    from ..ledger import live

    return MetricsData(ledger_instances(conn), live_runs(conn, now, thresholds), live.decision_counts(conn),
                       live.stop_failures(conn))


def read_dashboard(conn: sa.Connection, now: datetime, thresholds: Thresholds,
                   instances: InstanceSource = ledger_instances) -> DashboardData:
    """:class:`DashboardData` from one read connection; the instances table from ``instances``."""
    from ..ledger import live
    from ..ledger.queries import run_page
    from ..ledger.timeline import spend_series

    billed = ledger_instances(conn)
    metrics = MetricsData(billed, live_runs(conn, now, thresholds), live.decision_counts(conn),
                          live.stop_failures(conn))
    page = run_page(conn, limit=RUNS_SHOWN, now=now)
    newest = list(dict.fromkeys(r.run_id for r in reversed(page.rows)))[:RUNS_CHARTED]
    return DashboardData(
        metrics=metrics,
        run_rows=page.rows,
        runs_total=page.runs_total,
        totals=page.totals,
        by_instance=spend_series(conn, max_points=CHART_POINTS),
        by_run=spend_series(conn, max_points=CHART_POINTS, by="run", run_ids=newest),
        decisions=live.recent_decisions(conn, limit=DECISIONS_SHOWN),
        instances=list(billed if instances is ledger_instances else instances(conn)),
    )


__all__ = ["CHART_POINTS", "DECISIONS_SHOWN", "DashboardData", "HEARTBEAT_STALE_S", "InstanceSource", "LiveRun",
           "MetricsData", "RUNS_CHARTED", "RUNS_SHOWN", "Thresholds", "ledger_instances", "live_runs",
           "read_dashboard", "read_metrics"]
