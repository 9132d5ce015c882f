"""A job that prints a numbered heartbeat every 0.2 s (stdout; every 5th also on stderr) for
``HEARTBEAT_S`` seconds (default 60) or until the file ``HEARTBEAT_UNTIL`` exists, and appends each number it printed to ``HEARTBEAT_FILE``
after the print returned (what it really wrote). A BrokenPipeError ends it, as it would a job."""

import os
import sys
import time

record = os.environ.get("HEARTBEAT_FILE")
end = time.monotonic() + float(os.environ.get("HEARTBEAT_S", "60"))
until = os.environ.get("HEARTBEAT_UNTIL")
n = 0
while time.monotonic() < end and not (until and os.path.exists(until)):
    print(f"heartbeat {n} loss {1.0 / (n + 1):.4f}", flush=True)
    if n % 5 == 0:
        print(f"heartbeat-err {n}", file=sys.stderr, flush=True)
    if record:
        with open(record, "a") as fh:
            fh.write(f"{n}\n")
    n += 1
    time.sleep(0.2)
