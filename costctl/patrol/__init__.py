"""``costctl patrol``: a policy sweep over the fleet, from outside the instances.

* :mod:`.idle` — "idle over a window" from the patrol's stored observations, by the idle
  policy's own rule (:class:`costctl.policies.idle.IdlePolicy`);
* :mod:`.model` — pure: which instances a ``[[patrol.policies]]`` matches, with the evidence,
  and whether it may act on them (scope, grace, snooze, release's conditions);
* :mod:`.messages` — what the notifications say;
* :mod:`.act` — an action carried through the watch's verified stop
  (:class:`costctl.executor.Executor`, :class:`costctl.stopping.StopProcess`), recorded as a
  decision of the instance;
* :mod:`.sweep` — one sweep: read the fleet, store the observations, mark, warn, act;
* :mod:`.schedule` — sweeps on an APScheduler interval (``--every``).
"""
