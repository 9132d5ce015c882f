"""Binding costctl's settings to a provider adapter (through the registry, never by name)."""

from __future__ import annotations

from typing import Any

from costctl_providers.base import Provider
from costctl_providers.registry import get_provider

from .clock import Clock
from .config import Settings
from .paths import data_dir


def provider_config(settings: Settings, name: str) -> dict[str, Any]:
    """The config table for provider ``name``: ``[providers.<name>]``; for the simulated provider
    named in ``[instance]``, the ``[instance]`` keys (gpu, gpu_count, price_per_hour, currency,
    billing, id) seed the table where it does not set them, so the simulated instance is the one
    the config describes."""
    table = dict(settings.providers.get(name, {}))
    inst = settings.instance
    if name == "sim" and inst.provider == "sim":
        seed = {
            "gpu": inst.gpu,
            "gpu_count": inst.gpu_count if "gpu_count" in inst.model_fields_set else None,
            "price_per_hour": str(inst.price_per_hour) if inst.price_per_hour is not None else None,
            "currency": inst.currency if inst.price_per_hour is not None else None,
            "billing": inst.billing if "billing" in inst.model_fields_set else None,
            "instance_id": inst.id,
        }
        for key, value in seed.items():
            if value is not None:
                table.setdefault(key, value)
    return table


def open_provider(settings: Settings, name: str | None = None, *, clock: Clock | None = None) -> Provider:
    """Construct provider ``name`` (default ``[instance] provider``) from the settings.

    Raises:
        ConfigError: unknown provider or a bad ``[providers.<name>]`` table.
    """
    name = name or settings.instance.provider
    return get_provider(name, provider_config(settings, name), data_dir=data_dir(settings.data_dir), clock=clock)
