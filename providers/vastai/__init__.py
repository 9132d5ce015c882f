"""Vast.ai adapter (USD): instances, start/stop/destroy, bids, offer search, balance, charges.
See :mod:`.provider`."""

from .config import VastAIConfig
from .normalize import ACTUAL_STATUS_TABLE
from .provider import Charge, VastAIProvider

__all__ = ["ACTUAL_STATUS_TABLE", "Charge", "VastAIConfig", "VastAIProvider"]
