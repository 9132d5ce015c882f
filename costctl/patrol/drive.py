"""A sweep's stops and releases carried through side by side.

Each action of a sweep is its own verified stop (a :class:`~costctl.stopping.StopProcess`
behind its :class:`~costctl.executor.Executor`), which may take up to ``[stop] deadline``
(15 minutes by default) when its provider never confirms. :func:`drive` steps them all at
once, so a provider that never confirms delays no other instance's stop:

* every step that is due runs in a bounded pool of threads (:data:`MAX_AT_ONCE` at most), one
  step of one stop at a time (a stop's steps stay in order);
* between steps this thread waits for the next step due or the next step to end; on a
  simulated clock (one with ``set``) it moves the clock to the next step due, and only while
  no step is running, so the order of events is the same on every run;
* a step that raises ends its own stop as failed (:meth:`~costctl.stopping.StopProcess.cancel`)
  and the others go on;
* ``ended`` is called, in this thread, for each stop as soon as it ends (its notification
  goes out then, not after the slowest stop);
* before each step, ``proceed`` (when given) is asked whether the stop is still this sweep's to
  drive: a stop another patrol took over (this one slept through the take-over) takes no
  further step and is handed to ``ended`` as it is.

It returns when every stop ended: confirmed, gone, failed, or past its deadline.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from datetime import datetime
from typing import TypeVar

from ..clock import Clock
from ..i18n import _
from ..stopping import StopProcess

#: How many stops' steps run at once (each holds at most one provider call).
MAX_AT_ONCE = 8
#: The most steps one stop takes (as :meth:`costctl.executor.Executor.run_stop`).
MAX_STEPS = 10_000

T = TypeVar("T")


def drive(items: Sequence[T], process: Callable[[T], StopProcess | None], *, clock: Clock,
          ended: Callable[[T], None], say: Callable[[str], None], max_at_once: int = MAX_AT_ONCE,
          proceed: Callable[[T], bool] | None = None) -> None:
    """Step every item's stop until each ended (see the module docstring).

    Args:
        items: the actions (any objects; ``process(item)`` is the item's stop, None: none).
        clock: the sweep's clock (a simulated one is moved here, never by a step).
        ended: called with each item once its stop ended (or at once when it has none); what it
            raises is said and the others go on.
        say: prints one of the patrol's lines (a step or ``ended`` that raised).
        max_at_once: the pool's size (>= 1).
        proceed: asked before each step of an item; False: the item takes no more steps and is
            ended as it is (what it raises counts as True: the stop goes on).
    """
    pending: list[T] = []
    for item in items:
        proc = process(item)
        if proc is None or proc.done:
            _end(item, ended, say)
        else:
            pending.append(item)
    if not pending:
        return
    steps = {id(item): 0 for item in pending}
    running: dict[Future[None], T] = {}
    with ThreadPoolExecutor(max_workers=max(1, min(max_at_once, len(pending))),
                            thread_name_prefix="costctl-patrol-stop") as pool:
        while pending or running:
            now = clock.now()
            busy = {id(item) for item in running.values()}
            for item in list(pending):
                proc = process(item)
                assert proc is not None
                if id(item) in busy:
                    continue
                if proc.done or steps[id(item)] >= MAX_STEPS:
                    if not proc.done:
                        proc.cancel(_("too many steps"))
                    pending.remove(item)
                    _end(item, ended, say)
                elif proc.due(now):
                    if proceed is not None and not _asks(proceed, item):
                        pending.remove(item)
                        _end(item, ended, say)
                        continue
                    steps[id(item)] += 1
                    running[pool.submit(_step, proc, say)] = item
            if not pending and not running:
                break
            busy = {id(item) for item in running.values()}
            idle = [process(item) for item in pending if id(item) not in busy]
            next_at = min((p.next_at for p in idle if p is not None and p.next_at is not None), default=None)
            if running:  # a simulated clock moves only while no step runs: wait for one to end
                simulated = callable(getattr(clock, "set", None))
                timeout = None if next_at is None or simulated else max(0.0, (next_at - clock.now()).total_seconds())
                finished, _left = wait(list(running), timeout=timeout, return_when=FIRST_COMPLETED)
                for future in finished:
                    running.pop(future)
            elif next_at is not None:
                _wait_until(clock, next_at)
            else:  # nothing running, nothing due ever: end what is left
                for item in list(pending):
                    proc = process(item)
                    if proc is not None and not proc.done:
                        proc.cancel(_("nothing left to do"))
                    pending.remove(item)
                    _end(item, ended, say)


def _step(proc: StopProcess, say: Callable[[str], None]) -> None:
    """One step of ``proc``; what it raises ends that stop as failed, nothing else."""
    try:
        proc.step()
    except Exception as exc:  # noqa: BLE001 - one stop's bug never ends the others or the sweep
        try:
            proc.cancel(_("the stop raised {error}").format(error=type(exc).__name__))
        except Exception as again:  # noqa: BLE001 - said, and the others go on
            say(_("costctl patrol: a stop could not be ended: {error}").format(error=type(again).__name__))


def _asks(proceed: Callable[[T], bool], item: T) -> bool:
    try:
        return bool(proceed(item))
    except Exception:  # noqa: BLE001 - a question that cannot be answered never halts a stop
        return True


def _end(item: T, ended: Callable[[T], None], say: Callable[[str], None]) -> None:
    try:
        ended(item)
    except Exception as exc:  # noqa: BLE001 - one action's end never ends the others
        say(_("costctl patrol: after a stop: {error}").format(error=exc))


def _wait_until(clock: Clock, when: datetime) -> None:
    """Move a simulated clock to ``when``; on the real clock, sleep until then."""
    advance = getattr(clock, "set", None)
    if callable(advance):
        if when > clock.now():
            advance(when)
        return
    time.sleep(max(0.0, (when - clock.now()).total_seconds()))


__all__ = ["MAX_AT_ONCE", "MAX_STEPS", "drive"]
