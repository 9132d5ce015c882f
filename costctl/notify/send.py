"""The sender child: ``python -m costctl.notify.send`` sends one message through Apprise.

A watch never imports Apprise (its import alone costs ~0.4 s and ~45 MB); it starts this
short-lived process for each message (:class:`costctl.notify.dispatch.Notifier`) and writes the
request to its stdin, one JSON object::

    {"urls": ["json://127.0.0.1:8080/hook", "autodl://TOKEN"], "title": "...", "body": "...",
     "type": "info|success|warning|failure", "name": "costctl pro-1 run 1a2b3c4d", "timeout": 30,
     "language": "zh_CN", "after_pid": 4242, "after_wait_s": 35}

so that no URL (they hold tokens) is ever in its argv (``ps``) or its environment. Each URL is
sent to in a thread of its own (a URL that hangs does not hold the others up), within
``timeout`` seconds (Apprise's connect and read timeouts, and a deadline on the whole process).
The messages of one watch arrive in the order they happened: a child started while an earlier
one still runs is told that one's pid (``after_pid``) and sends only once it has ended (at most
``after_wait_s`` seconds of waiting, the time by which the watch kills it anyway); the children
still start at once, so Apprise's import is not serialized.
It answers on stdout with one JSON line, ``{"results": [{"index": 1, "ok": true, "detail": ""},
...]}`` (index: the URL's place in ``urls``, from 1), and exits 0; ``detail`` is Apprise's
warning lines for that URL, costctl's own in the watch's ``language`` (:mod:`costctl.i18n`;
the locale variables when absent). Every line it writes, and every log record of Apprise's (a filter on
the root handler), has each part of each URL masked (:mod:`costctl.notify.redact`). Exit status
2: the request could not be read.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time
from typing import Any

from ..i18n import _, set_language
from .redact import RedactFilter, all_secrets, redact

#: Seconds after the timeout that the whole process is given before it answers for what is left.
EXIT_SLACK_S = 2.0


class _PerThread(logging.Handler):
    """Keeps the (already masked) warning lines per sending thread: a URL's own lines."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: dict[str, list[str]] = {}

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.setdefault(record.threadName, []).append(record.getMessage())


def _send_one(index: int, url: str, request: dict[str, Any], results: dict[int, dict[str, Any]],
              lines: _PerThread, secrets: list[str]) -> None:
    import apprise

    timeout = float(request.get("timeout", 30))
    name = threading.current_thread().name
    try:
        sender = apprise.Apprise()
        if not sender.add(url):
            scheme = url.split("://", 1)[0] if "://" in url else "?"
            results[index] = {"index": index, "ok": False,
                              "detail": _("Apprise does not know this URL (scheme {scheme}://) or it is "
                                          "malformed").format(scheme=scheme)}
            return
        for service in sender:
            service.socket_connect_timeout = min(timeout, 10.0)
            service.socket_read_timeout = timeout
            if hasattr(service, "run_name"):  # a plugin that shows the run's name (AutoDL's push)
                service.run_name = str(request.get("name") or "costctl")
        outcome = sender.notify(body=str(request.get("body", "")), title=str(request.get("title", "")),
                                notify_type=apprise.NotifyType(str(request.get("type", "info"))))
        ok = bool(outcome)
        said = list(lines.lines.get(name, []))  # Apprise 1.x logs in the calling thread
        if not said and not isinstance(outcome, bool):  # Apprise 2.x: each service's own log
            try:
                said = [e.message for r in outcome for e in r.logs() if e.level in ("WARNING", "ERROR", "CRITICAL")]
            except Exception:  # noqa: BLE001 - a detail is a courtesy
                said = []
        detail = " | ".join(said[-3:])
        results[index] = {"index": index, "ok": ok, "detail": redact(detail, secrets)[:500]}
    except Exception as exc:  # noqa: BLE001 - one URL's failure is its result, never the process's
        results[index] = {"index": index, "ok": False, "detail": redact(f"{type(exc).__name__}: {exc}", secrets)[:500]}


def register_adapter_plugins() -> list[str]:
    """Make known to Apprise the plugins the provider adapters declare
    (:func:`costctl_providers.registry.notify_plugins`: AutoDL's WeChat push, ``autodl://``);
    returns the schemes added. One that cannot be loaded is skipped (its URLs then fail as
    unknown)."""
    import importlib

    from apprise.manager_plugins import NotificationManager
    from costctl_providers.registry import notify_plugins

    manager = NotificationManager()
    added: list[str] = []
    for spec in notify_plugins():
        module, _sep, name = spec.partition(":")
        try:
            plugin = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            continue
        schemes = [s for s in (getattr(plugin, "secure_protocol", None), getattr(plugin, "protocol", None)) if s]
        schemes = [x for s in schemes for x in ((s,) if isinstance(s, str) else s)]
        if schemes and not any(s in manager for s in schemes):
            manager.add(plugin, schemas=tuple(schemes))
            added.extend(schemes)
    return added


def send(request: dict[str, Any]) -> list[dict[str, Any]]:
    """Send ``request`` (the stdin object) to each of its URLs, one thread each; returns one
    result per URL (in order), those still running after ``timeout`` reported as such."""
    urls = [str(u) for u in request.get("urls", [])]
    secrets = all_secrets(urls)
    handler = _PerThread()
    handler.addFilter(RedactFilter(secrets))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)
    logging.getLogger("apprise").setLevel(logging.WARNING)

    register_adapter_plugins()
    timeout = float(request.get("timeout", 30))
    results: dict[int, dict[str, Any]] = {}
    threads = []
    for index, url in enumerate(urls, start=1):
        thread = threading.Thread(target=_send_one, args=(index, url, request, results, handler, secrets),
                                  name=f"url-{index}", daemon=True)
        thread.start()
        threads.append(thread)
    deadline = time.monotonic() + timeout + EXIT_SLACK_S
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    return [results.get(i) or {"index": i, "ok": False,
                               "detail": _("no answer within {seconds:g}s").format(seconds=timeout)}
            for i in range(1, len(urls) + 1)]


def _alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie, ended but not reaped yet, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state not in (b"Z", b"X")


def wait_for(pid: int, wait_s: float, *, poll_s: float = 0.02) -> bool:
    """Wait (real time, at most ``wait_s`` seconds) until the earlier sender ``pid`` ended; True
    when it did. Its messages happened first, so they go first."""
    deadline = time.monotonic() + max(0.0, wait_s)
    while _alive(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll_s)
    return True


def main() -> int:
    """Read the request from stdin, send it, print the results (see the module docstring)."""
    try:
        request = json.loads(sys.stdin.read())
        if not isinstance(request, dict) or not isinstance(request.get("urls"), list):
            raise ValueError("expected a JSON object with a list of urls")
    except ValueError as exc:
        print(json.dumps({"error": f"costctl.notify.send: unreadable request: {type(exc).__name__}"}), flush=True)
        return 2
    set_language(str(request.get("language") or "auto"))
    # Apprise is imported before the guard starts (its import takes ~0.4 s, seconds on a loaded
    # machine): the guard bounds the sending, which the request's timeout is about.
    import apprise  # noqa: F401
    after = request.get("after_pid")
    if isinstance(after, int) and after > 0 and after != os.getpid():
        wait_for(after, float(request.get("after_wait_s", 0)))
    # A last guard, should a thread ignore its timeouts: answer anyway and leave.
    limit = float(request.get("timeout", 30)) + 2 * EXIT_SLACK_S
    signal.signal(signal.SIGALRM, lambda *a: os._exit(124))
    signal.setitimer(signal.ITIMER_REAL, limit)
    results = send(request)
    sys.stdout.write(json.dumps({"results": results}) + "\n")
    sys.stdout.flush()
    os._exit(0)  # threads stuck in a socket are not waited for


if __name__ == "__main__":
    sys.exit(main())
