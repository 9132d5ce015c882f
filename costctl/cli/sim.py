"""``costctl sim preempt``: rehearse a spot preemption on the simulated provider.

``costctl sim preempt [INSTANCE] [--notice 30s]`` makes the simulated provider announce a
preemption of a spot instance ``--notice`` from now (default 30 s, the shortest notice a real
cloud gives: GCP and Azure). The watch running on that instance sees it at its next notice poll
(``[preemption] poll_interval``), requests a checkpoint, ends the job ``[preemption] margin`` +
``[watch] grace_period`` before the deadline and stops the instance, exactly as on a real spot
instance; at the deadline the simulated instance goes stopped (``preempted``). ``--notice 0s``
takes the instance at once, without notice (a preemption after the fact).

INSTANCE defaults to the only running spot instance of the simulation (the configured local one
when there are several). Errors (no such instance, not a simulated one, not spot, not running,
a bad duration) are one line with exit status 2 (usage) or 3 (provider).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

import typer

from .translated import CostctlTyper

from ..errors import UsageError
from .common import ConfigOption, settings_from

sim_app = CostctlTyper(
    name="sim",
    help="The simulated provider: rehearse what a real cloud does (sim preempt: a spot preemption notice).",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
)

#: Longest notice ``--notice`` accepts.
MAX_NOTICE = timedelta(hours=1)


def parse_notice(text: str) -> timedelta:
    """``--notice``: ``30s``, ``2m``, ``0s`` (at once) ... up to one hour.

    Raises:
        UsageError: anything else (one line naming what is allowed).
    """
    from ..config_types import parse_duration

    try:
        return parse_duration(text, minimum=timedelta(0), maximum=MAX_NOTICE,
                              allowed="a duration from 0s (at once) to 1h, like 30s, 2m or 90")
    except ValueError as exc:
        raise UsageError(f"--notice {text!r}: {exc}") from None


@sim_app.command("preempt")
def preempt(
    instance: Annotated[str | None, typer.Argument(
        metavar="[INSTANCE]", help="Simulated spot instance (default: the only running one).")] = None,
    notice: Annotated[str, typer.Option(
        "--notice", help="Warning before the instance is taken, like 30s or 2m (0s: at once, without notice).")] = "30s",
    config: ConfigOption = None,
) -> None:
    """Announce a preemption of a simulated spot instance, as a cloud would: the watch on it
    requests a checkpoint, ends the job before the deadline and stops the instance."""
    from ..cloud import open_provider

    notice_td = parse_notice(notice)
    settings = settings_from(config)
    prov = open_provider(settings, "sim")
    target = prov.preemption_target(instance)  # type: ignore[attr-defined]
    inst = prov.inject_preemption(target, notice_td.total_seconds())  # type: ignore[attr-defined]
    seconds = notice_td.total_seconds()
    if seconds > 0:
        deadline = inst.raw["notice"]["deadline"] if inst.raw.get("notice") else "?"
        typer.echo(f"preemption notice issued for {inst.id}: taken at {deadline} ({seconds:g}s from now); "
                   f"a watch on it requests a checkpoint at its next notice poll "
                   f"(every {settings.preemption.poll_interval.total_seconds():g}s)")
    else:
        typer.echo(f"{inst.id} taken at once, without notice (status {inst.status.value}, {inst.status_raw})")


def register(app: typer.Typer) -> None:
    """Add ``costctl sim`` to ``app``."""
    app.add_typer(sim_app, name="sim")
