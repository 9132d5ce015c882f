"""``costctl analyze``: replay the configured policies over recorded GPU and training logs.

Reads the logs with :mod:`costctl.replay` (format from content), replays the same policy engine
``costctl watch`` runs on a simulated clock (no waiting), and reports the idle stretches, each
decision with the money it would have saved, the oracle's saving and, with ``--compare``, the
peers' rules (SkyPilot autostop, dstack utilization_policy).
"""

from __future__ import annotations

import json
import re
import sys
from datetime import datetime, timedelta, timezone
from enum import Enum
from itertools import islice
from pathlib import Path
from typing import Annotated, Any

import typer

from ..errors import CostctlError, UsageError
from ..i18n import N_, _
from .common import ConfigOption, out_console, settings_from
from .when import parse_when_option

TIME_ALLOWED = N_("expected an ISO-8601 date-time such as 2026-02-02T01:07:37 (no offset = the logs' own clock, read "
                  "as UTC)")
#: ``--step-rate`` at most 10^6 steps per second (no training loop is faster; a placement past it
#: would put a whole log within a microsecond).
MAX_STEP_RATE = 1_000_000
#: ``--sky-idle-minutes`` at most a year of minutes (SkyPilot's own ``-i`` is minutes).
MAX_SKY_IDLE_MINUTES = 525_600


class AnalyzeFormat(str, Enum):
    """Output formats of ``costctl analyze``."""

    table = "table"
    json = "json"


def parse_start_time(text: str) -> datetime:
    """``--start-time``: ISO 8601 or nvidia-smi's ``YYYY/MM/DD HH:MM:SS``; naive = UTC (as the logs).

    Raises:
        UsageError: anything else.
    """
    value = text.strip()
    if re.match(r"\d{4}/\d{2}/\d{2}", value):  # nvidia-smi's own timestamp shape
        value = value.replace("/", "-", 2)
    return parse_when_option(value, option="--start-time", tz=timezone.utc, allowed=_(TIME_ALLOWED))


def _duration(text: str | None, option: str) -> timedelta | None:
    from ..config import parse_duration

    if text is None:
        return None
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise UsageError(_("{option} {value!r}: {problem}").format(option=option, value=text, problem=exc)) from None


def analyze(
    gpu_log: Annotated[Path | None, typer.Option("--gpu-log", help=_("nvidia-smi --query-gpu CSV, looped nvidia-smi table, or wandb system-metrics JSONL."))] = None,
    train_log: Annotated[Path | None, typer.Option("--train-log", help=_("trainer_state.json, metrics.csv, CSVLogger, results.csv, metrics.json, scalars JSON or a console log."))] = None,
    price: Annotated[str | None, typer.Option("--price", help=_("Price per instance-hour (all GPUs), e.g. 2.5."))] = None,
    currency: Annotated[str | None, typer.Option("--currency", help=_("ISO 4217 code of --price (default: [instance] currency)."))] = None,
    gpu: Annotated[str | None, typer.Option("--gpu", help=_("GPU model for a catalog price, e.g. 'RTX 4090' (with --provider)."))] = None,
    provider: Annotated[str | None, typer.Option("--provider", help=_("Provider for a catalog price, e.g. runpod (with --gpu)."))] = None,
    config: ConfigOption = None,
    compare: Annotated[bool, typer.Option("--compare", help=_("Also replay SkyPilot autostop -i 5 (its default) and dstack utilization_policy with its documented example (10 %, 1h) and its 5-minute minimum window."))] = False,
    fmt: Annotated[AnalyzeFormat, typer.Option("--format", "-f", help=_("table or json."))] = AnalyzeFormat.table,
    plot: Annotated[Path | None, typer.Option("--plot", help=_("Write a PNG with utilization, loss, decisions and spend (needs matplotlib)."))] = None,
    start_time: Annotated[str | None, typer.Option("--start-time", help=_("Wall time of the training log's first point (with --step-rate), or of an elapsed-seconds GPU log's start."))] = None,
    step_rate: Annotated[float | None, typer.Option("--step-rate", help=_("Training steps (or epochs, for per-epoch logs) per second, to place the training log in time."))] = None,
    time_window: Annotated[str | None, typer.Option("--time-window", help=_("Override [policies.idle] time_window (e.g. 10m, or off)."))] = None,
    min_gpu_utilization: Annotated[float | None, typer.Option("--min-gpu-utilization", help=_("Override [policies.idle] min_gpu_utilization (percent)."))] = None,
    sample_interval: Annotated[str | None, typer.Option("--sample-interval", help=_("The GPU log's sampling period (default: its median gap)."))] = None,
    min_stretch: Annotated[str, typer.Option("--min-stretch", help=_("List idle stretches at least this long."))] = "5m",
    gpu_log_columns: Annotated[str | None, typer.Option("--gpu-log-columns", help=_("--query-gpu fields in order, for a headerless nvidia-smi CSV without units."))] = None,
    loss_regex: Annotated[str | None, typer.Option("--loss-regex", help=_("Regex with a (?P<loss>...) group for an unusual console log."))] = None,
    loss: Annotated[str | None, typer.Option("--loss", help=_("Which train loss series the policies watch when the log has several (e.g. 'G loss', 'train_loss_epoch'); default: a 'total' one, else the plain per-batch loss, else the first."))] = None,
    sky_idle_minutes: Annotated[float, typer.Option("--sky-idle-minutes", help=_("sky autostop -i MINUTES for --compare."))] = 5.0,
) -> None:
    """Replay the configured policies over recorded logs and show what they would have saved.

    Stretch spend = price x duration; a stop saves price x (end of log - stop time); the
    oracle stops at the first sample of the final idle stretch (or a configured plateau's
    onset). Times are shown as the logs recorded them.
    """
    # The replay stack loads here, not when the CLI starts (costctl --help lists this command).
    from ..replay.analysis import AnalyzeOptions, analyze as run_analysis, to_dict
    from ..replay.pricing import resolve_price
    from ..replay.engine import LossReplay
    from ..replay.readers import open_gpu_log, read_train_log
    from ..replay.render import render
    from ..replay.timeline import place_progress

    overrides: dict[str, Any] = {}
    idle: dict[str, Any] = {}
    if time_window is not None:
        idle["time_window"] = time_window
    if min_gpu_utilization is not None:
        idle["min_gpu_utilization"] = min_gpu_utilization
    if idle:
        overrides["policies"] = {"idle": idle}
    settings = settings_from(config, **overrides)
    if gpu_log is None and train_log is None:
        raise UsageError(_("nothing to analyze: give --gpu-log FILE and/or --train-log FILE"))
    if not 0 < sky_idle_minutes <= MAX_SKY_IDLE_MINUTES:  # False for nan too
        raise UsageError(_("--sky-idle-minutes {value:g}: expected a number of minutes above 0 and up to {maximum} "
                           "(a year)").format(value=sky_idle_minutes, maximum=MAX_SKY_IDLE_MINUTES))
    start = parse_start_time(start_time) if start_time else None
    # Usage errors before any log is read (a big log takes a while to read).
    if step_rate is not None:
        if train_log is None:
            raise UsageError(_("--step-rate places a training log in time: give --train-log too"))
        if start is None:
            raise UsageError(_("--start-time and --step-rate go together: give both to place the training log in time"))
        if not 0 < step_rate <= MAX_STEP_RATE:  # False for nan too
            raise UsageError(_("--step-rate {value:g}: expected a number of steps (or epochs) per second above 0 and "
                               "up to {maximum}").format(value=step_rate, maximum=MAX_STEP_RATE))
    columns = [c.strip() for c in gpu_log_columns.split(",") if c.strip()] if gpu_log_columns else None
    options = AnalyzeOptions(
        compare=compare,
        min_stretch=_duration(min_stretch, "--min-stretch") or timedelta(minutes=5),
        sample_interval=_duration(sample_interval, "--sample-interval"),
        skypilot_idle_minutes=sky_idle_minutes,
    )
    glog = open_gpu_log(gpu_log, columns=columns, start=start) if gpu_log is not None else None  # streamed
    # the loss replay is fed the train points while the log is read (one read, not two); a log
    # placed in time (--step-rate) is replayed on the time axis instead and does not use it
    gpu_count = len(glog.gpu_indices) if glog is not None else None
    rate, price_source = resolve_price(settings, price=price, currency=currency, gpu=gpu, provider=provider,
                                       gpu_count=gpu_count)
    pre_replay = None
    if train_log is not None and step_rate is None:
        try:
            pre_replay = LossReplay(settings, rate=rate)
        except Exception:  # noqa: BLE001 - the replay after the read raises it, where it always did
            pre_replay = None
    tlog = (read_train_log(train_log, loss_regex=loss_regex, streamed=True, replay=pre_replay,
                           loss_name=loss)
            if train_log is not None else None)
    progress, placement = (None, None)
    no_loss = None
    if tlog is not None and not (tlog.count("train") or tlog.count("eval") or tlog.extra or tlog.grad_norms):
        no_loss = _("no loss was found in {path} (read as a {format} log): costctl reads HF dicts, "
                    "trainer_state.json, CSV/JSON metrics and console lines such as 'loss: 0.5'; --loss-regex "
                    "REGEX reads another shape").format(path=train_log, format=tlog.format)
        if glog is None:
            raise UsageError(_("--train-log: {problem}; nothing to analyze").format(problem=no_loss))
    if tlog is not None:
        gpu_only_start = start is not None and step_rate is None and glog is not None and glog.relative
        if step_rate is not None:
            tlog = tlog.materialized()  # placed in time: the timed replay takes every point at once
        progress, placement = place_progress(
            tlog, start=None if gpu_only_start else start, step_rate=step_rate
        )
    elif step_rate is not None:
        raise UsageError(_("--step-rate places a training log in time: give --train-log too"))
    result = run_analysis(settings, gpu_log=glog, train_log=tlog, progress=progress, placement=placement,
                          rate=rate, options=options)
    if no_loss is not None:
        result.notes.append(no_loss)
    if glog is not None:
        result.rightsizing = _rightsizing(settings, result, gpu=gpu, provider=provider)
    if rate is not None:
        result.notes.append(_("price from {source}").format(source=price_source))
    if plot is not None:
        from ..replay.plot import plot_analysis

        plot_analysis(result, plot, progress)
        result.notes.append(_("plot written to {path}").format(path=plot))
    if fmt is AnalyzeFormat.json:
        _write_json(to_dict(result))
    else:
        render(result, out_console)


def _rightsizing(settings: Any, result: Any, *, gpu: str | None, provider: str | None) -> Any:
    """:func:`costctl.lifecycle.underuse.rightsizing_from_log` for the analysis's GPU log: the card
    is ``--gpu`` or the log's name column; peak memory the highest on any one GPU; utilization the
    mean of the GPUs' means; cheaper cards from the price table of ``--provider`` (else
    ``[instance] provider``) in the price's currency and ``[instance] billing``."""
    from ..catalog import load_price_table
    from ..lifecycle.sizing import options_from_price_table
    from ..lifecycle.underuse import LogRightsizing, rightsizing_from_log

    stats = [st for st in result.gpu_stats if st.samples]
    if not stats:
        return LogRightsizing(None, _("right-sizing: the GPU log has no readings"))
    name = gpu or next((st.name for st in stats if st.name), None)
    peaks = [st.memory_used_max for st in stats if st.memory_used_max is not None]
    totals = [st.memory_total for st in stats if st.memory_total]
    means = [st.mean_utilization for st in stats if st.mean_utilization is not None]
    rate = result.rate
    options: list[Any] = []
    if rate is not None:
        try:
            table = load_price_table(settings)
        except CostctlError:
            table = None
        if table is not None:
            billing = "spot" if settings.instance.billing == "spot" else "on-demand"
            options = options_from_price_table(table, provider=provider or settings.instance.provider,
                                               gpu_count=len(stats), billing=billing, currency=rate.currency)
    duration = (result.end - result.start).total_seconds() if result.start and result.end else 0.0
    return rightsizing_from_log(
        run_id="", label=_("the recorded run"), gpu=name, rate=rate, duration_s=duration,
        peak_memory_bytes=max(peaks) if peaks else None, card_memory_bytes=min(totals) if totals else None,
        # the busiest GPU's mean: it bounds the run's pace (an idle GPU beside it must not halve the figure)
        mean_utilization=max(means) if means else None, options=options, config=settings.downsize)


def _write_json(data: Any) -> None:
    """:func:`print_json`'s exact output, written piece by piece (no one giant string: a long
    log's thousands of decisions would double the peak memory)."""
    encoder = json.JSONEncoder(indent=2, default=str, ensure_ascii=False)
    write = sys.stdout.write
    pieces = encoder.iterencode(data)
    # Pieces are a few characters each: written in runs of 8192 (one write per run, not per piece).
    while run := list(islice(pieces, 8192)):
        write("".join(run))
    write("\n")


def register(app: typer.Typer) -> None:
    """Add ``costctl analyze`` to ``app``."""
    app.command("analyze", help=_(
        "Replay the configured policies over recorded logs and show what they would have saved.\n\n"
        "Stretch spend = price x duration; a stop saves price x (end of log - stop time); the oracle stops at "
        "the first sample of the final idle stretch (or a configured plateau's onset). Times are shown as the "
        "logs recorded them."))(analyze)
