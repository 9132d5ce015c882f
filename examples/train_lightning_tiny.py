"""A real Lightning ``Trainer.fit()`` on the CPU, in seconds: a small MLP regression with
costctl's checkpoint callback and Lightning's CSVLogger, resumable from ``COSTCTL_RESUME_FROM``.

Usage::

    pip install torch && pip install -e '.[lightning]'    # torch first
    costctl watch -- python examples/train_lightning_tiny.py --root-dir out --max-steps 400

Flags: ``--root-dir DIR`` (checkpoints in ``DIR/checkpoints/``, metrics in
``DIR/lightning_logs/version_N/metrics.csv``), ``--max-steps N``, ``--step-sleep S`` (seconds
slept per step; default 0). The tqdm progress bar (stderr) shows ``train_loss_step``.
"""

from __future__ import annotations

import argparse
import os
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root-dir", default="pl-out")
    ap.add_argument("--max-steps", type=int, default=400)
    ap.add_argument("--step-sleep", type=float, default=0.0)
    a = ap.parse_args()

    import torch
    from torch.utils.data import DataLoader, TensorDataset

    try:
        import lightning.pytorch as pl
        from lightning.pytorch.callbacks import TQDMProgressBar
        from lightning.pytorch.loggers import CSVLogger
    except ImportError:  # the older package name
        import pytorch_lightning as pl  # type: ignore[no-redef]
        from pytorch_lightning.callbacks import TQDMProgressBar  # type: ignore[no-redef]
        from pytorch_lightning.loggers import CSVLogger  # type: ignore[no-redef]

    from costctl.integrations.lightning import CostctlCheckpoint

    class Regression(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))

        def training_step(self, batch, batch_idx):  # noqa: ANN001
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.net(x), y)
            self.log("train_loss", loss, on_step=True, on_epoch=True, prog_bar=True)
            if a.step_sleep:
                time.sleep(a.step_sleep)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.02)

    class Report(pl.Callback):
        def on_train_start(self, trainer, pl_module):  # noqa: ANN001
            print(f"train_lightning_tiny: training from global step {trainer.global_step} to {a.max_steps}",
                  flush=True)

    torch.manual_seed(0)
    x = torch.randn(4096, 8)
    y = x.sum(1, keepdim=True)
    data = DataLoader(TensorDataset(x, y), batch_size=32)
    trainer = pl.Trainer(max_steps=a.max_steps, default_root_dir=a.root_dir, logger=CSVLogger(a.root_dir),
                         log_every_n_steps=5, accelerator="cpu", enable_model_summary=False,
                         enable_checkpointing=False,  # the progress bar shows train_loss_step (tqdm, on stderr)
                         callbacks=[CostctlCheckpoint(dirpath=os.path.join(a.root_dir, "checkpoints")), Report(),
                                    TQDMProgressBar(refresh_rate=5)])
    trainer.fit(Regression(), data, ckpt_path=os.environ.get("COSTCTL_RESUME_FROM") or None)
    print(f"train_lightning_tiny: done at global step {trainer.global_step}", flush=True)


if __name__ == "__main__":
    main()
