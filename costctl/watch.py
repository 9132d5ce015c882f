"""The Watcher: runs a training job (or guards the whole machine) and acts on what it sees.

Data flow per tick (APScheduler interval job in real time; :meth:`Watcher.tick` directly
under a simulated clock): sample telemetry → take the progress points the output parser
found since the last tick → accrue spend from stored timestamps (so a skipped tick loses
nothing) → evaluate the policies → carry out new decisions → record everything in the ledger.

Lifecycle actions (:mod:`costctl.lifecycle`): checkpoint requests are followed on the main
loop (every 0.1 s, :meth:`Watcher.step`); on spot instances the preemption-notice source is
polled every ``[preemption] poll_interval`` (:meth:`Watcher.poll_notices`). A job that dies of
CUDA OOM can be restarted with a halved batch, and a plateaued run moved to a cheaper card, in
the same watch: the child is replaced, and a move to another instance starts a new ledger run.
"""

from __future__ import annotations

import os
import queue
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

from apscheduler.schedulers.background import BackgroundScheduler

from . import paths
from .checkpoint import ephemeral_storage_warning, newest_checkpoint, resolve_pattern
from .child import Child, OutputMux
from .clock import Clock, RealClock
from .cloud import open_provider
from .config import Settings
from .errors import ConfigError, CostctlError, LedgerError, UsageError
from .executor import Executor
from .ledger.db import Ledger
from .ledger.lifecycle import spot_exposure
from .lifecycle.controller import Lifecycle
from .lifecycle.oom_retry import BatchPlan, render_command
from .lifecycle.underuse import underuse_advice
from .money import Money
from .policies.engine import PolicyEngine
from .policies.history import History
from .progress.lines import LineParser
from .progress.metrics_file import MetricsFileFollower
from .records import Decision, ProgressPoint
from .statusline import StatusLine
from .summary import RunSummary
from .telemetry.cpu import MachineCpu, ProcessTreeCpu
from .telemetry.sampler import Sampler, detect_gpu_source

from costctl_providers.base import Instance, Provider, Status
from costctl_providers.notices import Notice, NoticePoller, detect_cloud


@dataclass
class WatchOptions:
    """Command-line choices for one watch.

    Attributes:
        command: argv of the training job; None guards the whole machine.
        on_exit: when the command exits: ``guard`` (keep guarding with the idle policy),
            ``stop`` (stop the instance at once) or ``leave`` (end the watch, leave it running).
        loss_regex: overrides the built-in loss formats (named group ``loss``).
        metrics_file: read progress from this JSONL/CSV file instead of the output.
        dry_run: record decisions, stop nothing.
        quiet: no messages of costctl's own on stderr except errors (the child's bytes still pass).
        status_line: None = on when stderr is a terminal.
        resume: restart the command from the newest checkpoint under ``[checkpoint] path``
            (``{checkpoint}`` in the command and ``$COSTCTL_RESUME_FROM``).
        on_oom: ``retry`` (halve the batch, double accumulation, restart) or ``advise``.
        batch_size / accum_steps: the job's batch size and gradient-accumulation steps, for
            ``{batch_size}``/``{accum_steps}`` and ``$COSTCTL_BATCH_SIZE``/``$COSTCTL_ACCUM_STEPS``
            (default: those variables in costctl's own environment, accumulation 1).
    """

    command: list[str] | None = None
    on_exit: str = "guard"
    loss_regex: str | None = None
    metrics_file: Path | None = None
    dry_run: bool = False
    quiet: bool = False
    status_line: bool | None = None
    extra_env: dict[str, str] = field(default_factory=dict)
    resume: bool = False
    on_oom: str = "advise"
    batch_size: int | None = None
    accum_steps: int | None = None


class Watcher:
    """One ``costctl watch``.

    Args:
        settings: validated configuration.
        options: command-line choices.
        clock: time source (RealClock live; SimClock in tests).
        sampler: telemetry sampler; built from the machine (NVML → nvidia-smi → CPU) when None.
        say: prints one of costctl's own lines (default: the status line's message channel).

    Raises:
        ConfigError, LedgerError, ProviderError, UsageError: at :meth:`start`, one line each,
            before anything is recorded or any process is started.
    """

    def __init__(
        self,
        settings: Settings,
        options: WatchOptions,
        *,
        clock: Clock | None = None,
        sampler: Sampler | None = None,
        provider: Provider | None = None,
        stdout_fd: int = 1,
        stderr_fd: int = 2,
    ) -> None:
        self.settings = settings
        self.options = options
        self.clock = clock or RealClock()
        self.status = StatusLine(False if options.quiet else options.status_line)
        self._sampler = sampler
        self._provider = provider
        self._fds = (stdout_fd, stderr_fd)
        self._progress_q: queue.SimpleQueue[ProgressPoint] = queue.SimpleQueue()
        self._lock = threading.RLock()
        self._done = threading.Event()
        self._signal: int | None = None
        self._stopped_at: datetime | None = None
        self.child: Child | None = None
        self.child_status: int | None = None
        self.ledger: Ledger | None = None
        self.run_id: str | None = None
        self.summary = RunSummary()
        self._tick_error_reported = False
        self._log_fh = None
        self._mux: OutputMux | None = None
        self._child_done = True
        self._spend_before = Decimal(0)
        self.batch: BatchPlan | None = None
        self.resume_from: str | None = None
        self.lifecycle: Lifecycle | None = None
        self.executor: Executor | None = None  # type: ignore[assignment]
        self.notice_poller: NoticePoller | None = None
        self._own_cpu = False
        self._pending_records: list[tuple[Decision, str]] = []

    # ------------------------------------------------------------------ setup
    def say(self, text: str) -> None:
        """Print one of costctl's own lines (suppressed by --quiet)."""
        if not self.options.quiet:
            self.status.message(text)

    def start(self) -> None:
        """Open the ledger, resolve the instance and its price, start the run and the child."""
        s = self.settings
        data_dir = paths.data_dir(s.data_dir)
        url = s.database_url or paths.default_database_url(s.data_dir)
        if self.options.metrics_file is not None and self.options.command is None:
            pass  # a metrics file can be followed while guarding the machine
        # Resolve the provider and price before touching the ledger: a bad config changes nothing.
        provider = self._provider or open_provider(s, clock=self.clock)
        self.provider = provider
        instance_id = s.instance.id or provider.detect_self()
        if not instance_id:
            raise ConfigError(
                f"instance.id is not set and provider '{provider.name}' cannot tell which instance "
                "this is: set [instance] id (or COSTCTL_INSTANCE__ID)"
            )
        self.instance_id = instance_id
        try:
            inst: Instance | None = provider.get_instance(instance_id)
        except CostctlError as exc:
            if s.instance.price_per_hour is None:
                raise
            self.say(f"costctl: cannot read instance {instance_id} from {provider.name} ({exc.message}); "
                     f"using the configured price")
            inst = None
        self.instance = inst
        if inst is not None and inst.price_per_hour is not None:
            self.rate = Money(inst.price_per_hour, inst.currency)
        elif s.instance.price_per_hour is not None:
            self.rate = Money(s.instance.price_per_hour, s.instance.currency)
        else:
            raise ConfigError(
                f"no price for instance {instance_id}: {provider.name} did not report one; "
                "set [instance] price_per_hour and currency"
            )
        if self.rate.currency != s.instance.currency:
            # Budget caps are in the instance's currency: the one the provider bills in.
            budget = s.policies.budget
            if budget.total is not None or budget.daily is not None:
                self.say(
                    f"costctl: {provider.name} bills in {self.rate.currency}, not {s.instance.currency}: "
                    f"budget caps are read as {self.rate.currency}"
                )
            s = s.model_copy(update={"instance": s.instance.model_copy(update={"currency": self.rate.currency})})
            self.settings = s
        self.gpu_name = (inst.gpu if inst else None) or s.instance.gpu
        billing = inst.billing.value if inst else s.instance.billing
        gpu_count = inst.gpu_count if inst else s.instance.gpu_count
        self.billing = billing
        self.gpu_count = gpu_count
        self._prepare_command()
        if self.options.resume and inst is not None and inst.status in (Status.STOPPED, Status.STOPPING) \
                and provider.capabilities.start:
            started = provider.start_instance(instance_id)
            self._pending_records.append((Decision(
                time=self.clock.now(), policy="resume", action="start",
                reason=f"--resume: instance {instance_id} was {inst.status.value}"
                       f"{' (preempted)' if inst.preempted else ''}; started it to resume the job",
                evidence={"status_before": inst.status.value, "preempted": inst.preempted},
                key="resume-start"), f"instance {instance_id} is {started.status.value}"))

        self.ledger = Ledger.open(url)
        self.instance_pk = self.ledger.ensure_instance(
            provider.name, instance_id, gpu=self.gpu_name, gpu_count=gpu_count, billing=billing,
            price_per_hour=self.rate.amount, currency=self.rate.currency,
            region=inst.region if inst else None,
        )
        self.started_at = self.clock.now()
        self.run_started_at = self.started_at
        self.started_wall = time.time()
        stem = f"{self.started_at.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
        self.log_path = paths.runs_dir(s.data_dir) / f"{stem}.log"
        self.checkpoint_request = paths.runs_dir(s.data_dir) / f"{stem}.checkpoint-request"
        self.run_id = self.ledger.start_run(
            self.instance_pk, started_at=self.started_at, command=self.options.command,
            log_path=str(self.log_path), host=socket.gethostname(),
        )
        self.summary.run_ids.append(self.run_id)

        self.engine = PolicyEngine(s)
        self.history = History(
            sample_interval=s.watch.sample_interval,
            started_at=self.started_at,
            child_running=None,
            progress_source=bool(self.options.command or self.options.metrics_file),
            total_steps=s.watch.total_steps,
        )
        self.executor = Executor(
            ledger=self.ledger, run_id=self.run_id, clock=self.clock, hooks=s.hooks,
            stop_child=self._stop_child, stop_instance=self._stop_instance, say=self.say,
            dry_run=self.options.dry_run, log_path=str(self.log_path),
            downsize=lambda d: self.lifecycle.downsize(d),  # type: ignore[union-attr]
        )
        mtbf_s, mtbf_source = self._mtbf()
        self.lifecycle = Lifecycle(self, self.checkpoint_request, on_oom=self.options.on_oom,
                                   mtbf_s=mtbf_s, mtbf_source=mtbf_source)
        for decision, outcome in self._pending_records:
            self.record(decision, outcome)
        self._pending_records.clear()
        self._metrics = MetricsFileFollower(self.options.metrics_file) if self.options.metrics_file else None
        self._parsers = {
            "stdout": LineParser(self.options.loss_regex),
            "stderr": LineParser(self.options.loss_regex),
        }
        if s.checkpoint.path:
            warning = ephemeral_storage_warning(resolve_pattern(s.checkpoint.path))
            if warning:
                self.record(Decision(time=self.started_at, policy="checkpoint", action="warn",
                                     reason=warning, evidence={"path": s.checkpoint.path},
                                     key="checkpoint-storage"), "warned")
        if self.options.command:
            self._log_fh = open(self.log_path, "ab")
            self._mux = OutputMux(
                self._log_fh, self._on_text,
                stdout_fd=self._fds[0], stderr_fd=self._fds[1],
                before_write=self.status.clear, after_write=self.status.after_child_write,
                lock=self.status.lock,
            )
            try:
                self._spawn()
            except CostctlError:
                self._log_fh.close()
                self.ledger.finish_run(self.run_id, ended_at=self.clock.now(), exit_code=None, status="failed-to-start")
                self.ledger.close()
                raise
        if self._sampler is None:
            stand_in = "the watched process tree" if self.child else "all user processes"
            gpu = detect_gpu_source(log=self.say, stand_in=stand_in)
            cpu = ProcessTreeCpu(self.child.pid) if self.child else MachineCpu()
            self._sampler = Sampler(gpu, cpu, count_ssh=s.policies.idle.count_ssh_sessions)
            self._own_cpu = self.child is not None
        mode = f"running {' '.join(self.options.command)}" if self.options.command else "guarding this machine"
        self.say(
            f"costctl: run {self.run_id[:8]} {mode} on {provider.name} instance {instance_id} "
            f"({self.gpu_name or 'unknown GPU'}, {self.rate.amount} {self.rate.currency}/h"
            f"{', ' + billing if billing == 'spot' else ''}); log {self.log_path}"
        )
        if self.resume_from:
            self.say(f"costctl: resuming from {self.resume_from}")
        if billing == "spot":
            self._start_notice_source()

    # ------------------------------------------------------------------ command, child, lifecycle
    def _prepare_command(self) -> None:
        """Batch size, accumulation and the resume checkpoint; validates the placeholders.

        Raises:
            UsageError: a bad ``$COSTCTL_BATCH_SIZE``, ``{batch_size}`` without a known batch size,
                or ``--resume`` with no checkpoint to resume from.
        """
        opts, s = self.options, self.settings

        def env_int(name: str) -> int | None:
            raw = os.environ.get(name, "").strip()
            if not raw:
                return None
            if not raw.isdigit() or int(raw) < 1:
                raise UsageError(f"{name}={raw!r}: expected a positive integer")
            return int(raw)

        batch = opts.batch_size or env_int("COSTCTL_BATCH_SIZE")
        accum = opts.accum_steps or env_int("COSTCTL_ACCUM_STEPS") or 1
        self.batch = BatchPlan(batch, accum) if batch else None
        if opts.resume:
            if not s.checkpoint.path:
                raise UsageError("--resume needs [checkpoint] path (where the job writes its checkpoints)")
            newest = newest_checkpoint(resolve_pattern(s.checkpoint.path))
            if newest is None:
                raise UsageError(f"--resume: no checkpoint matches [checkpoint] path {s.checkpoint.path!r}")
            self.resume_from = str(newest.path)
        if opts.command:
            render_command(opts.command, batch_size=self.batch.batch_size if self.batch else None,
                           accum_steps=accum, checkpoint=self.resume_from)

    def _spawn(self) -> None:
        """Start (or restart) the command with the current batch plan and resume checkpoint."""
        assert self._mux is not None and self.options.command and self.run_id is not None
        batch = self.batch
        argv = render_command(self.options.command, batch_size=batch.batch_size if batch else None,
                              accum_steps=batch.accum_steps if batch else 1, checkpoint=self.resume_from)
        env = {
            "PYTHONUNBUFFERED": "1",
            "COSTCTL_RUN_ID": self.run_id,
            "COSTCTL_CHECKPOINT_REQUEST": str(self.checkpoint_request),
            **self.options.extra_env,
        }
        if batch is not None:
            env["COSTCTL_BATCH_SIZE"] = str(batch.batch_size)
            env["COSTCTL_ACCUM_STEPS"] = str(batch.accum_steps)
        if self.resume_from:
            env["COSTCTL_RESUME_FROM"] = self.resume_from
        self.child = Child(argv, self._mux, env=env)
        self.child_status = None
        self._child_done = False
        self.history.child_running = True
        self.history.child_exited_at = None
        if self._own_cpu and self._sampler is not None:
            self._sampler.cpu = ProcessTreeCpu(self.child.pid)

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

    # ------------------------------------------------------------------ host interface for the lifecycle
    @property
    def stopped_at(self) -> datetime | None:
        """When a stop decision ended the watch (None while it runs)."""
        return self._stopped_at

    @property
    def job_running(self) -> bool:
        """True while the watched command runs."""
        return self.child is not None and self.child.running

    def job_pid(self) -> int | None:
        """The pid of the command's root process (None when there is none)."""
        return self.child.pid if self.child is not None else None

    def record(self, decision: Decision, outcome: str, *, say: bool = True) -> None:
        """Record a lifecycle decision in the ledger and the summary (and print it)."""
        assert self.ledger is not None and self.run_id is not None
        self.ledger.record_decision(self.run_id, decision, outcome=outcome)
        self.summary.add_decision(decision)
        if self.executor is not None:
            self.executor.decisions.append((decision, outcome))
        if say:
            self.say(f"costctl {decision.policy}: {decision.reason}")

    def mark_stopped(self, when: datetime) -> None:
        """A lifecycle stop ended the watch at ``when``."""
        self._stopped_at = when
        self._done.set()

    def add_waste(self, money: Money, seconds: float) -> None:
        """Add to the summary's waste (paid time whose work was lost)."""
        self.summary.add_waste(money, seconds)

    def end_job(self) -> int | None:
        """End the command (SIGTERM to its group, SIGKILL after the grace period) without
        ending the watch; returns its exit status."""
        if self.child is None:
            return None
        status = self.child.terminate(self.settings.watch.grace_period.total_seconds())
        self.child_status = status
        return status

    def restart_job(self, *, batch: BatchPlan | None = None, resume_from: str | None = None) -> None:
        """Start the command again (after an OOM or a move), with a new batch plan and/or checkpoint."""
        if batch is not None:
            self.batch = batch
        if resume_from is not None:
            self.resume_from = resume_from
        self._spawn()

    def move_to(self, inst: Instance) -> None:
        """The job moves to instance ``inst``: close this ledger run (status ``downsized``) and
        start a new one there, charged at ``inst``'s price."""
        assert self.ledger is not None and self.run_id is not None
        now = self.clock.now()
        self.ledger.accrue(self.run_id, now, self.rate.amount, self.rate.currency)
        spent = self.ledger.spend(run_id=self.run_id).get(self.rate.currency, Decimal(0))
        self.ledger.finish_run(self.run_id, ended_at=now, exit_code=self.child_status, status="downsized")
        if inst.price_per_hour is None:
            raise ConfigError(f"{self.provider.name} reported no price for instance {inst.id}")
        if inst.currency == self.rate.currency:
            self._spend_before += spent
        self.instance, self.instance_id = inst, inst.id
        self.rate = Money(inst.price_per_hour, inst.currency)
        self.gpu_name, self.gpu_count, self.billing = inst.gpu, inst.gpu_count, inst.billing.value
        self.instance_pk = self.ledger.ensure_instance(
            self.provider.name, inst.id, gpu=inst.gpu, gpu_count=inst.gpu_count, billing=inst.billing.value,
            price_per_hour=inst.price_per_hour, currency=inst.currency, region=inst.region,
        )
        self.run_id = self.ledger.start_run(self.instance_pk, started_at=now, command=self.options.command,
                                            log_path=str(self.log_path), host=socket.gethostname())
        self.run_started_at = now
        self.executor.run_id = self.run_id
        self.history.rate = self.rate
        self.summary.run_ids.append(self.run_id)

    # ------------------------------------------------------------------ progress
    def _on_text(self, stream: str, text: str) -> None:
        if self.lifecycle is not None:
            self.lifecycle.on_text(stream, text)
        if self._metrics is not None:
            return
        points = self._parsers[stream].feed(text, self.clock.now())
        for p in points:
            self._progress_q.put(p)

    def _drain_progress(self, now: datetime) -> list[ProgressPoint]:
        points: list[ProgressPoint] = []
        while True:
            try:
                points.append(self._progress_q.get_nowait())
            except queue.Empty:
                break
        if self._metrics is not None:
            try:
                points.extend(self._metrics.poll(now))
            except CostctlError as exc:
                self.say(f"costctl: metrics file: {exc.message}")
        return points

    # ------------------------------------------------------------------ tick
    def tick(self, now: datetime | None = None) -> list[Decision]:
        """One evaluation: sample, accrue, evaluate policies, act. Returns the new decisions.

        A second tick at the same instant (a simulated clock that did not move) takes no new
        sample; it still drains progress, accrues and evaluates."""
        with self._lock:
            now = now or self.clock.now()
            if self._stopped_at is not None:
                return []
            assert self.ledger is not None and self.run_id is not None and self._sampler is not None
            if self.child is not None:
                self.history.child_running = self.child.running
            sample = None
            if not self.history.samples or now > self.history.samples[-1].time:
                sample = self._sampler.sample(now)
                self.history.add_sample(sample)
            points = self._drain_progress(now)
            for point in points:
                self.history.add_progress(point)
            self.summary.add_progress(points)
            if sample is not None:
                self.ledger.record_samples(self.run_id, [sample])
            if points:
                self.ledger.record_progress(self.run_id, points)
            self.ledger.accrue(self.run_id, now, self.rate.amount, self.rate.currency)
            self._update_spend(now)
            decisions = self.engine.evaluate(self.history, now)
            for decision in decisions:
                self.executor.handle(decision)
                self.summary.add_decision(self.executor.decisions[-1][0])
            if self.executor.stop is not None:
                self._stopped_at = self.executor.stop.time
                self._done.set()
            if sample is not None:
                self.summary.add_sample(sample)
                self._status(now, sample)
            return decisions

    def _update_spend(self, now: datetime) -> None:
        assert self.ledger is not None
        tz = self.settings.watch.tz
        local = now.astimezone(tz)
        day_start = local.replace(hour=0, minute=0, second=0, microsecond=0).astimezone(timezone.utc)
        cur = self.rate.currency
        total = self.ledger.spend(instance_pk=self.instance_pk).get(cur, Decimal(0))
        today = self.ledger.spend(instance_pk=self.instance_pk, since=day_start).get(cur, Decimal(0))
        run = self.ledger.spend(run_id=self.run_id).get(cur, Decimal(0))
        self.history.spend_total = Money(total, cur)
        self.history.spend_today = Money(today, cur)
        self.history.rate = self.rate
        self.summary.spend = Money(run + self._spend_before, cur)

    def _status(self, now: datetime, sample: Any) -> None:
        if not self.status.enabled:
            return
        elapsed = now - self.started_at
        util = ", ".join(
            f"GPU{g.index} {g.utilization:.0f}%" if g.utilization is not None else f"GPU{g.index} ?"
            for g in sample.gpus
        ) or (f"CPU {sample.cpu_percent:.0f}%" if sample.cpu_percent is not None else "CPU ?")
        loss = self.summary.last_loss
        loss_txt = f"loss {loss:.4g}" if loss is not None else "no loss yet"
        spend = self.summary.spend
        self.status.update(
            f" costctl | {str(elapsed).split('.')[0]} | {spend.rounded(4) if spend else 0} {self.rate.currency} "
            f"| {util} | {loss_txt} "
        )

    def _safe_tick(self) -> None:
        try:
            self.tick()
        except Exception as exc:  # noqa: BLE001 - keep guarding; the traceback goes to a log file
            if not self._tick_error_reported:
                self._tick_error_reported = True
                path = paths.crash_log_dir() / f"tick-{self.run_id}.log"
                try:
                    path.write_text("".join(traceback.format_exception(exc)))
                except OSError:
                    pass
                self.say(f"costctl: error during a tick: {type(exc).__name__}: {exc} (traceback in {path})")

    # ------------------------------------------------------------------ actions
    def _stop_child(self) -> int | None:
        if self.child is None or not self.child.running:
            return None
        grace = self.settings.watch.grace_period.total_seconds()
        self.child_status = self.child.terminate(grace)
        return self.child_status

    def _stop_instance(self) -> str:
        inst = self.provider.stop_instance(self.instance_id)
        return f"instance {self.instance_id} on {self.provider.name} is {inst.status.value}"

    # ------------------------------------------------------------------ loop
    def _handle_signal(self, signum: int, frame: Any) -> None:
        self._signal = signum
        self._done.set()

    def run(self) -> int:
        """Start everything, loop in real time until done, clean up; returns the exit status."""
        # SIGINT/SIGTERM are ours from before the child starts: one arriving while start() is
        # still running is passed to the job by the loop instead of killing costctl unrecorded.
        old = {s: signal.signal(s, self._handle_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            self.start()
        except BaseException:
            for s, h in old.items():
                signal.signal(s, h)
            raise
        interval = self.settings.watch.sample_interval.total_seconds()
        scheduler = BackgroundScheduler(timezone=timezone.utc)
        scheduler.add_job(
            self._safe_tick, "interval", seconds=interval, next_run_time=datetime.now(timezone.utc),
            max_instances=1, coalesce=True, misfire_grace_time=max(1, int(interval)), id="tick",
        )
        if self.billing == "spot":
            poll = self.settings.preemption.poll_interval.total_seconds()
            scheduler.add_job(
                self._safe_poll_notices, "interval", seconds=poll, next_run_time=datetime.now(timezone.utc),
                max_instances=1, coalesce=True, misfire_grace_time=max(1, int(poll)), id="notices",
            )
        scheduler.start()
        exit_code = 0
        status = "running"
        try:
            exit_code, status = self._loop()
        finally:
            scheduler.shutdown(wait=True)
            for s, h in old.items():
                signal.signal(s, h)
            exit_code, status = self._finish(exit_code, status)
        return exit_code

    def _loop(self) -> tuple[int, str]:
        while True:
            self._done.wait(0.1)
            result = self.step()
            if result is not None:
                return result

    def step(self) -> tuple[int, str] | None:
        """One turn of the main loop: signals, stops, lifecycle, the command's exit.

        Returns ``(exit status, run status)`` when the watch should end, else None. The real
        loop calls it every 0.1 s; a simulated-clock driver calls it between clock advances.
        """
        if self._signal is not None:
            return self._on_signal()
        if self._stopped_at is None and self.lifecycle is not None:
            with self._lock:
                try:
                    self.lifecycle.poll()
                except CostctlError as exc:  # e.g. the ledger is unwritable: keep guarding
                    self.say(f"costctl: lifecycle step failed: {exc.message}")
        if self._stopped_at is not None:
            if self.child is not None and self.child_status is None:
                self.child_status = self.child.terminate(self.settings.watch.grace_period.total_seconds())
            code = self.child_status if self.child_status is not None else 0
            return code, "preempted" if self.lifecycle is not None and self.lifecycle.preempted else "stopped"
        if not self._child_done and self.child is not None and not self.child.running:
            self._child_done = True
            self.child_status = self.child.wait()
            with self._lock:
                self.history.child_running = False
                self.history.child_exited_at = self.clock.now()
            self.tick()  # record the last output and spend up to the exit
            if self._stopped_at is not None:
                return None
            with self._lock:
                assert self.lifecycle is not None
                if self.lifecycle.requester.pending is not None:
                    self.lifecycle.poll()  # the job exited during a checkpoint request
                if self._stopped_at is not None:
                    return None
                if self.lifecycle.child_exited(self.child_status):
                    return None  # restarted (OOM retry)
            on_exit = self.options.on_exit
            if on_exit == "leave":
                return self.child_status, "completed" if self.child_status == 0 else "failed"
            if on_exit == "stop":
                with self._lock:
                    decision = Decision(
                        time=self.clock.now(), policy="on-exit", action="stop",
                        reason=f"the command exited with status {self.child_status} and --on-exit stop is set",
                        evidence={"exit_status": self.child_status}, key="on-exit",
                    )
                    self.executor.handle(decision)
                    self.summary.add_decision(decision)
                    if self.executor.stop is not None:
                        self._stopped_at = self.executor.stop.time
                if self._stopped_at is None:  # dry run
                    return self.child_status, "completed" if self.child_status == 0 else "failed"
                return None
            self.say(
                f"costctl: the command exited with status {self.child_status}; guarding the instance "
                "until the idle policy stops it (Ctrl-C leaves it running)"
            )
        return None

    def _on_signal(self) -> tuple[int, str]:
        sig = self._signal or signal.SIGTERM
        if self.child is not None and self.child.running:
            self.say(f"costctl: {signal.Signals(sig).name}: passing it to the job")
            self.child_status = self.child.terminate(self.settings.watch.grace_period.total_seconds(), sig)
            return self.child_status, "interrupted"
        self.say("costctl: interrupted; the instance is left running")
        return (self.child_status if self.child_status is not None else 128 + sig), "interrupted"

    def finish(self, exit_code: int, status: str) -> tuple[int, str]:
        """Close the run in the ledger, print the summary and release everything; returns
        ``(exit status, run status)``. :meth:`run` calls it; simulated-clock drivers too."""
        return self._finish(exit_code, status)

    def _advise_underuse(self, end: datetime) -> None:
        """End-of-run advice when a cheaper card would have done this run (GPU telemetry only)."""
        summ = self.summary
        if summ.peak_gpu_memory_bytes is None or summ.mean_gpu_utilization is None or self.lifecycle is None:
            return
        try:
            options = self.lifecycle.price_options()
        except CostctlError:
            return
        advice = underuse_advice(
            run_id=self.run_id or "", gpu=self.gpu_name, rate=self.rate,
            duration_s=(end - self.run_started_at).total_seconds(), peak_memory_bytes=summ.peak_gpu_memory_bytes,
            card_memory_bytes=summ.gpu_memory_total_bytes, mean_utilization=summ.mean_gpu_utilization,
            options=options, config=self.settings.downsize,
        )
        if advice is not None:
            self.record(Decision(time=end, policy="underutilized", action="advise", reason=advice.text,
                                 evidence=advice.to_dict(), key="underutilized"), "advised", say=False)
            summ.advice.append(advice.text)

    def _finish(self, exit_code: int, status: str) -> tuple[int, str]:
        if self.ledger is None or self.run_id is None:
            return exit_code, status
        end = self._stopped_at or self.clock.now()
        try:
            if self._stopped_at is None:
                self.tick(end)
            else:  # stopped between ticks (e.g. a preemption): keep the progress seen since the last one
                with self._lock:
                    points = self._drain_progress(end)
                    if points:
                        self.ledger.record_progress(self.run_id, points)
                        self.summary.add_progress(points)
            with self._lock:
                if self.lifecycle is not None and self.lifecycle.requester.pending is not None:
                    self.lifecycle.requester.withdraw()
                self._advise_underuse(end)
                self.ledger.accrue(self.run_id, end, self.rate.amount, self.rate.currency)
                self._update_spend(end)
                if status == "running":
                    status = "completed"
                self.ledger.finish_run(self.run_id, ended_at=end, exit_code=self.child_status, status=status)
        except LedgerError as exc:
            self.say(f"costctl: could not close the run in the ledger: {exc.message}")
        finally:
            self.status.close()
            if self._log_fh is not None:
                self._log_fh.close()
        self.summary.duration = end - self.started_at
        if not self.options.quiet:
            self.summary.print(self.run_id, self.rate.currency, sys.stderr)
        self.ledger.close()
        return exit_code, status
