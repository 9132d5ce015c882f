"""AutoDL adapter (CNY): official developer API for Pro instances, opt-in web console API for
ordinary instances, and the container's own ``shutdown``. See :mod:`.provider`."""

from .config import AutoDLConfig
from .normalize import STATUS_TABLE, GpuStock
from .provider import AutoDLProvider

__all__ = ["AutoDLConfig", "AutoDLProvider", "GpuStock", "STATUS_TABLE"]
