"""RunPod adapter (USD): GraphQL pods, stop/resume/terminate, spot bids (per GPU), gpuTypes
prices, balance. See :mod:`.provider`."""

from .config import RunPodConfig
from .normalize import STATUS_TABLE
from .provider import RunPodProvider

__all__ = ["RunPodConfig", "RunPodProvider", "STATUS_TABLE"]
