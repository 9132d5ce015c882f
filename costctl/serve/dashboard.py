"""The dashboard page: server-rendered HTML (Jinja2, autoescaped), inline SVG charts, no script.

:func:`render` turns one :class:`~costctl.serve.data.DashboardData` into the page: totals per
currency; spend over time per instance and per run (one SVG chart per currency each, ids
``spend-by-instance-<CUR>`` / ``spend-by-run-<CUR>``, class ``spend-chart``); the open runs with
their status line (table ``live-runs``); the newest runs (table ``runs``); the newest decisions
with their evidence, redacted (table ``decisions``); and the instances (table ``instances``):
``costctl fleet``'s rows when the provider accounts are read (:mod:`.fleet_view`: every
instance, guarded or not, with the time of the read and the accounts that could not be read,
each with its error), else the instances the ledger has charged, the page saying why.

The template (``templates/dashboard.html``, package data) holds markup only: every sentence is
translated here, through :func:`costctl.i18n._`, in the language costctl shows ([ui] language,
else ``LANG``...; :mod:`costctl.i18n`), and the page says which (``<html lang>``). Times are shown
in ``[watch] timezone`` without microseconds; money as the language writes it, per currency,
never added across currencies: spends and totals to the cent as ``costctl bill`` shows them
(:func:`costctl.report.money_cell`: ``$1.23``, ``<$0.01`` for less), prices per hour and the
live status line's spend as every command shows them (:func:`costctl.i18n.format_amount`:
``$0.0123/h``).

Readable on a phone: a viewport meta tag, CSS that stacks on narrow screens, tables that scroll
sideways inside their box, and charts that scale to the width (SVG ``viewBox``).
"""

from __future__ import annotations

import json
from datetime import datetime, tzinfo
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from ..i18n import _, display_word, format_amount, language
from ..report import duration_cell, money_cell, price_cell
from . import charts

if TYPE_CHECKING:
    from jinja2 import Environment

    from ..fleet.model import FleetRow, Guard
    from .data import DashboardData, LiveRun
    from .fleet_view import FleetView
    from .redaction import Redactor

#: Seconds between the page's own reloads (``<meta http-equiv="refresh">``): no script needed.
REFRESH_S = 60
#: Characters of a decision's evidence shown at most (the rest is cut, and said to be).
EVIDENCE_CHARS = 4000


@lru_cache(maxsize=1)
def environment() -> Environment:
    """The Jinja2 environment: templates from the package, HTML autoescaped, undefined names an
    error (a template typo fails the tests, not silently an empty cell)."""
    from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

    return Environment(loader=PackageLoader("costctl.serve", "templates"),
                       autoescape=select_autoescape(["html", "svg"], default=True),
                       undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)


def _time(value: datetime | None, tz: tzinfo) -> str:
    """A time in ``tz``, to the second (``2026-03-01 22:00:00``); ``-`` for None."""
    return "-" if value is None else value.astimezone(tz).strftime("%Y-%m-%d %H:%M:%S")


def _age(seconds: float) -> str:
    """A duration as ``H:MM:SS``."""
    return duration_cell(max(0.0, seconds))


def texts() -> dict[str, str]:
    """Every fixed text of the page, translated (keys are the template's names)."""
    return {
        "title": _("costctl dashboard"),
        "totals": _("Spend, all time"),
        "spend_over_time": _("Spend over time"),
        "per_instance": _("Cumulative spend per instance"),
        "per_run": _("Cumulative spend per run (the newest runs)"),
        "no_spend": _("Nothing charged yet."),
        "live": _("Live runs"),
        "no_live": _("No run is open."),
        "runs": _("Runs"),
        "no_runs": _("No run recorded yet."),
        "decisions": _("Decisions"),
        "no_decisions": _("No decision recorded yet."),
        "instances": _("Instances"),
        "no_instances": _("No instance charged yet."),
        "instances_note": _("The instances this ledger has charged; `costctl fleet` lists every instance the "
                            "configured provider accounts report."),
        "evidence": _("evidence"),
        "col_run": _("Run"),
        "col_instance": _("Instance"),
        "col_gpu": _("GPU"),
        "col_started": _("Started"),
        "col_duration": _("Duration"),
        "col_status": _("Status"),
        "col_spend": _("Spend"),
        "col_rate": _("Rate per hour"),
        "col_status_line": _("Status line"),
        "col_time": _("Time"),
        "col_policy": _("Policy"),
        "col_action": _("Action"),
        "col_reason": _("Reason"),
        "col_outcome": _("Outcome"),
        "col_provider": _("Provider"),
        "col_billing": _("Billing"),
        "col_runs": _("Runs"),
        "col_last_charge": _("Last charge"),
        "metrics_link": _("Prometheus metrics"),
        "fleet_note": _("Every instance the configured provider accounts report (`costctl fleet`'s read); "
                        "\"unguarded\": no watch of this ledger stops it."),
        "no_fleet_instances": _("The provider accounts report no instance."),
        "col_account": _("Account"),
        "col_uptime": _("Uptime"),
        "col_provider_spend": _("Spend (provider)"),
        "col_ledger_spend": _("Spend (ledger)"),
        "col_guard": _("Guard"),
    }


def _readings_text(run: LiveRun) -> str:
    """``GPU0 95%, GPU1 3%, CPU 120%`` from the run's newest readings (as the watch's status line
    shows them), or a sentence saying there are none."""
    parts = [f"GPU{r.gpu_index} {r.utilization:.0f}%" if r.gpu_index is not None else f"CPU {r.utilization:.0f}%"
             for r in run.readings]
    return ", ".join(parts) if parts else _("no readings yet")


def status_line(run: LiveRun, now: datetime) -> str:
    """The run's status line, as the watch draws its own (``costctl | elapsed | spend | readings |
    loss``), from what the ledger holds, with its heartbeat: ``0:42:10 | $0.3215 | GPU0 95% |
    loss 0.412 | idle 0:00:00 | heartbeat 0:00:04 ago`` (money as the watch's own status line
    writes it: :func:`costctl.i18n.format_amount`)."""
    parts = [_age((now - run.run.started_at).total_seconds())]
    parts += [format_amount(amount, currency) for currency, amount in sorted(run.spend.items())]
    parts.append(_readings_text(run))
    loss = run.loss
    if loss is None:
        parts.append(_("no loss yet"))
    elif loss.value is None:
        parts.append(_("loss {loss}").format(loss=loss.special))
    else:
        parts.append(_("loss {loss:.4g}").format(loss=loss.value))
    if run.idle is not None:
        parts.append(_("read idle for {duration}").format(duration=_age(run.idle.seconds)))
    age = run.run.heartbeat_age_s(now)
    if run.live:
        parts.append(_("heartbeat {age} ago").format(age=_age(age)))
    else:
        parts.append(_("no heartbeat for {age}: its watch may be gone").format(age=_age(age)))
    if run.run.mode == "dry-run":
        parts.append(_("dry run: nothing is stopped"))
    elif run.run.mode == "advise-only":
        parts.append(_("advise-only: nothing is stopped"))
    return " | ".join(parts)


def _status(row: Any) -> str:
    """A run's status with its exit code, and its watch mode (``failed (1), dry run``)."""
    shown = display_word(row.status)
    status = shown if row.exit_code is None else _("{status} ({code})").format(status=shown, code=row.exit_code)
    if getattr(row, "dry_run", False):
        return _("{status}, dry run").format(status=status)
    if getattr(row, "advise_only", False):
        return _("{status}, advise-only").format(status=status)
    return status


def _gpu(gpu: str | None, count: int | None) -> str:
    name = gpu or "-"
    return f"{count}x {name}" if count and count > 1 else name


def _evidence(value: Any, redactor: Redactor) -> str:
    """The evidence as indented JSON, redacted, cut to :data:`EVIDENCE_CHARS`."""
    text = json.dumps(redactor.value(value), indent=1, sort_keys=True, ensure_ascii=False, default=str)
    if len(text) > EVIDENCE_CHARS:
        text = _("{text}... ({count} more characters not shown)").format(text=text[:EVIDENCE_CHARS],
                                                                          count=len(text) - EVIDENCE_CHARS)
    return text


def _outcome(d: Any, redactor: Redactor) -> str:
    """The decision's outcome (redacted) and, for a stop, its final state."""
    outcome = redactor.text(d.outcome) if d.outcome else ""
    if d.stop_state:
        return _("{outcome} (stop: {state})").format(outcome=outcome, state=d.stop_state) if outcome else \
            _("stop: {state}").format(state=d.stop_state)
    return outcome or "-"


def guard_text(guard: Guard) -> str:
    """A fleet row's guard as ``costctl fleet`` words it (the heartbeat's age as ``H:MM:SS``)."""
    from ..fleet.model import guard_words

    return guard_words(guard, _age(guard.heartbeat_age.total_seconds()) if guard.heartbeat_age is not None else "-")


def _fleet_row(row: FleetRow) -> dict[str, Any]:
    inst = row.instance
    word = display_word(inst.status)
    status = _("{status} (preempted)").format(status=word) if inst.preempted else word
    return {
        "provider": row.provider, "account": row.account if row.account is not None else _("default"),
        "instance": inst.id, "gpu": _gpu(inst.gpu or inst.gpu_raw, inst.gpu_count), "status": status,
        "rate": f"{price_cell(inst.price_per_hour, inst.currency)}/h" if inst.price_per_hour is not None else "-",
        "uptime": duration_cell(float(row.uptime_s)) if row.uptime_s is not None else "-",
        "provider_spend": money_cell(row.provider_spend.amount, inst.currency) if row.provider_spend else "-",
        "ledger_spend": ", ".join(money_cell(a, c) for c, a in sorted(row.ledger_spend.items())) or "-",
        "guard": guard_text(row.guard), "guarded": row.guard.guarded,
    }


def _unreadable(read: Any, redactor: Redactor) -> str:
    """An account the fleet read could not read, with its error (redacted)."""
    error = read.error or ""
    for colon in (": ", "："):
        if error.startswith(read.provider + colon):
            error = error[len(read.provider) + len(colon):]
    line = _("{provider}: cannot be read: {error}") if read.account is None else \
        _("{provider} account {account}: cannot be read: {error}")
    return redactor.text(line.format(provider=read.provider, account=read.account, error=error))


def _fleet_context(fleet: FleetView, tz: tzinfo, redactor: Redactor) -> dict[str, Any]:
    """The instances section's fleet part: its rows (None: the ledger's table is shown), the
    line saying when they were read or why they are not shown, and the unreadable accounts."""
    out: dict[str, Any] = {"fleet_rows": None, "fleet_status": None,
                           "fleet_failed": [_unreadable(a, redactor) for a in fleet.failed]}
    if fleet.rows is not None:
        out["fleet_rows"] = [_fleet_row(r) for r in fleet.rows]
        out["fleet_status"] = _("Provider accounts read at {time}.").format(time=_time(fleet.as_of, tz))
        if fleet.failed:
            out["fleet_status"] += " " + _("At {time} these could not be read (the table is the last good read):").format(
                time=_time(fleet.failed_at, tz))
    elif fleet.reading:
        out["fleet_status"] = _("The provider accounts are being read; until then, the instances this ledger has "
                                "charged.")
    else:
        out["fleet_status"] = _("The provider accounts could not be read yet; the instances this ledger has charged "
                                "are shown instead.")
        if fleet.error:
            out["fleet_failed"].append(redactor.text(_("the fleet read failed: {error}").format(error=fleet.error)))
    return out


def view(data: DashboardData | None, *, now: datetime, tz: tzinfo, redactor: Redactor, ledger: str,
         note: str | None = None, fleet: FleetView | None = None) -> dict[str, Any]:
    """The template's context for ``data`` (None: no ledger yet, ``note`` says why); the
    instances table from ``fleet`` when it has rows (None: no provider configured, the
    ledger's table)."""
    zone = getattr(tz, "key", None) or str(tz)
    context: dict[str, Any] = {
        "lang": "zh-CN" if language() == "zh_CN" else "en",
        "t": texts(),
        "refresh_s": REFRESH_S,
        "as_of": _("Ledger {ledger}, read at {time} ({zone}); the page reloads every {seconds} seconds.").format(
            ledger=ledger, time=_time(now, tz), zone=zone, seconds=REFRESH_S),
        "note": note,
        "totals": [], "instance_charts": [], "run_charts": [], "live": [], "runs": [], "runs_note": None,
        "decisions": [], "instances": [], "fleet_rows": None, "fleet_status": None, "fleet_failed": [],
    }
    if fleet is not None:
        context.update(_fleet_context(fleet, tz, redactor))
    if data is None:
        return context
    context["totals"] = [money_cell(amount, currency) for currency, amount in sorted(data.totals.items())]
    context["instance_charts"] = [(c, _("Cumulative spend per instance, {currency}").format(currency=c.currency),
                                   [money_cell(line.total, c.currency) for line in c.lines])
                                  for c in charts.charts(data.by_instance, tz, "spend-by-instance")]
    context["run_charts"] = [(c, _("Cumulative spend per run, {currency}").format(currency=c.currency),
                              [money_cell(line.total, c.currency) for line in c.lines])
                             for c in charts.charts(data.by_run, tz, "spend-by-run")]
    context["live"] = [{
        "run": r.run.run_id[:8], "instance": f"{r.run.provider}:{r.run.instance_id}", "gpu": r.run.gpu or "-",
        "started": _time(r.run.started_at, tz),
        "rate": ", ".join(f"{price_cell(a, c)}/h" for c, a in sorted(r.rate.items())) or "-",
        "line": status_line(r, now), "live": r.live,
    } for r in data.metrics.runs]
    context["runs"] = [{
        "run": r.run_id[:8], "instance": f"{r.provider}:{r.instance_id}", "gpu": _gpu(r.gpu, r.gpu_count),
        "started": _time(r.started_at, tz), "duration": duration_cell(r.duration_s), "status": _status(r),
        "spend": money_cell(r.spend, r.currency),
    } for r in reversed(data.run_rows)]
    hidden = data.runs_total - len({r.run_id for r in data.run_rows})
    if hidden > 0:
        context["runs_note"] = _("The newest {shown} runs; {hidden} older runs are in `costctl bill`.").format(
            shown=len({r.run_id for r in data.run_rows}), hidden=hidden)
    context["decisions"] = [{
        "time": _time(d.time, tz), "run": d.run_id[:8] if d.run_id else "-", "instance": f"{d.provider}:{d.instance_id}",
        "policy": d.policy, "action": _("{action} (dry run)").format(action=display_word(d.action)) if d.dry_run
        else display_word(d.action),
        "reason": redactor.text(d.reason), "outcome": _outcome(d, redactor), "evidence": _evidence(d.evidence, redactor),
    } for d in data.decisions]
    context["instances"] = [{
        "provider": i.provider, "instance": i.instance_id, "gpu": _gpu(i.gpu, getattr(i, "gpu_count", None)),
        "billing": display_word(getattr(i, "billing", None) or "-"),
        "rate": f"{price_cell(i.price_per_hour, i.currency)}/h" if i.price_per_hour is not None else "-",
        "runs": getattr(i, "runs", "-"), "last_charge": _time(getattr(i, "last_charge_at", None), tz),
        "spend": money_cell(i.spend, i.currency),
    } for i in data.instances]
    return context


def render(data: DashboardData | None, *, now: datetime, tz: tzinfo, redactor: Redactor, ledger: str,
           note: str | None = None, fleet: FleetView | None = None) -> str:
    """The dashboard page as HTML text (see the module docstring and :func:`view`)."""
    return environment().get_template("dashboard.html").render(
        **view(data, now=now, tz=tz, redactor=redactor, ledger=ledger, note=note, fleet=fleet))


__all__ = ["EVIDENCE_CHARS", "REFRESH_S", "environment", "guard_text", "render", "status_line", "texts", "view"]
