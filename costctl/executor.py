"""Carries out policy decisions: advise, warn, stop.

Stops are deliberate: each one runs the ``before_stop`` hook (its failure is recorded and
does not prevent the stop), ends the watched job (SIGTERM to its process group, SIGKILL after
the grace period), stops the instance through the provider adapter, and records the decision
with its reason, evidence (with the stop route the preflight found) and outcome. A second stop
is a recorded no-op (idempotent). In dry-run mode nothing is stopped: the decision is recorded
as what would have happened. In advise-only mode (``--advise-only``: the user asked for a watch
that stops nothing) a stop decision is recorded as advice and nothing is done.

The ``before_stop`` hook runs in a process group of its own; when it outlives its timeout the
whole group is ended (SIGTERM, SIGKILL after :data:`HOOK_KILL_GRACE_S`), so a hook's children
do not outlive it.

The executor acts through the small interfaces of :mod:`costctl.protocols` (the job, the
provider, the run) and records through the :class:`~costctl.protocols.DecisionLog`; a
``downsize`` decision is the lifecycle controller's (the watcher hands it there), so here it
is only advice.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from .clock import Clock
from .config import HooksConfig
from .errors import CostctlError
from .protocols import DecisionLog, InstanceControl, JobControl, RunControl, StopResult
from .records import Action, Decision

#: Seconds between the SIGTERM and the SIGKILL sent to a timed-out before_stop hook's group.
HOOK_KILL_GRACE_S = 2.0


class Executor:
    """Acts on decisions for one watch.

    Args:
        log: records every decision with its outcome (the watch's decision recorder).
        clock: time of the stop.
        hooks: ``[hooks]`` config (``before_stop`` shell command and its timeout).
        job: the watched command (ended by a stop if it still runs).
        instances: the provider adapter (stops the instance).
        run: the watch's run (which instance to stop).
        say: prints one of costctl's own lines for the user.
        dry_run: record what would happen, stop nothing.
        log_path: the run's log file (the before_stop hook's output is appended to it).
        advise_only: stop nothing; a stop decision is recorded as advice (``--advise-only``).
        stop_route: how the instance would be stopped (the preflight's label, e.g.
            ``"API (credential accepted)"``), recorded in each stop decision's evidence.
    """

    def __init__(
        self,
        *,
        log: DecisionLog,
        clock: Clock,
        hooks: HooksConfig,
        job: JobControl,
        instances: InstanceControl,
        run: RunControl,
        say: Callable[[str], None],
        dry_run: bool = False,
        log_path: str | None = None,
        advise_only: bool = False,
        stop_route: str | None = None,
    ) -> None:
        self.log = log
        self.clock = clock
        self.hooks = hooks
        self.job = job
        self.instances = instances
        self.run = run
        self.say = say
        self.dry_run = dry_run
        self.log_path = log_path
        self.advise_only = advise_only
        self.stop_route = stop_route
        self.stop: StopResult | None = None

    def handle(self, decision: Decision) -> str:
        """Carry out ``decision`` and record it; returns the outcome text."""
        if self.advise_only and decision.action in (Action.STOP, Action.DOWNSIZE):
            return self._advise_instead(decision)
        if decision.action is Action.STOP:
            return self._handle_stop(decision)
        label = "warning" if decision.action is Action.WARN else "advice"
        outcome = "warned" if decision.action is Action.WARN else "advised"
        self.log.record(decision, outcome, dry_run=self.dry_run,
                        say=f"costctl {decision.policy} {label}: {decision.reason}")
        return outcome

    def _advise_instead(self, decision: Decision) -> str:
        """``--advise-only``: record a stop (or move) as advice; nothing is done."""
        would = str(decision.action.value if isinstance(decision.action, Action) else decision.action)
        advised = replace(decision, action=Action.ADVISE,
                          evidence={**decision.evidence, "advise_only": True, "would": would})
        outcome = "advise-only: nothing stopped"
        self.log.record(advised, outcome, dry_run=self.dry_run,
                        say=f"costctl {decision.policy} advice (advise-only, nothing is stopped): "
                            f"would {would}: {decision.reason}")
        return outcome

    def _stop_instance(self) -> str:
        instance_id = self.run.state.instance_id
        inst = self.instances.stop_instance(instance_id)
        return f"instance {instance_id} on {self.instances.name} is {inst.status.value}"

    def _handle_stop(self, decision: Decision) -> str:
        if self.dry_run:
            outcome = "dry-run: would run before_stop, end the job and stop the instance"
            self.log.record(decision, outcome, dry_run=True,
                            say=f"costctl {decision.policy} (dry run): would stop: {decision.reason}")
            return outcome
        if self.stop is not None:
            outcome = f"already stopped at {self.stop.time.isoformat()}"
            self.log.record(decision, outcome, say=False)
            return outcome
        self.say(f"costctl {decision.policy}: stopping: {decision.reason}")
        hook = self._run_hook()
        parts = []
        if hook:
            parts.append(f"before_stop {hook['result']}")
        child_status = self.job.end() if self.job.running else None
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
        if self.stop_route:
            evidence.setdefault("stop_route", self.stop_route)
        recorded = replace(decision, evidence=evidence)
        self.log.record(recorded, outcome, say=f"costctl: {outcome}")
        self.stop = StopResult(time=stop_time, outcome=outcome, hook=hook)
        return outcome

    def _run_hook(self) -> dict[str, Any]:
        command = self.hooks.before_stop
        if not command:
            return {}
        timeout = self.hooks.before_stop_timeout.total_seconds()
        started = self.clock.now()
        self.say(f"costctl: running before_stop hook: {command}")
        try:
            # A group of its own: on a timeout the hook's children are ended with it.
            proc = subprocess.Popen(
                command, shell=True, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, start_new_session=True,
            )
        except OSError as exc:
            return {"command": command, "result": f"failed to start: {exc.strerror}", "ok": False}
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            end_group(proc)
            return {"command": command, "result": f"timed out after {timeout:g}s (its process group was ended)",
                    "ok": False}
        tail = (out + err).decode("utf-8", "replace")[-2000:]
        if self.log_path:
            try:
                with open(self.log_path, "ab") as fh:
                    fh.write(b"\n[costctl before_stop hook output]\n" + out + err)
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


def end_group(proc: subprocess.Popen[bytes], *, grace_s: float = HOOK_KILL_GRACE_S) -> None:
    """End ``proc``'s whole process group (it was started with ``start_new_session``): SIGTERM,
    then SIGKILL to what is left after ``grace_s`` seconds; reaps ``proc``. A group already
    gone is fine."""
    pgid = proc.pid  # the session leader's pid is its group id
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            break
        if sig is signal.SIGKILL:
            break
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and _group_alive(pgid):
            proc.poll()
            time.sleep(0.02)
        if not _group_alive(pgid):
            break
    try:
        proc.communicate(timeout=grace_s)
    except subprocess.TimeoutExpired:  # a grandchild that escaped the group still holds the pipes
        proc.kill()
        proc.wait()


def _group_alive(pgid: int) -> bool:
    """Whether any process of group ``pgid`` exists (signal 0)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


__all__ = ["HOOK_KILL_GRACE_S", "Executor", "StopResult", "end_group"]
