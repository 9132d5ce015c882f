"""The relay: a small process that owns the job's output, so the job outlives its watcher.

``costctl watch`` does not read the job's pipes itself. It starts ``python -m costctl.relay``
in a session of its own (so SIGHUP, a closed terminal, Ctrl-C to the watch's process group or
the watch's death do not reach it); the relay starts the job (in a process group and session
of its own, as before), reads its stdout and stderr, appends every byte to the run log, and
serves the watch over a Unix socket (:mod:`.protocol`). The watch (:class:`.client.RelayChild`)
passes the bytes to the terminal and the progress parser; it signals the job's process group
directly. Whatever happens to the watch, the relay keeps reading: the job never gets
BrokenPipeError because its watcher died.

Layers: :mod:`.protocol` and :mod:`.server` use only the standard library (the relay must not
be able to fail on an import of costctl's heavier parts); :mod:`.client` is the watch's side.
"""
