"""The digits example in PyTorch: the same data, output format, flags and checkpoint protocol
as ``train_digits.py``, for users who have torch.

Prints, once per epoch::

    epoch 7/150 loss: 0.281223
    epoch 7/150 val_loss: 0.324528

Model: an MLP (``--hidden`` Linear+ReLU layers) trained with SGD, Nesterov momentum 0.9 and
weight decay ``--alpha`` (the L2 penalty that puts a floor under the training loss: it falls for
~20 epochs, then stays within a few percent, and ``ReduceLROnPlateau(patience=10,
threshold=1e-4)`` fed these losses fires at epoch 50 of 150 on the CPU). The training loss
printed is the mean cross-entropy over the epoch's samples; the validation loss is the
cross-entropy on the held-out 20 %. Runs on CUDA when available (``--device``), else on the CPU, deterministically
for a given seed on the CPU (one intra-op thread: faster for a model this small). About
25-30 s on a laptop CPU with the defaults; ``--quick`` takes a few seconds.

Gradient accumulation is real here: each optimizer step sums the gradients of
``--accum-steps`` micro-batches of ``--batch-size`` samples, scaled so that the step equals one
over the effective batch; halving the batch and doubling the steps (costctl's OOM retry)
leaves the updates unchanged.

costctl protocol (see ``costctl.job``): a checkpoint (``torch.save`` of model, optimizer and
RNG state) goes to ``<dir>/epoch-NNNN.pt`` and ``<dir>/last.pt`` at the end of the epoch in
which ``$COSTCTL_CHECKPOINT_REQUEST`` appears (the request file is then deleted), every
``--save-every`` epochs and at the end; ``--resume PATH`` / ``$COSTCTL_RESUME_FROM``
continues the epoch count; ``$COSTCTL_BATCH_SIZE`` / ``$COSTCTL_ACCUM_STEPS`` apply when the
flags are not given. ``--simulate-memory-limit-batch N`` raises a real
``torch.OutOfMemoryError`` when the micro-batch exceeds N.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch
from torch import nn

from costctl import job

sys.path.insert(0, str(Path(__file__).resolve().parent))
import digits_common as common  # noqa: E402

CHECKPOINT_FORMAT = "costctl-example-digits-torch/1"
SUFFIX = ".pt"


def make_model(hidden: tuple[int, ...]) -> nn.Sequential:
    layers: list[nn.Module] = []
    width = 64
    for size in hidden:
        layers += [nn.Linear(width, size), nn.ReLU()]
        width = size
    layers.append(nn.Linear(width, 10))
    return nn.Sequential(*layers)


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def main(argv: list[str] | None = None) -> int:
    parser = common.build_parser(
        "Train a PyTorch MLP on scikit-learn's digits, printing one loss per epoch.",
        epochs=150, hidden="768,768", batch_size=32, lr=0.05, alpha=0.02,
        quick_epochs=6, quick_hidden="32",
    )
    parser.add_argument("--device", default="auto", help="auto (CUDA if available), cpu or cuda[:N]")
    args = common.finish_args(parser.parse_args(argv))
    device = pick_device(args.device)
    if device.type == "cpu":
        torch.set_num_threads(1)  # a model this small runs slower with intra-op threads

    X_train, X_val, y_train, y_val = common.load_digits_split(args.seed)
    X_train = torch.tensor(X_train, dtype=torch.float32, device=device)
    X_val = torch.tensor(X_val, dtype=torch.float32, device=device)
    y_train = torch.tensor(y_train, dtype=torch.long, device=device)
    y_val = torch.tensor(y_val, dtype=torch.long, device=device)

    torch.manual_seed(args.seed)
    generator = torch.Generator().manual_seed(args.seed)  # shuffling, on the CPU
    history: list[float] = []
    start = 0
    resume = common.resolve_resume(args.resume, SUFFIX)
    state = None
    if resume is not None:
        state = torch.load(resume, map_location="cpu", weights_only=True)
        if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
            common.fail(f"cannot resume: {str(resume)!r} is not a checkpoint of this script")
        args.hidden = tuple(state["hidden"])
        start, history = int(state["epoch"]), list(state["train_losses"])
    model = make_model(args.hidden).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, nesterov=True,
                                weight_decay=args.alpha)
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        generator.set_state(state["generator"])
    print(common.describe(args, len(X_train), len(X_val), start) + f", device {device}")

    if args.simulate_memory_limit_batch and args.batch_size > args.simulate_memory_limit_batch:
        raise torch.OutOfMemoryError(common.cuda_oom_message(args.batch_size, args.simulate_memory_limit_batch))

    def save(epoch: int) -> Path:
        payload = {
            "format": CHECKPOINT_FORMAT, "epoch": epoch, "model": model.state_dict(),
            "optimizer": optimizer.state_dict(), "generator": generator.get_state(),
            "train_losses": list(history), "hidden": list(args.hidden), "seed": args.seed,
        }
        return common.save_checkpoint_files(args.checkpoint_dir, epoch, SUFFIX, lambda p: torch.save(payload, p))

    loss_fn = nn.CrossEntropyLoss(reduction="sum")
    effective = args.batch_size * args.accum_steps
    started = time.monotonic()
    for epoch in range(start + 1, args.epochs + 1):
        model.train()
        order = torch.randperm(len(X_train), generator=generator).to(device)
        total = torch.zeros((), device=device)
        for lo in range(0, len(order), effective):
            chunk = order[lo : lo + effective]
            optimizer.zero_grad(set_to_none=True)
            for micro in chunk.split(args.batch_size):
                loss = loss_fn(model(X_train[micro]), y_train[micro])
                (loss / len(chunk)).backward()  # accumulate: the step sees the effective-batch mean
                total += loss.detach()
            optimizer.step()
        train_loss = (total / len(order)).item()
        history.append(train_loss)
        model.eval()
        with torch.no_grad():
            val_loss = (loss_fn(model(X_val), y_val) / len(X_val)).item()
        print(common.TRAIN_LINE.format(epoch=epoch, epochs=args.epochs, loss=train_loss))
        print(common.EVAL_LINE.format(epoch=epoch, epochs=args.epochs, loss=val_loss))

        requested = job.checkpoint_requested()
        periodic = args.save_every > 0 and epoch % args.save_every == 0
        if requested or periodic or epoch == args.epochs:
            save_started = time.time()
            path = save(epoch)
            if requested:  # the record: which file, which epoch, when the save began and ended
                job.acknowledge_checkpoint(checkpoint=path, step=epoch, started_at=save_started)
            why = "on request" if requested else ("periodic" if periodic else "final")
            print(f"checkpoint saved ({why}): {path} (epoch {epoch})")

    if start >= args.epochs:
        print(f"nothing to do: the checkpoint is at epoch {start} of {args.epochs}")
    with torch.no_grad():
        accuracy = (model(X_val).argmax(dim=1) == y_val).float().mean().item()
    print(f"done: epochs {start + 1}..{args.epochs} in {time.monotonic() - started:.1f} s, "
          f"val accuracy {accuracy:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
