"""What ``costctl init --provider autodl`` writes: a config for a watch inside an AutoDL
container (容器实例), each choice with its reason (see :mod:`costctl_providers.preset`).

Facts it rests on (DESIGN.md, AutoDL's help pages): AutoDL bills in yuan, pay-as-you-go by
default; inside a container the hostname is ``autodl-container-<uuid>`` and ``shutdown`` powers
the instance off and stops GPU billing with no token; the data disk ``/root/autodl-tmp``
survives a shutdown; an instance shut down for 15 days is released with its data.
"""

from __future__ import annotations

from costctl.i18n import N_

from costctl_providers.preset import ConfigPreset, PresetKey

#: Where the preset keeps checkpoints: on the data disk, which survives a shutdown.
CHECKPOINT_DIR = "/root/autodl-tmp/checkpoints"

AUTODL_PRESET = ConfigPreset(
    display_name="AutoDL",
    summary=(
        N_("Written for a watch inside an AutoDL container: prices in CNY, days in Asia/Shanghai, checkpoints on "
          "the data disk, and the container's own shutdown as the stop of last resort."),
        N_("Without AUTODL_TOKEN it runs as is inside the container (the instance is known from the hostname, "
          "the price from [instance] price_per_hour); with the token the API stops the instance and reports its "
          "real price."),
    ),
    keys=(
        PresetKey("instance", "id", None,
                  N_("Not needed inside the container: the instance is known from its hostname, "
                    "autodl-container-<uuid>. Set it to watch an instance from another machine."),
                  example="pro-76419909953e"),
        PresetKey("instance", "currency", "CNY",
                  N_("AutoDL bills in yuan (its API reports prices in 1/1000 yuan); budget caps below are in yuan "
                    "too.")),
        PresetKey("instance", "billing", "on-demand",
                  N_("Pay-as-you-go, AutoDL's default; \"prepaid\" for a daily, weekly or monthly rental, "
                    "which is paid whether the instance runs or not.")),
        PresetKey("instance", "self_stop", "shutdown",
                  N_("Inside the container, shutdown powers the instance off and stops GPU billing, with no token: "
                    "the stop of last resort (with AUTODL_TOKEN the API's power_off comes first).")),
        PresetKey("watch", "timezone", "Asia/Shanghai",
                  N_("AutoDL's clock (China Standard Time): daily caps and `costctl bill --by day` start the day "
                    "at midnight in Beijing.")),
        PresetKey("checkpoint", "path", CHECKPOINT_DIR,
                  N_("On the data disk: /root/autodl-tmp is kept when the instance shuts down, while the system disk "
                    "is not meant for data (costctl warns about a checkpoint path elsewhere). An instance shut down "
                    "for 15 days is released with its data: copy what you keep off it.")),
        PresetKey("hooks", "before_stop", None,
                  N_("Runs before any stop: e.g. copy outputs from the system disk to the data disk."),
                  example="rsync -a outputs/ /root/autodl-tmp/outputs/"),
        PresetKey("policies.budget", "daily", None,
                  N_("A cap in yuan per day (Asia/Shanghai days); unset by default."), example="50"),
        PresetKey("catalog", "currency", "CNY",
                  N_("`costctl gpus` and `costctl recommend` rank and show prices in yuan; a USD price is shown "
                    "converted only through a dated [[catalog.exchange_rates]] entry below.")),
    ),
    default_gpu="RTX 4090",
    price_note=N_("With AUTODL_TOKEN set, the price AutoDL reports for the instance (its snapshot's payg_price) "
                 "is charged instead: set this one to what your instance costs when you watch without the token."),
    credential_hint=N_("AUTODL_TOKEN is the developer token of your AutoDL account (for Pro instances); an ordinary "
                      "instance is read through the console API only with console_api = true and "
                      "AUTODL_CONSOLE_TOKEN, the console's login token."),
)

__all__ = ["AUTODL_PRESET", "CHECKPOINT_DIR"]
