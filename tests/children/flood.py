"""A job that floods stdout with loss lines as fast as it can: ``flood.py LINES``.

The lines (``step N loss: X``, each one different, so a lost or repeated piece shows) are made
in blocks and written with ``os.write`` in 64 KiB pieces, so the job writes tens of MB per second.
"""

import os
import sys

n = int(sys.argv[1])
block = 50_000
for start in range(0, n, block):
    data = "".join(f"step {i} loss: {0.5 + (i * 7919 % 1000) / 10000:.4f}\n"
                   for i in range(start, min(n, start + block))).encode()
    view = memoryview(data)
    while view:
        view = view[os.write(1, view[:65536]):]
