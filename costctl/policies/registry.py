"""Finding the policies and building the ``[policies]`` settings section from them.

Sources, in this order:

1. the built-in policy modules of this package (every module but the infrastructure ones:
   ``base``, ``engine``, ``history``, ``registry``), each of which registers itself on import;
2. entry points in the ``costctl.policies`` group: each names a
   :class:`~costctl.policies.base.Policy` subclass (``loud = "mypolicies.loud:LoudPolicy"``),
   and its name must be the policy's ``name``. They are loaded once per process, when settings
   are loaded (:func:`discover_policies`); a plugin that fails to load is a one-line
   :class:`~costctl.errors.ConfigError` naming the entry point.

:func:`policies_model` turns the registry into the pydantic model of ``[policies]``: one field
per registered policy, its config model with defaults; unknown tables are errors.
"""

from __future__ import annotations

import importlib
import pkgutil
from importlib.metadata import entry_points

from pydantic import Field, create_model

from ..config_types import Section
from ..errors import ConfigError
from ..i18n import _
from .base import POLICIES, Policy, PolicySpec, register, registrations

ENTRY_POINT_GROUP = "costctl.policies"

#: Modules of this package that are infrastructure, not policies.
_NOT_POLICIES = frozenset({"base", "engine", "history", "registry"})

_builtins_loaded = False
_plugins_loaded = False
_models: dict[tuple[tuple[str, type], ...], type[Section]] = {}


def load_builtin_policies() -> None:
    """Import every built-in policy module once (each registers itself)."""
    global _builtins_loaded
    if _builtins_loaded:
        return
    package = importlib.import_module(__package__ or "costctl.policies")
    for info in pkgutil.iter_modules(package.__path__):
        if not info.name.startswith("_") and info.name not in _NOT_POLICIES:
            importlib.import_module(f"{package.__name__}.{info.name}")
    _builtins_loaded = True


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def discover_policies(*, refresh: bool = False) -> list[PolicySpec]:
    """Register the built-ins and the ``costctl.policies`` entry points; return every
    registration in evaluation order.

    Entry points are read once per process (``refresh=True`` reads them again, e.g. after a
    test put a new distribution on ``sys.path``).

    Raises:
        ConfigError: an entry point that cannot be imported, does not name a Policy subclass,
            names a policy of another name, or clashes with a registered policy — one line
            naming the entry point.
    """
    global _plugins_loaded
    load_builtin_policies()
    if _plugins_loaded and not refresh:
        return registrations()
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        where = {"name": ep.name, "value": ep.value, "group": ENTRY_POINT_GROUP}
        try:
            obj = ep.load()
        except Exception as exc:  # noqa: BLE001 - any failure of a third party's import
            raise ConfigError(_("policy plugin '{name} = {value}' (entry point group {group}) cannot be loaded: "
                                "{error}").format(error=_one_line(exc), **where)) from None
        if not (isinstance(obj, type) and issubclass(obj, Policy)):
            raise ConfigError(_("policy plugin '{name} = {value}' (entry point group {group}) does not name a "
                                "costctl.policies.Policy subclass").format(**where))
        if obj.name != ep.name:
            raise ConfigError(_("policy plugin '{name} = {value}' (entry point group {group}) names a policy "
                                "called {policy!r}; the entry point's name must be the policy's name").format(
                policy=obj.name, **where))
        try:
            register(obj)
        except ValueError as exc:
            raise ConfigError(_("policy plugin '{name} = {value}' (entry point group {group}): {error}").format(
                error=exc, **where)) from None
    _plugins_loaded = True
    return registrations()


class PoliciesSection(Section):
    """``[policies.*]``: one table per registered policy (built-in or plugin); each missing
    table means that policy's defaults."""


def policies_model() -> type[Section]:
    """The pydantic model of ``[policies]`` for the policies registered now (cached per registry
    state): a field per policy name holding its config model, unknown tables forbidden."""
    load_builtin_policies()
    specs = registrations()
    key = tuple((s.name, s.config) for s in specs)
    model = _models.get(key)
    if model is None:
        fields = {s.name: (s.config, Field(default_factory=s.config, description=s.description)) for s in specs}
        model = create_model("PoliciesConfig", __base__=PoliciesSection, __module__=__name__,
                             **fields)  # type: ignore[call-overload]
        model.__doc__ = PoliciesSection.__doc__
        _models[key] = model
    return model


def known_policies() -> list[str]:
    """Names of the registered policies, in evaluation order."""
    return [s.name for s in registrations()] or sorted(POLICIES)


__all__ = ["ENTRY_POINT_GROUP", "load_builtin_policies", "discover_policies", "policies_model",
           "known_policies", "PoliciesSection"]
