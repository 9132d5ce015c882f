"""Throughput of costctl's console-log reader against ``grep -c loss`` on the same file.

Writes a synthetic mixed-format training log (default 1 GB) into a temporary directory:
Hugging Face dict lines, Keras progress bars, nanoGPT iteration and eval lines, tqdm bars
redrawn with carriage returns and a loss postfix, ANSI-coloured lines and plain noise (warnings,
"saving checkpoint"), roughly in the proportions a real console log has. Then it times

* ``costctl.replay.train_log.iter_console`` (the same LineParser ``costctl watch`` runs live,
  plus the OOM and summary scans; points are counted, not kept), and
* ``grep -c loss`` (a lower bound: it only counts lines),

and prints lines per second for both. This is a measurement, not a test: nothing is asserted.

Usage::

    python benchmarks/bench_readers.py                # 1 GB
    python benchmarks/bench_readers.py --size 50M     # smaller run
    python benchmarks/bench_readers.py --keep         # keep the file and print its path
"""

from __future__ import annotations

import argparse
import random
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from costctl.replay.oom import OomEvent
from costctl.replay.train_log import iter_console

_SIZE = re.compile(r"^(\d+(?:\.\d+)?)\s*([KMG]?)B?$", re.IGNORECASE)
_UNITS = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9}


def parse_size(text: str) -> int:
    """``1G``, ``500M``, ``64K`` or a byte count -> bytes (decimal units)."""
    m = _SIZE.match(text.strip())
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a size like 1G, 500M, 64K or bytes")
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()])


def make_block(rng: random.Random, lines: int = 20_000) -> tuple[str, int]:
    """One block of mixed console output and the number of physical lines in it (``\\n`` and ``\\r`` ends)."""
    out: list[str] = []
    count = 0
    step = 0
    for _ in range(lines):
        step += 1
        loss = 4.0 * rng.random() + 0.1
        kind = rng.random()
        if kind < 0.25:
            out.append(f"{{'loss': {loss:.4f}, 'grad_norm': {rng.random() * 3:.6f}, "
                       f"'learning_rate': {rng.random() * 1e-4:.6e}, 'epoch': {step / 1000:.2f}}}\n")
            count += 1
        elif kind < 0.40:
            out.append(f"iter {step}: loss {loss:.4f}, time {rng.random() * 2000:.2f}ms, mfu {rng.random() * 50:.2f}%\n")
            count += 1
        elif kind < 0.55:
            bars = "".join(
                f" {p:3d}%|{'#' * (p // 10):<10}| {p}/100 [00:{p:02d}<00:10, 9.9it/s, loss={loss + p / 1000:.3f}]\r"
                for p in range(10, 60, 10)
            )
            out.append(bars + "\n")
            count += 6
        elif kind < 0.65:
            out.append(f"9595/9595 [==============================] - 1s - loss: {loss:.4f} - acc: 0.6295 "
                       f"- val_loss: {loss * 1.1:.4f} - val_acc: 0.7470\n")
            count += 1
        elif kind < 0.72:
            out.append(f"\x1b[32mINFO\x1b[0m step {step} \x1b[1mloss\x1b[0m={loss:.4f} lr=3e-4\n")
            count += 1
        elif kind < 0.75:
            out.append(f"step {step}: train loss {loss:.4f}, val loss {loss * 1.05:.4f}\n")
            count += 1
        else:
            out.append(rng.choice((
                "saving checkpoint to out\n",
                "/usr/lib/python3/site-packages/torch/utils/data.py:42: UserWarning: this is a warning\n",
                "  warnings.warn(\n",
                f"Epoch {step % 100}/100\n",
                "Map: 100%|##########| 67349/67349 [00:03<00:00, 19000.00 examples/s]\n",
            )))
            count += 1
    return "".join(out), count


def write_log(path: Path, size: int, seed: int = 0) -> int:
    """Write about ``size`` bytes of mixed console output to ``path``; returns the line count."""
    rng = random.Random(seed)
    blocks = [make_block(rng) for _ in range(4)]
    written = lines = 0
    with path.open("w", encoding="utf-8", newline="") as fh:
        k = 0
        while written < size:
            text, count = blocks[k % len(blocks)]
            fh.write(text)
            written += len(text.encode("utf-8"))
            lines += count
            k += 1
    return lines


def main(argv: list[str] | None = None) -> None:
    """Generate the log, time both readers, print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=parse_size, default=parse_size("1G"), help="log size (default 1G)")
    parser.add_argument("--keep", action="store_true", help="keep the generated file")
    args = parser.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="costctl-bench-"))
    path = tmp / "console.log"
    try:
        t0 = time.perf_counter()
        lines = write_log(path, args.size)
        made = time.perf_counter() - t0
        size = path.stat().st_size
        print(f"log: {path} {size / 1e6:.1f} MB, {lines:,} lines (\\n and \\r ends), written in {made:.1f} s")

        t0 = time.perf_counter()
        counts = {"train": 0, "eval": 0}
        oom: list[OomEvent] = []
        for point in iter_console(path, oom=oom, summary={}):
            counts[point.kind] += 1
        took = time.perf_counter() - t0
        print(f"costctl iter_console: {took:8.2f} s  {lines / took:14,.0f} lines/s  {size / took / 1e6:8.1f} MB/s"
              f"  ({counts['train']:,} train + {counts['eval']:,} eval points, {len(oom)} OOM)")

        grep = shutil.which("grep")
        if grep is None:
            print("grep -c loss: grep not found")
        else:
            t0 = time.perf_counter()
            proc = subprocess.run([grep, "-c", "loss", str(path)], capture_output=True, text=True, check=False)
            took_g = time.perf_counter() - t0
            print(f"grep -c loss:         {took_g:8.2f} s  {lines / took_g:14,.0f} lines/s  "
                  f"{size / took_g / 1e6:8.1f} MB/s  ({proc.stdout.strip()} matching lines)")
            print(f"ratio: costctl is {took / took_g:.1f}x the time of grep -c (grep only counts lines)")
    finally:
        if args.keep:
            print(f"kept {path}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
