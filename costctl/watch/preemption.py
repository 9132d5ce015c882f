"""Spot instances: the mean time between preemptions and the preemption-notice source.

:class:`PreemptionMixin` is part of :class:`~costctl.watch.Watcher`: on a spot instance the
notice source (the simulated provider at once; AWS/GCP/Azure metadata, detected in the
background) is polled every ``[preemption] poll_interval`` and a notice goes to the
lifecycle controller (:meth:`costctl.lifecycle.controller.Lifecycle.on_notice`). It uses the
watcher's ``settings``, ``provider``, ``instance_id``, ``clock``, ``ledger``, ``lifecycle``,
``_lock``, ``_stopped_at``, ``notice_poller`` and ``say``.
"""

from __future__ import annotations

import threading
from datetime import datetime

from ..errors import LedgerError
from ..ledger.lifecycle import spot_exposure

from costctl_providers.notices import Notice, NoticePoller, detect_cloud


class PreemptionMixin:
    """Preemption handling of the :class:`~costctl.watch.Watcher` (see the module docstring)."""

    def _mtbf(self) -> tuple[float | None, str]:
        """Mean time between preemptions for the periodic interval (see the lifecycle docs)."""
        configured = self.settings.checkpoint.mtbf.total_seconds()
        assert self.ledger is not None
        try:
            with self.ledger.session() as session:
                seen = spot_exposure(session)
        except LedgerError:
            return configured, "configured"
        if seen.charged_s <= 0:
            return configured, "configured"
        blended = (configured + seen.charged_s) / (1 + seen.preemptions)
        return blended, (f"observed: {seen.preemptions} preemption(s) in {seen.charged_s / 3600:.1f} spot hours, "
                         f"with the configured {configured / 3600:g} h as one prior observation")

    def _start_notice_source(self) -> None:
        """Find the preemption-notice source (sim provider at once; cloud metadata in the background)."""
        cfg = self.settings.preemption

        def detect() -> None:
            found = detect_cloud(
                provider=self.provider, instance_id=self.instance_id, clock=self.clock,
                aws_base_url=cfg.aws_base_url, gcp_base_url=cfg.gcp_base_url, azure_base_url=cfg.azure_base_url,
            )
            if found.source is not None:
                self.notice_poller = NoticePoller(found.source, cfg.poll_interval.total_seconds(),
                                                  on_notice=self._on_notice)
                self.say(f"costctl: watching {found.platform} for preemption notices every "
                         f"{cfg.poll_interval.total_seconds():g}s")

        if getattr(self.provider.capabilities, "preemption_notice", False):
            detect()
        else:
            threading.Thread(target=detect, name="costctl-detect-cloud", daemon=True).start()

    def _on_notice(self, notice: Notice) -> None:
        with self._lock:
            assert self.lifecycle is not None
            self.lifecycle.on_notice(notice)

    def poll_notices(self, now: datetime | None = None) -> None:
        """Poll the preemption-notice source once (and, on the sim provider, whether the spot
        instance was already taken without notice). Called by a scheduler job every
        ``[preemption] poll_interval``; tests call it on a simulated clock."""
        poller = self.notice_poller
        if poller is None or self._stopped_at is not None:
            return
        poller.poll_once()
        if getattr(self.provider.capabilities, "preemption_notice", False):
            with self._lock:
                assert self.lifecycle is not None
                self.lifecycle.check_preempted()

    def _safe_poll_notices(self) -> None:
        try:
            self.poll_notices()
        except Exception as exc:  # noqa: BLE001 - a broken notice source must not end the watch
            self.say(f"costctl: preemption notice poll failed: {type(exc).__name__}: {exc}")
