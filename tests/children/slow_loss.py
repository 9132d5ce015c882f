"""Prints loss lines without flushing (block-buffered unless PYTHONUNBUFFERED), with the wall time."""
import sys
import time

n = int(sys.argv[1]) if len(sys.argv) > 1 else 4
for i in range(n):
    print(f"iter {i}: loss {1.0 / (i + 1):.4f} t={time.time():.6f}")
    time.sleep(0.6)
