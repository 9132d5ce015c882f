"""Throughput of costctl's block log reader against ``grep -c loss``, and ``costctl analyze``'s peak memory.

Writes a synthetic mixed-format training log (default 1 GB; cached in the temporary directory
with ``--keep`` and reused by the next run of the same size): Hugging Face dict lines (numbers,
and strings such as ``{'loss': '0.1234'}``), ``loss: x`` lines, Keras progress bars, nanoGPT
iteration and eval lines, tqdm bars redrawn with carriage returns and a loss postfix,
ANSI-coloured lines, epoch headers and plain noise (warnings, stack traces, data-loading bars,
long lines), roughly in the proportions a chatty console log has. Then it times

* ``reader``: the reader ``costctl watch`` runs on the job's output,
  :meth:`costctl.progress.output.OutputProgress.parse` (the line parser with its block hook: named
  losses, column tables, gradient norms; the primary series cut), over the raw file in 4 MiB
  blocks with the chosen engine (``--engine``; default :data:`costctl.progress.lines.ENGINE`:
  the C scanner when built, else pure Python); ``costctl analyze`` reads a file with the same
  parser and hook. Points land in a ``PointBatch``, nothing is kept;
* ``line_parser``: :meth:`costctl.progress.LineParser.feed_batch` alone (no hook), for reference;
* ``grep -c loss`` on the same file (a lower bound: it only counts lines);
* ``costctl analyze --train-log FILE --format json`` as a subprocess (stdout discarded): wall
  time and peak RSS (``ru_maxrss`` of that child, via ``os.wait4``).

Figures (the last line is one JSON object): ``engine`` ("native" or "python"); ``mix``
("console" or "general", see ``--mix``); ``size_bytes``; ``lines`` (``\n`` and ``\r``
ends); ``points``; ``reader_s`` (seconds); ``reader_mb_s`` (MB/s, 10^6 bytes); ``points_per_s``;
``line_parser_s``; ``grep_s``; ``grep_mb_s``; ``ratio_to_grep`` (reader_s / grep_s; target <= 20,
aim 10); ``line_parser_ratio_to_grep``;
``analyze_s``; ``analyze_peak_rss_mb`` (MiB; target <= 200); ``analyze_rc``. Nothing is
asserted: it is a measurement; absolute times depend on the machine's load.

Usage::

    python benchmarks/bench_parse.py                 # 1 GB
    python benchmarks/bench_parse.py --size 200M     # smaller run
    python benchmarks/bench_parse.py --keep          # keep (and reuse) the generated file
    python benchmarks/bench_parse.py --no-analyze    # reader and grep only
    python benchmarks/bench_parse.py --engine python # the pure-Python reader (COSTCTL_PARSER=python)
    python benchmarks/bench_parse.py --mix general   # mostly loss lines of no strict shape
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _procfs beside it, also when loaded by path

from _procfs import costctl_env, ensure_bytecode, parse_size, run_child  # noqa: E402

from costctl.progress import lines as _lines  # noqa: E402
from costctl.progress.lines import LineParser  # noqa: E402

BLOCK = 4 << 20

__all__ = ["main", "make_block", "parse_size", "write_log"]


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
        elif kind < 0.78:
            out.append(f"{{'loss': '{loss:.4f}', 'grad_norm': '{rng.random() * 3:.4f}', 'epoch': '{step / 1000:.2f}'}}\n")
            count += 1
        elif kind < 0.81:
            out.append(f"[rank0]:[W1202 10:00:00.{step % 1000000:06d} ProcessGroupNCCL.cpp:4115] "
                       f"Warning: {'using the default stream for collective ' * rng.randint(1, 6)}\n")
            count += 1
        elif kind < 0.84:
            out.append("Traceback (most recent call last):\n  File \"train.py\", line 42, in <module>\n"
                       "    main()\nValueError: caught and retried\n")
            count += 4
        elif kind < 0.86:
            bars = "".join(f"Loading shards: {p:3d}%|{'#' * (p // 10):<10}| {p // 10}/10 [00:0{p // 20}<00:05]\r"
                           for p in range(0, 101, 20))
            out.append(bars + "\n")
            count += 7
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


def make_general_block(rng: random.Random, lines: int = 20_000) -> tuple[str, int]:
    """:func:`make_block` for ``--mix general``: mostly loss lines of no strict shape (the shapes
    the per-line grammar reads): ``iter N: loss X`` without time/mfu, ``step N loss=X``,
    ``Epoch [e/E], Step [s/S], Loss: X``, ``train_loss: X val_loss: Y``, ANSI-coloured lines,
    HF dicts in other key orders, with extra keys or string values, Lightning tqdm bars redrawn
    with carriage returns, ``Epoch k | running_loss: X``, HF eval dicts, scikit-learn
    iterations, nanoGPT eval lines and noise."""
    out: list[str] = []
    count = 0
    step = 0
    for _ in range(lines):
        step += 1
        loss = 4.0 * rng.random() + 0.1
        kind = rng.random()
        count += 1
        if kind < 0.12:
            out.append(f"iter {step}: loss {loss:.4f}\n")
        elif kind < 0.22:
            out.append(f"step {step} loss={loss:.4f}\n")
        elif kind < 0.32:
            out.append(f"Epoch [{step % 80 + 1}/80], Step [{step % 600 + 1}/600], Loss: {loss:.4f}\n")
        elif kind < 0.40:
            out.append(f"train_loss: {loss:.4f} val_loss: {loss * 1.1:.4f}\n")
        elif kind < 0.48:
            out.append(f"\x1b[32mINFO\x1b[0m step {step} \x1b[1mloss\x1b[0m={loss:.4f} lr=3e-4\n")
        elif kind < 0.58:
            out.append(f"{{'epoch': {step / 1000:.2f}, 'loss': {loss:.4f}, 'learning_rate': 2e-05, 'step': {step}}}\n")
        elif kind < 0.64:
            out.append(f"{{'loss': '{loss:.4f}', 'grad_norm': '{rng.random() * 3:.4f}', 'epoch': '{step / 1000:.2f}'}}\n")
        elif kind < 0.72:
            out.append("".join(f"Epoch 0: {p:3d}%|{'#' * (p // 10):<10}| {p // 2}/50 [00:01<00:01, 9.9it/s, "
                               f"loss={loss + p / 1000:.3f}, v_num=1]\r" for p in range(10, 60, 20)) + "\n")
            count += 3
        elif kind < 0.78:
            out.append(f"Epoch {step % 10} | running_loss: {loss:.4f} | kl_loss: 0.02\n")
        elif kind < 0.82:
            out.append(f"{{'eval_loss': {loss:.4f}, 'eval_runtime': 1.2, 'eval_samples_per_second': 100.0, 'epoch': 1.0}}\n")
        elif kind < 0.85:
            out.append(f"Iteration {step}, loss = {loss:.6f}\n")
        elif kind < 0.88:
            out.append(f"step {step}: train loss {loss:.4f}, val loss {loss * 1.05:.4f}\n")
        else:
            out.append(rng.choice((
                "saving checkpoint to out\n", "  warnings.warn(\n", "Traceback (most recent call last):\n",
                "loss_scale: 65536 reduced\n",
                "Map: 100%|##########| 67349/67349 [00:03<00:00, 19000.00 examples/s]\n",
            )))
    return "".join(out), count


#: ``--mix``: the block maker of each generated log.
MIXES = {"console": make_block, "general": make_general_block}


def write_log(path: Path, size: int, seed: int = 0, mix: str = "console") -> int:
    """Write about ``size`` bytes of mixed console output to ``path``; returns the line count.

    ``mix``: ``"console"`` (:func:`make_block`) or ``"general"`` (:func:`make_general_block`).
    """
    rng = random.Random(seed)
    blocks = [MIXES[mix](rng) for _ in range(4)]
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


def _reader(path: Path, engine: str) -> tuple[float, int, int]:
    """Seconds, points and lines of the watch's reader (OutputProgress.parse: the line parser,
    its block hook and the primary-series cut) over ``path`` in BLOCK-byte blocks; the gradient
    norms read are taken after each block, as the watch's tick takes them."""
    from costctl.progress.output import OutputProgress

    reader = OutputProgress(engine=engine)
    points = 0
    t0 = time.perf_counter()
    with path.open("rb") as fh:
        while block := fh.read(BLOCK):
            points += len(reader.parse("stdout", block, None))
            reader.take_grad_norms()
    points += len(reader.flush(None))
    return time.perf_counter() - t0, points, reader.lines_seen


def _line_parser(path: Path, engine: str) -> tuple[float, int, int]:
    """Seconds, points and lines of LineParser.feed_batch alone over ``path`` in BLOCK-byte blocks."""
    parser = LineParser(engine=engine)
    points = 0
    t0 = time.perf_counter()
    with path.open("rb") as fh:
        while block := fh.read(BLOCK):
            points += len(parser.feed_batch(block, None))
    points += len(parser.flush_batch(None))
    return time.perf_counter() - t0, points, parser.lines_seen


def _analyze(path: Path, engine: str) -> tuple[float, float, int]:
    """Wall seconds, peak RSS (MiB) and exit status of ``costctl analyze`` on ``path``."""
    cmd = [sys.executable, "-m", "costctl", "analyze", "--train-log", str(path), "--format", "json"]
    env = costctl_env()
    if engine == "python":
        env["COSTCTL_PARSER"] = "python"
    return run_child(cmd, env)


def main(argv: list[str] | None = None) -> dict:
    """Generate (or reuse) the log, time the reader, grep and analyze; print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=parse_size, default=parse_size("1G"), help="log size (default 1G)")
    parser.add_argument("--keep", action="store_true", help="keep the generated file (and reuse a kept one)")
    parser.add_argument("--no-analyze", action="store_true", help="skip the costctl analyze run")
    parser.add_argument("--mix", choices=tuple(MIXES), default="console",
                        help="log lines: console (default: a chatty console's mix, strict shapes mostly) or "
                             "general (mostly loss lines of no strict shape)")
    parser.add_argument("--engine", choices=("native", "python"), default=_lines.ENGINE,
                        help=f"block reader engine (default {_lines.ENGINE}, costctl's choice here)")
    args = parser.parse_args(argv)
    if not args.no_analyze:
        ensure_bytecode()
    cache = Path(tempfile.gettempdir()) / "costctl-bench-parse"
    tmp = cache if args.keep else Path(tempfile.mkdtemp(prefix="costctl-bench-"))
    tmp.mkdir(exist_ok=True)
    path = tmp / (f"console-{args.size}.log" if args.mix == "console" else f"{args.mix}-{args.size}.log")
    try:
        if path.exists():
            print(f"log: reusing {path}")
        else:
            t0 = time.perf_counter()
            write_log(path, args.size, mix=args.mix)
            print(f"log: {path} written in {time.perf_counter() - t0:.1f} s")
        size = path.stat().st_size
        took, points, lines = _reader(path, args.engine)
        print(f"reader (the watch's, {args.engine}): {took:8.2f} s  {size / took / 1e6:8.1f} MB/s  "
              f"{points / took:12,.0f} points/s  ({size / 1e6:.1f} MB, {lines:,} lines, {points:,} points)")
        took_p, points_p, _ = _line_parser(path, args.engine)
        print(f"line parser alone:   {took_p:8.2f} s  {size / took_p / 1e6:8.1f} MB/s  ({points_p:,} points)")
        figures: dict = {"engine": args.engine, "mix": args.mix, "size_bytes": size, "lines": lines, "points": points, "reader_s": round(took, 3),
                         "reader_mb_s": round(size / took / 1e6, 2), "points_per_s": round(points / took),
                         "line_parser_s": round(took_p, 3)}
        grep = shutil.which("grep")
        if grep is None:
            print("grep -c loss: grep not found")
        else:
            t0 = time.perf_counter()
            proc = subprocess.run([grep, "-c", "loss", str(path)], capture_output=True, text=True, check=False)
            took_g = time.perf_counter() - t0
            print(f"grep -c loss:        {took_g:8.2f} s  {size / took_g / 1e6:8.1f} MB/s  "
                  f"({proc.stdout.strip()} matching lines)")
            print(f"ratio: the reader takes {took / took_g:.1f}x the time of grep -c loss (target <= 20, aim 10)")
            figures.update(grep_s=round(took_g, 3), grep_mb_s=round(size / took_g / 1e6, 2),
                           ratio_to_grep=round(took / took_g, 2), line_parser_ratio_to_grep=round(took_p / took_g, 2))
        if not args.no_analyze:
            took_a, rss, rc = _analyze(path, args.engine)
            print(f"costctl analyze:     {took_a:8.2f} s  peak RSS {rss:.1f} MiB (target <= 200)  exit {rc}")
            figures.update(analyze_s=round(took_a, 2), analyze_peak_rss_mb=round(rss, 1), analyze_rc=rc)
        print(json.dumps(figures, sort_keys=True))
        return figures
    finally:
        if args.keep:
            print(f"kept {path}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
