"""``costctl serve``: Prometheus metrics and a web dashboard of the ledger, in one process.

Binds ``--host`` (default 127.0.0.1) and ``--port`` (default 8787; 0 picks a free one) and
serves ``/`` (the dashboard), ``/metrics`` (Prometheus) and ``/healthz`` until interrupted
(Ctrl-C, SIGTERM: exit status 0). Reads the ledger of ``--db`` / ``database_url`` (else the
SQLite file in the data dir) on every request, read-only: never created, never migrated.

A host that is not loopback needs a token (``--token``, ``[serve] token`` or
``COSTCTL_SERVE__TOKEN``; at least 16 characters) or ``--behind-proxy`` (a reverse proxy in
front authenticates); otherwise the command stops with one line and exit status 2 before
binding anything. See ``docs/serve.md``.
"""

from __future__ import annotations

import signal
import sys
from typing import Annotated, Any

import typer

from ..i18n import N_, _
from .common import ConfigOption, DbOption, settings_from

#: The line printed once the server listens (stderr): tests and scripts read the URL from it.
LISTENING = N_("costctl: serving {url} (metrics at {url}metrics); Ctrl-C stops")


def serve(
    host: Annotated[str, typer.Option("--host", help=_("Address to listen on (default 127.0.0.1, this machine only); "
                                                        "any other needs a token or --behind-proxy."))] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535,
                                      help=_("Port to listen on (0: a free one, printed at start)."))] = 8787,
    token: Annotated[str | None, typer.Option(
        "--token", help=_("Token every request must carry (Authorization: Bearer TOKEN, or ?token=TOKEN in a "
                          "browser); default [serve] token / COSTCTL_SERVE__TOKEN, which other users cannot read "
                          "from the process list."))] = None,
    behind_proxy: Annotated[bool, typer.Option(
        "--behind-proxy", help=_("A reverse proxy in front authenticates: allow a non-loopback address without "
                                 "a token."))] = False,
    config: ConfigOption = None,
    db: DbOption = None,
) -> None:
    """Serve the ledger: Prometheus metrics at /metrics and a dashboard at /."""
    from ..ledger.engine import configured_url
    from ..serve.app import ServeApp
    from ..serve.data import Thresholds
    from ..serve.fleet_view import FleetCache, fleet_configured
    from ..serve.redaction import Redactor, known_secrets
    from ..serve.server import check_bind, make_server
    from ..serve.source import LedgerSource

    settings = settings_from(config, db)
    if token is None and settings.serve.token is not None:
        token = settings.serve.token.get_secret_value()
    check_bind(host, token, behind_proxy)
    source = LedgerSource(configured_url(settings.database_url, settings.data_dir))
    fleet = FleetCache.from_settings(settings) if fleet_configured(settings) else None
    app = ServeApp(source, token=token, tz=settings.watch.tz, thresholds=Thresholds.from_settings(settings),
                   redactor=Redactor([*known_secrets(settings), *([token] if token else [])]), fleet=fleet)
    server = make_server(host, port, app)
    if fleet is not None:
        fleet.start()

    def _stop(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, _stop)
    bound_host, bound_port = server.server_address[:2]
    shown = f"[{bound_host}]" if ":" in str(bound_host) else str(bound_host)
    print(_(LISTENING).format(url=f"http://{shown}:{bound_port}/"), file=sys.stderr, flush=True)
    try:
        server.serve_forever(poll_interval=0.5)
    except KeyboardInterrupt:
        print(_("costctl: serve stopped"), file=sys.stderr)
    finally:
        signal.signal(signal.SIGTERM, previous)
        server.server_close()
        source.close()
        if fleet is not None:
            fleet.stop()


def register(app: typer.Typer) -> None:
    """Add ``costctl serve`` to ``app``."""
    app.command("serve", help=_(
        "Serve the ledger: Prometheus metrics at /metrics and a dashboard at / (spend over time, live runs, "
        "decisions, instances). Listens on 127.0.0.1 unless --host says otherwise; any other address needs a "
        "token or --behind-proxy. Read-only: GET and HEAD only, the ledger never created or migrated."))(serve)


__all__ = ["LISTENING", "register", "serve"]
