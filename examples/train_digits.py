"""Train a small MLP on scikit-learn's handwritten digits, one epoch at a time.

A real (CPU) training run for trying costctl: it prints one training-loss line and one
validation-loss line per epoch::

    epoch 7/150 loss: 0.767125
    epoch 7/150 val_loss: 0.259118

and keeps going a fixed number of epochs after its training loss has flattened, the waste
costctl's plateau policy is there to point out. Data: ``sklearn.datasets.load_digits``
(bundled, no download). Model: ``MLPClassifier`` trained with ``partial_fit`` over shuffled
mini-batches; SGD with Nesterov momentum and a strong L2 penalty (``--alpha``), which sets a
floor under the training loss: it falls for ~10 epochs, then stays within a couple of percent
while PyTorch's ``ReduceLROnPlateau(patience=10, threshold=1e-4)`` fed these losses fires
at epoch 50 of 150. The training loss printed is the mean over the epoch of
scikit-learn's ``loss_`` (log-loss plus its L2 term); the validation loss is the plain
log-loss on a held-out 20 %. Runs ~20-30 s on a laptop CPU; ``--quick`` takes a few seconds.

Gradient accumulation: scikit-learn computes each update inside one ``partial_fit`` call, so
here ``--accum-steps K`` passes ``K`` micro-batches of ``--batch-size`` to one call: one
update per effective batch of ``batch x K`` samples, which is what accumulating K
micro-batch gradients computes. Halving the batch and doubling the steps (costctl's OOM
retry) therefore gives the same updates and the same losses; only the simulated memory check
(``--simulate-memory-limit-batch``) looks at the micro-batch.

costctl protocol (see ``costctl.job``): a checkpoint is saved at the end of the epoch in
which ``$COSTCTL_CHECKPOINT_REQUEST`` appears (the request file is then deleted), every
``--save-every`` epochs, and at the end, as ``<dir>/epoch-NNNN.pkl`` plus ``<dir>/last.pkl``;
``--resume PATH`` (or ``$COSTCTL_RESUME_FROM``) continues the epoch count from a checkpoint;
``$COSTCTL_BATCH_SIZE`` / ``$COSTCTL_ACCUM_STEPS`` apply when the flags are not given.

Usage::

    python examples/train_digits.py                      # 150 epochs, ~20-30 s
    python examples/train_digits.py --quick              # 6 epochs, a few seconds
    costctl watch -- python examples/train_digits.py
"""

from __future__ import annotations

import pickle
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics import log_loss
from sklearn.neural_network import MLPClassifier

from costctl import job

sys.path.insert(0, str(Path(__file__).resolve().parent))
import digits_common as common  # noqa: E402

CHECKPOINT_FORMAT = "costctl-example-digits-sklearn/1"
SUFFIX = ".pkl"


class OutOfMemoryError(RuntimeError):
    """Stands in for ``torch.OutOfMemoryError`` (same printed name) without importing torch."""


OutOfMemoryError.__module__ = "torch"


def make_model(hidden: tuple[int, ...], lr: float, alpha: float, seed: int) -> MLPClassifier:
    return MLPClassifier(
        hidden_layer_sizes=hidden, solver="sgd", learning_rate_init=lr, momentum=0.9,
        nesterovs_momentum=True, alpha=alpha, random_state=seed, shuffle=False,
    )


def save(args, clf: MLPClassifier, epoch: int, rng: np.random.Generator, history: list[float]) -> Path:
    state = {
        "format": CHECKPOINT_FORMAT, "epoch": epoch, "model": clf, "rng_state": rng.bit_generator.state,
        "train_losses": list(history), "hidden": args.hidden, "seed": args.seed,
    }

    def write(path: Path) -> None:
        with open(path, "wb") as fh:
            pickle.dump(state, fh, protocol=pickle.HIGHEST_PROTOCOL)

    return common.save_checkpoint_files(args.checkpoint_dir, epoch, SUFFIX, write)


def main(argv: list[str] | None = None) -> int:
    parser = common.build_parser(
        "Train an MLP on scikit-learn's digits, printing one loss per epoch.",
        epochs=150, hidden="256,256", batch_size=32, lr=0.05, alpha=0.5,
        quick_epochs=6, quick_hidden="32",
    )
    args = common.finish_args(parser.parse_args(argv))
    X_train, X_val, y_train, y_val = common.load_digits_split(args.seed)
    classes = np.arange(10)

    rng = np.random.default_rng(args.seed)
    clf = make_model(args.hidden, args.lr, args.alpha, args.seed)
    history: list[float] = []
    start = 0
    resume = common.resolve_resume(args.resume, SUFFIX)
    if resume is not None:
        with open(resume, "rb") as fh:
            state = pickle.load(fh)
        if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
            common.fail(f"cannot resume: {str(resume)!r} is not a checkpoint of this script")
        clf, start, history = state["model"], int(state["epoch"]), list(state["train_losses"])
        rng.bit_generator.state = state["rng_state"]
        args.hidden = tuple(state["hidden"])
    print(common.describe(args, len(X_train), len(X_val), start))

    if args.simulate_memory_limit_batch and args.batch_size > args.simulate_memory_limit_batch:
        raise OutOfMemoryError(common.cuda_oom_message(args.batch_size, args.simulate_memory_limit_batch))

    effective = args.batch_size * args.accum_steps
    started = time.monotonic()
    saved_at = None
    for epoch in range(start + 1, args.epochs + 1):
        order = rng.permutation(len(X_train))
        total = 0.0
        for lo in range(0, len(order), effective):
            idx = order[lo : lo + effective]
            clf.batch_size = len(idx)  # one update per effective batch (see the module docstring)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                clf.partial_fit(X_train[idx], y_train[idx], classes=classes)
            total += clf.loss_ * len(idx)
        train_loss = total / len(order)
        history.append(train_loss)
        val_loss = log_loss(y_val, clf.predict_proba(X_val), labels=classes)
        print(common.TRAIN_LINE.format(epoch=epoch, epochs=args.epochs, loss=train_loss))
        print(common.EVAL_LINE.format(epoch=epoch, epochs=args.epochs, loss=val_loss))

        requested = job.checkpoint_requested()
        periodic = args.save_every > 0 and epoch % args.save_every == 0
        if requested or periodic or epoch == args.epochs:
            save_started = time.time()
            path = save(args, clf, epoch, rng, history)
            saved_at = epoch
            if requested:  # the record: which file, which epoch, when the save began and ended
                job.acknowledge_checkpoint(checkpoint=path, step=epoch, started_at=save_started)
            why = "on request" if requested else ("periodic" if periodic else "final")
            print(f"checkpoint saved ({why}): {path} (epoch {epoch})")

    if saved_at is None and start >= args.epochs:
        print(f"nothing to do: the checkpoint is at epoch {start} of {args.epochs}")
    accuracy = clf.score(X_val, y_val) if hasattr(clf, "coefs_") else float("nan")
    print(f"done: epochs {start + 1}..{args.epochs} in {time.monotonic() - started:.1f} s, "
          f"val accuracy {accuracy:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
