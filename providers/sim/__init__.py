"""The simulated provider, costctl's embedded default (entry point ``sim``).

See :mod:`costctl_providers.sim.provider` for states, config keys and preemption injection,
and :mod:`costctl_providers.sim.prices` for the built-in (illustrative) price table.
"""

from .provider import DEFAULT_INSTANCE_ID, SimConfig, SimProvider

__all__ = ["DEFAULT_INSTANCE_ID", "SimConfig", "SimProvider"]
