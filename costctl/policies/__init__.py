"""Policies: pure, clock-driven rules over a :class:`History` that conclude :class:`Decision` s.

Modules: ``history`` (the recent window), ``base`` (the interface, the config base and the
registry), ``registry`` (finding built-in and plugin policies, building the ``[policies]``
section), one module per policy (``idle``, ``idle_fraction``, ``stall``, ``budget``, ``plateau``, ``divergence``),
each carrying its config model and registering itself, and ``engine`` (builds the enabled
policies and reports each decision once). Policies never read the wall clock: ``now`` is passed
in, so a recorded trace replays deterministically. Third-party policies register through the
``costctl.policies`` entry-point group.
"""

from .base import (
    DEFAULT_ORDER, POLICIES, Pending, Policy, PolicyConfig, PolicyContext, PolicySpec, register, registrations, unregister,
)
from .budget import BudgetConfig, BudgetPolicy
from .divergence import DivergenceConfig, DivergencePolicy
from .engine import PolicyEngine
from .not_learning import LearningCheck, NotLearningConfig, NotLearningPolicy
from .overfitting import OverfittingConfig, OverfittingPolicy
from .unstable import SwingCheck, UnstableConfig, UnstablePolicy
from .history import History
from .idle import IdleConfig, IdlePolicy, SampleVerdict, classify_sample
from .idle_fraction import IdleFractionConfig, IdleFractionPolicy
from .plateau import PlateauConfig, PlateauPolicy, PlateauTracker, plateau_fires, rest_of_run_cost
from .registry import ENTRY_POINT_GROUP, discover_policies, known_policies, policies_model
from .stall import StallConfig, StallPolicy

__all__ = [
    "POLICIES", "DEFAULT_ORDER", "Pending", "Policy", "PolicyConfig", "PolicyContext", "PolicySpec", "register",
    "registrations", "unregister", "ENTRY_POINT_GROUP", "discover_policies", "known_policies",
    "policies_model", "History", "PolicyEngine",
    "IdleConfig", "IdlePolicy", "SampleVerdict", "classify_sample", "IdleFractionConfig", "IdleFractionPolicy", "StallConfig", "StallPolicy",
    "BudgetConfig", "BudgetPolicy", "PlateauConfig", "PlateauPolicy", "PlateauTracker", "plateau_fires",
    "rest_of_run_cost", "DivergenceConfig", "DivergencePolicy", "NotLearningConfig", "NotLearningPolicy",
    "LearningCheck", "OverfittingConfig", "OverfittingPolicy", "UnstableConfig", "UnstablePolicy", "SwingCheck",
]
