"""The stall policy: the job is alive but no new progress arrived for ``stall_window``.

This is the hung-NCCL case, where GPU utilization can even read 100 % while nothing moves, so
the stall policy looks at progress alone. It needs progress to have been seen once (a job that
never printed a loss is not "stalled", its format may just be unknown) and the child to be
running (``History.child_running is True``); after the child exits the idle policy takes over.

Fires when ``now - last_progress_at >= stall_window``; the key is ``stall:<last progress time>``
so each silent stretch fires once.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import ClassVar

from pydantic import Field

from ..clock import ensure_utc
from ..config_types import Action, Window
from ..records import Decision
from .base import Pending, Policy, PolicyConfig, PolicyContext, iso, register
from .history import History, finite_or_text
from .idle import fmt_duration, fmt_span


class StallConfig(PolicyConfig):
    """``[policies.stall]``: the job is alive but reported no progress for ``stall_window``."""

    action: Action = Field(default="advise", description="what to do when the job stalls: advise | stop")
    stall_window: Window = Field(default=timedelta(minutes=30),
                                 description="how long without new progress counts as a stall, or \"off\"")


@register
class StallPolicy(Policy):
    """Advise (or stop) when a running job stopped reporting progress (``[policies.stall]``).

    Args:
        config: the ``[policies.stall]`` section; ``stall_window=None`` ("off") never fires.
    """

    name = "stall"
    config_model: ClassVar[type[StallConfig]] = StallConfig
    order = 20

    def __init__(self, config: StallConfig) -> None:
        self.config = config
        self.action = config.action

    @classmethod
    def from_config(cls, config: StallConfig, context: PolicyContext) -> StallPolicy | None:
        """None when ``stall_window`` is off."""
        return cls(config) if config.stall_window is not None else None

    def pending(self, history: History, now: datetime) -> Pending | None:
        """Once the running job has been silent for half of ``stall_window`` (sooner it is just
        between two log lines): it fires at its last progress + ``stall_window``. Text
        ``"no progress for 16m of 30m"``."""
        now = ensure_utc(now)
        window = self.config.stall_window
        last_at = history.last_progress_at
        if window is None or history.child_running is not True or last_at is None or last_at > now:
            return None
        at = last_at + window
        if at <= now or now - last_at < window / 2:
            return None
        return Pending(policy=self.name, action=self.action, at=at,
                       progress=f"no progress for {fmt_span(now - last_at)} of {fmt_span(window)}")

    def evaluate(self, history: History, now: datetime) -> Decision | None:
        """A decision when the child runs and its last progress is ``stall_window`` old or older."""
        now = ensure_utc(now)
        window = self.config.stall_window
        last_at = history.last_progress_at
        if window is None or history.child_running is not True or last_at is None:
            return None
        silent = now - last_at
        if silent < window:
            return None
        last = history.last_progress()
        evidence = {
            "last_progress_at": iso(last_at),
            "silent_for_s": silent.total_seconds(),
            "stall_window_s": window.total_seconds(),
            "last_value": finite_or_text(last.value) if last is not None else None,
            "last_kind": last.kind if last is not None else None,
            "last_step": last.step if last is not None else None,
            "last_epoch": last.epoch if last is not None else None,
        }
        reason = (f"no new progress for {fmt_duration(silent)} (stall_window {fmt_duration(window)}) "
                  f"while the job is still running; last progress at {iso(last_at)}")
        return Decision(time=now, policy=self.name, action=self.action, reason=reason,
                        evidence=evidence, key=f"stall:{iso(last_at)}")


__all__ = ["StallConfig", "StallPolicy"]
