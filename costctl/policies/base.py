"""The policy interface and the registry the engine and the ``[policies.*]`` settings are built from.

A policy is a class that carries its own config model (the ``[policies.<name>]`` section: a
pydantic model whose fields all have defaults, descriptions and bounds) and registers itself
with :func:`register`. It looks at a :class:`~costctl.policies.history.History` at a given
``now`` and concludes a :class:`~costctl.records.Decision` or nothing. Policies never read the
wall clock and never act: the executor does. Modelled on Cloud Custodian's registry of small
filter classes.

Third-party policies live in any importable module and are found through the
``costctl.policies`` entry-point group (:mod:`costctl.policies.registry`); the entry point's
name must be the policy's ``name``. Example::

    from pydantic import Field
    from costctl.policies import Policy, PolicyConfig, register
    from costctl.records import Decision

    class LoudConfig(PolicyConfig):
        threshold: float = Field(default=0.1, ge=0, description="advise when a loss is below this")

    @register
    class LoudPolicy(Policy):
        name = "loud"
        config_model = LoudConfig

        def evaluate(self, history, now):
            return None

    # pyproject.toml of the plugin:
    # [project.entry-points."costctl.policies"]
    # loud = "mypolicies.loud:LoudPolicy"

Evaluation order: the engine evaluates the enabled policies by ascending ``order`` (the
built-ins: idle 10, idle_fraction 11, stall 20, budget 30, plateau 40, not_learning 42, overfitting 43, unstable 44,
divergence 50; a policy that sets none gets
:data:`DEFAULT_ORDER`, 100), and in registration order among equal ``order`` values.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar
from zoneinfo import ZoneInfo

from pydantic import BaseModel, ValidationError

from ..clock import ensure_utc
from ..config_types import Section
from ..i18n import N_, _, format_time
from ..records import Decision

if TYPE_CHECKING:
    from .history import History

#: ``order`` of a policy that does not set one (after every built-in).
DEFAULT_ORDER = 100

_NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")


class PolicyConfig(Section):
    """Base of a policy's config section (``[policies.<name>]``): unknown keys are errors.

    Give every field a default (an absent section means the defaults), a
    ``Field(description=N_(...))`` (``costctl init`` writes it as the key's comment, translated
    into the language shown) and its bounds (``ge``/``le``/``gt``/``lt``, also written by
    ``costctl init``).
    """

    #: The table's one-sentence description, written by ``costctl init`` after its header: an
    #: English sentence marked with :func:`~costctl.i18n.N_` (translated where written); empty:
    #: the first line of the model's docstring (then never translated).
    heading: ClassVar[str] = ""


@dataclass(frozen=True, slots=True)
class PolicyContext:
    """What a policy may need beyond its own section, taken from the rest of the settings.

    Attributes:
        sample_interval: the watch's nominal sampling interval (``[watch] sample_interval``).
        timezone: where a day starts (``[watch] timezone``).
        currency: ISO 4217 code money is stated in (``[instance] currency``).
        total_steps: the run's length when configured (``[watch] total_steps``), else None.
        policies: every ``[policies.*]`` section (read by attribute), for a policy that reuses
            another's rule with the user's settings (plateau's hold uses ``not_learning`` and
            ``unstable``); None: each policy's defaults.
    """

    sample_interval: timedelta = timedelta(seconds=5)
    timezone: ZoneInfo = ZoneInfo("UTC")
    currency: str = "USD"
    total_steps: int | None = None
    policies: Any = None

    @classmethod
    def from_settings(cls, settings: Any) -> PolicyContext:
        """The context of a :class:`~costctl.config.Settings` (read by attribute, so this module
        need not import the settings)."""
        watch, instance = settings.watch, settings.instance
        return cls(sample_interval=watch.sample_interval, timezone=watch.tz,
                   currency=instance.currency.upper(), total_steps=watch.total_steps,
                   policies=settings.policies)


@dataclass(frozen=True, slots=True)
class Pending:
    """An action a policy will take if nothing changes (a countdown for the status line).

    Attributes:
        policy: the policy's name.
        action: what it will do then (``"stop"``, ``"advise"``: its configured action).
        at: aware UTC time it fires at, if the trend holds (idle stays idle, the rate is charged on).
        progress: a short text of how far along it is, e.g. ``"idle 25m of 30m"``, in the
            current language (:mod:`costctl.i18n`): what the status line shows.
        progress_en: the same in English, for what is stored (a decision's evidence); None:
            ``progress`` is English already (:func:`progress_texts` makes both). Not compared:
            two pendings are equal when they say the same.
    """

    policy: str
    action: str
    at: datetime
    progress: str
    progress_en: str | None = field(default=None, compare=False)

    @property
    def progress_stored(self) -> str:
        """:attr:`progress` as stored in the ledger: in English."""
        return self.progress_en if self.progress_en is not None else self.progress


def progress_texts(message: str, *, stored: str | None = None, **values: Any) -> dict[str, str]:
    """``{"progress": ..., "progress_en": ...}`` for a :class:`Pending`: the
    :func:`~costctl.i18n.N_` sentence ``message`` with ``values`` filled, in the current language
    and in English.

    Args:
        stored: the English text to store instead of ``message`` filled in (exact amounts
            with their currency codes, where ``values`` hold money as people read it).
    """
    return {"progress": _(message).format(**values),
            "progress_en": stored if stored is not None else message.format(**values)}


class Policy:
    """Base class of the policies.

    Subclasses set ``name`` (lower-case identifier: the ``[policies.<name>]`` table and the
    ``COSTCTL_POLICIES__<NAME>__<KEY>`` variables), ``config_model`` (a :class:`PolicyConfig`
    subclass) and optionally ``order`` and ``snoozable``; they override :meth:`from_config` when the constructor
    is not ``cls(config)`` or a configuration disables the policy, and implement either
    :meth:`evaluate` (at most one decision per call) or :meth:`decisions` (several, e.g. when a
    replay added many progress points at once).
    """

    name: ClassVar[str] = ""
    config_model: ClassVar[type[BaseModel]] = PolicyConfig
    order: ClassVar[int] = DEFAULT_ORDER
    #: names of policies whose diagnosis, where it holds, makes this one's moot: the engine drops
    #: a decision of this policy that any of them :meth:`covers` (plateau: ``("overfitting",)``).
    superseded_by: ClassVar[tuple[str, ...]] = ()
    #: Whether ``costctl snooze`` may postpone this policy's stops (the idle autostop); a budget
    #: cap, say, never is (:meth:`costctl.policies.engine.PolicyEngine.snooze`).
    snoozable: ClassVar[bool] = False
    #: The zone the times in this policy's reasons are shown in (``[watch] timezone``): set from
    #: the :class:`PolicyContext` by the engine and by :meth:`from_settings`; UTC until then.
    #: Evidence and keys keep exact ISO UTC (:func:`iso`); reasons use :meth:`shown_time`.
    tz: ZoneInfo = ZoneInfo("UTC")

    def __init__(self, config: Any = None) -> None:
        """Keep ``config`` (an instance of ``config_model``; its defaults when None) as
        ``self.config`` — what the default :meth:`from_config` passes. The built-in policies are
        dataclasses with constructors of their own."""
        self.config = config if config is not None else self.config_model()

    @classmethod
    def from_config(cls, config: Any, context: PolicyContext) -> Policy | None:
        """Build the policy from its section (an instance of ``config_model``); None when that
        section disables it. The default is ``cls(config)``."""
        return cls(config)  # type: ignore[call-arg]

    @classmethod
    def from_settings(cls, settings: Any) -> Policy | None:
        """Build the policy from a whole :class:`~costctl.config.Settings` (its
        ``[policies.<name>]`` section, defaults when the settings have none, and its context)."""
        section = getattr(settings.policies, cls.name, None)
        if section is None:
            section = cls.config_model()
        context = PolicyContext.from_settings(settings)
        policy = cls.from_config(section, context)
        if policy is not None:
            policy.tz = context.timezone
        return policy

    def shown_time(self, when: datetime) -> str:
        """``when`` (aware) as a reason shows it: in :attr:`tz`, to the second
        (:func:`costctl.i18n.format_time`, e.g. ``2026-12-05 22:52:07+08:00``); never in
        evidence or keys, which keep :func:`iso`."""
        return format_time(when, self.tz)

    def retention(self, sample_interval: timedelta) -> timedelta:
        """How much telemetry (behind the newest sample) this policy needs kept in History."""
        return timedelta(0)

    def covers(self, decision: Decision) -> bool:
        """True when this policy's diagnosis holds where another policy's ``decision`` was made
        (so that decision is moot: see :attr:`superseded_by`). Default: never."""
        return False

    def evaluate(self, history: History, now: datetime) -> Decision | None:
        """The decision this policy reaches at ``now`` (aware UTC), or None.

        The same event yields a decision with the same ``key`` on every call while it lasts;
        the engine reports it once. Policies that process new records incrementally return
        only the latest of the decisions :meth:`decisions` would give.
        """
        found = self.decisions(history, now)
        return found[-1] if found else None

    def pending(self, history: History, now: datetime) -> Pending | None:
        """The action this policy will take later if nothing changes, or None (the default:
        a policy that cannot tell). Called on every tick after :meth:`decisions`, so it must be
        cheap (no rescans of the history); it never decides anything. Returns None once the
        action is due (``at <= now``): then :meth:`decisions` reports it."""
        return None

    def due_at(self, history: History, now: datetime) -> datetime | None:
        """The next instant after ``now`` at which this policy decides something if nothing
        changes (a deadline: a window's end), or None (the default: none known). The watch
        schedules a tick at it when its sample interval would reach it late, so a deadline
        decision comes on the first tick after the deadline. Must be cheap (called every tick)."""
        return None

    def decisions(self, history: History, now: datetime) -> list[Decision]:
        """All decisions reached at ``now`` (what the engine calls)."""
        if type(self).evaluate is Policy.evaluate:
            raise NotImplementedError(f"{type(self).__name__} implements neither evaluate nor decisions")
        found = self.evaluate(history, now)
        return [found] if found is not None else []


@dataclass(frozen=True, slots=True)
class PolicySpec:
    """One registration.

    Attributes:
        name: the policy's name (its ``[policies.<name>]`` table).
        cls: the Policy subclass.
        config: its config model (a pydantic model whose every field has a default).
        order: evaluation order (ascending; see the module docstring).
        index: registration sequence number (breaks ties in ``order``).
        description: the config model's ``heading`` (English, for :func:`~costctl.i18n._`), else
            the first line of its (else the class's) docstring.
    """

    name: str
    cls: type[Policy]
    config: type[BaseModel]
    order: int
    index: int
    description: str


#: name -> Policy subclass, every registered policy (kept for callers of the old registry).
POLICIES: dict[str, type[Policy]] = {}
_SPECS: dict[str, PolicySpec] = {}
_counter = 0


def _first_line(obj: Any) -> str:
    doc = (obj.__doc__ or "").strip()
    return doc.split("\n\n", 1)[0].replace("\n", " ").strip() if doc else ""


def register(cls: type[Policy]) -> type[Policy]:
    """Class decorator: register a policy under ``cls.name`` with ``cls.config_model`` and ``cls.order``.

    Registering the same class again is a no-op.

    Raises:
        ValueError: the name is not a lower-case identifier or is taken by another class, the
            config model is not a pydantic model, or it cannot be built from defaults alone.
    """
    global _counter
    name = cls.name
    if not name:
        raise ValueError(_("{cls} has no policy name").format(cls=cls.__name__))
    if not _NAME_RE.match(name):
        raise ValueError(_("policy name {name!r} must be a lower-case identifier (letters, digits, _)").format(
            name=name))
    existing = POLICIES.get(name)
    if existing is cls:
        return cls
    if existing is not None:
        raise ValueError(_("a policy named {name!r} is already registered ({where})").format(
            name=name, where=f"{existing.__module__}.{existing.__qualname__}"))
    model = cls.config_model
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise ValueError(_("policy {name!r}: config_model must be a pydantic model class").format(name=name))
    try:
        model()
    except ValidationError:
        raise ValueError(_("policy {name!r}: every key of {model} needs a default").format(
            name=name, model=model.__name__)) from None
    _counter += 1
    description = (getattr(model, "heading", "") or _first_line(model)) if model is not PolicyConfig \
        else _first_line(cls)
    _SPECS[name] = PolicySpec(name=name, cls=cls, config=model, order=int(cls.order), index=_counter,
                              description=description or _first_line(cls))
    POLICIES[name] = cls
    return cls


def unregister(name: str) -> None:
    """Forget the policy ``name`` (tests; no error when absent)."""
    POLICIES.pop(name, None)
    _SPECS.pop(name, None)


def registrations() -> list[PolicySpec]:
    """Every registered policy, in evaluation order."""
    return sorted(_SPECS.values(), key=lambda s: (s.order, s.index))


def where_text(step: int | None, epoch: float | None, index: int, *, other: str = N_("point {index}")) -> str:
    """Where in the log a point is, for a reason, in the current language: ``"step 1200"``, else
    ``"epoch 7"``, else ``other`` (a :func:`~costctl.i18n.N_` sentence with ``{index}``: ``"point
    42"``)."""
    if step is not None:
        return _("step {step}").format(step=step)
    if epoch is not None:
        return _("epoch {epoch:g}").format(epoch=epoch)
    return _(other).format(index=index)


def clauses(*parts: str | None) -> str:
    """Whole clauses of one reason (a diagnosis, then what it costs), joined the current
    language's way (``"; "``, ``"；"``); empty ones are left out."""
    return _("; ").join(p for p in parts if p)


def cost_clause(rest: Any, rate: Any, *, at_rate: bool = False) -> str | None:
    """What a diagnosed run costs, one clause for a reason: the rest of the run's estimated
    cost (``rest``: :func:`~costctl.policies.plateau.rest_of_run_cost`'s dict, ``cost`` a decimal
    string and ``currency``), else the rate while it runs (``rate``: Money per hour), else None.
    Money as the current language writes it (:meth:`~costctl.money.Money.shown`).

    Args:
        at_rate: say that the estimate is at the current rate.
    """
    from decimal import Decimal

    from ..money import Money

    if rest is not None:
        cost = Money(Decimal(rest["cost"]), rest["currency"])
        if at_rate:
            return _("the rest of the run would cost about {cost} at the current rate").format(cost=cost.shown())
        return _("the rest of the run would cost about {cost}").format(cost=cost.shown())
    if rate is not None:
        return _("it costs {rate}/h while it runs").format(rate=rate.shown())
    return None


def iso(when: datetime) -> str:
    """An aware datetime as ISO 8601 UTC with a ``Z`` (for keys and evidence)."""
    return ensure_utc(when).isoformat().replace("+00:00", "Z")


__all__ = ["Pending", "Policy", "PolicyConfig", "PolicyContext", "PolicySpec", "POLICIES", "DEFAULT_ORDER",
           "register", "unregister", "registrations", "iso", "where_text", "clauses", "cost_clause", "progress_texts"]
