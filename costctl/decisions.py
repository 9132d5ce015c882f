"""The one place decisions are recorded: :class:`DecisionRecorder`.

Every decision of a watch — a policy's advice, warning or stop, a checkpoint request and its
outcome, an OOM retry, a move to a cheaper card and its steps, the on-exit stop — goes through
:meth:`DecisionRecorder.record`, which, in this order, writes it to the ledger (with its outcome),
adds it to the end-of-run :class:`~costctl.summary.RunSummary`, prints its console line, and
calls the subscribers (:meth:`DecisionRecorder.subscribe`; e.g. notifications). Nothing else
writes decisions.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from .i18n import _
from .records import Action, Decision
from .summary import RunSummary

#: Seconds (of the decisions' own clock) during which a policy's further advice is recorded but
#: not printed live, per policy: a noisy loss in a flood of output opens one plateau episode
#: after another (each one decision in the ledger and one row of the summary, which counts
#: them); the console gets one line, and the next line printed after the quiet time says how
#: many were not shown. costctl's own choice: at most one plateau line per 10 minutes.
LIVE_QUIET_S: Mapping[str, float] = {"plateau": 600.0}


class DecisionStore(Protocol):
    """Where decisions are stored: :meth:`costctl.ledger.db.Ledger.record_decision` (returns the id),
    or, in a watch, :class:`costctl.ledger.writer.LedgerWriter` (returns a ticket for it)."""

    def record_decision(self, run_id: str, decision: Decision, *, outcome: str | None = None,
                        dry_run: bool = False) -> Any: ...


@dataclass(frozen=True, slots=True)
class RecordedDecision:
    """A decision as recorded: what was decided, what was done, in which ledger run.

    Attributes:
        decision: the decision (its ``action`` an :class:`~costctl.records.Action`).
        outcome: one line: what was done (``"advised"``, ``"job ended; instance ... is stopped"``...).
        run_id: the ledger run it belongs to.
        dry_run: recorded as what would have happened.
        ledger_id: the ledger's id of the stored decision, or (written through the watch's
            :class:`~costctl.ledger.writer.LedgerWriter`) a ``Ticket`` that resolves to it once
            written; pass the ticket itself as an argument of a later write (a stop event).
    """

    decision: Decision
    outcome: str
    run_id: str
    dry_run: bool
    ledger_id: Any


#: A subscriber is called with every recorded decision, after the ledger and the summary.
Subscriber = Callable[[RecordedDecision], None]


class DecisionRecorder:
    """Records the decisions of one watch (see the module docstring).

    Args:
        store: the ledger, or the watch's ledger writer (then nothing waits on the database).
        summary: the watch's end-of-run summary.
        say: prints one of costctl's own lines (the watch's, suppressed by --quiet).
        run_id: the ledger run decisions belong to; the watcher sets :attr:`run_id` again when
            the job moves to another instance (a new run).
        live_quiet_s: per policy, seconds after one of its advice lines during which its further
            advice is recorded (ledger, summary, subscribers) but not printed; counted, and the
            next line printed says how many (default :data:`LIVE_QUIET_S`).
    """

    def __init__(self, store: DecisionStore, summary: RunSummary, say: Callable[[str], None],
                 run_id: str | None = None, live_quiet_s: Mapping[str, float] = LIVE_QUIET_S) -> None:
        self.store = store
        self.live_quiet_s = dict(live_quiet_s)
        self._said: dict[str, tuple[Any, int]] = {}  # policy -> (time of its last live advice line, not shown since)
        self.summary = summary
        self.say = say
        self.run_id = run_id
        self._subscribers: list[Subscriber] = []
        self._by_key: dict[str, tuple[Any, str]] = {}  # newest decisions: key -> (ledger id, outcome)

    def subscribe(self, subscriber: Subscriber) -> None:
        """Call ``subscriber`` with every decision recorded from now on. A subscriber that raises
        is reported on the console and does not stop the recording or the other subscribers."""
        self._subscribers.append(subscriber)

    def update(self, key: str, evidence: dict[str, Any]) -> bool:
        """Add ``evidence`` to the recorded decision keyed ``key`` (its outcome unchanged), e.g.
        a plateau episode's repeat count; False when that decision is not known (any more).

        Raises:
            LedgerError: the ledger could not store it (a writer's store never raises).
        """
        found = self._by_key.get(key)
        update = getattr(self.store, "set_decision_outcome", None)
        if found is None or update is None:
            return False
        ledger_id, outcome = found
        update(ledger_id, outcome, evidence=evidence)
        return True

    def record(self, decision: Decision, outcome: str, *, dry_run: bool = False,
               say: bool | str = True) -> RecordedDecision:
        """Record ``decision`` with its ``outcome``: ledger, summary, console line, subscribers.

        Args:
            say: True prints ``costctl <policy>: <reason>``; a string prints that line instead;
                False prints nothing (the caller already said it, or it is end-of-run advice).

        Raises:
            LedgerError: the ledger could not store it (nothing else is done then); a writer's
                store never raises (it holds and retries the write).
            RuntimeError: no ledger run yet (:attr:`run_id` is None).
        """
        if self.run_id is None:
            raise RuntimeError("no ledger run to record the decision in")
        ledger_id = self.store.record_decision(self.run_id, decision, outcome=outcome, dry_run=dry_run)
        if decision.key:
            self._by_key[decision.key] = (ledger_id, outcome)
            while len(self._by_key) > 256:
                del self._by_key[next(iter(self._by_key))]
        self.summary.add_decision(decision)
        if say is True:
            line: str | None = _("costctl {policy}: {reason}").format(policy=decision.policy, reason=decision.reason)
        else:
            line = say or None
        if line is not None:
            line = self._live_line(decision, line)
        if line is not None:
            self.say(line)
        recorded = RecordedDecision(decision=decision, outcome=outcome, run_id=self.run_id,
                                    dry_run=dry_run, ledger_id=ledger_id)
        for subscriber in list(self._subscribers):
            try:
                subscriber(recorded)
            except Exception as exc:  # noqa: BLE001 - a broken subscriber must not end the watch
                self.say(_("costctl: decision subscriber failed: {error}: {detail}").format(
                    error=type(exc).__name__, detail=exc))
        return recorded


    def _live_line(self, decision: Decision, line: str) -> str | None:
        """``line``, or None while ``decision`` (advice) falls in its policy's quiet time; the
        first line after it says how many were recorded and not shown."""
        quiet = self.live_quiet_s.get(decision.policy)
        if quiet is None or decision.action != Action.ADVISE:
            return line
        last = self._said.get(decision.policy)
        if last is not None and (decision.time - last[0]).total_seconds() < quiet:
            self._said[decision.policy] = (last[0], last[1] + 1)
            return None
        self._said[decision.policy] = (decision.time, 0)
        if last is not None and last[1]:
            return _("{line} [{count} more {policy} advice since the last line printed: recorded, counted in the "
                     "summary]").format(line=line, count=last[1], policy=decision.policy)
        return line


__all__ = ["LIVE_QUIET_S", "DecisionRecorder", "DecisionStore", "RecordedDecision", "Subscriber"]
