"""The watch's side of notifications: :class:`Notifier`.

It hangs on the decision recorder (:meth:`Notifier.on_decision` is a subscriber), on the stop's
events (:meth:`Notifier.on_stop_event`) and on the command's end (:meth:`Notifier.job_ended`),
turns what people should hear about into :class:`~costctl.notify.events.Message` s, and sends
each through a short-lived child (``python -m costctl.notify.send``, which imports Apprise; the
watch never does), the URLs on its stdin. Nothing here waits for a send:

* :meth:`Notifier.post` only puts the message on a bounded queue (``[notify] queue_max``; when
  full, the oldest message that is not a stop's end is dropped, and that is said once); one
  dispatcher thread starts the children in the order the messages were posted, at most
  :data:`MAX_SENDERS` at a time. They arrive in that order too: each child is told the pid of
  the one started before it while that one still runs, and sends only after it ended
  (:func:`costctl.notify.send.wait_for`), so a budget cap is never heard after the stop it
  caused. Each child is watched by a thread of its own that kills it (its whole process group)
  at its deadline: ``[notify] timeout`` + :data:`KILL_SLACK_S` after the later of its start and
  its predecessor's deadline. A stop is dispatched before, and independently of, any
  notification: the stop's own thread never touches this class but to enqueue.
* The same message (its key: a decision's key, ``stop:done``, ``stop:failed``...) is sent once.
* At most ``[notify] max_per_hour`` messages in any hour of the watch's clock; what is held back
  is counted, and the next message sent says how many were. A stop done or failed is never held.
* Each URL gets only its events (``[notify] urls`` entries with their own ``events``, else
  ``[notify] events``).
* What the child reports (a URL that failed) is said on the console with the URL named by
  :func:`~costctl.notify.redact.describe_url` and every part of every URL masked.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone, tzinfo
from typing import TYPE_CHECKING, Any

from ..decisions import RecordedDecision
from ..i18n import N_, _, format_time, language
from ..records import Action
from ..stopping import StopEvent, StopState
from .events import Context, Event, Message, decision_message, job_end_message, stop_message
from ..redaction import clip
from .redact import all_secrets, describe_url, redact

if TYPE_CHECKING:
    from ..config import NotifyConfig
    from ..stopping import StopProcess

#: Sender children running at once (a hung webhook holds one; the others go on).
MAX_SENDERS = 4
#: Seconds past ``[notify] timeout`` after which a sender child's process group is killed.
KILL_SLACK_S = 5.0
#: The module the sender child runs (``python -m``).
SENDER_MODULE = "costctl.notify.send"
#: Environment variables never passed to the sender child (the URLs reach it on stdin only).
_HIDDEN_ENV_PREFIXES = ("COSTCTL_NOTIFY__",)

#: Console lines: whole sentences with named placeholders (translated where they are said).
SAY_FAILED = N_("costctl: notification {title!r} was not delivered to notify URL {index} ({url}): {detail}")
SAY_NO_ANSWER = N_("costctl: the notification sender for {title!r} gave no answer: {detail}")
SAY_ENDED = N_("costctl: the notification sender for {title!r} gave no answer: it was ended after {seconds:g}s")
SAY_DROPPED = N_("costctl: notifications are coming faster than they can be sent: {count} were dropped "
                 "([notify] queue_max {limit})")
HELD_NOTE = N_("{count} earlier notification(s) were not sent: at most {limit} go out in an hour "
               "([notify] max_per_hour).")


@dataclass(frozen=True, slots=True)
class Target:
    """One ``[notify] urls`` entry: its place (from 1), the URL (a secret) and its events."""

    index: int
    url: str = field(repr=False)
    events: frozenset[str]

    @property
    def shown(self) -> str:
        """The URL as it may be shown (:func:`~costctl.notify.redact.describe_url`)."""
        return describe_url(self.url)


@dataclass
class Delivery:
    """What happened to one message (for the summary and the tests).

    Attributes:
        message: the message.
        targets: the URL indices it was sent to.
        results: the child's results (``{"index", "ok", "detail"}``), once it answered.
        started / ended: monotonic seconds of the child's start and end (None before).
        pid / deadline: the child's pid, and the monotonic second it is killed at.
        after: the delivery started before it that was still running (it sends after that one).
    """

    message: Message
    targets: list[int]
    results: list[dict[str, Any]] = field(default_factory=list)
    started: float | None = None
    ended: float | None = None
    pid: int | None = None
    deadline: float | None = None
    after: Delivery | None = field(default=None, repr=False)


class Notifier:
    """Sends one watch's notifications (see the module docstring).

    Args:
        config: ``[notify]``.
        context: where the watch runs now (a callable: the run changes with a move).
        say: prints one of costctl's own lines.
        on_exit: the watch's ``--on-exit`` (said in the ``job_end`` message).
        tz: the zone times are shown in (``[watch] timezone``).
        python: the interpreter that runs the sender child.
    """

    def __init__(self, config: NotifyConfig, context: Callable[[], Context], *, say: Callable[[str], None],
                 on_exit: str = "guard", tz: tzinfo = timezone.utc, python: str = sys.executable) -> None:
        self.tz = tz
        self.config = config
        self.context = context
        self.say = say
        self.on_exit = on_exit
        self.python = python
        globally = frozenset(config.events)
        self.targets = [Target(i, t.url.get_secret_value(), frozenset(t.events) if t.events is not None else globally)
                        for i, t in enumerate(config.urls, start=1)]
        self._secrets = all_secrets(t.url for t in self.targets)
        self._sent: set[str] = set()
        self._times: deque[datetime] = deque()  # when the rate-limited messages went out
        self._held = 0
        self._dropped = 0
        self._dropped_said = False
        self._queue: deque[Delivery] = deque()
        self._outstanding = 0  # messages queued or being sent (see flush)
        self._cv = threading.Condition()
        self._slots = threading.BoundedSemaphore(MAX_SENDERS)
        self._closing = False
        self._stop_reason: str | None = None
        self._unconfirmed_said = False
        self.snoozed: str | None = None  # the latest snooze, said in the next messages
        #: Whether a snooze postpones a policy's stop (the watch sets the engine's): the snooze
        #: note goes only with the warning or the end of such a stop, never a budget cap's.
        self.snoozable: Callable[[str], bool] = lambda policy: True
        self._stop_policy: str | None = None
        #: Messages posted while the watch handles its job's exit (see :meth:`defer`), else None.
        self._deferred: list[Message] | None = None
        self._defer_lock = threading.Lock()
        #: Every message handed to a sender, in order (the summary, the tests).
        self.deliveries: list[Delivery] = []
        self._thread = threading.Thread(target=self._dispatch, name="costctl-notify", daemon=True)
        self._thread.start()

    @property
    def enabled(self) -> bool:
        """Some URL is configured."""
        return bool(self.targets)

    # ------------------------------------------------------------------ what is told
    def _ctx(self, policy: str | None = None) -> Context:
        """The context now; the snooze note only when ``policy``'s stop is one a snooze holds
        (None: the message is not about a policy's stop)."""
        ctx = self.context()
        relevant = policy is None or policy == "snooze" or self.snoozable(policy)
        return replace(ctx, snoozed=self.snoozed if relevant else None)

    def on_decision(self, recorded: RecordedDecision) -> None:
        """A decision recorder subscriber: the decisions people are told about (see
        :func:`~costctl.notify.events.decision_event`); a stop decision's reason is kept for the
        stop's end."""
        d = recorded.decision
        if d.action is Action.STOP and recorded.outcome == "stop requested":
            self._stop_reason = d.reason
            self._stop_policy = d.policy
        message = decision_message(recorded, self._ctx(d.policy))
        if message is not None:
            self.post(message)

    def on_stop_event(self, event: StopEvent, process: StopProcess | None = None) -> None:
        """A step of the stop (:meth:`costctl.executor.Executor.on_stop_event`; the stop's
        thread): its end (``stop_done`` / ``stop_failed``), and once, the first sign that it is
        not going through (a failed request, a re-send, or no confirmation ``[stop]
        unconfirmed_after`` after the first request, e.g. stuck in "stopping": ``stop_failed``,
        "not confirmed yet")."""
        state = event.state.value
        if event.state is StopState.REQUESTED or event.unconfirmed:
            if event.attempt < 1 or self._unconfirmed_said:
                return
            self._unconfirmed_said = True
            state = "unconfirmed"
        elif event.state is StopState.SENT:
            return
        deadline = None
        if process is not None and state == "unconfirmed":
            deadline = format_time(process.deadline, self.tz)  # one time format in every message
        message = stop_message(state, detail=event.detail, attempts=event.attempt, when=event.time,
                               reason=self._stop_reason, deadline=deadline,
                               ctx=self._ctx(self._stop_policy or "?"))
        if message is not None:
            self.post(message)

    def job_ended(self, status: int, when: datetime) -> None:
        """The watched command exited for good with ``status``: posted ahead of anything
        :meth:`defer` holds (what the exit led to, e.g. the idle warning it starts, comes after)."""
        self.post(job_end_message(status, on_exit=self.on_exit, when=when, ctx=self._ctx()), first=True)

    def defer(self) -> None:
        """Hold the messages posted from now until :meth:`release`: the watch calls it while it
        handles its job's exit, whose last tick may already post a warning the exit caused,
        before it knows whether the exit is for good (an OOM retry restarts the job) and so
        before :meth:`job_ended`. Never delays a stop: only its messages wait, a moment."""
        with self._defer_lock:
            if self._deferred is None:
                self._deferred = []

    def release(self) -> None:
        """Post what :meth:`defer` held, in the order it was posted."""
        with self._defer_lock:
            held, self._deferred = self._deferred or [], None
        for message in held:
            self.post(message)

    # ------------------------------------------------------------------ sending
    def post(self, message: Message, *, first: bool = False) -> bool:
        """Queue ``message`` for the URLs that take its event; False when it is not sent: no
        such URL, already sent, held back by the rate limit, the notifier closed. Never blocks
        (any thread may call it: the tick's, the stop's, the snooze socket's). While
        :meth:`defer` holds messages, it is held too (True), unless ``first``."""
        if not first:
            with self._defer_lock:
                if self._deferred is not None:
                    self._deferred.append(message)
                    return True
        targets = [t.index for t in self.targets if message.event.value in t.events]
        if not targets:
            return False
        with self._cv:
            if self._closing or message.key in self._sent:
                return False
            if not message.loud:
                hour_ago = message.time - timedelta(hours=1)
                while self._times and self._times[0] <= hour_ago:
                    self._times.popleft()
                if len(self._times) >= self.config.max_per_hour:
                    self._held += 1
                    return False
                self._times.append(message.time)
            self._sent.add(message.key)
            if self._held:
                note = _(HELD_NOTE).format(count=self._held, limit=self.config.max_per_hour)
                message = replace(message, body=f"{message.body}\n{note}")
                self._held = 0
            if len(self._queue) >= self.config.queue_max:
                victim = next((d for d in self._queue if not d.message.loud), None)
                if victim is None and not message.loud:
                    self._drop()
                    return False
                if victim is not None:
                    self._queue.remove(victim)
                    self._outstanding -= 1
                    self._drop()
            self._queue.append(Delivery(message=message, targets=targets))
            self._outstanding += 1
            self._cv.notify()
        return True

    def _drop(self) -> None:
        self._dropped += 1
        if not self._dropped_said:
            self._dropped_said = True
            self.say(_(SAY_DROPPED).format(count=self._dropped, limit=self.config.queue_max))

    def _dispatch(self) -> None:
        """Thread: start a sender child for each queued message, in the order they were posted."""
        while True:
            with self._cv:
                while not self._queue and not self._closing:
                    self._cv.wait()
                if not self._queue:
                    return
                delivery = self._queue.popleft()  # in order: the messages arrive as things happened
            self._slots.acquire()
            try:
                self._start(delivery)
            except Exception as exc:  # noqa: BLE001 - a notification never ends the watch
                self._slots.release()
                self._settled()
                self.say(_(SAY_NO_ANSWER).format(title=delivery.message.title,
                                                 detail=redact(f"{type(exc).__name__}: {exc}", self._secrets)))

    def _request(self, delivery: Delivery) -> bytes:
        m = delivery.message
        urls = [t.url for t in self.targets if t.index in delivery.targets]
        request: dict[str, Any] = {"urls": urls, "title": m.title, "body": m.body, "type": m.level, "name": m.name,
                                   "timeout": self.config.timeout.total_seconds(), "language": language()}
        before = delivery.after
        if before is not None and before.pid is not None and before.ended is None and before.deadline is not None:
            request["after_pid"] = before.pid
            request["after_wait_s"] = max(0.0, before.deadline - time.monotonic())
        return json.dumps(request).encode()

    def _start(self, delivery: Delivery) -> None:
        """Start the sender child for ``delivery`` and a thread that feeds and reaps it; it
        sends after the child started before it (:attr:`Delivery.after`) ended."""
        env = {k: v for k, v in os.environ.items() if not k.upper().startswith(_HIDDEN_ENV_PREFIXES)}
        before = self.deliveries[-1] if self.deliveries else None
        if before is not None and before.ended is not None:
            before = None
        proc = subprocess.Popen([self.python, "-m", SENDER_MODULE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True, close_fds=True, env=env)
        delivery.started = time.monotonic()
        delivery.pid = proc.pid
        delivery.after = before
        start = max(delivery.started, before.deadline) if before is not None and before.deadline else delivery.started
        delivery.deadline = start + self.config.timeout.total_seconds() + KILL_SLACK_S
        self.deliveries.append(delivery)
        threading.Thread(target=self._reap, args=(proc, delivery), name="costctl-notify-sender",
                         daemon=True).start()

    def _reap(self, proc: subprocess.Popen[bytes], delivery: Delivery) -> None:
        """Thread: give the child its request, wait for its answer (killing its group after the
        timeout), and say what did not go through."""
        assert delivery.deadline is not None and delivery.started is not None
        limit = self.config.timeout.total_seconds() + KILL_SLACK_S
        waited = max(0.0, delivery.deadline - delivery.started - limit)  # for the sender before it
        title = delivery.message.title
        try:
            try:
                out, err = proc.communicate(self._request(delivery),
                                            timeout=max(0.0, delivery.deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                out, err = proc.communicate()
                self.say(_(SAY_ENDED).format(title=title, seconds=round(limit + waited, 1)))
                return
            except OSError as exc:  # the child died before reading its request
                proc.kill()
                proc.wait()
                self.say(_(SAY_NO_ANSWER).format(title=title, detail=redact(f"{type(exc).__name__}: {exc}",
                                                                            self._secrets)))
                return
            self._report(proc.returncode, out, err, delivery)
        finally:
            delivery.ended = time.monotonic()
            self._slots.release()
            self._settled()

    def _settled(self) -> None:
        """One message handed to a sender is done (answered, ended, or failed to start)."""
        with self._cv:
            self._outstanding -= 1

    def _report(self, code: int, out: bytes, err: bytes, delivery: Delivery) -> None:
        title = delivery.message.title
        try:
            answer = json.loads(out.decode("utf-8", "replace").strip().splitlines()[-1])
            results = answer["results"]
        except (ValueError, IndexError, KeyError, TypeError):
            tail = err.decode("utf-8", "replace").strip().splitlines()[-1:] or [
                _("exit status {status}").format(status=code)]
            self.say(_(SAY_NO_ANSWER).format(title=title, detail=clip(tail[0], 300, self._secrets)))
            return
        delivery.results = results
        by_index = {t.index: t for t in self.targets}
        for result in results:
            index = delivery.targets[result.get("index", 1) - 1] if 0 < result.get("index", 0) <= len(delivery.targets) \
                else None
            if result.get("ok") or index is None:
                continue
            detail = redact(str(result.get("detail") or _("it failed")), self._secrets)
            self.say(_(SAY_FAILED).format(title=title, index=index, url=by_index[index].shown, detail=detail))

    def flush(self, wait_s: float) -> bool:
        """Wait (real time, at most ``wait_s`` seconds) until every message posted so far was
        handed to a sender and every sender answered or was ended; True when they all did.
        The notifier goes on taking messages (a patrol waits for its marks' notifications
        before it acts)."""
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            with self._cv:
                if self._outstanding <= 0:
                    return True
            time.sleep(0.02)
        return False

    def delivered(self, key: str) -> bool | None:
        """Whether the message keyed ``key`` reached at least one of its URLs: True, False (its
        sender answered with no URL reached, or gave no answer), None (not sent, or not
        answered yet)."""
        found = next((d for d in reversed(self.deliveries) if d.message.key == key), None)
        if found is None or found.ended is None:
            return None
        return any(r.get("ok") for r in found.results)

    def close(self, wait_s: float = 1.0) -> None:
        """Send what is queued and take no more; wait up to ``wait_s`` seconds for the senders
        still running (they end by themselves within ``[notify] timeout`` otherwise)."""
        with self._cv:
            self._closing = True
            self._cv.notify()
        deadline = time.monotonic() + wait_s
        self._thread.join(max(0.0, deadline - time.monotonic()))
        while time.monotonic() < deadline and any(d.ended is None for d in self.deliveries):
            time.sleep(0.02)


__all__ = ["Delivery", "KILL_SLACK_S", "MAX_SENDERS", "Notifier", "SENDER_MODULE", "Target"]
