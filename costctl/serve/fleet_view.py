"""The dashboard's instances table from the fleet: ``costctl fleet``'s read, cached and refreshed
in a background thread, so a page never waits on a provider.

:class:`FleetCache` holds the newest fleet read (:func:`costctl.fleet.collect.collect`, the
code ``costctl fleet`` runs, with every account's read limited to ``[serve] fleet_timeout``:
an account that hangs is shown as unreadable, its "no answer" line as its error) and the last
good one (some account was read). :meth:`FleetCache.start` reads at once and then every
``[serve] fleet_refresh`` seconds in a daemon thread; a page takes :meth:`FleetCache.view`,
which only copies what is cached.

What the page shows (:class:`FleetView`): the last good read's rows with its time, and the
accounts the newest read could not read, each with its error (never left out). Before any
good read (none yet, or every account failed, or the read itself failed), ``rows`` is None
and the page shows the ledger's table, saying why. Nothing here writes to a provider: a
listing is all the fleet read asks for.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from ..errors import CostctlError
from ..i18n import _

if TYPE_CHECKING:
    from ..clock import Clock
    from ..config import Settings
    from ..fleet.model import AccountRead, FleetReport, FleetRow

log = logging.getLogger("costctl.serve")


@dataclass(frozen=True, slots=True)
class FleetView:
    """What the page shows of the fleet.

    Attributes:
        rows: the last good read's rows, or None (no good read yet: the ledger's table).
        as_of: when those rows were read (aware UTC), or None.
        failed: the accounts the newest read could not read (with their one-line errors).
        failed_at: when that newest read was made (aware UTC), or None.
        error: the newest read's own failure (not one account's), or None.
        reading: no read has finished yet.
    """

    rows: tuple[FleetRow, ...] | None
    as_of: datetime | None
    failed: tuple[AccountRead, ...] = ()
    failed_at: datetime | None = None
    error: str | None = None
    reading: bool = False


def fleet_configured(settings: Settings) -> bool:
    """Whether any provider account is configured: a ``[providers.*]`` table, or ``[instance]
    provider`` set in the config (its default, the simulated provider, is no fleet)."""
    return bool(settings.providers) or "provider" in settings.instance.model_fields_set


class FleetCache:
    """The cached fleet read (see the module docstring).

    Args:
        read: one fleet read (a :class:`~costctl.fleet.model.FleetReport`); it may raise
            :class:`~costctl.errors.CostctlError` (shown as the read's error).
        refresh_s: seconds between reads in the background thread.
    """

    def __init__(self, read: Callable[[], FleetReport], *, refresh_s: float = 60.0) -> None:
        self._read = read
        self.refresh_s = refresh_s
        self._lock = threading.Lock()
        self._good: FleetReport | None = None
        self._newest: FleetReport | None = None
        self._error: str | None = None
        self._done = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @classmethod
    def from_settings(cls, settings: Settings, *, clock: Clock | None = None) -> FleetCache:
        """The cache of the configured accounts, read as ``costctl fleet`` reads them, each
        account limited to ``[serve] fleet_timeout``."""
        from ..fleet.collect import collect

        limit = settings.serve.fleet_timeout.total_seconds()
        return cls(lambda: collect(settings, clock=clock, limit_s=limit),
                   refresh_s=settings.serve.fleet_refresh.total_seconds())

    def refresh(self) -> None:
        """Read the fleet once and keep the outcome (never raises for a failed read)."""
        try:
            report, error = self._read(), None
        except CostctlError as exc:
            report, error = None, exc.message
        except Exception as exc:  # noqa: BLE001 - a bug in one read must not end the refresher
            log.debug("fleet read failed", exc_info=True)
            report, error = None, _("internal error: {error}: {detail}").format(error=type(exc).__name__, detail=exc)
        with self._lock:
            self._done = True
            self._error = error
            if report is not None:
                self._newest = report
                if report.accounts and not report.all_failed:
                    self._good = report

    def view(self) -> FleetView:
        """What the page shows now (no read here)."""
        with self._lock:
            good, newest, error, done = self._good, self._newest, self._error, self._done
        failed = newest.failed if newest is not None and error is None else ()
        return FleetView(rows=good.rows if good is not None else None, as_of=good.now if good is not None else None,
                         failed=failed, failed_at=newest.now if failed else None, error=error, reading=not done)

    def _loop(self) -> None:
        while True:
            self.refresh()
            if self._stop.wait(self.refresh_s):
                return

    def start(self) -> None:
        """Read now and every :attr:`refresh_s` seconds in a daemon thread, until :meth:`stop`."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="serve-fleet", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """End the background reads after the one under way (the first read always happens)."""
        self._stop.set()


__all__ = ["FleetCache", "FleetView", "fleet_configured"]
