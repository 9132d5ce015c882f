"""Writes 1 MB to each stream with no newline, interleaved, then exits 0."""
import sys

chunk = b"x" * 4096
for i in range(256):
    sys.stdout.buffer.write(chunk)
    sys.stderr.buffer.write(chunk.replace(b"x", b"y"))
sys.stdout.buffer.flush()
sys.stderr.buffer.flush()
