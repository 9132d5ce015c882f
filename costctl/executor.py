"""Carries out policy decisions: advise, warn, stop, downsize.

Stops are deliberate: each one runs the ``before_stop`` hook (its failure is recorded and
does not prevent the stop), ends the watched child (SIGTERM to its process group, SIGKILL after
the grace period), stops the instance through the provider adapter, and records the decision
with its reason, evidence and outcome. A second stop is a recorded no-op (idempotent). In
dry-run mode nothing is stopped: the decision is recorded as what would have happened.

``downsize`` (the plateau policy's action when configured) is handed to the lifecycle
controller (:meth:`costctl.lifecycle.controller.Lifecycle.downsize`), which sizes the cheaper
card and either starts the move (checkpoint, end the job, resume elsewhere) or advises; the
decision is recorded with the plan in its evidence and what was done as its outcome.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Protocol

from .clock import Clock
from .config import HooksConfig
from .errors import CostctlError
from .records import Decision


class DecisionSink(Protocol):
    """Where decisions are recorded (the ledger)."""

    def record_decision(self, run_id: str, decision: Decision, *, outcome: str | None = None,
                        dry_run: bool = False) -> int: ...


class InstanceStopper(Protocol):
    """Stops the instance this watch runs on (the provider adapter, bound to one instance)."""

    def __call__(self) -> str: ...


@dataclass
class StopResult:
    """What a stop did: when, and the outcome text recorded with the decision."""

    time: datetime
    outcome: str
    hook: dict[str, Any] = field(default_factory=dict)


class Executor:
    """Acts on decisions for one run.

    Args:
        ledger: records every decision with its outcome.
        run_id: the run the decisions belong to.
        clock: time of the stop.
        hooks: ``[hooks]`` config (``before_stop`` shell command and its timeout).
        stop_child: ends the watched child if it still runs (returns its exit status or None).
        stop_instance: stops the instance through the provider; returns a one-line outcome;
            raises CostctlError when the provider refused.
        say: prints one of costctl's own lines for the user.
        dry_run: record what would happen, stop nothing.
        log_path: the run's log file (the before_stop hook's output is appended to it).
        downsize: acts on a ``downsize`` decision; returns the decision to record (extended with
            the plan) and its outcome. Without it, a downsize decision is only advice.
    """

    def __init__(
        self,
        *,
        ledger: DecisionSink,
        run_id: str,
        clock: Clock,
        hooks: HooksConfig,
        stop_child: Callable[[], int | None],
        stop_instance: InstanceStopper,
        say: Callable[[str], None],
        dry_run: bool = False,
        log_path: str | None = None,
        downsize: Callable[[Decision], tuple[Decision, str]] | None = None,
    ) -> None:
        self.ledger = ledger
        self.run_id = run_id
        self.clock = clock
        self.hooks = hooks
        self._stop_child = stop_child
        self._stop_instance = stop_instance
        self.say = say
        self.dry_run = dry_run
        self.log_path = log_path
        self._downsize = downsize
        self.stop: StopResult | None = None
        self.decisions: list[tuple[Decision, str]] = []

    def handle(self, decision: Decision) -> str:
        """Carry out ``decision`` and record it; returns the outcome text."""
        if decision.action == "stop":
            outcome = self._handle_stop(decision)
        elif decision.action == "downsize" and self._downsize is not None:
            decision, outcome = self._downsize(decision)
            self.say(f"costctl {decision.policy}: {decision.reason} -> {outcome}")
            self.ledger.record_decision(self.run_id, decision, outcome=outcome, dry_run=self.dry_run)
        else:
            label = "warning" if decision.action == "warn" else "advice"
            self.say(f"costctl {decision.policy} {label}: {decision.reason}")
            outcome = "advised" if decision.action != "warn" else "warned"
            self.ledger.record_decision(self.run_id, decision, outcome=outcome, dry_run=self.dry_run)
        self.decisions.append((decision, outcome))
        return outcome

    def _handle_stop(self, decision: Decision) -> str:
        if self.dry_run:
            outcome = "dry-run: would run before_stop, end the job and stop the instance"
            self.say(f"costctl {decision.policy} (dry run): would stop: {decision.reason}")
            self.ledger.record_decision(self.run_id, decision, outcome=outcome, dry_run=True)
            return outcome
        if self.stop is not None:
            outcome = f"already stopped at {self.stop.time.isoformat()}"
            self.ledger.record_decision(self.run_id, decision, outcome=outcome)
            return outcome
        self.say(f"costctl {decision.policy}: stopping: {decision.reason}")
        hook = self._run_hook()
        parts = []
        if hook:
            parts.append(f"before_stop {hook['result']}")
        child_status = self._stop_child()
        if child_status is not None:
            parts.append(f"job ended (exit status {child_status})")
        stop_time = self.clock.now()
        try:
            parts.append(self._stop_instance())
        except CostctlError as exc:
            parts.append(f"instance stop FAILED: {exc.message}")
            self.say(f"costctl: could not stop the instance: {exc.message}")
        outcome = "; ".join(parts)
        evidence = dict(decision.evidence)
        if hook:
            evidence["before_stop"] = hook
        recorded = replace(decision, evidence=evidence)
        self.ledger.record_decision(self.run_id, recorded, outcome=outcome)
        self.stop = StopResult(time=stop_time, outcome=outcome, hook=hook)
        self.say(f"costctl: {outcome}")
        return outcome

    def _run_hook(self) -> dict[str, Any]:
        command = self.hooks.before_stop
        if not command:
            return {}
        timeout = self.hooks.before_stop_timeout.total_seconds()
        started = self.clock.now()
        self.say(f"costctl: running before_stop hook: {command}")
        try:
            proc = subprocess.run(
                command, shell=True, timeout=timeout, capture_output=True, stdin=subprocess.DEVNULL
            )
        except subprocess.TimeoutExpired:
            return {"command": command, "result": f"timed out after {timeout:g}s", "ok": False}
        except OSError as exc:
            return {"command": command, "result": f"failed to start: {exc.strerror}", "ok": False}
        tail = (proc.stdout + proc.stderr).decode("utf-8", "replace")[-2000:]
        if self.log_path:
            try:
                with open(self.log_path, "ab") as fh:
                    fh.write(b"\n[costctl before_stop hook output]\n" + proc.stdout + proc.stderr)
            except OSError:
                pass
        ok = proc.returncode == 0
        return {
            "command": command,
            "result": "succeeded" if ok else f"failed (exit status {proc.returncode})",
            "ok": ok,
            "exit_status": proc.returncode,
            "started_at": started.isoformat(),
            "output_tail": tail,
        }
