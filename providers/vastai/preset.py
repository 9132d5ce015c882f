"""What ``costctl init --provider vastai`` writes: a config for a watch on a Vast.ai instance,
each choice with its reason (see :mod:`costctl_providers.preset`).

Facts it rests on (DESIGN.md, Vast's API): Vast bills in US dollars; a stopped instance keeps
its disk and bills for it; instances are stopped through the API only, with ``VAST_API_KEY``;
an outbid interruptible instance goes to stopped.
"""

from __future__ import annotations

from costctl.i18n import N_

from costctl_providers.preset import ConfigPreset, PresetKey

VASTAI_PRESET = ConfigPreset(
    display_name="Vast.ai",
    summary=(
        N_("Written for a watch on a Vast.ai instance: prices in USD, and the instance stopped through Vast's API "
          "(VAST_API_KEY, on the instance too)."),
    ),
    keys=(
        PresetKey("instance", "id", None,
                  N_("The instance's id (Vast's console, or `vastai show instances`); costctl cannot tell it from "
                    "inside."),
                  example="12345678"),
        PresetKey("instance", "currency", "USD",
                  N_("Vast bills in US dollars; budget caps below are in dollars too.")),
        PresetKey("instance", "billing", "on-demand",
                  N_("An on-demand instance; \"spot\" for an interruptible (bid) one, which is stopped when outbid.")),
        PresetKey("checkpoint", "path", None,
                  N_("A stopped Vast instance keeps its whole disk (and bills for it), so any path on it survives a "
                    "stop; nothing survives a destroy."), example="/workspace/checkpoints"),
        PresetKey("instance", "currency", "USD",
                  N_("Vast bills in US dollars; budget caps below are in dollars too.")),
    ),
    price_note=N_("Vast's API reports the instance's price (dph_total), which is charged instead."),
    credential_hint=N_("VAST_API_KEY is an API key from Vast's console (Account, API Keys); without it costctl can "
                      "neither read the instance's price nor stop it, and a watch refuses to start."),
)

__all__ = ["VASTAI_PRESET"]
