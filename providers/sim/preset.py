"""What ``costctl init --provider sim`` writes: the embedded defaults (see
:mod:`costctl_providers.preset`): the simulated instance, priced in USD from its own table."""

from __future__ import annotations

from costctl.i18n import N_

from costctl_providers.preset import ConfigPreset

SIM_PRESET = ConfigPreset(
    display_name=N_("the simulated provider"),
    summary=(N_("Written for the simulated provider: a local instance that costs what its table says, for trying "
               "costctl without an account."),),
)

__all__ = ["SIM_PRESET"]
