"""The measured route: bytes of tensors autograd saves for backward, fitted as M(b) = M0 + b*m1.

Needs torch (CPU build is enough). Without torch these tests skip, except when CI=true: then
they fail, because CI must exercise this route.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap

import pytest

from costctl.catalog.measure import measure_activations, measure_factory, saved_tensor_bytes
from costctl.catalog.memory import Setup, estimate_memory
from costctl.catalog.models import preset
from costctl.cli.main import main
from costctl.errors import CostctlError, UsageError

try:
    import torch
    from torch import nn
except ImportError:  # pragma: no cover - depends on the environment
    torch = None  # type: ignore[assignment]


@pytest.fixture(autouse=True)
def _need_torch():
    if torch is None:
        if os.environ.get("CI") == "true":
            pytest.fail("torch is not installed (CI=true: the measured route must be tested)", pytrace=False)
        pytest.skip("torch is not installed; pip install torch (CPU) to test the measured route")
    torch.manual_seed(0)


def test_mlp_saved_bytes_match_a_hand_count():
    """Linear(16,32) saves its input (16 floats), ReLU its output (32 floats), the second Linear
    the same ReLU output (same storage, counted once), and the caller holds the output (4
    floats; the default loss ``out.float().sum()`` saves nothing): 52 floats = 208 bytes."""
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    fit = measure_activations(model, lambda b: torch.randn(b, 16))
    assert fit.per_sample_bytes == 208
    assert fit.fixed_bytes == 0
    assert fit.params == 16 * 32 + 32 + 32 * 4 + 4
    assert fit.dtype_bytes == 4


def _tiny_cnn():
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10),
    )


def _loss(out):
    return out.logsumexp(1).sum()


def test_conv_net_fit_is_linear_and_matches_a_hand_count():
    """Per 3x32x32 sample, fp32: conv1 input 3*32*32, BN input 8*32*32, ReLU output 8*32*32,
    max-pool indices 8*16*16 int64, conv2 input 8*16*16, ReLU output 16*16*16, Linear input 16,
    logsumexp input 10 and output 1 -> (3072 + 8192 + 8192 + 2048 + 4096 + 16 + 11) * 4 + 2048 * 8
    = 118,892 bytes. Allow 5 % for operator changes across torch versions."""
    model = _tiny_cnn()
    fit = measure_activations(model, lambda b: torch.randn(b, 3, 32, 32), loss_fn=_loss)
    assert fit.per_sample_bytes == pytest.approx(118_892, rel=0.05)
    # the line predicts a third, unseen batch size exactly (saved bytes are linear in batch)
    assert fit.predict(5) == saved_tensor_bytes(model, torch.randn(5, 3, 32, 32), _loss)
    # three points give the same line
    fit3 = measure_activations(model, lambda b: torch.randn(b, 3, 32, 32), batches=(1, 2, 4), loss_fn=_loss)
    assert fit3.per_sample_bytes == fit.per_sample_bytes
    assert all(p.grad is None for p in model.parameters())  # measuring leaves no gradients behind
    # device-independent: the same network on the meta device saves the same bytes
    with torch.device("meta"):
        meta = _tiny_cnn()
    meta_fit = measure_activations(meta, lambda b: torch.randn(b, 3, 32, 32, device="meta"), loss_fn=_loss)
    assert (meta_fit.fixed_bytes, meta_fit.per_sample_bytes) == (fit.fixed_bytes, fit.per_sample_bytes)


if torch is not None:  # the class body needs torch.nn; without torch the tests skip

    class _Bottleneck(nn.Module):
        def __init__(self, cin: int, mid: int, stride: int, down: bool):
            super().__init__()
            self.c1, self.b1 = nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid)
            self.c2, self.b2 = nn.Conv2d(mid, mid, 3, stride, 1, bias=False), nn.BatchNorm2d(mid)
            self.c3, self.b3 = nn.Conv2d(mid, mid * 4, 1, bias=False), nn.BatchNorm2d(mid * 4)
            self.relu = nn.ReLU(inplace=True)
            self.down = (nn.Sequential(nn.Conv2d(cin, mid * 4, 1, stride, bias=False), nn.BatchNorm2d(mid * 4))
                         if down else None)

        def forward(self, x):
            identity = x if self.down is None else self.down(x)
            y = self.relu(self.b1(self.c1(x)))
            y = self.relu(self.b2(self.c2(y)))
            return self.relu(self.b3(self.c3(y)) + identity)


def _resnet50():
    """ResNet-50 in torchvision's layout (He et al. 2016), built by hand: torchvision is not a dependency."""
    layers = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for stage, (blocks, mid) in enumerate(zip((3, 4, 6, 3), (64, 128, 256, 512))):
        for i in range(blocks):
            layers.append(_Bottleneck(cin, mid, 2 if (i == 0 and stage > 0) else 1, i == 0))
            cin = mid * 4
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2048, 1000)]
    return nn.Sequential(*layers)


def test_resnet50_preset_is_what_the_measured_route_finds():
    """The resnet50 preset's 85.9 MB/image comes from this measurement (fp32, 224x224)."""
    with torch.device("meta"):  # shapes only: what autograd saves does not depend on the values
        model = _resnet50()
    fit = measure_activations(
        model, lambda b: torch.randn(b, 3, 224, 224, device="meta"),
        loss_fn=lambda out: nn.functional.cross_entropy(out, torch.zeros(len(out), dtype=torch.long, device="meta")))
    r50 = preset("resnet50")
    assert fit.params == r50.params == 25_557_032
    assert fit.per_sample_bytes == pytest.approx(r50.per_sample_bytes, rel=0.02)
    profile = fit.profile("resnet50-measured", forward_flops_per_sample=r50.forward_flops_per_sample, blocks=17)
    setup = Setup(batch_size=112, precision="fp32", optimizer="sgd-momentum")
    assert estimate_memory(profile, setup).total == pytest.approx(estimate_memory(r50, setup).total, rel=0.02)


FACTORY = """
import torch
from torch import nn

def build():
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(8, 10))
    return model, lambda b: torch.randn(b, 3, 64, 64)

def not_a_pair():
    return 42

def broken():
    raise RuntimeError("no GPU here")
"""


def test_torch_model_factory_file(tmp_path):
    path = tmp_path / "mynet.py"
    path.write_text(textwrap.dedent(FACTORY))
    profile = measure_factory(f"{path}:build")
    # conv input 3*64*64 + ReLU output 8*64*64 floats per sample (+ the tiny head)
    assert profile.per_sample_bytes == pytest.approx((3 + 8) * 64 * 64 * 4, rel=0.01)
    assert profile.params == 3 * 8 * 9 + 8 + 8 * 10 + 10
    with pytest.raises(UsageError, match="must return"):
        measure_factory(f"{path}:not_a_pair")
    with pytest.raises(UsageError, match="no function"):
        measure_factory(f"{path}:missing")
    with pytest.raises(UsageError, match="RuntimeError: no GPU here"):
        measure_factory(f"{path}:broken")
    (tmp_path / "bad.py").write_text("import not_a_real_module_xyz\n")
    with pytest.raises(UsageError, match="ModuleNotFoundError"):
        measure_factory(f"{tmp_path / 'bad.py'}:build")
    with pytest.raises(UsageError, match="does not exist"):
        measure_factory(f"{tmp_path / 'nope.py'}:build")


def test_cli_recommend_with_a_measured_model(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("COSTCTL_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mynet.py").write_text(textwrap.dedent(FACTORY))
    assert main(["recommend", "--torch-model", "mynet.py:build", "--batch", "64", "--precision", "fp32",
                 "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    per_sample = (3 + 8) * 64 * 64 * 4
    assert out["memory"]["terms_bytes"]["activations"] == pytest.approx(64 * per_sample, rel=0.01)
    assert out["memory"]["params"] == 3 * 8 * 9 + 8 + 8 * 10 + 10


def test_missing_torch_is_one_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # makes `import torch` raise ImportError
    with pytest.raises(CostctlError, match="pip install torch"):
        measure_activations(object(), lambda b: None)


def test_logits_the_caller_holds_are_counted():
    """A training loop keeps ``outputs`` (the logits) referenced through backward; autograd
    does not save a Linear's output, so the saved-tensor hooks alone missed it. Here the head's
    output (4 floats per sample) is held by the caller and the loss saves nothing else of it."""
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    fit = measure_activations(model, lambda b: torch.randn(b, 16), loss_fn=lambda out: out.sum())
    assert fit.per_sample_bytes == 192 + 4 * 4  # saved input and ReLU output, plus the held logits
    # a language-model head: the held (b, s, V) logits dominate what a small model keeps
    lm = nn.Sequential(nn.Embedding(1000, 16), nn.Linear(16, 1000))
    lm_fit = measure_activations(lm, lambda b: torch.randint(0, 1000, (b, 8)), loss_fn=lambda out: out.float().mean())
    assert lm_fit.per_sample_bytes >= 8 * 1000 * 4


def test_a_meta_device_model_is_measured_like_a_cpu_one():
    with torch.device("meta"):
        meta = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Dropout(0.1), nn.Linear(32, 4))
    fit = measure_activations(meta, lambda b: torch.randn(b, 16, device="meta"))
    cpu = measure_activations(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Dropout(0.1), nn.Linear(32, 4)),
                              lambda b: torch.randn(b, 16))
    assert fit.per_sample_bytes > 0
    assert (fit.fixed_bytes, fit.per_sample_bytes) == (cpu.fixed_bytes, cpu.per_sample_bytes)


META_FACTORY = """
import torch
from torch import nn

def inputs_on_cpu():
    with torch.device("meta"):
        model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    return model, lambda b: torch.randn(b, 16)

def reads_values():
    with torch.device("meta"):
        inner = nn.Linear(4, 4)
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = inner
        def forward(self, x):
            return self.inner(x) if x.sum().item() > 0 else -self.inner(x)
    return Net(), lambda b: torch.randn(b, 4, device="meta")

def wrong_shape():
    return nn.Linear(16, 4), lambda b: torch.randn(b, 8)

def bad_batch():
    def make(b):
        raise ValueError("no data")
    return nn.Linear(16, 4), make

def not_a_module():
    return object(), lambda b: None

def frozen():
    model = nn.Linear(16, 4)
    model.requires_grad_(False)
    return model, lambda b: torch.randn(b, 16)
"""


@pytest.mark.parametrize(
    "func, message",
    [
        ("inputs_on_cpu", "meta device: make_batch must build its inputs with device='meta'"),
        ("reads_values", "cannot be called on meta tensors"),
        ("wrong_shape", "forward pass: RuntimeError: mat1 and mat2 shapes cannot be multiplied"),
        ("bad_batch", "make_batch(1) failed: ValueError: no data"),
        ("not_a_module", "needs a torch.nn.Module"),
        ("frozen", "does not require a gradient"),
    ],
)
def test_measured_route_failures_are_one_line_usage_errors(tmp_path, func, message):
    path = tmp_path / "metanet.py"
    path.write_text(textwrap.dedent(META_FACTORY))
    with pytest.raises(UsageError) as info:
        measure_factory(f"{path}:{func}")
    text = str(info.value)
    assert message in text and "\n" not in text and text.startswith(f"--torch-model {path}:{func}: ")


def test_cli_meta_model_failure_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("COSTCTL_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "metanet.py").write_text(textwrap.dedent(META_FACTORY))
    assert main(["recommend", "--torch-model", "metanet.py:inputs_on_cpu", "--batch", "4"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("costctl: --torch-model metanet.py:inputs_on_cpu: ") and err.count("\n") == 1
    assert "internal error" not in err and "Traceback" not in err and "meta device" in err
