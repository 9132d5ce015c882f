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

Modules: :mod:`.options` (:class:`WatchOptions`), :mod:`.instance` (which instance, at what
price), :mod:`.command` (batch plan, resume checkpoint, placeholders, the child's environment),
:mod:`.job` (:class:`~.job.Job`, the command as a :class:`costctl.protocols.JobControl`) and
:mod:`.watcher` (:class:`Watcher`, the coordinator; its state is one
:class:`costctl.protocols.RunState`). Every decision is recorded by
:class:`costctl.decisions.DecisionRecorder`; see ``docs/architecture.md``.
"""

from .options import WatchOptions
from .watcher import Watcher

__all__ = ["WatchOptions", "Watcher"]
