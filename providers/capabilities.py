"""What an adapter says about itself: its capabilities (each with the reason when absent) and
where checkpoints survive on its machines.

The core never tests a provider's name; it asks these declarations instead (SkyPilot keeps a
similar map of unsupported features per cloud)::

    caps = provider.capabilities
    if not caps.stop:                 # a Capability is truthy when supported
        say(f"{provider.name} cannot stop instances: {caps.stop.reason}")

:class:`Capabilities` is frozen; each field accepts a bool, a :class:`Capability`, or (for an
absent one) a reason string: ``Capabilities(create="the API has no create call")``.
"""

from __future__ import annotations

import fnmatch
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from costctl.i18n import _


@dataclass(frozen=True)
class Capability:
    """One capability: supported or not; ``reason`` says why not (None when supported).

    Truthy exactly when supported, so ``if caps.stop:`` reads as before. ``reason`` is a clause
    in the language shown (adapters write ``no(_("..."))``: declared at import, after the
    language is chosen)."""

    supported: bool
    reason: str | None = None

    def __bool__(self) -> bool:
        return self.supported

    def __str__(self) -> str:
        """``yes``, or ``no (<reason>)`` in the current language."""
        if self.supported:
            return _("yes")
        return _("no ({reason})").format(reason=self.reason or _("not supported"))


def yes() -> Capability:
    """A supported capability."""
    return Capability(True)


def no(reason: str) -> Capability:
    """An absent capability and why (one short clause, e.g. ``"the API has no price list"``)."""
    return Capability(False, reason)


@dataclass(frozen=True)
class SelfStop:
    """Whether this very instance can stop itself from inside, and how
    (:meth:`~costctl_providers.base.Provider.self_stop_command`).

    Truthy exactly when ``argv`` is set.

    Attributes:
        argv: the command to run (no shell), e.g. ``("shutdown",)``; None when there is no such
            route here.
        reason: one short clause: why not (``argv`` None), or what was found (``"this is
            instance X; shutdown is /usr/sbin/shutdown"``).
    """

    argv: tuple[str, ...] | None
    reason: str

    def __bool__(self) -> bool:
        return self.argv is not None


def find_executable(command: str, path: str | None = None) -> str | None:
    """Where ``command`` (a name looked up on ``path``, default ``$PATH``, or a path with a
    ``/``) is an executable file, or None. Never runs it."""
    return shutil.which(command, path=path)


def _coerce(value: Any, name: str) -> Capability:
    if isinstance(value, Capability):
        return value
    if isinstance(value, bool):
        return Capability(True) if value else Capability(
            False, _("{capability} is not supported").format(capability=name.replace("_", " ")))
    if isinstance(value, str):
        return Capability(False, value)
    raise TypeError(f"capability {name}: expected a bool, a Capability or a reason string, not {value!r}")


#: Why ``move_job`` is absent on a real provider (the default).
NO_MOVE = _("the job runs on the rented machine; costctl does not copy it to another instance, it advises")


@dataclass(frozen=True)
class Capabilities:
    """What a provider's adapter can do; the core asks these instead of catching errors.

    Lifecycle and placement (each a :class:`Capability` with a reason when absent):

    * ``stop`` / ``start`` / ``release``: the instance lifecycle calls exist.
    * ``create``: :meth:`~costctl_providers.base.Provider.create_instance` rents a new instance.
    * ``list_offers``: current prices can be listed (``offers`` is the older name, same value).
    * ``move_job``: costctl may move the job to another instance by itself (true only where the
      job runs on this machine whichever instance is rented: the simulated provider).
    * ``self_stop``: the instance can stop itself from inside (e.g. AutoDL's container
      ``shutdown``), with no API credential.

    Account and market features (plain capabilities too; reasons optional):
    ``spot`` (interruptible instances with a bid), ``change_gpu``, ``balance``,
    ``billing_records``, ``preemption_notice`` (the provider warns inside the guest before
    taking a spot instance), ``price_list`` (``list_offers`` returns the provider's own price
    per GPU type and billing mode -- RunPod's ``gpuTypes`` -- so the catalog may use it live in
    place of its dated table; a marketplace's offers are single machines, not a price list).

    Readings (what the instance listing reports; ``costctl fleet`` shows them and ``costctl
    patrol`` stores them as its observations): ``gpu_utilization`` (the provider's own reading
    of the instance's GPU utilization) and ``cpu_utilization`` (of its CPU). A patrol's idle
    filter counts every reading the adapter declares here, a missing one as busy, so an
    instance whose CPU can be read is never judged idle by its GPU alone.

    Every field accepts a bool, a :class:`Capability` or a reason string (= absent).
    """

    stop: Capability = Capability(True)
    start: Capability = Capability(True)
    release: Capability = Capability(True)
    create: Capability = Capability(False, _("this adapter cannot rent new instances"))
    list_offers: Capability = Capability(False, _("this adapter cannot list prices"))
    move_job: Capability = Capability(False, NO_MOVE)
    self_stop: Capability = Capability(False, _("the instance is stopped through the provider's API only"))
    spot: Capability = Capability(False, _("no interruptible instances"))
    change_gpu: Capability = Capability(False, _("the card of an instance cannot be changed"))
    balance: Capability = Capability(False, _("the account balance cannot be read"))
    billing_records: Capability = Capability(False, _("invoices cannot be read"))
    price_list: Capability = Capability(False, _("its offers are individual listings, not a price list"))
    preemption_notice: Capability = Capability(False, _("no warning inside the guest before a preemption"))
    gpu_utilization: Capability = Capability(False, _("the instance listing reports no GPU utilization"))
    cpu_utilization: Capability = Capability(False, _("the instance listing reports no CPU utilization"))

    def __init__(self, offers: Any = None, **kwargs: Any) -> None:
        if offers is not None:
            kwargs.setdefault("list_offers", offers)
        names = {f.name for f in fields(self)}
        unknown = sorted(set(kwargs) - names)
        if unknown:
            raise TypeError(f"unknown capability {unknown[0]!r}; known: {', '.join(sorted(names))}")
        for f in fields(self):
            value = kwargs[f.name] if f.name in kwargs else f.default
            object.__setattr__(self, f.name, _coerce(value, f.name))

    @property
    def offers(self) -> Capability:
        """Older name of :attr:`list_offers`."""
        return self.list_offers

    def get(self, name: str) -> Capability:
        """The capability called ``name`` (``"offers"`` is accepted for ``list_offers``).

        Raises:
            KeyError: no such capability.
        """
        name = "list_offers" if name == "offers" else name
        if name not in {f.name for f in fields(self)}:
            raise KeyError(name)
        return getattr(self, name)

    def as_dict(self) -> dict[str, Capability]:
        """Every capability by name, in declaration order."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def absent(self) -> dict[str, str]:
        """The capabilities not supported, each with its reason."""
        return {k: v.reason or _("not supported") for k, v in self.as_dict().items() if not v}


# ----------------------------------------------------------------------------- storage


@dataclass(frozen=True)
class StoragePath:
    """A path prefix on the provider's machines and what happens to it when the instance stops.

    Attributes:
        path: absolute prefix, e.g. ``/root/autodl-tmp``.
        survives: files under it are kept across a stop (shutdown).
        note: what it is, for messages (``"data disk"``, ``"network storage"``).
        network: a network file system (no SQLite WAL: keep a ledger elsewhere).
    """

    path: str
    survives: bool
    note: str = ""
    network: bool = False

    def holds(self, where: str) -> bool:
        """``where`` (an absolute, resolved path) is this path or below it."""
        base = self.path.rstrip("/") or "/"
        return where == base or base == "/" or where.startswith(base + "/")


@dataclass(frozen=True)
class Storage:
    """Where data survives on a provider's machines, and how to tell that this is one.

    Attributes:
        paths: declared prefixes (surviving and ephemeral); the longest match wins.
        hostnames: ``fnmatch`` patterns of the hostname of one of its machines
            (``autodl-container-*``).
        env_markers: environment variables set on its machines (``RUNPOD_POD_ID``).
        others_survive: whether a path outside every declared prefix survives a stop.
        others_note: for messages, why other paths do not survive (when ``others_survive`` is
            False), e.g. ``"a pod's container disk is reset when the pod stops"``.
        hostname_env: an environment variable that, when set, is taken as this machine's
            hostname for ``hostnames`` (the adapter's own override: AutoDL's
            ``AUTODL_CONTAINER_HOSTNAME``, for a wrapper or a simulated container).
    """

    paths: tuple[StoragePath, ...] = ()
    hostnames: tuple[str, ...] = ()
    env_markers: tuple[str, ...] = ()
    others_survive: bool = True
    others_note: str = ""
    hostname_env: str | None = None

    @property
    def surviving(self) -> tuple[StoragePath, ...]:
        """The declared prefixes that survive a stop."""
        return tuple(p for p in self.paths if p.survives)

    @property
    def ephemeral(self) -> tuple[StoragePath, ...]:
        """The declared prefixes that do not survive a stop."""
        return tuple(p for p in self.paths if not p.survives)

    def on_this_machine(self, hostname: str, env: Mapping[str, str]) -> bool:
        """This process runs on one of the provider's machines (hostname, ``hostname_env``'s
        value when set, or a marker variable)."""
        hostname = (env.get(self.hostname_env) if self.hostname_env else None) or hostname
        return (any(fnmatch.fnmatchcase(hostname, pat) for pat in self.hostnames)
                or any(env.get(var) for var in self.env_markers))

    def find(self, where: str) -> StoragePath | None:
        """The longest declared prefix holding ``where`` (absolute, resolved), or None."""
        hits = [p for p in self.paths if p.holds(where)]
        return max(hits, key=lambda p: len(p.path)) if hits else None

    def warning(self, path: str, where: str, provider: str) -> str | None:
        """One line when checkpoints at ``where`` (``path`` as configured) would not survive a
        stop on ``provider``'s machine; None when they would. A whole sentence in the current
        language, one per case (with or without the path's note, the surviving paths, the
        reason others do not survive)."""
        hit = self.find(where)
        keep = ", ".join(p.path for p in self.surviving)
        shape = dict(path=path, provider=provider, keep=keep)
        if hit is not None:
            if hit.survives:
                return None
            shape.update(prefix=hit.path, note=hit.note)
            if hit.note and keep:
                said = _("checkpoint path {path} is under {prefix} ({note}), which {provider} does not keep across "
                         "a stop; keep checkpoints under {keep}")
            elif hit.note:
                said = _("checkpoint path {path} is under {prefix} ({note}), which {provider} does not keep across "
                         "a stop")
            elif keep:
                said = _("checkpoint path {path} is under {prefix}, which {provider} does not keep across a stop; "
                         "keep checkpoints under {keep}")
            else:
                said = _("checkpoint path {path} is under {prefix}, which {provider} does not keep across a stop")
            return said.format(**shape)
        if self.others_survive:
            return None
        shape.update(why=self.others_note)
        if keep and self.others_note:
            said = _("checkpoint path {path} is outside {keep} on {provider}: {why}")
        elif keep:
            said = _("checkpoint path {path} is outside {keep} on {provider}")
        elif self.others_note:
            said = _("checkpoint path {path} is outside the surviving storage on {provider}: {why}")
        else:
            said = _("checkpoint path {path} is outside the surviving storage on {provider}")
        return said.format(**shape)


__all__ = ["Capabilities", "Capability", "NO_MOVE", "SelfStop", "Storage", "StoragePath", "find_executable", "no",
           "yes"]
