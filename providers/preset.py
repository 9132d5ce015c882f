"""What ``costctl init --provider NAME`` writes for an adapter: its :class:`ConfigPreset`.

An adapter describes the configuration its machines want (the currency it bills in, the
timezone its days start in, where checkpoints survive a stop, how an instance stops itself,
the credential it needs) as data, each choice with the sentence that explains it; the core's
``init`` writes it into the commented example config. The core never tests a provider's name::

    class AutoDLProvider(HttpProvider):
        config_preset = ConfigPreset(
            display_name="AutoDL",
            keys=(PresetKey("instance", "currency", "CNY", N_("AutoDL bills in yuan.")), ...),
        )

Every sentence a preset holds is an English sentence marked with :func:`costctl.i18n.N_` where
the preset is declared (so Babel extracts it into the catalogue) and kept in English; ``costctl
init`` translates each with :func:`costctl.i18n._` as it writes it, so its comments come in the
language shown (Simplified Chinese or English) whenever the adapter was imported.

An adapter without a preset gets the example config with only ``[instance] provider`` set.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: A TOML scalar a preset may write.
PresetValue = str | int | float | bool


@dataclass(frozen=True)
class PresetKey:
    """One key of the config, as ``costctl init --provider NAME`` writes it.

    Attributes:
        section: the TOML table, dotted as in the file: ``"instance"``, ``"watch"``,
            ``"checkpoint"``, ``"hooks"``, ``"catalog"``, ``"policies.budget"``. The example
            config must already show the key there (set or commented out).
        key: the key.
        value: the value written; None writes the key commented out, showing ``example``.
        why: the comment: why this value on this provider's machines (whole sentences, in
            English, marked with ``N_()``; translated where written).
        example: the value a commented-out key shows (ignored when ``value`` is set).
    """

    section: str
    key: str
    value: PresetValue | None
    why: str
    example: PresetValue | None = None


@dataclass(frozen=True)
class ConfigPreset:
    """The configuration ``costctl init --provider NAME`` writes for an adapter.

    Attributes:
        display_name: the provider as people call it, for the file's header (``"AutoDL"``;
            translated where written when it is a sentence, as every text here).
        summary: header lines: the choices in a few words, each a whole sentence (English marked
            with ``N_()``, as every sentence here).
        keys: the keys written, each with its reason (:class:`PresetKey`).
        default_gpu: the card ``[instance] gpu`` names when ``init`` is given no ``--gpu`` (its
            price, from costctl's price table, becomes the ``price_per_hour`` fallback); None
            leaves both to the provider's API.
        price_note: a sentence on where the price really charged comes from (written with the
            ``price_per_hour`` fallback).
        credential_hint: a sentence on where the API credential comes from (written above the
            provider's table).
    """

    display_name: str
    summary: tuple[str, ...] = ()
    keys: tuple[PresetKey, ...] = field(default_factory=tuple)
    default_gpu: str | None = None
    price_note: str = ""
    credential_hint: str = ""


__all__ = ["ConfigPreset", "PresetKey", "PresetValue"]
