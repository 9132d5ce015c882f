"""``/metrics``: the ledger in Prometheus' text format, read on each scrape.

:class:`LedgerCollector` is a custom ``prometheus_client`` collector: every scrape reads the
ledger once (:func:`costctl.serve.data.read_metrics`, one transaction) and yields these
families (names follow Prometheus' naming conventions: base units, ``_total`` for counters,
``_ratio`` for 0-1):

=====================================  =======  ===========================  ===================================
family                                 type     labels                       value
=====================================  =======  ===========================  ===================================
``costctl_spend_total``                counter  currency, provider, instance money charged, all time, in the
                                                                             currency's units (``costctl bill
                                                                             --by instance``)
``costctl_spend_rate_per_hour``        gauge    currency, provider, instance the newest charged rate of the
                                                                             instance's live run, per hour
``costctl_gpu_utilization_ratio``      gauge    provider, instance, gpu      a live run's newest reading per
                                                                             GPU, 0-1
``costctl_idle_seconds``               gauge    provider, instance           how long a live run has read idle
                                                                             (:func:`costctl.ledger.live.idle_readings`)
``costctl_live_runs``                  gauge    (none)                       open runs with a fresh heartbeat
``costctl_decisions_total``            counter  policy, action               decisions recorded
``costctl_stop_failures_total``        counter  (none)                       stops that ended failed
=====================================  =======  ===========================  ===================================

No run id is ever a label: run ids are unbounded (each run makes new series, which a
Prometheus server keeps for its retention); a live run is labelled by its instance, whose count
is bounded by the fleet. When two live runs share an instance, the newest run's figures are
its series (one series per label set). Live: not ended, heartbeat within
:data:`~costctl.serve.data.HEARTBEAT_STALE_S`. Two currencies are never added: spend and rate
are per currency label.

Money is Decimal in the ledger and in every sum; Prometheus samples are float64, so each
amount is converted with ``float()`` here, at exposition, and nowhere before (an amount keeps
its 15-16 significant digits: a cent is exact up to 10^13 units). Read money to the cent from
``costctl bill``, not from a float.

Metric names and help texts are an interface (dashboards and alerts are written against them):
English, never translated.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from .data import LiveRun, MetricsData

#: The families this collector yields (name as exposed, without a counter's ``_total``), in order.
FAMILIES = ("costctl_spend", "costctl_spend_rate_per_hour", "costctl_gpu_utilization_ratio", "costctl_idle_seconds",
            "costctl_live_runs", "costctl_decisions", "costctl_stop_failures")


class LedgerCollector(Collector):
    """Yields the families of the module docstring from ``read()``, called once per scrape.

    Args:
        read: returns this scrape's :class:`~costctl.serve.data.MetricsData`, or None when there
            is no ledger yet (the counters without labels are then 0 and the rest empty); it may
            raise :class:`~costctl.errors.LedgerError`, which the scrape passes on (503).
    """

    def __init__(self, read: Callable[[], MetricsData | None]) -> None:
        self.read = read

    def collect(self) -> Iterator[Metric]:
        """This scrape's families (reads the ledger once)."""
        data = self.read()
        spend = CounterMetricFamily("costctl_spend", "Money charged per instance, all time, in the currency's units "
                                    "(costctl bill --by instance; float64 of the ledger's exact Decimal).",
                                    labels=["currency", "provider", "instance"])
        rate = GaugeMetricFamily("costctl_spend_rate_per_hour", "Newest charged rate of the instance's live run, "
                                 "in the currency's units per hour.", labels=["currency", "provider", "instance"])
        util = GaugeMetricFamily("costctl_gpu_utilization_ratio", "Newest GPU utilization reading of the "
                                 "instance's live run, 0-1 (NVML: share of time a kernel ran).",
                                 labels=["provider", "instance", "gpu"])
        idle = GaugeMetricFamily("costctl_idle_seconds", "Seconds the instance's live run has read idle (every GPU "
                                 "and the job's CPU under [policies.idle] thresholds, no training-log point), "
                                 "up to its newest reading.", labels=["provider", "instance"])
        live = GaugeMetricFamily("costctl_live_runs", "Runs not ended whose heartbeat is fresh.")
        decisions = CounterMetricFamily("costctl_decisions", "Decisions recorded in the ledger, by policy and action.",
                                        labels=["policy", "action"])
        failures = CounterMetricFamily("costctl_stop_failures", "Stops that ended failed (the provider never "
                                       "confirmed them).")
        if data is not None:
            for row in data.instances:
                spend.add_metric([row.currency, row.provider, row.instance_id], float(row.spend))
            newest: dict[tuple[str, str], LiveRun] = {}
            for run in data.runs:  # newest first: the first run seen of an instance is its newest
                if run.live:
                    newest.setdefault((run.run.provider, run.run.instance_id), run)
            for (provider, instance), run in sorted(newest.items()):
                for currency, amount in sorted(run.rate.items()):
                    rate.add_metric([currency, provider, instance], float(amount))
                for reading in run.readings:
                    if reading.gpu_index is not None:
                        util.add_metric([provider, instance, str(reading.gpu_index)],
                                        min(max(reading.utilization / 100.0, 0.0), 1.0))
                if run.idle is not None:
                    idle.add_metric([provider, instance], run.idle.seconds)
            live.add_metric([], sum(1 for run in data.runs if run.live))
            for (policy, action), count in sorted(data.decisions.items()):
                decisions.add_metric([policy, action], count)
            failures.add_metric([], data.stop_failures)
        else:
            live.add_metric([], 0)
            failures.add_metric([], 0)
        yield from (spend, rate, util, idle, live, decisions, failures)


def exposition(collector: LedgerCollector, accept: str | None) -> tuple[bytes, str]:
    """The scrape's body and content type: Prometheus text format 0.0.4, or OpenMetrics when
    ``accept`` (the request's Accept header) asks for it (prometheus_client's own choice).

    Raises:
        LedgerError: the ledger cannot be read.
    """
    from prometheus_client import CollectorRegistry
    from prometheus_client.exposition import choose_encoder

    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    encoder, content_type = choose_encoder(accept or "")
    return encoder(registry), content_type


__all__ = ["FAMILIES", "LedgerCollector", "exposition"]
