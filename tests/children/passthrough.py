"""A child that writes awkward bytes to both streams: \\r updates, ANSI colours, [N/A], no final newline."""
import os
import sys

out = sys.stdout.buffer
err = sys.stderr.buffer
out.write(b"step 1\r step 2\r step 3\n")
out.write(b"\x1b[31mred [bold]not markup[/bold]\x1b[0m [N/A] [Not Supported]\n")
err.write(b"warn: \x1b[33myellow\x1b[0m\r\n")
out.write("ünïcödé ✓ \xff\xfe raw".encode() + b"\xff\xfe")
err.write(b"no final newline on stderr")
out.write(b"no final newline on stdout")
out.flush()
err.flush()
sys.exit(int(os.environ.get("EXIT_WITH", "0")))
