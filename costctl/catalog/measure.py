"""Measured activation memory: count the bytes of the tensors autograd saves for backward.

For models the analytic formulas do not cover (CNNs, anything custom), run one training step
on the CPU (or the meta device) at batch 1 and batch 2 under
:class:`torch.autograd.graph.saved_tensors_hooks`, add up the distinct storages the pack hook
sees plus the outputs the caller holds (the logits; parameters excluded: they are counted as
weights), and fit ``M(b) = M0 + b*m1``. A model that fails is one :class:`UsageError` line. What autograd saves depends on the operators, not on
the device, so the fit made on a machine without a GPU predicts the activation memory on one.

torch is optional: :func:`measure_activations` raises :class:`~costctl.errors.CostctlError`
with an install hint when it is missing.
"""

from __future__ import annotations

import importlib
import importlib.util
import runpy
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Mapping
from typing import Any, Callable, Sequence

from ..errors import CostctlError, UsageError
from ..i18n import _
from .models import MeasuredProfile


def torch_available() -> bool:
    """Whether torch can be imported."""
    return importlib.util.find_spec("torch") is not None


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        raise CostctlError(_("the measured route needs PyTorch: pip install torch (the CPU build is enough)")) from None
    return torch


@dataclass(frozen=True)
class ActivationFit:
    """``M(b) = fixed_bytes + b * per_sample_bytes``, fitted from measured points.

    Attributes:
        fixed_bytes: M0, batch-independent saved bytes (may be slightly negative from noise; clamped at 0 in use).
        per_sample_bytes: m1, saved bytes per sample.
        points: ``(batch, saved bytes)`` measured.
        params: parameter count of the model.
        dtype_bytes: bytes per element of the floating-point activations measured (4 for fp32).
    """

    fixed_bytes: int
    per_sample_bytes: int
    points: tuple[tuple[int, int], ...]
    params: int
    dtype_bytes: int = 4

    def predict(self, batch: int) -> int:
        """Saved bytes at ``batch``."""
        return max(0, self.fixed_bytes) + batch * self.per_sample_bytes

    def profile(self, name: str, *, forward_flops_per_sample: float | None = None, blocks: int = 1) -> MeasuredProfile:
        """A :class:`~costctl.catalog.models.MeasuredProfile` for the estimator."""
        return MeasuredProfile(
            name=name, params=self.params, per_sample_bytes=self.per_sample_bytes,
            fixed_bytes=max(0, self.fixed_bytes), measured_dtype_bytes=self.dtype_bytes,
            forward_flops_per_sample=forward_flops_per_sample, blocks=blocks,
            source=f"measured with saved_tensors_hooks at batch {', '.join(str(b) for b, _ in self.points)}",
        )


def _default_loss(output: Any) -> Any:
    if hasattr(output, "loss") and output.loss is not None:
        return output.loss
    if isinstance(output, (tuple, list)):
        output = output[0]
    if hasattr(output, "logits"):
        output = output.logits
    return output.float().sum()


def _storage_key(t: Any) -> int:
    """Identity of a tensor's storage: the StorageImpl address (works on the meta device, where
    every data pointer is 0), else the data pointer; the tensor's own id for tensors without a
    plain storage (sparse, nested, wrapper subclasses)."""
    try:
        storage = t.untyped_storage()
    except (RuntimeError, NotImplementedError, TypeError):
        return id(t)
    key = getattr(storage, "_cdata", None)
    return int(key) if key else int(storage.data_ptr())


def _nbytes(t: Any) -> int:
    """Bytes of a tensor's storage (``numel * element_size`` when it has no plain storage)."""
    try:
        return int(t.untyped_storage().nbytes())
    except (RuntimeError, NotImplementedError, TypeError):
        return int(t.numel() * t.element_size())


def _output_tensors(output: Any, depth: int = 0) -> list[Any]:
    """Tensors in a model's output: a tensor, a tuple/list, or a mapping (a Hugging Face
    ``ModelOutput`` is one) of them, nested up to 4 deep."""
    torch = _torch()
    if isinstance(output, torch.Tensor):
        return [output]
    if depth >= 4:
        return []
    if isinstance(output, Mapping):
        items: Any = output.values()
    elif isinstance(output, (tuple, list)):
        items = output
    else:
        return []
    return [t for item in items for t in _output_tensors(item, depth + 1)]


def saved_tensor_bytes(model: Any, inputs: Any, loss_fn: Callable[[Any], Any] | None = None) -> int:
    """Bytes alive at the end of one forward pass of ``model(*inputs)``, then runs backward to
    free them: the distinct storages autograd saves for backward, plus the model's outputs the
    caller holds through the backward pass (the logits of a language model; a training loop
    keeps ``outputs`` referenced) when autograd did not save them already. Parameters excluded.

    Works on any device, including ``meta`` (shapes only, no arithmetic: fast, and no memory
    for the weights), since what autograd saves does not depend on the values.

    Args:
        model: a ``torch.nn.Module`` (put in train mode).
        inputs: a tensor or a tuple of positional arguments.
        loss_fn: output -> scalar loss (default: ``.loss`` if present, else ``sum()`` of the output).

    Returns:
        bytes (storages counted once even when several tensors view them).

    Raises:
        UsageError: the model, the loss or the backward pass failed (one line: the error, and
            for the meta device what to change).
    """
    torch = _torch()
    params = {_storage_key(p) for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t: Any) -> Any:
        key = _storage_key(t)
        if key and key not in params:
            seen[key] = _nbytes(t)
        return t

    args = inputs if isinstance(inputs, tuple) else (inputs,)
    model.train()
    stage = "forward"
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            output = model(*args)
            stage = "loss"
            loss = (loss_fn or _default_loss)(output)
        for t in _output_tensors(output):
            key = _storage_key(t)
            if key and key not in params:
                seen.setdefault(key, _nbytes(t))
        stage = "backward"
        if not getattr(loss, "requires_grad", False):
            raise UsageError(_("the loss does not require a gradient (no trainable parameter reached it)"))
        loss.backward()
    except UsageError:
        raise
    except Exception as exc:  # noqa: BLE001 - the user's model: report it in one line
        raise UsageError(_failure(exc, stage, model)) from None
    finally:
        model.zero_grad(set_to_none=True)
    return sum(seen.values())


def _failure(exc: BaseException, stage: str, model: Any) -> str:
    """One line for a model that failed while being measured (``stage``: ``forward``, ``loss`` or
    ``backward``), with a hint for the meta device."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    if len(text) > 300:
        text = text[:297] + "..."
    if stage == "forward":
        line = _("measuring the model failed in the forward pass: {error_type}: {error}")
    elif stage == "loss":
        line = _("measuring the model failed in the loss: {error_type}: {error}")
    else:
        line = _("measuring the model failed in the backward pass: {error_type}: {error}")
    line = line.format(error_type=type(exc).__name__, error=text)
    devices = {str(p.device.type) for p in model.parameters()} if hasattr(model, "parameters") else set()
    if "meta" in devices:
        line = _("{failure}; the model is on the meta device: make_batch must build its inputs with "
                 "device='meta', and operations that read values (.item(), nonzero, data-dependent shapes) "
                 "cannot run there (build the model on the CPU instead)").format(failure=line)
    return line


def measure_activations(model: Any, make_batch: Callable[[int], Any], *, batches: Sequence[int] = (1, 2),
                        loss_fn: Callable[[Any], Any] | None = None) -> ActivationFit:
    """Fit ``M(b) = M0 + b*m1`` from saved-tensor bytes at ``batches`` (default 1 and 2).

    Args:
        model: a ``torch.nn.Module`` on the CPU or the ``meta`` device (with inputs to match).
        make_batch: batch size -> the model's positional input(s) for that batch.
        batches: at least two distinct batch sizes; with more, a least-squares line.
        loss_fn: see :func:`saved_tensor_bytes`.

    Raises:
        CostctlError: torch missing. UsageError: fewer than two distinct batch sizes, not a
            module, or the model failed (one line, see :func:`saved_tensor_bytes`).
    """
    sizes = sorted(set(int(b) for b in batches))
    if len(sizes) < 2 or sizes[0] < 1:
        raise UsageError(_("measure_activations needs at least two distinct batch sizes >= 1"))
    torch = _torch()
    if not isinstance(model, torch.nn.Module):
        raise UsageError(_("the measured route needs a torch.nn.Module, got {type}").format(
            type=type(model).__name__))
    points = []
    for b in sizes:
        try:
            batch = make_batch(b)
        except Exception as exc:  # noqa: BLE001 - the user's function: one line
            raise UsageError(_("make_batch({batch}) failed: {error_type}: {error}").format(
                batch=b, error_type=type(exc).__name__, error=exc)) from None
        try:
            points.append((b, saved_tensor_bytes(model, batch, loss_fn)))
        except UsageError as exc:
            raise UsageError(_("batch {batch}: {error}").format(batch=b, error=exc)) from None
    n = len(points)
    mean_b = sum(b for b, _ in points) / n
    mean_m = sum(m for _, m in points) / n
    var = sum((b - mean_b) ** 2 for b, _ in points)
    slope = sum((b - mean_b) * (m - mean_m) for b, m in points) / var
    intercept = mean_m - slope * mean_b
    dtype_bytes = 4
    for p in model.parameters():
        if p.is_floating_point():
            dtype_bytes = torch.finfo(p.dtype).bits // 8
            break
    params = sum(p.numel() for p in model.parameters())
    return ActivationFit(int(round(intercept)), int(round(slope)), tuple(points), params, dtype_bytes)


def load_factory(spec: str) -> Callable[[], Any]:
    """Load ``path/to/file.py:function`` (or ``package.module:function``) for ``--torch-model``.

    The function takes no arguments and returns ``(model, make_batch)``, optionally
    ``(model, make_batch, loss_fn)``.

    Raises:
        UsageError: malformed spec, missing file or function.
    """
    target, sep, func = spec.rpartition(":")
    if not sep or not target or not func:
        raise UsageError(_("--torch-model {spec!r}: expected FILE.py:FUNCTION or MODULE:FUNCTION").format(spec=spec))
    if target.endswith(".py"):
        path = Path(target)
        if not path.is_file():
            raise UsageError(_("--torch-model: {path} does not exist").format(path=path))
        try:
            namespace = runpy.run_path(str(path))
        except Exception as exc:  # noqa: BLE001 - the user's file: report it in one line
            raise UsageError(_("--torch-model: running {path} failed: {error_type}: {error}").format(
                path=path, error_type=type(exc).__name__, error=exc)) from None
    else:
        try:
            namespace = vars(importlib.import_module(target))
        except Exception as exc:  # noqa: BLE001
            raise UsageError(_("--torch-model: cannot import {module}: {error_type}: {error}").format(
                module=target, error_type=type(exc).__name__, error=exc)) from None
    factory = namespace.get(func)
    if not callable(factory):
        raise UsageError(_("--torch-model: {module} has no function {function!r}").format(
            module=target, function=func))
    return factory


def measure_factory(spec: str, name: str | None = None) -> MeasuredProfile:
    """Measure the model a ``--torch-model`` factory builds and return its profile.

    Raises:
        UsageError: the factory does not return ``(model, make_batch[, loss_fn])``.
    """
    factory = load_factory(spec)
    try:
        built = factory()
    except Exception as exc:  # noqa: BLE001 - the user's factory: report it in one line
        raise UsageError(_("--torch-model {spec}: the function raised {error_type}: {error}").format(
            spec=spec, error_type=type(exc).__name__, error=exc)) from None
    if not isinstance(built, tuple) or len(built) not in (2, 3):
        raise UsageError(_("--torch-model {spec}: the function must return (model, make_batch[, loss_fn])").format(
            spec=spec))
    model, make_batch = built[0], built[1]
    loss_fn = built[2] if len(built) == 3 else None
    try:
        fit = measure_activations(model, make_batch, loss_fn=loss_fn)
    except UsageError as exc:
        raise UsageError(_("--torch-model {spec}: {error}").format(spec=spec, error=exc)) from None
    return fit.profile(name or spec.rpartition(":")[2])


__all__ = ["ActivationFit", "load_factory", "measure_activations", "measure_factory", "saved_tensor_bytes",
           "torch_available"]
