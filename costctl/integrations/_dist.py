"""The one collective the callbacks need: "did any rank see the request?"."""

from __future__ import annotations

from typing import Any


def any_rank(flag: bool, device: Any = None) -> bool:
    """``flag`` OR-ed over every rank of the default ``torch.distributed`` process group, so
    that all ranks decide to save in the same step (the request file exists on one machine
    only, and a save is a collective in sharded setups). Without torch or an initialized
    group: ``flag`` itself.

    Args:
        device: where the tensor lives for the reduction (the rank's CUDA device for NCCL;
            ignored for other backends, which reduce on the CPU).
    """
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        return flag
    if not (dist.is_available() and dist.is_initialized()):
        return flag
    where = device if dist.get_backend() == "nccl" and device is not None else "cpu"
    t = torch.tensor([1 if flag else 0], device=where)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())
