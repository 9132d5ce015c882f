"""Lifecycle actions: checkpoints before preemption, periodic checkpoints on spot instances,
downsizing a plateaued run, OOM recovery and underutilization advice.

* :mod:`.periodic` — the Young/Daly checkpoint interval and its schedule;
* :mod:`.sizing` — which cheaper card fits the measured memory, and what the rest costs there;
* :mod:`.oom_retry` — command placeholders, the halved-batch plan, OOM lines in the output;
* :mod:`.underuse` — "a cheaper card would have done this run" advice (watch summary, bill);
* :mod:`.controller` — :class:`~.controller.Lifecycle`, which the watcher drives.

The checkpoint protocol itself is :mod:`costctl.checkpoint`; the job's side :mod:`costctl.job`.
"""
