"""Who drives a patrol's stop or release, and whether that patrol is provably gone.

A claimed stop (its decision's outcome still ``stop requested``) records its **owner** in its
evidence (``owner``): the patrol process's host, pid and process start time (psutil's
``create_time``, seconds since the epoch; it tells a reused pid apart), and ``heartbeat``: when
the driving patrol last stepped the stop (ISO UTC, refreshed at each step). A later sweep takes
the stop over (:meth:`costctl.patrol.sweep.Sweeper`) only when its owner is provably gone:

* on the same host: no process with that pid runs, or the one that does started at another
  time (the pid was reused);
* on another host: its heartbeat is older than :data:`HEARTBEAT_STALE`.

A decision without an owner (recorded before owners were) is never taken over.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta
from typing import Any

import psutil

from ..clock import ensure_utc
from ..i18n import _, format_time
from ..policies.idle import fmt_duration

#: How old another host's heartbeat may be before its patrol is deemed gone (a driving patrol
#: refreshes it at every step of the stop, and its steps come at most a minute or so apart).
HEARTBEAT_STALE = timedelta(minutes=3)
#: How often at most a driving patrol refreshes its heartbeat (a step later than this does).
HEARTBEAT_EVERY = timedelta(seconds=30)
#: How far two readings of one process's start time may differ (seconds).
START_SLACK_S = 1.0


def _iso(when: datetime) -> str:
    return ensure_utc(when).isoformat(timespec="seconds").replace("+00:00", "Z")


def process_start(pid: int) -> float | None:
    """The start time of process ``pid`` (seconds since the epoch), None when none runs."""
    try:
        return float(psutil.Process(pid).create_time())
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return None
    except psutil.Error:
        return -1.0  # it exists, its start is unreadable (another user's): alive


def this_owner(host: str, now: datetime) -> dict[str, Any]:
    """The ``owner`` evidence of a stop this process drives, its heartbeat ``now`` (aware)."""
    pid = os.getpid()
    return {"host": host, "pid": pid, "started": process_start(pid), "heartbeat": _iso(now)}


def parse_iso(when: str) -> datetime:
    """An ISO 8601 time with a ``Z`` (as stored) as an aware UTC datetime."""
    return ensure_utc(datetime.fromisoformat(when.replace("Z", "+00:00")))


def beat(owner: dict[str, Any], now: datetime) -> dict[str, Any]:
    """``owner`` with its heartbeat ``now`` (aware)."""
    return {**owner, "heartbeat": _iso(now)}


def same_owner(a: Any, b: Any) -> bool:
    """Whether two ``owner`` records name one patrol process (host, pid and its start time;
    the heartbeat aside)."""
    keys = ("host", "pid", "started")
    return isinstance(a, dict) and isinstance(b, dict) and all(a.get(k) == b.get(k) for k in keys)


def owner_gone(owner: Any, *, host: str, now: datetime, tz: Any = None) -> str | None:
    """Why the patrol that owns a stop is provably gone (one line), None when it may be alive
    or the stop has no owner (see the module docstring). ``host``: this machine's name; ``now``:
    aware; times in the line are shown in ``tz`` (None: UTC)."""
    if not isinstance(owner, dict) or not isinstance(owner.get("pid"), int) or not owner.get("host"):
        return None
    if owner["host"] == host:
        started = process_start(owner["pid"])
        if started is None:
            return _("process {pid} on {host} no longer runs").format(pid=owner["pid"], host=host)
        recorded = owner.get("started")
        if started >= 0 and isinstance(recorded, (int, float)) and abs(started - recorded) > START_SLACK_S:
            return _("process {pid} on {host} is another process now (its pid was reused)").format(
                pid=owner["pid"], host=host)
        return None
    heartbeat = owner.get("heartbeat")
    if not isinstance(heartbeat, str):
        return None
    last = parse_iso(heartbeat)
    if ensure_utc(now) - last > HEARTBEAT_STALE:
        return _("the patrol on {host} (process {pid}) last stepped it at {at}, over {bound} ago").format(
            host=owner["host"], pid=owner["pid"], at=format_time(last, tz), bound=fmt_duration(HEARTBEAT_STALE))
    return None


__all__ = ["HEARTBEAT_EVERY", "HEARTBEAT_STALE", "START_SLACK_S", "beat", "owner_gone", "parse_iso", "process_start",
           "this_owner", "same_owner"]
