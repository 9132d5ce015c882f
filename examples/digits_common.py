"""Shared plumbing of the digits examples: flags, data, atomic checkpoint files, simulated OOM.

Not a training script itself; ``train_digits.py`` (scikit-learn) and ``train_digits_torch.py``
(PyTorch) import it. It needs numpy and scikit-learn (for the bundled data set), never torch.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Callable

import numpy as np

from costctl import job

#: Printed once per epoch, e.g. ``epoch 7/150 loss: 0.123456`` and ``epoch 7/150 val_loss: 0.2345``.
TRAIN_LINE = "epoch {epoch}/{epochs} loss: {loss:.6f}"
EVAL_LINE = "epoch {epoch}/{epochs} val_loss: {loss:.6f}"


def fail(message: str) -> None:
    """Print one ``error: ...`` line on stderr and exit with status 2 (bad input, no traceback)."""
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def parse_hidden(text: str) -> tuple[int, ...]:
    """``"256,256"`` -> ``(256, 256)``; each size a positive integer."""
    try:
        sizes = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        sizes = ()
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"--hidden {text!r}: give positive layer sizes like 256,256")
    return sizes


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return value


def build_parser(description: str, *, epochs: int, hidden: str, batch_size: int, lr: float,
                 alpha: float, quick_epochs: int, quick_hidden: str) -> argparse.ArgumentParser:
    """The flags both examples share (defaults differ per example)."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--epochs", type=positive_int, default=None,
                   help=f"total epochs, counted across resumes (default {epochs}; --quick: {quick_epochs})")
    p.add_argument("--batch-size", type=positive_int, default=None,
                   help=f"micro-batch size (default $COSTCTL_BATCH_SIZE or {batch_size})")
    p.add_argument("--accum-steps", type=positive_int, default=None,
                   help="gradient-accumulation steps; effective batch = batch size x accum steps "
                        "(default $COSTCTL_ACCUM_STEPS or 1)")
    p.add_argument("--hidden", type=parse_hidden, default=None,
                   help=f"hidden layer sizes (default {hidden}; --quick: {quick_hidden})")
    p.add_argument("--lr", type=float, default=lr, help=f"learning rate (default {lr})")
    p.add_argument("--alpha", type=float, default=alpha,
                   help=f"L2 penalty / weight decay (default {alpha}); it sets the loss floor")
    p.add_argument("--seed", type=int, default=0, help="seed for the split, init and shuffling (default 0)")
    p.add_argument("--checkpoint-dir", type=Path, default=Path("checkpoints"),
                   help="where epoch-NNNN and last checkpoints go (default ./checkpoints)")
    p.add_argument("--save-every", type=int, default=0,
                   help="also save every N epochs (default 0: only on request and at the end)")
    p.add_argument("--resume", default=None,
                   help="checkpoint file or directory to continue from (default $COSTCTL_RESUME_FROM)")
    p.add_argument("--quick", action="store_true", help="a few seconds' run for tests")
    p.add_argument("--simulate-memory-limit-batch", type=positive_int, default=None, metavar="N",
                   help="pretend the GPU fits at most N samples per micro-batch: a larger "
                        "batch dies with CUDA's out-of-memory error (exit 1)")
    p.set_defaults(_defaults={"epochs": epochs, "hidden": hidden, "batch_size": batch_size,
                              "quick_epochs": quick_epochs, "quick_hidden": quick_hidden})
    return p


def finish_args(args: argparse.Namespace) -> argparse.Namespace:
    """Fill defaults that depend on --quick and on costctl's environment variables."""
    d = args._defaults
    if args.epochs is None:
        args.epochs = d["quick_epochs"] if args.quick else d["epochs"]
    if args.hidden is None:
        args.hidden = parse_hidden(d["quick_hidden"] if args.quick else d["hidden"])
    try:
        if args.batch_size is None:
            args.batch_size = job.batch_size(default=d["batch_size"])
        if args.accum_steps is None:
            args.accum_steps = job.accum_steps(default=1)
    except ValueError as exc:
        fail(str(exc))
    if args.resume is None:
        args.resume = job.resume_path()
    return args


def load_digits_split(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """scikit-learn's bundled 8x8 digits (1,797 images, no download), scaled to [0, 1],
    split 80/20 stratified: ``X_train, X_val, y_train, y_val`` (1,437 / 360 rows)."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    X, y = load_digits(return_X_y=True)
    X = (X / 16.0).astype(np.float64)
    return train_test_split(X, y, test_size=0.2, random_state=seed, stratify=y)


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Write ``path`` through a temporary file in the same directory and ``os.replace``, so a
    reader (or a preemption) never sees a half-written checkpoint."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600; give the usual file mode
        write(Path(tmp))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def save_checkpoint_files(directory: Path, epoch: int, suffix: str, write: Callable[[Path], None]) -> Path:
    """Write ``<dir>/epoch-NNNN<suffix>`` and then ``<dir>/last<suffix>`` (a real copy, not a
    link), both atomically. Returns the epoch file's path."""
    epoch_path = directory / f"epoch-{epoch:04d}{suffix}"
    atomic_write(epoch_path, write)
    atomic_write(directory / f"last{suffix}", write)
    return epoch_path


def resolve_resume(resume: str | None, suffix: str) -> Path | None:
    """The checkpoint file to load: ``resume`` itself, or ``<resume>/last<suffix>`` for a
    directory. Exits with status 2 and one line when it does not exist."""
    if not resume:
        return None
    path = Path(resume)
    if path.is_dir():
        path = path / f"last{suffix}"
    if not path.is_file():
        fail(f"cannot resume: checkpoint {str(path)!r} does not exist")
    return path


def cuda_oom_message(batch_size: int, limit: int) -> str:
    """A CUDA out-of-memory message in PyTorch >= 2.5's exact shape (see
    ``shared/corpus/oom_messages_from_issues.txt``), with sizes that scale with the batch.

    The simulated card is a 24 GB one (23.65 GiB usable, as an RTX 4090/A10 reports) that
    fits ``limit`` samples per micro-batch.
    """
    total_gib = 23.65
    per_sample_gib = 21.5 / limit  # activations fill what the weights and context leave
    in_use = min(total_gib - 0.01, 1.8 + per_sample_gib * limit * 0.98)
    tried = per_sample_gib * (batch_size - limit) + 0.25
    free_mib = (total_gib - in_use) * 1024
    allocated = in_use - 0.62
    return (
        f"CUDA out of memory. Tried to allocate {tried:.2f} GiB. GPU 0 has a total capacity of "
        f"{total_gib:.2f} GiB of which {free_mib:.2f} MiB is free. Including non-PyTorch memory, "
        f"this process has {in_use:.2f} GiB memory in use. Of the allocated memory {allocated:.2f} GiB "
        "is allocated by PyTorch, and 194.87 MiB is reserved by PyTorch but unallocated. If reserved "
        "but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
        "to avoid fragmentation.  See documentation for Memory Management  "
        "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
    )


def describe(args: argparse.Namespace, n_train: int, n_val: int, start_epoch: int) -> str:
    """One start-up line (it contains no loss, so costctl does not parse it)."""
    hidden = ",".join(str(h) for h in args.hidden)
    resumed = f", resumed after epoch {start_epoch}" if start_epoch else ""
    return (
        f"digits: {n_train} train / {n_val} val images, hidden {hidden}, batch {args.batch_size} "
        f"x accum {args.accum_steps} (effective {args.batch_size * args.accum_steps}), "
        f"epochs {start_epoch + 1}..{args.epochs}{resumed}"
    )
