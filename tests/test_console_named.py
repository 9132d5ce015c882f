"""costctl.replay.console_named: several named losses on a line, column tables from tqdm
refreshes (the final refresh of each epoch counted once), the primary-series rule."""

from __future__ import annotations

from pathlib import Path

import pytest

from costctl.errors import UsageError
from costctl.replay.console_named import choose_primary, granularity_of, kind_of, named_losses
from costctl.replay.train_log import read_console


def test_named_losses_need_two_train_side_names() -> None:
    assert named_losses("[Epoch 0/200] [Batch 3/938] [D loss: 0.61] [G loss: 0.81]") == [
        ("train", "D loss", 0.61), ("train", "G loss", 0.81)]
    assert named_losses("[0/5][0/1583]\tLoss_D: 1.7470\tLoss_G: 5.1245\tD(x): 0.5542") == [
        ("train", "Loss_D", 1.747), ("train", "Loss_G", 5.1245)]
    # one train loss and an eval one, or a loss and the loss scale: the line grammar's business
    assert named_losses("step 500: train loss 2.3, val loss 2.4") == []
    assert named_losses(" iteration 100/500 | lm loss: 7.5E+00 | loss scale: 65536.0 | grad norm: 2.3 |") == []
    assert kind_of("val_loss") == "eval" and kind_of("test_loss") is None and kind_of("loss_scale") is None
    assert granularity_of("train_loss_epoch") == "epoch" and granularity_of("Average loss") == "epoch"
    assert granularity_of("train_loss_step") == "batch"


def test_primary_rule() -> None:
    assert choose_primary(["box_loss", "obj_loss", "total_loss"]) == "total_loss"
    assert choose_primary(["kl_loss", "running_loss"]) == "running_loss"
    assert choose_primary(["loss_D", "loss_G"]) == "loss_D"
    assert choose_primary(["train_loss_epoch", "loss_G"]) == "loss_G"
    assert choose_primary(["loss_D", "loss_G"], "loss_G") == "loss_G"
    with pytest.raises(UsageError, match="--loss 'x'.*'loss_D', 'loss_G'"):
        choose_primary(["loss_D", "loss_G"], "x")


def _figures(log):
    out = {}
    for kind in ("train", "eval"):
        if log.count(kind):
            s = log.summary_of(kind)
            out[(kind, log.primary_names.get(kind, s.first.name))] = (s.count, s.first.value, s.last.value, s.min.value)
    for kind, name, _, s in log.extra:
        out[(kind, name)] = (s.count, s.first.value, s.last.value, s.min.value)
    return out


@pytest.mark.parametrize("streamed", [False, True])
def test_column_table_final_refresh_of_each_epoch_counts_once(tmp_path: Path, streamed: bool) -> None:
    header = "      Epoch   GPU_mem  box_loss  obj_loss  cls_loss     total    labels  img_size\n"
    def row(e, box, obj, cls, n):
        return (f"       {e}/2     3.1G    {box:.4f}    {obj:.4f}    {cls:.4f}    {box + obj + cls:.4f}"
                f"        12       640:  {n * 50}%|#####     | {n}/2 [00:01<00:01,  1.5it/s]")
    text = ""
    for e, refreshes in enumerate([[(0.09, 0.05, 0.02), (0.08, 0.05, 0.02)], [(0.07, 0.04, 0.01), (0.06, 0.04, 0.01)],
                                   [(0.065, 0.03, 0.01), (0.05, 0.03, 0.01)]]):
        text += header + "\r".join(row(e, *r, n + 1) for n, r in enumerate(refreshes)) + "\n"
        text += "                 Class     Images  Instances          P          R      mAP50   mAP50-95: 100%|##| 1/1\n"
    log_file = tmp_path / "yolo.log"
    log_file.write_text(text)
    log = read_console(log_file, streamed=streamed)
    f = _figures(log)
    assert log.primary_names["train"] == "total"
    assert f[("train", "total")] == (3, pytest.approx(0.15), pytest.approx(0.09), pytest.approx(0.09))
    assert f[("train", "box_loss")] == (3, 0.08, 0.05, 0.05)
    assert [p.epoch for p in log.iter_points() if p.kind == "train"] == [0.0, 1.0, 2.0]


def test_lightning_bar_named_losses_redraws_counted_once(tmp_path: Path) -> None:
    lines = []
    for epoch, (step_losses, epoch_loss) in enumerate([([0.9, 0.8], None), ([0.7, 0.6], 0.85)]):
        for i, l in enumerate(step_losses):
            post = f"v_num=0, train_loss_step={l}" + (f", train_loss_epoch={epoch_loss}" if epoch_loss else "")
            bar = f"Epoch {epoch}: {50 * (i + 1)}%|#####     | {i + 1}/2 [00:01<00:01,  1.50it/s, {post}]"
            lines += [bar, bar]  # tqdm redraws the same state
    log_file = tmp_path / "pl.log"
    log_file.write_text("\r".join(lines) + "\n")
    log = read_console(log_file, streamed=True)
    f = _figures(log)
    assert f[("train", "train_loss_step")] == (4, 0.9, 0.6, 0.6)
    assert f[("train", "train_loss_epoch")][0] == 1  # shown on every refresh of epoch 1: one value


@pytest.mark.parametrize("extra", ["", "época ✓\n"])  # an ASCII block, and one that is not
def test_gan_named_losses_each_own_series_and_dcgan_loss_d(tmp_path: Path, extra: str) -> None:
    text = extra + "".join(f"[{i}/5][0/1583]\tLoss_D: {1.7 - 0.1 * i:.4f}\tLoss_G: {5.1 - 0.5 * i:.4f}\t"
                           f"D(x): 0.55\tD(G(z)): 0.57 / 0.01\n" for i in range(5))
    log_file = tmp_path / "dcgan.log"
    log_file.write_text(text, encoding="utf-8")
    log = read_console(log_file, streamed=True)
    f = _figures(log)
    assert log.primary_names["train"] == "Loss_D"
    assert f[("train", "Loss_D")] == (5, 1.7, 1.3, 1.3)
    assert f[("train", "Loss_G")] == (5, 5.1, 3.1, 3.1)
    assert len(list(log.iter_batches(kinds=("train",)))) >= 1
    assert [p.value for p in log.iter_points()] == [1.7, 1.6, 1.5, 1.4, 1.3]
