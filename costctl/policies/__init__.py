"""Policies: pure, clock-driven rules over a :class:`History` that conclude :class:`Decision` s.

Modules: ``history`` (the recent window), ``base`` (the interface and registry), one module per
policy (``idle``, ``stall``, ``budget``, ``plateau``, ``divergence``), and ``engine`` (builds the
enabled policies and reports each decision once). Policies never read the wall clock: ``now`` is
passed in, so a recorded trace replays deterministically.
"""

from .base import POLICIES, Policy, register
from .budget import BudgetPolicy
from .divergence import DivergencePolicy
from .engine import PolicyEngine
from .history import History
from .idle import IdlePolicy, SampleVerdict, classify_sample
from .plateau import PlateauPolicy, PlateauTracker, plateau_fires, rest_of_run_cost
from .stall import StallPolicy

__all__ = [
    "POLICIES", "Policy", "register", "History", "PolicyEngine",
    "IdlePolicy", "SampleVerdict", "classify_sample", "StallPolicy", "BudgetPolicy",
    "PlateauPolicy", "PlateauTracker", "plateau_fires", "rest_of_run_cost", "DivergencePolicy",
]
