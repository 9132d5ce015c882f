"""Carries out policy decisions: advise, warn, stop.

Stops are deliberate: a stop decision is recorded at once (reason, evidence, the stop route the
preflight found; outcome ``stop requested``) and becomes a :class:`~costctl.stopping.StopProcess`
that runs off the tick: it runs the ``before_stop`` hook (its failure is recorded and does not
prevent the stop), ends the watched job (SIGTERM to its process group, SIGKILL after the grace
period), sends the stop through the provider adapter and reads the provider's own status until
it reports the instance stopped (re-sending, escalating to the instance's self-stop, or
failing; see :mod:`costctl.stopping`). Every state it reaches is stored as a stop event; when
it ends, the decision's outcome says what really happened. A second stop is a recorded no-op
(idempotent). In dry-run mode nothing is stopped: the decision is recorded as what would have
happened. In advise-only mode (``--advise-only``: the user asked for a watch that stops
nothing) a stop decision is recorded as advice and nothing is done.

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
from .config import HooksConfig, StopConfig
from .errors import CostctlError
from .i18n import _, format_time, ngettext
from .protocols import DecisionLog, InstanceControl, JobControl, RunControl, StopLog, StopResult
from .records import Action, Decision
from .stopping import (STATE_WORDS, StopEvent, StopProcess, StopRoute, StopState, exit_text, kill_self_stops,
                       stop_state_text)
from .summary import action_text

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
        route: how the instance will be stopped (the preflight's finding; default: the API),
            recorded in each stop decision's evidence.
        stop_log: stores each stop's history and its final outcome (the ledger); None: kept
            in memory only.
        stop_config: ``[stop]`` (how long and how often a stop is carried through).
        before_self_stop: called just before a self-stop command runs (the watch flushes
            its ledger: the machine may power off).

    Attributes:
        stop: the stop, once one was decided (None before); it goes on in :attr:`stopping`.
        stopping: the :class:`~costctl.stopping.StopProcess` carrying it through (the watch
            runs it in a thread of its own, or a simulated-clock driver steps it).
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
        route: StopRoute | None = None,
        stop_log: StopLog | None = None,
        stop_config: StopConfig | None = None,
        before_self_stop: Callable[[], None] | None = None,
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
        self.route = route or StopRoute("api", _("instance read"))
        self.stop_log = stop_log
        self.stop_config = stop_config or StopConfig()
        self.before_self_stop = before_self_stop
        self.stop: StopResult | None = None
        self.stopping: StopProcess | None = None
        self._decision_id: Any = None
        self._stop_parts: list[str] = []
        self._log_failed = False
        self._after_stop: list[Callable[[StopResult], None]] = []
        self._stop_listeners: list[Callable[[StopEvent, StopProcess | None], None]] = []
        self._hook_proc: subprocess.Popen[bytes] | None = None

    def handle(self, decision: Decision) -> str:
        """Carry out ``decision`` and record it; returns the outcome text."""
        if self.advise_only and decision.action in (Action.STOP, Action.DOWNSIZE):
            return self._advise_instead(decision)
        if decision.action is Action.STOP:
            return self._handle_stop(decision)
        # outcomes: short machine words in the ledger (compared by code), not translated
        outcome = "warned" if decision.action is Action.WARN else "advised"
        if decision.action is Action.WARN:
            line = _("costctl {policy} warning: {reason}")
        else:
            line = _("costctl {policy} advice: {reason}")
        self.log.record(decision, outcome, dry_run=self.dry_run,
                        say=line.format(policy=decision.policy, reason=decision.reason))
        return outcome

    def _advise_instead(self, decision: Decision) -> str:
        """``--advise-only``: record a stop (or move) as advice; nothing is done."""
        would = str(decision.action.value if isinstance(decision.action, Action) else decision.action)
        advised = replace(decision, action=Action.ADVISE,
                          evidence={**decision.evidence, "advise_only": True, "would": would})
        outcome = _("advise-only: nothing stopped")
        self.log.record(advised, outcome, dry_run=self.dry_run,
                        say=_("costctl {policy} advice (advise-only, nothing is stopped): would {action}: "
                              "{reason}").format(policy=decision.policy, action=action_text(would),
                                                 reason=decision.reason))
        return outcome

    def _handle_stop(self, decision: Decision) -> str:
        if self.dry_run:
            outcome = _("dry-run: would run before_stop, end the job and stop the instance")
            self.log.record(decision, outcome, dry_run=True,
                            say=_("costctl {policy} (dry run): would stop: {reason}").format(
                                policy=decision.policy, reason=decision.reason))
            return outcome
        if self.stop is not None:
            when = format_time(self.stop.time)
            if self.stop.stopped:
                outcome = _("already stopped at {time}").format(time=when)
            else:
                outcome = _("a stop decided at {time} is {state}").format(
                    time=when, state=_(STATE_WORDS.get(self.stop.state, self.stop.state)))
            self.log.record(decision, outcome, say=False)
            return outcome
        self.say(_("costctl {policy}: stopping: {reason}").format(policy=decision.policy, reason=decision.reason))
        now = self.clock.now()
        evidence = {**decision.evidence, "stop_route": self.route.label_en}
        recorded = self.log.record(replace(decision, evidence=evidence), "stop requested", say=False)
        self._decision_id = getattr(recorded, "ledger_id", None)
        self.stop = StopResult(time=now, outcome="stop requested")
        self.stopping = StopProcess(
            instances=self.instances, instance_id=self.run.state.instance_id, route=self.route,
            clock=self.clock, config=self.stop_config, on_event=self._on_stop_event,
            find_self_stop=self._find_self_stop, before_self_stop=self.before_self_stop,
            prepare=self._prepare_stop, started_at=now,
        )
        return "stop requested"

    def run_stop(self, *, max_steps: int = 10_000) -> StopResult | None:
        """Carry the stop through here and now, stepping it until it ends (tests and callers
        without a stop thread; on a simulated clock nothing waits). Returns :attr:`stop`."""
        proc = self.stopping
        steps = 0
        while proc is not None and not proc.done and steps < max_steps:
            proc.step()
            steps += 1
            if not proc.done and proc.next_at is not None and proc.next_at > self.clock.now():
                advance = getattr(self.clock, "set", None)
                if callable(advance):
                    advance(proc.next_at)
                else:
                    time.sleep(max(0.0, (proc.next_at - self.clock.now()).total_seconds()))
        return self.stop

    def _find_self_stop(self) -> tuple[str, ...] | None:
        """This instance's self-stop argv, where it has one (the adapter decides)."""
        if self.route.kind == "self-stop" and self.route.argv:
            return self.route.argv
        finder = getattr(self.instances, "self_stop_command", None)
        if not callable(finder):
            return None
        found = finder(self.run.state.instance_id)
        return tuple(found.argv) if found else None

    def _prepare_stop(self) -> str | None:
        """First step of a stop (in the stop's thread): the before_stop hook, then the job."""
        hook = self._run_hook()
        assert self.stop is not None
        self.stop.hook = hook
        if hook:
            self._stop_parts.append(_("before_stop {result}").format(result=hook["result"]))
            if not hook.get("ok") and not (self.stopping is not None and self.stopping.done):
                self.say(_("costctl: before_stop {result}; stopping anyway").format(result=hook["result"]))
        child_status = self.job.end() if self.job.running else None
        if child_status is not None:
            self._stop_parts.append(_("job ended (exit status {status})").format(status=child_status))
        return _("; ").join(self._stop_parts) or None

    def _on_stop_event(self, event: StopEvent) -> None:
        """Store one step of the stop, say it, and once it ends, the decision's outcome."""
        stop = self.stop
        assert stop is not None
        if event.unconfirmed:  # no transition (nothing stored): said, and told to the listeners
            self.say(_("costctl: the stop of instance {instance} on {provider} is not confirmed yet: {detail}").format(
                instance=self.run.state.instance_id, provider=self.instances.name, detail=event.detail))
            self._tell_stop_listeners(event)
            return
        stop.state, stop.attempts, stop.detail = event.state.value, event.attempt, event.detail
        self._store("record_stop_event", self.run.state.run_id, decision_id=self._decision_id, time=event.time,
                    state=event.state.value, attempt=event.attempt, detail=event.detail)
        shape = {"instance": self.run.state.instance_id, "provider": self.instances.name,
                 "count": event.attempt, "attempt": event.attempt, "detail": event.detail}
        if event.state is StopState.CONFIRMED:
            self.say(ngettext("costctl: instance {instance} on {provider} is stopped (confirmed by {provider}; "
                              "{count} stop request)",
                              "costctl: instance {instance} on {provider} is stopped (confirmed by {provider}; "
                              "{count} stop requests)", event.attempt).format(**shape))
        elif event.state is StopState.GONE:
            self.say(_("costctl: instance {instance} on {provider} is gone: {detail}").format(**shape))
        elif event.state is StopState.SELF_STOP_SENT:
            self.say(_("costctl: self-stop sent: {detail}").format(**shape))
        elif event.state is StopState.FAILED:
            self.say(_("costctl: STOP FAILED: instance {instance} on {provider} may still be running and billing: "
                       "{detail}").format(**shape))
        elif event.state is StopState.SENT:
            self.say(_("costctl: stop request {attempt} sent to {provider}: {detail}").format(**shape))
        elif event.attempt:  # a retry or a re-send
            self.say(_("costctl: stop: {detail}").format(**shape))
        self._tell_stop_listeners(event)
        if event.state.terminal:
            ended = _("{what}: {detail}").format(what=stop_state_text(event.state.value), detail=event.detail)
            stop.outcome = _("; ").join([*self._stop_parts, ended])
            proc = self.stopping
            history = [e.as_dict() for e in proc.events] if proc is not None else [event.as_dict()]
            extra: dict[str, Any] = {"stop": {"state": event.state.value, "attempts": event.attempt,
                                              "history": history}}
            if stop.hook:
                extra["before_stop"] = stop.hook
            self._store("set_decision_outcome", self._decision_id, stop.outcome, evidence=extra)
            stop.ended_at = event.time
            for callback in self._after_stop:
                try:
                    callback(stop)
                except CostctlError as exc:
                    self.say(_("costctl: after the stop: {error}").format(error=exc.message))
            stop.closed = True  # last: the watch ends on it (StopResult.done), in another thread

    def abort(self) -> None:
        """The watch ends now (SIGTERM/Ctrl-C during a stop): a before_stop hook or self-stop
        command still running has its whole process group killed, so nothing of it outlives the
        watch."""
        kill_self_stops()
        proc = self._hook_proc
        if proc is not None and proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def _tell_stop_listeners(self, event: StopEvent) -> None:
        """Pass ``event`` to each :meth:`on_stop_event` listener; one that raises is said."""
        for listener in list(self._stop_listeners):
            try:
                listener(event, self.stopping)
            except Exception as exc:  # noqa: BLE001 - a listener (notifications) never ends the stop
                self.say(_("costctl: a stop listener failed: {error}").format(error=type(exc).__name__))

    def on_stop_event(self, listener: Callable[[StopEvent, StopProcess | None], None]) -> None:
        """Call ``listener`` with each step of the stop (and the :class:`StopProcess`), in the
        stop's thread, after the step is stored and said; it must not block (notifications
        only enqueue). One that raises is said and the stop goes on."""
        self._stop_listeners.append(listener)

    def after_stop(self, callback: Callable[[StopResult], None]) -> None:
        """Call ``callback`` with the stop once it ended (at once when it already has); in the
        stop's thread. A :class:`~costctl.errors.CostctlError` it raises is said, not raised."""
        if self.stop is not None and self.stop.done:
            callback(self.stop)
        else:
            self._after_stop.append(callback)

    def _store(self, method: str, *args: Any, **kwargs: Any) -> None:
        """Write through the stop log; a ledger that fails is said once and never ends the stop."""
        if self.stop_log is None or (method == "set_decision_outcome" and self._decision_id is None):
            return
        try:
            getattr(self.stop_log, method)(*args, **kwargs)
        except CostctlError as exc:
            if not self._log_failed:
                self._log_failed = True
                self.say(_("costctl: could not record the stop in the ledger ({error}); the stop goes on").format(
                    error=exc.message))

    def _run_hook(self) -> dict[str, Any]:
        command = self.hooks.before_stop
        if not command:
            return {}
        timeout = self.hooks.before_stop_timeout.total_seconds()
        started = self.clock.now()
        self.say(_("costctl: running before_stop hook: {command}").format(command=command))
        try:
            # A group of its own: on a timeout the hook's children are ended with it.
            proc = subprocess.Popen(
                command, shell=True, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, start_new_session=True,
            )
        except OSError as exc:
            return {"command": command, "result": _("failed to start: {error}").format(error=exc.strerror),
                    "ok": False}
        except ValueError as exc:  # "embedded null byte": the config refuses it; a hook set in code may not
            return {"command": command, "result": _("failed to start: {error}").format(error=exc), "ok": False}
        self._hook_proc = proc
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            end_group(proc)
            return {"command": command, "ok": False,
                    "result": _("timed out after {seconds:g}s (its process group was ended)").format(seconds=timeout)}
        finally:
            self._hook_proc = None
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
            "result": _("succeeded") if ok else _("failed (it {exit})").format(exit=exit_text(proc.returncode)),
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
