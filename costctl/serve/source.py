"""The ledger as ``costctl serve`` reads it: opened on first need, never created, never migrated.

:class:`LedgerSource` turns a request's read into one of three outcomes:

* the reader's result, read in one transaction (one snapshot of the ledger);
* None when there is nothing to read yet: the SQLite file does not exist (``costctl watch``
  creates it) or the database has no costctl tables — an empty page, not an error;
* :class:`~costctl.errors.LedgerError` (one line, password redacted) when the ledger cannot be
  read: the server is down, the file is unreadable, or its schema revision is not the one this
  costctl reads (``costctl db upgrade`` migrates it; serve never does). The server answers 503
  with that line and stays up; the next request tries again.

The engine is made once (its connection pool is shared by the server's threads) and kept while
it works; after a failure it is thrown away, so a ledger that comes back is found again.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from ..errors import LedgerError
from ..i18n import _

if TYPE_CHECKING:
    import sqlalchemy as sa
    from sqlalchemy.engine import Engine

T = TypeVar("T")


class LedgerSource:
    """Read-only access to the ledger at ``url`` for the server's threads.

    Args:
        url: a SQLAlchemy URL (``configured_url`` of the settings).
    """

    def __init__(self, url: str) -> None:
        from ..ledger.engine import redact

        self.url = url
        self.shown_url = redact(url)
        self._engine: Engine | None = None
        self._lock = threading.Lock()

    def _open(self) -> Engine | None:
        """The engine, made on first need; None while there is no ledger file.

        Raises:
            LedgerError: the database cannot be reached, or the URL is wrong.
        """
        from ..ledger.engine import MissingLedgerError
        from ..ledger.reader import open_engine

        with self._lock:
            if self._engine is None:
                try:
                    self._engine = open_engine(self.url, migrate=False, create=False)
                except MissingLedgerError:
                    return None
            return self._engine

    def _check_revision(self, engine: Engine) -> bool:
        """True when the ledger is at the revision this costctl reads; False when it has no
        costctl tables yet (nothing to read).

        Raises:
            LedgerError: another revision (one line naming both and ``costctl db upgrade``).
        """
        from ..ledger import migrate

        found = migrate.current_revision(engine)
        if found is None:
            return False
        head = migrate.head_revision()
        if found != head:
            raise LedgerError(_("the ledger at {url} is at schema revision {found} and this costctl reads {head}: "
                                "run `costctl db upgrade` (or update costctl, when the ledger is newer)").format(
                url=self.shown_url, found=found, head=head))
        return True

    def read(self, reader: Callable[[sa.Connection], T]) -> T | None:
        """``reader(connection)`` in one read transaction, rolled back after; None when there is no
        ledger yet (see the module docstring).

        Raises:
            LedgerError: the ledger cannot be read (one line).
        """
        from ..ledger.engine import translate_errors

        try:
            engine = self._open()
            if engine is None or not self._check_revision(engine):
                return None
            with translate_errors(_("read the ledger"), engine.url), engine.connect() as conn:
                return reader(conn)
        except LedgerError:
            self.reset()
            raise

    def reset(self) -> None:
        """Throw the engine away (its pooled connections closed); the next read opens it again."""
        with self._lock:
            engine, self._engine = self._engine, None
        if engine is not None:
            engine.dispose()

    def close(self) -> None:
        """Release the database connections. Safe to call twice."""
        self.reset()


__all__ = ["LedgerSource"]
