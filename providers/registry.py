"""Find provider adapters by name; the core never imports an adapter module by name.

Lookup order for ``name``:

1. providers registered in this process with :func:`register_provider` (tests, plugins);
2. entry points in the ``costctl.providers`` group (declared in pyproject.toml; a third-party
   distribution adds a provider the same way);
3. for an uninstalled checkout, the module ``costctl_providers.<name>``: its one concrete
   :class:`~costctl_providers.base.Provider` subclass.

Adapter constructor convention (what :func:`get_provider` calls)::

    ProviderClass(config: dict, *, data_dir: pathlib.Path, clock: Clock | None = None)

``config`` is the provider's table from costctl.toml (``[providers.<name>]``, may be empty);
the adapter validates its own keys and raises :class:`costctl.errors.ConfigError` for a bad or
unknown one. ``data_dir`` is costctl's data directory (credentials file, sim state).
"""

from __future__ import annotations

import importlib
import inspect
import logging
import pkgutil
from collections.abc import Callable, Mapping
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from costctl.clock import Clock
from costctl.errors import ConfigError
from costctl.i18n import _

from .base import Provider
from .capabilities import Capabilities, Storage
from .preset import ConfigPreset

log = logging.getLogger("costctl_providers.registry")

ENTRY_POINT_GROUP = "costctl.providers"

#: Modules of this package that are infrastructure, not adapters.
_NOT_ADAPTERS = frozenset({"base", "registry", "credentials", "notices", "capabilities", "errors", "preset"})

_registered: dict[str, Callable[..., Provider]] = {}


def register_provider(name: str, factory: Callable[..., Provider]) -> None:
    """Register ``factory`` (a Provider subclass or a callable with the constructor convention
    above) under ``name`` for this process; it takes precedence over entry points."""
    _registered[name.lower()] = factory


def unregister_provider(name: str) -> None:
    """Undo :func:`register_provider` (no error if absent)."""
    _registered.pop(name.lower(), None)


def _entry_points() -> dict[str, Any]:
    found: dict[str, Any] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        found.setdefault(ep.name.lower(), ep)
    return found


def _package_modules() -> list[str]:
    package = importlib.import_module(__package__ or "costctl_providers")
    names = []
    for info in pkgutil.iter_modules(package.__path__):
        if not info.name.startswith("_") and info.name not in _NOT_ADAPTERS:
            names.append(info.name)
    return names


def available_providers() -> list[str]:
    """Names of the providers that can be asked for, sorted (nothing is imported to list them)."""
    names = set(_registered) | set(_entry_points()) | set(_package_modules())
    return sorted(names)


def _provider_class_in(module: Any) -> type[Provider] | None:
    candidates = [
        obj
        for obj in vars(module).values()
        if inspect.isclass(obj)
        and issubclass(obj, Provider)
        and obj is not Provider
        and not inspect.isabstract(obj)
        and obj.__module__.startswith(module.__name__)
    ]
    if len(candidates) == 1:
        return candidates[0]
    named = [c for c in candidates if getattr(c, "name", None) == module.__name__.rsplit(".", 1)[-1]]
    return named[0] if len(named) == 1 else None


def provider_class(name: str) -> Callable[..., Provider]:
    """The class (or factory) for provider ``name``.

    Raises:
        ConfigError: unknown name (the message lists the available ones), or the adapter fails
            to import.
    """
    key = name.strip().lower()
    if key in _registered:
        return _registered[key]
    eps = _entry_points()
    if key in eps:
        try:
            return eps[key].load()
        except Exception as exc:  # noqa: BLE001 - an installed-but-broken adapter
            log.debug("entry point %s failed to load: %r; trying the package module", key, exc)
    if key and key.isidentifier() and key not in _NOT_ADAPTERS and not key.startswith("_"):
        try:
            module = importlib.import_module(f"{__package__}.{key}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__package__}.{key}":
                raise ConfigError(_("provider {name!r} cannot be loaded: {error}").format(name=name, error=exc)) from None
        except ImportError as exc:
            raise ConfigError(_("provider {name!r} cannot be loaded: {error}").format(name=name, error=exc)) from None
        else:
            cls = _provider_class_in(module)
            if cls is not None:
                return cls
            raise ConfigError(_("provider {name!r}: module {module} defines no Provider class").format(
                name=name, module=module.__name__))
    # Listed only for the error (listing reads every entry point again: not on the way to a hit).
    available = available_providers()
    if not available:
        raise ConfigError(_("unknown provider {name!r}; available: none").format(name=name))
    raise ConfigError(_("unknown provider {name!r}; available: {available}").format(
        name=name, available=", ".join(available)))


def get_provider(
    name: str,
    config: Mapping[str, Any] | None = None,
    *,
    data_dir: Path,
    clock: Clock | None = None,
    account: Any = None,
) -> Provider:
    """Construct provider ``name`` with its config table.

    Args:
        name: the adapter's name (case-insensitive), e.g. the default ``"sim"``.
        config: the ``[providers.<name>]`` table (default empty; without ``accounts``).
        data_dir: costctl's data directory.
        clock: time source for the adapter (default: real time).
        account: a named account (a :class:`costctl_providers._adapter.Account`), passed as
            ``account=`` only when given; the adapter must declare ``supports_accounts``.

    Raises:
        ConfigError: unknown provider (lists the available ones), a bad config table, or a
            named account for an adapter without accounts.
    """
    factory = provider_class(name)
    if account is None:
        return factory(dict(config or {}), data_dir=Path(data_dir), clock=clock)
    if not getattr(factory, "supports_accounts", False):
        raise ConfigError(_("provider {name!r} has no named accounts; remove [providers.{name}.accounts]").format(
            name=name))
    return factory(dict(config or {}), data_dir=Path(data_dir), clock=clock, account=account)


# ----------------------------------------------------------------------------- declarations


def _declared(name: str) -> Any:
    try:
        return provider_class(name)
    except ConfigError:
        return None


def capabilities_of(name: str) -> Capabilities:
    """Adapter ``name``'s declared capabilities (the base defaults for a factory without any).

    Raises:
        ConfigError: unknown provider.
    """
    caps = getattr(provider_class(name), "capabilities", None)
    return caps if isinstance(caps, Capabilities) else Capabilities()


def credential_env(name: str) -> tuple[str, ...]:
    """The environment variables adapter ``name`` declares for its credential (``()`` for an
    unknown provider or one that declares none)."""
    found = getattr(_declared(name), "credential_env", ())
    return (found,) if isinstance(found, str) else tuple(found or ())


def config_preset_of(name: str) -> ConfigPreset:
    """What ``costctl init --provider NAME`` writes for adapter ``name``: its declared
    ``config_preset``, or a bare one (only ``[instance] provider`` set) when it declares none.

    Raises:
        ConfigError: unknown provider (the message lists the available ones).
    """
    preset = getattr(provider_class(name), "config_preset", None)
    return preset if isinstance(preset, ConfigPreset) else ConfigPreset(display_name=name)


def notify_plugins() -> list[str]:
    """The Apprise plugins (``"module:Class"``) every available adapter declares
    (``Provider.notify_plugins``); an adapter that fails to load is skipped."""
    found: list[str] = []
    for name in available_providers():
        declared = getattr(_declared(name), "notify_plugins", ()) or ()
        found.extend(p for p in declared if isinstance(p, str) and p not in found)
    return found


def storage_layouts() -> list[tuple[str, Storage]]:
    """``(name, storage)`` for every available adapter that declares storage paths or machine
    markers; an adapter that fails to load is skipped (logged at debug level)."""
    layouts = []
    for name in available_providers():
        storage = getattr(_declared(name), "storage", None)
        if isinstance(storage, Storage) and (storage.paths or storage.hostnames or storage.env_markers):
            layouts.append((name, storage))
    return layouts
