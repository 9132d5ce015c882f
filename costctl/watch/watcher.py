"""The :class:`Watcher`: the coordinator of one ``costctl watch``.

It owns the configuration, the child process, the ledger run, the policy engine, the executor
and the lifecycle controller, and starts them in order (:meth:`Watcher.start`): resolve the
instance and its price (:mod:`.instance`) and prepare the command (:mod:`.command`) before the
ledger is touched, then open the ledger run, build the engine, executor and lifecycle, and
spawn the command. The rest of its behaviour lives in mixins, one concern each:
:mod:`.tick` (one evaluation), :mod:`.loop` (real-time loop, signals, :meth:`Watcher.step`),
:mod:`.preemption` (notice polling), :mod:`.host` (what the lifecycle controller calls) and
:mod:`.finish` (closing the run, the summary).
"""

from __future__ import annotations

import os
import queue
import shlex
import socket
import threading
import time
from datetime import datetime
from decimal import Decimal

import psutil

from .. import paths
from ..checkpoint import ephemeral_storage_warning, resolve_pattern
from ..child import Child, OutputMux
from ..clock import Clock, RealClock
from ..cloud import open_provider
from ..config import Settings
from ..errors import CostctlError
from ..executor import Executor
from ..ledger.db import Ledger
from ..lifecycle.controller import Lifecycle
from ..lifecycle.oom_retry import BatchPlan
from ..policies.engine import PolicyEngine
from ..policies.history import History
from ..progress.lines import LineParser
from ..progress.metrics_file import MetricsFileFollower
from ..records import Decision, ProgressPoint
from ..statusline import StatusLine
from ..summary import RunSummary
from ..telemetry.cpu import MachineCpu, ProcessTreeCpu
from ..telemetry.sampler import Sampler, detect_gpu_source
from .command import child_argv_env, prepare_command
from .finish import FinishMixin
from .host import LifecycleHostMixin
from .instance import bring_up, resolve_instance
from .loop import LoopMixin
from .options import WatchOptions
from .preemption import PreemptionMixin
from .tick import TickMixin

from costctl_providers.base import Provider
from costctl_providers.notices import NoticePoller


def watch_alive(pid: int) -> bool:
    """Whether process ``pid`` on this host may still be a costctl watch (unsure counts as alive).

    A pid that no longer exists is gone; one that exists but runs something other than
    Python/costctl was reused by another program, so the watch is gone too.
    """
    try:
        proc = psutil.Process(pid)
        cmdline = " ".join(proc.cmdline()).lower()
    except psutil.NoSuchProcess:
        return False
    except (psutil.AccessDenied, psutil.ZombieProcess):
        return True
    return "costctl" in cmdline or "python" in cmdline


class Watcher(TickMixin, LoopMixin, PreemptionMixin, LifecycleHostMixin, FinishMixin):
    """One ``costctl watch``.

    Args:
        settings: validated configuration.
        options: command-line choices.
        clock: time source (RealClock live; SimClock in tests).
        sampler: telemetry sampler; built from the machine (NVML → nvidia-smi → CPU) when None.

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
        self.summary = RunSummary(dry_run=options.dry_run)
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
        # Resolve the provider and price before touching the ledger: a bad config changes nothing.
        provider = self._provider or open_provider(s, clock=self.clock)
        self.provider = provider
        resolved = resolve_instance(s, provider, say=self.say)
        instance_id, inst = resolved.instance_id, resolved.instance
        self.instance_id = instance_id
        self.instance = inst
        self.rate = resolved.rate
        s = self.settings = resolved.settings
        self.gpu_name = resolved.gpu_name
        billing = resolved.billing
        gpu_count = resolved.gpu_count
        self.billing = billing
        self.gpu_count = gpu_count
        self._prepare_command()
        self._pending_records.extend(bring_up(resolved, self.options, clock=self.clock, say=self.say))

        self.ledger = Ledger.open(url)
        self.instance_pk = self.ledger.ensure_instance(
            provider.name, instance_id, gpu=self.gpu_name, gpu_count=gpu_count, billing=billing,
            price_per_hour=self.rate.amount, currency=self.rate.currency,
            region=inst.region if inst else None,
        )
        lost = self.ledger.close_lost_runs(self.instance_pk, host=socket.gethostname(), alive=watch_alive)
        if lost:
            self.say(f"costctl: closed {len(lost)} earlier run(s) on this instance whose watch died "
                     f"without closing them ({', '.join(r[:8] for r in lost)}): status lost")
        self.started_at = self.clock.now()
        self.run_started_at = self.started_at
        self.started_wall = time.time()
        stem = f"{self.started_at.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
        self.log_path = paths.runs_dir(s.data_dir) / f"{stem}.log"
        self.checkpoint_request = paths.runs_dir(s.data_dir) / f"{stem}.checkpoint-request"
        self.run_id = self.ledger.start_run(
            self.instance_pk, started_at=self.started_at, command=self.options.command,
            log_path=str(self.log_path), host=socket.gethostname(), pid=os.getpid(),
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
            gpu = detect_gpu_source(log=lambda m: self.say(f"costctl: {m}"), stand_in=stand_in)
            cpu = ProcessTreeCpu(self.child.pid) if self.child else MachineCpu()
            self._sampler = Sampler(gpu, cpu, count_ssh=s.policies.idle.count_ssh_sessions)
            self._own_cpu = self.child is not None
        mode = f"running {shlex.join(self.options.command)}" if self.options.command else "guarding this machine"
        config = s.config_path or "defaults and environment"
        self.say(
            f"costctl: run {self.run_id[:8]} {mode} on {provider.name} instance {instance_id} "
            f"({self.gpu_name or 'unknown GPU'}, {self.rate.amount} {self.rate.currency}/h"
            f"{', ' + billing if billing == 'spot' else ''}); config {config}; log {self.log_path}"
        )
        if self.resume_from:
            self.say(f"costctl: resuming from {self.resume_from}")
        if self.options.metrics_file is not None and not self.options.metrics_file.exists():
            self.say(f"costctl: metrics file {self.options.metrics_file} does not exist yet; "
                     "waiting for the job to write it")
        if billing == "spot":
            self._start_notice_source()

    # ------------------------------------------------------------------ command, child
    def _prepare_command(self) -> None:
        """Batch size, accumulation and the resume checkpoint; validates the placeholders
        (:func:`.command.prepare_command`).

        Raises:
            UsageError: a bad ``$COSTCTL_BATCH_SIZE``, ``{batch_size}`` without a known batch size,
                or ``--resume`` with no checkpoint to resume from.
        """
        self.batch, self.resume_from = prepare_command(self.options, self.settings)

    def _spawn(self) -> None:
        """Start (or restart) the command with the current batch plan and resume checkpoint."""
        assert self._mux is not None and self.options.command and self.run_id is not None
        argv, env = child_argv_env(self.options.command, self.batch, self.resume_from, run_id=self.run_id,
                                   checkpoint_request=self.checkpoint_request, extra_env=self.options.extra_env)
        self.child = Child(argv, self._mux, env=env)
        self.child_status = None
        self._child_done = False
        self.history.child_running = True
        self.history.child_exited_at = None
        if self._own_cpu and self._sampler is not None:
            self._sampler.cpu = ProcessTreeCpu(self.child.pid)

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
