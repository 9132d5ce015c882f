"""What ``costctl init --provider runpod`` writes: a config for a watch on a RunPod pod, each
choice with its reason (see :mod:`costctl_providers.preset`).

Facts it rests on (DESIGN.md, RunPod's docs): RunPod bills in US dollars per second; a stopped
pod keeps its ``/workspace`` volume (and bills for it) while its container disk is reset; pods
are stopped through the GraphQL API, with ``RUNPOD_API_KEY``; a pod's id is in
``$RUNPOD_POD_ID`` inside it.
"""

from __future__ import annotations

from costctl.i18n import N_

from costctl_providers.preset import ConfigPreset, PresetKey

RUNPOD_PRESET = ConfigPreset(
    display_name="RunPod",
    summary=(
        N_("Written for a watch on a RunPod pod: prices in USD, checkpoints on the pod's /workspace volume, and "
          "the pod stopped through RunPod's API (RUNPOD_API_KEY, inside the pod too)."),
    ),
    keys=(
        PresetKey("instance", "id", None,
                  N_("The pod's id (RunPod's console, or $RUNPOD_POD_ID inside the pod: "
                    "export COSTCTL_INSTANCE__ID=\"$RUNPOD_POD_ID\" sets it without editing this file)."),
                  example="abc123xyz"),
        PresetKey("instance", "currency", "USD",
                  N_("RunPod bills in US dollars; budget caps below are in dollars too.")),
        PresetKey("instance", "billing", "on-demand",
                  N_("An on-demand pod; \"spot\" for an interruptible one (bidPerGpu), which RunPod may take back.")),
        PresetKey("checkpoint", "path", "/workspace/checkpoints",
                  N_("On the pod's volume: /workspace is kept when the pod stops, the container disk is reset.")),
        PresetKey("catalog", "currency", "USD",
                  N_("`costctl gpus` and `costctl recommend` rank and show prices in dollars; a CNY price is shown "
                    "converted only through a dated [[catalog.exchange_rates]] entry.")),
    ),
    price_note=N_("RunPod's API reports the pod's price (costPerHr), which is charged instead."),
    credential_hint=N_("RUNPOD_API_KEY is an API key from RunPod's console (Settings, API Keys); without it costctl "
                      "can neither read the pod's price nor stop it, and a watch refuses to start."),
)

__all__ = ["RUNPOD_PRESET"]
