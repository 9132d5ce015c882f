"""``costctl snooze DURATION|off``: postpone the pending idle autostop of the running watches.

From a shell of the same user on the same machine: ``costctl snooze 1h`` asks every running
watch of this user (their control sockets in the user's runtime dir, :mod:`costctl.snooze`) to
hold its idle autostop for an hour (at most ``[snooze] max``, the watch's own setting);
``costctl snooze off`` lifts it; ``costctl snooze status`` shows what is pending. ``--watch PID``
picks one watch. Each watch answers with one line: what it did and what is pending now. A watch
records the snooze as a decision naming who (user, uid, pid) and when. Budget caps and a failed
stop are never snoozed, nor a stop under way.

``--instance PROVIDER:ID`` snoozes ``costctl patrol`` instead: its actions (stop, release) on
that instance are held until then (``off`` lifts it), recorded in the ledger as a ``snooze``
decision of the instance naming who and when; a mark goes on, and the action comes after the
snooze if the instance still matches. The watches' control sockets cannot reach a patrol (it
runs elsewhere, often on no instance at all), so this snooze lives in the ledger the patrols
share.

Exit status: 0 when every watch reached answered yes, 1 when none runs or one refused (or, with
``--instance``, the ledger has no such instance), 2 for a bad argument.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ..errors import UsageError
from ..i18n import _
from .common import ConfigOption, DbOption

if TYPE_CHECKING:
    from ..clock import Clock

#: Longest snooze the command asks for (each watch also caps it at its ``[snooze] max``).
MAX_ASK = timedelta(days=7)
ALLOWED = "a duration like 10m, 1h or 1h30m, off, or status"


def parse_request(text: str, maximum: timedelta | None = None) -> dict[str, object]:
    """``10m`` -> ``{"op": "snooze", "seconds": 600}``; ``off``; ``status``.

    Args:
        maximum: the configured ``[snooze] max``, named in the error (None: it could not be
            read, or snoozes are off: the error names only the syntax). A longer duration is
            still sent: each watch caps it at its own maximum and says so.

    Raises:
        UsageError: anything else (one line naming what is allowed).
    """
    word = text.strip().lower()
    if word in ("off", "status"):
        return {"op": word}
    from ..config_types import parse_duration

    try:
        td = parse_duration(text, maximum=MAX_ASK, allowed=ALLOWED)
    except ValueError:
        if maximum is None:
            raise UsageError(_("snooze {text!r}: expected a duration like 10m, 1h or 1h30m, off, or status").format(
                text=text)) from None
        from ..config_types import format_duration

        raise UsageError(_("snooze {text!r}: expected a duration like 10m, 1h or 1h30m (at most {max}, the "
                           "configured [snooze] max), off, or status").format(
            text=text, max=format_duration(maximum))) from None
    return {"op": "snooze", "seconds": td.total_seconds()}


def clock() -> Clock:
    """The clock a patrol snooze is dated with (real time; a test replaces this function)."""
    from ..clock import RealClock

    return RealClock()


def snooze(
    duration: Annotated[str, typer.Argument(metavar="DURATION|off|status",
                                            help=_("How long to hold the idle autostop (10m, 1h), off, "
                                                      "or status."))],
    watch: Annotated[int | None, typer.Option("--watch", metavar="PID",
                                              help=_("Only the watch with this process id."))] = None,
    instance: Annotated[str | None, typer.Option(
        "--instance", metavar="PROVIDER:ID",
        help=_("Hold costctl patrol's actions on this instance instead (recorded in the ledger)."))] = None,
    config: ConfigOption = None,
    db: DbOption = None,
) -> None:
    """Postpone the pending idle autostop of the running watches of this user on this machine
    (DURATION, capped by each watch's [snooze] max), lift it (off), or show what is pending
    (status). Budget caps and a failed stop are never snoozed."""
    from ..snooze import request, watch_sockets

    try:
        payload = parse_request(duration)
    except UsageError:
        payload = parse_request(duration, _configured_max(config))  # raises, naming the real maximum
    if instance is not None:
        if watch is not None:
            raise UsageError(_("--instance and --watch name different things: give one"))
        _snooze_patrol(instance, payload, config, db)
        return
    sockets = watch_sockets()
    if watch is not None:
        sockets = [p for p in sockets if p.name == f"watch-{watch}.sock"]
    if not sockets:
        if watch is not None:
            none = _("costctl: no running watch {pid} of this user on this machine to reach (none listens in "
                     "{dir})")
        else:
            none = _("costctl: no running costctl watch of this user on this machine to reach (none listens in "
                     "{dir})")
        typer.echo(none.format(pid=watch, dir=_dir()), err=True)
        raise typer.Exit(1)
    reached = refused = 0
    for path in sockets:
        try:
            answer = request(path, payload)
        except (ConnectionRefusedError, FileNotFoundError):
            _forget(path)  # its watch died without removing it
            continue
        except PermissionError as exc:
            typer.echo(_("costctl: {socket}: {error}").format(socket=path.name, error=exc.strerror), err=True)
            refused += 1
            continue
        except (OSError, ValueError) as exc:
            typer.echo(_("costctl: {socket}: no answer ({error}: {detail})").format(
                socket=path.name, error=type(exc).__name__, detail=exc), err=True)
            refused += 1
            continue
        reached += 1
        if answer.get("ok"):
            typer.echo(str(answer.get("message", "")))
        else:
            refused += 1
            typer.echo(_("costctl: {message}").format(message=answer.get("error") or _("refused")), err=True)
    if reached == 0 and refused == 0:
        typer.echo(_("costctl: no running costctl watch of this user on this machine (stale sockets removed "
                     "from {dir})").format(dir=_dir()), err=True)
        raise typer.Exit(1)
    if refused:
        raise typer.Exit(1)


def parse_instance(text: str) -> tuple[str, str]:
    """``PROVIDER:ID`` -> ``(provider, id)`` (the id is everything after the first ``:``).

    Raises:
        UsageError: no ``:``, an empty part, or a provider no adapter is installed for.
    """
    from costctl_providers.registry import available_providers

    provider, sep, iid = text.partition(":")
    known = available_providers()
    if not sep or not provider or not iid.strip() or provider not in known:
        raise UsageError(_("--instance {text!r}: expected PROVIDER:ID, the provider's name and the instance's id "
                           "(providers: {known})").format(
            text=text, known=", ".join(known)))
    return provider, iid.strip()


def _snooze_patrol(instance: str, payload: dict[str, object], config: object, db: str | None = None) -> None:
    """``costctl snooze --instance``: record (or show) a patrol snooze in the ledger the patrols
    read (``--db``, else the central ledger in fleet mode, else this machine's)."""
    import getpass
    import os
    import socket
    from datetime import timedelta

    from ..clock import ensure_utc
    from ..i18n import format_time
    from ..ledger import Ledger
    from ..ledger import patrol_store as store
    from ..ledger.engine import configured_url
    from ..patrol.model import iso, snoozed_until
    from ..records import Action, Decision
    from .common import team_settings

    key = parse_instance(instance)
    settings = team_settings(config, db)  # type: ignore[arg-type]
    tz = settings.watch.tz
    now = ensure_utc(clock().now())
    with Ledger.open(configured_url(settings.database_url, settings.data_dir)) as ledger:
        if payload["op"] == "status":
            with ledger.session() as s:
                past = store.patrol_decisions(s.connection(), [key]).get(key, [])
            until = snoozed_until(past, now)
            if until is None:
                typer.echo(_("{instance}: no patrol snooze holds").format(instance=instance))
            else:
                typer.echo(_("{instance}: patrol actions held until {until}").format(
                    instance=instance, until=format_time(until, tz)))
            return
        until = now + timedelta(seconds=float(payload["seconds"])) if payload["op"] == "snooze" else now  # type: ignore[arg-type]
        who = {"user": getpass.getuser(), "uid": os.getuid(), "pid": os.getpid(), "host": socket.gethostname()}
        if payload["op"] == "snooze":
            reason = _("patrol actions on {instance} held until {until} by {user}").format(
                instance=instance, until=format_time(until, tz), user=who["user"])
        else:
            reason = _("patrol snooze of {instance} lifted by {user}").format(instance=instance, user=who["user"])
        decision = Decision(time=now, policy=store.PATROL_POLICY, action=Action.SNOOZE, reason=reason,
                            evidence={"until": iso(until), "by": who})
        recorded = store.record_snooze(ledger, key, decision)
    if recorded is None:
        typer.echo(_("costctl: {instance} is not in this ledger: the patrol records an instance when it marks it "
                     "(costctl patrol --execute names them); nothing to snooze").format(instance=instance), err=True)
        raise typer.Exit(1)
    typer.echo(reason)


def _configured_max(config: Path | None) -> timedelta | None:
    """``[snooze] max`` of the settings in force, or None when they cannot be read or snoozes are
    off (an error message then names only the syntax)."""
    from ..errors import CostctlError
    from .common import settings_from

    try:
        return settings_from(config).snooze.max
    except (CostctlError, OSError, ValueError):
        return None


def _dir() -> str:
    from ..paths import runtime_dir

    return str(runtime_dir())


def _forget(path: Path) -> None:
    """Remove a socket nobody listens on (ours: the runtime dir is this user's alone)."""
    try:
        path.unlink()
    except OSError:
        pass


def register(app: typer.Typer) -> None:
    """Add ``snooze`` to the CLI."""
    app.command("snooze", help=_(
        "Postpone the pending idle autostop of the running watches of this user on this machine (DURATION, "
        "capped by each watch's [snooze] max), lift it (off), or show what is pending (status). Budget caps "
        "and a failed stop are never snoozed."))(snooze)


__all__ = ["parse_request", "register", "snooze"]
