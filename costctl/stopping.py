"""A stop carried through until the provider confirms it: :class:`StopProcess`.

A stop decision does not end with a request that was answered. It is a recorded state machine
(every transition is a :class:`StopEvent`, stored in the ledger's ``stop_events``)::

    requested ──send──▶ sent ──status reads stopped──▶ confirmed
        │  ▲              │ still running after resend_interval: send again (attempt n+1)
        │  └─transient────┘ (the send failed after the adapter's own retries: backoff, send again)
        ├─ 404 / not found ─────────────────────────▶ gone      (it no longer bills)
        ├─ permanent error, or the deadline ─▶ self-stop sent   (where the instance can stop
        │                                                        itself: recorded *before* it runs)
        └────────────────────────────────────────────▶ failed   (reason)

* **Transient** failures (HTTP 429/5xx, timeouts, connection resets, a transient error inside a
  200: RunPod ``errors[]``, an AutoDL envelope code) are first retried by the adapter's own
  HTTP layer (:mod:`costctl_providers._retry`, tenacity: exponential backoff with jitter,
  Retry-After honoured up to a cap). One that outlasts those retries is sent again here after
  a backoff from ``[stop] poll_interval`` doubling up to ``resend_interval``.
* A stop **answered but not carried out** (the status still reads running ``resend_interval``
  after the last request) is sent again on that schedule; once the status reads stopped the
  process ends (a user who starts the instance again by hand is not stopped again).
* **Permanent** errors (a rejected credential, a missing capability, another 4xx) end the API
  route at once; so does ``[stop] deadline``. The next step is the instance's **self-stop**
  (``[instance] self_stop``, an AutoDL container's ``shutdown``) where it has one; a self-stop
  cannot be confirmed (the machine powers off under us), so ``self-stop sent`` is recorded
  before the command runs; a command that returns and leaves this process alive for
  ``[stop] self_stop_grace`` did not stop the machine: **failed**. Without a self-stop the stop
  is **failed** too, and the watch says so and exits with :data:`EXIT_STOP_FAILED`.
* ``[stop] deadline`` counts from the first stop request, after the before_stop hook and the
  end of the job (each bounded by its own timeout): neither can use it up.

The process never sleeps: :meth:`StopProcess.step` does one action and sets
:attr:`StopProcess.next_at`; the live watch runs it in a thread of its own
(:class:`StopRunner`), a simulated-clock test calls :meth:`~StopProcess.step` itself.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import TYPE_CHECKING, Literal

from .clock import Clock
from .errors import CostctlError
from .i18n import N_, _, canonical, ngettext
from .summary import STATE_WORDS, STOP_STATE_TEXT, stop_state_text

if TYPE_CHECKING:
    from costctl_providers.base import Instance, Provider

    from .config import StopConfig

#: The watch's exit status when it was to stop its instance and ended without a confirmed (or
#: self-stop-sent) stop. 69 is ``EX_UNAVAILABLE`` of BSD ``sysexits.h`` ("a service is
#: unavailable"): not 1 (an error of costctl's), not 2 (usage), and not a status a training
#: job commonly exits with. It wins over the job's own exit status (which is in the summary
#: and in ``costctl bill``).
EXIT_STOP_FAILED = 69

#: Seconds a self-stop command may run before it is given up on (it normally powers the
#: machine off, or returns at once).
SELF_STOP_TIMEOUT_S = 60.0


class StopState(StrEnum):
    """Where a stop is (the ``stop_events.state`` column)."""

    REQUESTED = "requested"
    SENT = "sent"
    CONFIRMED = "confirmed"
    GONE = "gone"
    SELF_STOP_SENT = "self-stop sent"
    FAILED = "failed"

    @property
    def terminal(self) -> bool:
        """The stop is over (confirmed, gone or failed). ``self-stop sent`` is not: the watch
        waits for the machine to power off under it (``[stop] self_stop_grace``); if it is
        still alive after that, the self-stop failed."""
        return self in _TERMINAL

    @property
    def stopped(self) -> bool:
        """The instance no longer bills (the provider said so)."""
        return self in (StopState.CONFIRMED, StopState.GONE)


_TERMINAL = frozenset({StopState.CONFIRMED, StopState.GONE, StopState.FAILED})



@dataclass(frozen=True)
class StopRoute:
    """How a watch would stop its instance, as the preflight found it.

    Attributes:
        kind: ``"api"`` (the provider's API, credential accepted), ``"self-stop"`` (a command
            run on the instance itself) or ``"none"`` (``--advise-only``: nothing is stopped).
        detail: what was found, one clause (``"credential accepted"``, the self-stop's reason,
            or why neither route exists under ``--advise-only``).
        argv: the self-stop command (``kind == "self-stop"``), else None.
    """

    kind: Literal["api", "self-stop", "none"]
    detail: str
    argv: tuple[str, ...] | None = None

    @property
    def stops(self) -> bool:
        """Whether this watch may stop the instance (False under ``--advise-only``)."""
        return self.kind != "none"

    def _label(self, tr: Callable[[str], str]) -> str:
        if self.kind == "api":
            return tr(N_("API ({detail})")).format(detail=self.detail)
        if self.kind == "self-stop":
            assert self.argv
            return tr(N_("self-stop via {command}")).format(command=" ".join(self.argv))
        return tr(N_("none (--advise-only: nothing will be stopped)"))

    @property
    def label(self) -> str:
        """``API (credential accepted)``, ``self-stop via shutdown``, ``none (--advise-only)``, in
        the current language (:mod:`costctl.i18n`)."""
        return self._label(_)

    @property
    def label_en(self) -> str:
        """:attr:`label` in English, for a decision's evidence (machine data)."""
        return str(canonical(self.label))

    def __str__(self) -> str:
        return _("stop route: {route}").format(route=self.label)

    def as_evidence(self) -> dict[str, object]:
        """JSON form for a decision's evidence."""
        return {"kind": self.kind, "detail": self.detail, "argv": list(self.argv) if self.argv else None}


@dataclass(frozen=True)
class StopEvent:
    """One transition of a stop.

    Attributes:
        time: when (aware UTC).
        state: the state reached.
        attempt: stop requests sent so far (API sends, plus the self-stop when it ran).
        detail: one line: what was seen (the provider's status, the error, the command).
        unconfirmed: the stop is still not confirmed ``[stop] unconfirmed_after`` after the first
            request (said once, the state unchanged: the notifier's "not confirmed yet").
    """

    time: datetime
    state: StopState
    attempt: int
    detail: str
    unconfirmed: bool = False

    def as_dict(self) -> dict[str, object]:
        """JSON form."""
        out: dict[str, object] = {"time": self.time.isoformat(), "state": self.state.value, "attempt": self.attempt,
                                  "detail": self.detail}
        if self.unconfirmed:
            out["unconfirmed"] = True
        return out


def api_problem(provider: Provider, instance_id: str, inst: Instance | None,
                error: CostctlError | None) -> str | None:
    """The preflight of the API route: why the provider's API is no stop route for instance
    ``instance_id``, or None when it is one (the adapter declares ``capabilities.stop`` and the
    read of the instance just made was answered, so the credential is accepted).

    Args:
        provider: the adapter (only its ``capabilities`` and ``name`` are read).
        inst: the instance as just read (a get, or a listing of the account), None when the
            read failed with ``error``.
        error: why the read failed (None when it succeeded).

    Returns:
        one clause in the current language (``"the credential was rejected (...)"``), or None.
    """
    from costctl_providers.errors import AuthError

    from .errors import ConfigError

    cap = provider.capabilities.stop
    if not cap:
        if cap.reason:
            return _("{provider} cannot stop instances through its API ({reason})").format(
                provider=provider.name, reason=cap.reason)
        return _("{provider} cannot stop instances through its API (not supported)").format(provider=provider.name)
    if inst is not None:
        return None
    assert error is not None
    if isinstance(error, AuthError):
        return _("the credential was rejected ({error})").format(error=error.message)
    if isinstance(error, ConfigError):
        return error.message  # no credential configured: the message says how to add one
    return _("instance {instance} could not be read, so no credential is proven ({error})").format(
        instance=instance_id, error=error.message)


def _is_transient(exc: BaseException) -> bool:
    return bool(getattr(exc, "transient", False))


def _is_not_found(exc: BaseException) -> bool:
    from costctl_providers.errors import NotFoundError

    return isinstance(exc, NotFoundError)


def _tries(exc: BaseException) -> int | None:
    """The HTTP attempts an error names, when its message does not say them already."""
    attempts = getattr(exc, "attempts", None)
    return attempts if attempts and "attempt" not in str(exc) else None


def exit_text(returncode: int) -> str:
    """``exited with status 3`` or ``was killed by SIGTERM`` (a negative Popen return code): a
    whole predicate, in the current language, that follows the name of what ran."""
    if returncode < 0:
        try:
            return _("was killed by {signal}").format(signal=signal.Signals(-returncode).name)
        except ValueError:
            return _("was killed by signal {number}").format(number=-returncode)
    return _("exited with status {status}").format(status=returncode)


#: The self-stop commands running now (so that a watch told to end kills them, group and all).
_running: set[subprocess.Popen[bytes]] = set()
_running_lock = threading.Lock()


def kill_self_stops() -> None:
    """SIGKILL the process group of every self-stop command still running (the watch ends)."""
    with _running_lock:
        procs = list(_running)
    for proc in procs:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def run_self_stop(argv: Sequence[str], *, timeout_s: float = SELF_STOP_TIMEOUT_S) -> str:
    """Run a self-stop command (no shell, in a process group of its own); returns one line of
    what happened. On a timeout its whole group is killed.

    Raises:
        CostctlError: it could not be started, timed out, was killed, or exited non-zero.
    """
    shown = " ".join(argv)
    try:
        proc = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
    except FileNotFoundError:
        raise CostctlError(_("self-stop {command!r}: command not found").format(command=shown)) from None
    except OSError as exc:
        raise CostctlError(_("self-stop {command!r} could not be started: {error}").format(
            command=shown, error=exc.strerror)) from None
    with _running_lock:
        _running.add(proc)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.communicate()
        raise CostctlError(_("self-stop {command!r} did not return within {timeout:g}s (its process group "
                             "was killed)").format(command=shown, timeout=timeout_s)) from None
    finally:
        with _running_lock:
            _running.discard(proc)
    if proc.returncode != 0:
        tail = (err or out).decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
        if tail[0]:
            raise CostctlError(_("self-stop {command!r} {exit}: {output}").format(
                command=shown, exit=exit_text(proc.returncode), output=tail[0][:200]))
        raise CostctlError(_("self-stop {command!r} {exit}").format(command=shown, exit=exit_text(proc.returncode)))
    return _("{command} exited 0").format(command=shown)


@dataclass
class StopProcess:
    """One stop of one instance, from request to its end (see the module docstring).

    Args:
        instances: the provider adapter (``name``, ``stop_instance(id, wait=False)``,
            ``get_instance``; the executor's :class:`~costctl.protocols.InstanceControl`).
        instance_id: the instance to stop.
        route: the preflight's route: ``api`` sends through the provider, ``self-stop`` runs
            ``route.argv`` at once.
        clock: time source (aware UTC).
        config: ``[stop]`` (poll_interval, resend_interval, deadline).
        on_event: called with every :class:`StopEvent`, in order, before the next action
            (the watch stores it and says it); it must not raise.
        find_self_stop: where the API route fails, returns the self-stop argv of this very
            instance (or None when it has none); None: no escalation.
        before_self_stop: called after ``self-stop sent`` was passed to ``on_event`` and before
            the command runs (the watch flushes its ledger: the machine may power off).
        run_command: runs a self-stop argv (default :func:`run_self_stop`).
        prepare: runs first, once, in :meth:`step` (the executor's before_stop hook and ending
            the job), so that neither blocks the watch's tick; what it returns (one line) is
            recorded as a ``requested`` event.

    Attributes:
        state / attempts / events: where it is, stop requests sent, the history.
        next_at: when :meth:`step` should run next (None once terminal).
        ended_at: when it reached its terminal state.
        last_status: the provider's last status word seen.
    """

    instances: Provider
    instance_id: str
    route: StopRoute
    clock: Clock
    config: StopConfig
    on_event: Callable[[StopEvent], None]
    find_self_stop: Callable[[], Sequence[str] | None] | None = None
    before_self_stop: Callable[[], None] | None = None
    run_command: Callable[[Sequence[str]], str] = run_self_stop
    prepare: Callable[[], str | None] | None = None
    state: StopState = StopState.REQUESTED
    attempts: int = 0
    events: list[StopEvent] = field(default_factory=list)
    next_at: datetime | None = None
    ended_at: datetime | None = None
    last_status: str | None = None
    started_at: datetime | None = None
    _last_sent_at: datetime | None = None
    _send_failures: int = 0
    _self_stop_tried: bool = False
    _requests_from: datetime | None = None
    _self_stop_ran_at: datetime | None = None
    _unconfirmed_said: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _emit_lock: threading.RLock = field(default_factory=threading.RLock, repr=False)

    def __post_init__(self) -> None:
        self.started_at = self.started_at or self.clock.now()
        self.next_at = self.started_at
        self._emit(StopState.REQUESTED, _("stop of {provider} instance {instance} requested ({route})").format(
            provider=self.instances.name, instance=self.instance_id, route=self.route.label))

    # ------------------------------------------------------------------ state
    @property
    def done(self) -> bool:
        """The stop reached a terminal state."""
        return self.state.terminal

    @property
    def deadline(self) -> datetime:
        """When the API route is given up on: ``[stop] deadline`` after the first stop request
        (the before_stop hook and the end of the job come first and do not count)."""
        start = self._requests_from or self.started_at
        assert start is not None
        return start + self.config.deadline

    @property
    def self_stop_returned(self) -> bool:
        """The self-stop command returned 0 and the watch waits for the machine to power off."""
        return self._self_stop_ran_at is not None and not self.done

    def due(self, now: datetime | None = None) -> bool:
        """Whether :meth:`step` has something to do at ``now``."""
        return not self.done and self.next_at is not None and (now or self.clock.now()) >= self.next_at

    def describe(self) -> str:
        """One short clause for the status line (``stopping: sent (attempt 2), status running``)."""
        shape = {"instance": self.instance_id, "state": _(STATE_WORDS[self.state.value]), "attempt": self.attempts,
                 "status": self.last_status}
        if self.attempts == 0:  # requested, nothing sent yet: no attempt to count
            if self.last_status:
                return _("stopping {instance}: {state}, status {status}").format(**shape)
            return _("stopping {instance}: {state}").format(**shape)
        if self.last_status:
            return _("stopping {instance}: {state} (attempt {attempt}), status {status}").format(**shape)
        return _("stopping {instance}: {state} (attempt {attempt})").format(**shape)

    def _emit(self, state: StopState, detail: str) -> bool:
        """Move to ``state`` and report it; False (nothing done) once the stop already ended
        (e.g. cancelled from another thread while a provider call was in flight)."""
        with self._emit_lock:
            if self.state.terminal:
                return False
            now = self.clock.now()
            self.state = state
            if state.terminal:
                self.ended_at = now
                self.next_at = None
            event = StopEvent(time=now, state=state, attempt=self.attempts, detail=detail)
            self.events.append(event)
            self.on_event(event)
            return True

    # ------------------------------------------------------------------ actions
    def step(self) -> None:
        """Do what is due: prepare, send, read the status, re-send, escalate. Never raises for a
        provider failure (it becomes a state); never blocks longer than one provider call (with
        its own retries) or the self-stop command."""
        with self._lock:
            if self.done:
                return
            if self.prepare is not None:
                prepare, self.prepare = self.prepare, None
                done = prepare()
                if done:
                    self._emit(StopState.REQUESTED, done)
            if self._requests_from is None:
                self._requests_from = self.clock.now()
            if self.state is StopState.SELF_STOP_SENT:
                self._self_stop_outlived()
                return
            if self.route.kind == "self-stop":
                self._self_stop(self.route.argv or (), _("the preflight chose the instance's self-stop"))
                return
            now = self.clock.now()
            if now >= self.deadline:
                shape = {"deadline": self.config.deadline.total_seconds(), "count": self.attempts,
                         "status": self.last_status}
                if self.last_status:
                    why = ngettext("not confirmed {deadline:g}s after the first stop request ({count} stop request "
                                   "sent, status still {status})",
                                   "not confirmed {deadline:g}s after the first stop request ({count} stop requests "
                                   "sent, status still {status})", self.attempts)
                else:
                    why = ngettext("not confirmed {deadline:g}s after the first stop request ({count} stop request "
                                   "sent)",
                                   "not confirmed {deadline:g}s after the first stop request ({count} stop requests "
                                   "sent)", self.attempts)
                self._escalate(why.format(**shape))
                return
            if self.state is StopState.REQUESTED:
                self._send()
            else:
                self._check()

    def cancel(self, reason: str) -> None:
        """End an unfinished stop as failed (the watch was told to end: SIGTERM, Ctrl-C). Does
        not wait for a provider call in flight: what it answers afterwards is not recorded, so a
        stop is never claimed after the watch said it failed."""
        shape = {"reason": reason, "count": self.attempts, "status": self.last_status}
        if self.last_status:
            why = ngettext("{reason}, before the stop was confirmed ({count} stop request sent, status {status})",
                           "{reason}, before the stop was confirmed ({count} stop requests sent, status {status})",
                           self.attempts)
        else:
            why = ngettext("{reason}, before the stop was confirmed ({count} stop request sent)",
                           "{reason}, before the stop was confirmed ({count} stop requests sent)", self.attempts)
        self._emit(StopState.FAILED, why.format(**shape))

    def _send(self) -> None:
        self.attempts += 1
        try:
            inst = self.instances.stop_instance(self.instance_id, wait=False)
        except CostctlError as exc:
            tries = _tries(exc)
            shape = {"attempt": self.attempts, "tries": tries, "error": exc.message}
            if _is_not_found(exc):
                self._emit(StopState.GONE, _("the provider no longer knows the instance: {error}").format(**shape))
            elif _is_transient(exc):
                self._send_failures += 1
                backoff = min(self._backoff(), max(self.deadline - self.clock.now(), timedelta(0)))
                if tries:
                    failed = _("stop request {attempt} failed ({tries} HTTP attempts): {error}; sending it again "
                               "in {backoff:.0f}s")
                else:
                    failed = _("stop request {attempt} failed: {error}; sending it again in {backoff:.0f}s")
                self._emit(StopState.REQUESTED, failed.format(backoff=backoff.total_seconds(), **shape))
                self._next_at(self.clock.now() + backoff)
            elif tries:
                self._escalate(_("stop request {attempt} refused ({tries} HTTP attempts): {error}").format(**shape))
            else:
                self._escalate(_("stop request {attempt} refused: {error}").format(**shape))
            return
        self._last_sent_at = self.clock.now()
        self._seen(inst, sent=True)

    def _check(self) -> None:
        try:
            inst = self.instances.get_instance(self.instance_id)
        except CostctlError as exc:
            tries = _tries(exc)
            if _is_not_found(exc):
                self._emit(StopState.GONE, _("the provider no longer knows the instance: {error}").format(
                    error=exc.message))
            elif _is_transient(exc):
                self._next_at(self.clock.now() + self.config.poll_interval)  # keep reading until the deadline
            elif tries:
                self._escalate(_("reading the instance failed ({tries} HTTP attempts): {error}").format(
                    tries=tries, error=exc.message))
            else:
                self._escalate(_("reading the instance failed: {error}").format(error=exc.message))
            return
        self._seen(inst, sent=False)

    def _seen(self, inst: Instance, *, sent: bool) -> None:
        from costctl_providers.base import Status

        self.last_status = inst.status_raw or inst.status.value
        # the status word (``stopped``, ``running (exited)``): the provider's own words, untranslated
        word = inst.status.value + (f" ({inst.status_raw})" if inst.status_raw and inst.status_raw != inst.status.value else "")
        shape = {"provider": self.instances.name, "instance": self.instance_id, "status": word,
                 "count": self.attempts, "attempt": self.attempts}
        if inst.status in (Status.STOPPED, Status.TERMINATED):
            self._emit(StopState.CONFIRMED, ngettext(
                "{provider} reports instance {instance} {status} after {count} stop request",
                "{provider} reports instance {instance} {status} after {count} stop requests", self.attempts,
            ).format(**shape))
            return
        now = self.clock.now()
        if sent:
            self._emit(StopState.SENT, _("stop request {attempt} accepted; the instance is {status}").format(**shape))
        elif (inst.status is not Status.STOPPING and self._last_sent_at is not None
              and now - self._last_sent_at >= self.config.resend_interval):
            self._emit(StopState.REQUESTED, _("the instance is still {status} {seconds:.0f}s after stop request "
                                              "{attempt}; sending it again").format(
                seconds=(now - self._last_sent_at).total_seconds(), **shape))
            self._send()
            return
        elif not self._unconfirmed_said and self._requests_from is not None \
                and now - self._requests_from >= self.config.unconfirmed_after:
            self._unconfirmed_said = True
            self._emit_unconfirmed(now, _("not confirmed {seconds:.0f}s after the first stop request ({count} stop "
                                          "request(s) sent, status {status})").format(
                seconds=(now - self._requests_from).total_seconds(), **shape))
        self._next_at(now + self.config.poll_interval)

    def _next_at(self, when: datetime) -> None:
        """The next step of the API route at ``when``, never past :attr:`deadline` (a wait or a
        re-send scheduled after it would declare the failure late)."""
        self.next_at = min(when, self.deadline)

    def _emit_unconfirmed(self, now: datetime, detail: str) -> None:
        """Say once that the stop is still not confirmed (``[stop] unconfirmed_after``): an event
        in the state it is in, marked :attr:`StopEvent.unconfirmed`."""
        with self._emit_lock:
            if self.state.terminal:
                return
            event = StopEvent(time=now, state=self.state, attempt=self.attempts, detail=detail, unconfirmed=True)
            self.events.append(event)
            self.on_event(event)

    def _backoff(self) -> timedelta:
        """``poll_interval`` × 2^(failures-1), capped at ``resend_interval``, ±10 % jitter."""
        base = self.config.poll_interval.total_seconds() * 2 ** max(0, self._send_failures - 1)
        capped = min(base, self.config.resend_interval.total_seconds())
        return timedelta(seconds=capped * random.uniform(0.9, 1.1))

    def _escalate(self, why: str) -> None:
        argv = None
        if not self._self_stop_tried and self.find_self_stop is not None:
            try:
                argv = self.find_self_stop()
            except Exception:  # noqa: BLE001 - no self-stop is the answer then
                argv = None
        if argv:
            self._self_stop(argv, _("API route ended: {why}").format(why=why))
            return
        self._emit(StopState.FAILED, _("{why}; no self-stop route for this instance").format(why=why))

    def _self_stop(self, argv: Sequence[str], why: str) -> None:
        self._self_stop_tried = True
        self.attempts += 1
        # Recorded before it runs: the machine may power off before anything else is written.
        if not self._emit(StopState.SELF_STOP_SENT, _("{why}; running {command} (a self-stop cannot be "
                                                      "confirmed)").format(why=why, command=" ".join(argv))):
            return
        if self.before_self_stop is not None:
            self.before_self_stop()
        try:
            result = self.run_command(argv)
        except CostctlError as exc:
            with self._emit_lock:  # the command did not even run to completion: not a stop
                self.state = StopState.REQUESTED
                self._emit(StopState.FAILED, _("{why}; {error}").format(why=why, error=exc.message))
            return
        with self._emit_lock:
            if self.state.terminal:  # cancelled meanwhile
                return
            now = self.clock.now()
            grace = self.config.self_stop_grace
            event = StopEvent(time=now, state=self.state, attempt=self.attempts,
                              detail=_("{result}; the machine should power off within {grace:g}s").format(
                                  result=result, grace=grace.total_seconds()))
            self.events.append(event)
            self.on_event(event)
            self._self_stop_ran_at = now
            self.next_at = now + grace

    def _self_stop_outlived(self) -> None:
        """This process is still alive ``self_stop_grace`` after the self-stop returned: the
        machine did not power off, so the instance still runs."""
        assert self._self_stop_ran_at is not None
        waited = (self.clock.now() - self._self_stop_ran_at).total_seconds()
        with self._emit_lock:
            if self.state.terminal:
                return
            self.state = StopState.REQUESTED
            self._emit(StopState.FAILED, _("the self-stop returned but this machine is still running {seconds:.0f}s "
                                           "later: the instance was not stopped").format(seconds=waited))


class StopRunner:
    """Runs a :class:`StopProcess` to its end in a daemon thread of its own, so a slow
    provider never blocks the watch's tick or its signal handling.

    Args:
        process: the stop.
        wake_s: the longest real wait between two looks at :attr:`StopProcess.next_at`.
    """

    def __init__(self, process: StopProcess, *, wake_s: float = 0.2) -> None:
        self.process = process
        self._wake = threading.Event()
        self._wake_s = wake_s
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="costctl-stop", daemon=True)

    def start(self) -> None:
        """Start the thread."""
        self.thread.start()

    def _run(self) -> None:
        proc = self.process
        try:
            while not proc.done:
                if proc.due():
                    proc.step()
                    continue
                left = (proc.next_at - proc.clock.now()).total_seconds() if proc.next_at else self._wake_s
                self._wake.wait(max(0.0, min(self._wake_s, left)))
        except BaseException as exc:  # noqa: BLE001 - a bug must still end the stop, as failed
            self.error = exc
            proc.cancel(_("internal error in the stop thread: {error}: {detail}").format(
                error=type(exc).__name__, detail=exc))

    def join(self, timeout_s: float | None = None) -> None:
        """Wait for the thread to end."""
        self._wake.set()
        self.thread.join(timeout_s)


__all__ = ["EXIT_STOP_FAILED", "api_problem", "SELF_STOP_TIMEOUT_S", "STOP_STATE_TEXT", "StopEvent", "StopProcess", "StopRoute",
           "StopRunner", "StopState", "exit_text", "kill_self_stops", "run_self_stop", "stop_state_text"]
