"""A real Hugging Face ``Trainer.train()`` on the CPU, offline, in seconds: a 2-layer GPT-2 built
from a config and a word-level tokenizer built in code (nothing is downloaded), with costctl's
checkpoint callback, resumable from ``COSTCTL_RESUME_FROM``.

Usage::

    pip install torch && pip install -e '.[hf]'    # torch first (else a CUDA build), then transformers + accelerate
    costctl watch -- python examples/train_hf_tiny.py --output-dir out --max-steps 400

Flags: ``--output-dir DIR`` (checkpoints are ``DIR/checkpoint-<step>/``), ``--max-steps N``,
``--save-steps N`` (the Trainer's own saves; default 0: none), ``--logging-steps N`` (default
5), ``--step-sleep S`` (seconds slept per step, to make a short run last; default 0).
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--output-dir", default="hf-out")
    ap.add_argument("--max-steps", type=int, default=400)
    ap.add_argument("--save-steps", type=int, default=0)
    ap.add_argument("--logging-steps", type=int, default=5)
    ap.add_argument("--step-sleep", type=float, default=0.0)
    a = ap.parse_args()

    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import (GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast, Trainer, TrainerCallback,
                              TrainingArguments)

    from costctl.integrations.hf import CostctlCheckpointCallback

    words = "the a cat dog sat ran on under mat log red blue".split()
    vocab = {w: i for i, w in enumerate(["[PAD]", "[UNK]", *words])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]")
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(vocab), n_positions=16, n_embd=32, n_layer=2, n_head=2,
                                       pad_token_id=tokenizer.pad_token_id))

    class Sentences(torch.utils.data.Dataset):
        """Fixed pseudo-random sentences (the same for every run: a resume sees the same data)."""

        def __len__(self) -> int:
            return 1 << 16

        def __getitem__(self, i: int) -> dict:
            ids = torch.randint(2, len(vocab), (12,), generator=torch.Generator().manual_seed(i))
            return {"input_ids": ids, "labels": ids.clone()}

    class Slow(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):  # noqa: ANN001
            print(f"train_hf_tiny: training from global step {state.global_step} to {a.max_steps}", flush=True)
            return control

        def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001
            if a.step_sleep:
                time.sleep(a.step_sleep)
            return control

    args = TrainingArguments(output_dir=a.output_dir, max_steps=a.max_steps, per_device_train_batch_size=8,
                             logging_steps=a.logging_steps, save_strategy="steps" if a.save_steps else "no",
                             save_steps=a.save_steps or 500, report_to=[], use_cpu=True, disable_tqdm=True,
                             dataloader_num_workers=0, seed=0)
    trainer = Trainer(model=model, args=args, train_dataset=Sentences(),
                      callbacks=[CostctlCheckpointCallback(), Slow()])
    trainer.train(resume_from_checkpoint=os.environ.get("COSTCTL_RESUME_FROM") or None)
    print(f"train_hf_tiny: done at global step {trainer.state.global_step}", flush=True)


if __name__ == "__main__":
    main()
