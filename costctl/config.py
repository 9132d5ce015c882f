"""Configuration: ``costctl.toml`` plus ``COSTCTL_*`` environment variables (pydantic-settings).

Precedence, highest first: explicit overrides (CLI flags) > environment > TOML file > defaults.
Nested keys in the environment use ``__``: ``COSTCTL_POLICIES__IDLE__TIME_WINDOW=10m``.

Durations are written ``90s``, ``30m``, ``2h``, ``1h30m`` or a number of seconds; windows also
accept ``off`` (disabled; never zero). Money is a string or number, held as Decimal.
The field types are in :mod:`costctl.config_types`. The ``[policies.*]`` sections come from
the policy registry: each policy module (built-in, or a plugin found through the
``costctl.policies`` entry-point group) carries its own config model.
Unknown keys and sections are errors. Every number has a range (the field types' and each
key's ``Field`` bounds; docs/configuration.md lists them). :func:`load_settings` turns every
problem into one :class:`~costctl.errors.ConfigError` line naming the key, the value and what is
allowed (for a number, its whole range: :func:`key_range`); a value an environment variable set
is named by the variable, not by the config file (:func:`env_variable_for`).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import tomllib
import typing
from datetime import date, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import (
    BaseModel,
    BeforeValidator,
    ByteSize,
    Field,
    PrivateAttr,
    SecretStr,
    StrictBool,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)
from pydantic_settings.exceptions import SettingsError

from . import jsonio, tomlfile

# The shared field types live in config_types (importable by the policies); re-exported here.
from .config_types import (  # noqa: F401
    DURATION_ALLOWED,
    WINDOW_ALLOWED,
    Action,
    Duration,
    MoneyAmount,
    Percent,
    Section,
    ValueRange,
    Window,
    _format_duration,
    bounded_duration,
    bounded_window,
    _money,
    _Section,
    format_duration,
    parse_duration,
    parse_money,
    parse_window,
)
from . import job as _job
from .errors import ConfigError
from .i18n import N_, _
from .paths import CONFIG_FILE_NAME
from .policies.budget import BudgetConfig  # noqa: F401
from .policies.divergence import DivergenceConfig  # noqa: F401
from .policies.idle import IdleConfig  # noqa: F401
from .policies.idle_fraction import IdleFractionConfig  # noqa: F401
from .policies.plateau import PlateauConfig  # noqa: F401
from .policies.registry import ENTRY_POINT_GROUP, discover_policies, known_policies, policies_model
from .policies.stall import StallConfig  # noqa: F401
from .money import is_known_currency
from .validation import describe_value, one_line, ordered_problems, require_regular_file, toml_error_text

ENV_PREFIX = "COSTCTL_"

#: The largest count a key takes (steps, points): 10^12, far past any real run.
MAX_COUNT = 10**12
#: ``[downsize] peak_memory`` at most 1 PiB (bytes): larger than any GPU's memory.
MAX_PEAK_MEMORY = 2**50
#: ``[oom] min_batch`` at most 2^20.
MAX_BATCH = 2**20
#: ``[[catalog.exchange_rates]] rate`` from 10^-6 to 10^6: every pair of real currencies lies
#: well inside (1 USD is about 16,000 IDR and 25,000 VND; 1 IDR about 0.00006 USD).
MIN_EXCHANGE_RATE, MAX_EXCHANGE_RATE = Decimal("0.000001"), Decimal(1_000_000)


class InstanceConfig(_Section):
    """``[instance]``: what is being paid for.

    ``price_per_hour`` is per instance-hour (all GPUs together) in ``currency``; when the
    provider reports a price, that one is charged and this is the fallback.
    """

    provider: str = "sim"
    #: a named account of the provider (``[providers.<provider>.accounts.<account>]``); None:
    #: the provider's default account.
    account: str | None = None
    id: str | None = None
    gpu: str | None = None
    gpu_count: int = Field(default=1, ge=1, le=64)
    price_per_hour: MoneyAmount | None = None
    currency: str = Field(default="USD", pattern=r"^[A-Za-z]{3}$")
    billing: Literal["on-demand", "spot", "prepaid"] = "on-demand"
    #: the command line that stops this instance from inside it (e.g. ``"shutdown"`` in an AutoDL
    #: container), split like a POSIX shell would (no shell runs it); an adapter that can stop
    #: its instance from inside (``capabilities.self_stop``) uses it instead of its own default.
    self_stop: str | None = None

    @field_validator("currency")
    @classmethod
    def _upper(cls, v: str) -> str:
        return v.upper()

    @field_validator("self_stop")
    @classmethod
    def _command_line(cls, v: str | None) -> str | None:
        if v is None:
            return v
        if "\x00" in v:
            raise ValueError(_("expected a command line without NUL bytes"))
        try:
            argv = shlex.split(v)
        except ValueError as exc:  # "No closing quotation"
            raise ValueError(_("expected a command line a shell could split ({problem})").format(
                problem=str(exc).lower())) from None
        if not argv:
            raise ValueError(_("expected a command, e.g. \"shutdown\" (leave the key out for the adapter's default)"))
        return v

    @property
    def self_stop_argv(self) -> list[str] | None:
        """``self_stop`` as argv (``shlex.split``), None when not set."""
        return shlex.split(self.self_stop) if self.self_stop is not None else None


class WatchConfig(_Section):
    """``[watch]``: the sampling loop.

    ``sample_interval`` is how often telemetry is read and policies evaluated; ``grace_period``
    is how long a child gets between SIGTERM and SIGKILL; ``timezone`` (IANA name) decides
    where a day starts for daily caps and ``bill --by day``.

    The ledger is written by one background thread (:mod:`costctl.ledger.writer`): while it is
    unreachable or locked, up to ``ledger_queue_max`` writes are held in memory (the oldest
    telemetry rows are dropped beyond it, never charges or decisions) and retried with backoff
    capped at ``ledger_retry_max``; at the end the watch waits up to ``ledger_flush_timeout``
    for them before saying what was not written.
    """

    sample_interval: Duration = timedelta(seconds=5)
    grace_period: Duration = timedelta(seconds=10)
    timezone: str = "UTC"
    on_exit: Literal["guard", "stop", "leave"] = "guard"
    total_steps: int | None = Field(default=None, ge=1, le=MAX_COUNT)
    status_line: bool = True
    ledger_queue_max: int = Field(default=10_000, ge=1, le=10_000_000)  # writes held in memory during an outage
    ledger_retry_max: Duration = timedelta(seconds=30)  # longest wait between retries
    ledger_flush_timeout: Duration = timedelta(minutes=2)  # longest wait for the ledger at the end

    @field_validator("timezone")
    @classmethod
    def _tz(cls, v: str) -> str:
        try:
            ZoneInfo(v)
        except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: a name past 255 bytes (ENAMETOOLONG)
            raise ValueError(_("expected an IANA time zone name such as UTC or Asia/Shanghai")) from None
        return v

    @property
    def tz(self) -> ZoneInfo:
        """The configured zone as a ZoneInfo."""
        return ZoneInfo(self.timezone)


#: ``[policies.*]``: built from the policy registry (each policy module carries its config model;
#: see :mod:`costctl.policies.registry`). This one holds the built-ins; :func:`load_settings` uses
#: one that also holds the plugin policies found through the ``costctl.policies`` entry points.
PoliciesConfig = policies_model()


def _signal_name(value: Any) -> str | None:
    """``"off"``/None -> None; ``"SIGUSR1"``, ``"usr1"``, ``10`` -> ``"SIGUSR1"`` (a signal a
    process can handle: never SIGKILL or SIGSTOP)."""
    import signal as _signal

    if value is None or value is False:
        return None
    if isinstance(value, str) and value.strip().lower() in {"off", "none", "false", ""}:
        return None
    allowed = _("off, or a signal name such as SIGUSR1 or SIGUSR2 (never SIGKILL/SIGSTOP)")
    try:
        if isinstance(value, int) and not isinstance(value, bool):
            sig = _signal.Signals(value)
        elif isinstance(value, str):
            name = value.strip().upper()
            sig = _signal.Signals[name if name.startswith("SIG") else "SIG" + name]
        else:
            raise ValueError
    except (KeyError, ValueError):
        raise ValueError(_("expected {allowed}").format(allowed=allowed)) from None
    if sig in (_signal.SIGKILL, _signal.SIGSTOP):
        raise ValueError(_("expected {allowed}").format(allowed=allowed))
    return sig.name


SignalName = Annotated[str | None, BeforeValidator(_signal_name)]


class CheckpointConfig(_Section):
    """``[checkpoint]``: how costctl asks the job for a checkpoint and where it looks for one.

    costctl asks by creating the file named in the job's ``$COSTCTL_CHECKPOINT_REQUEST``
    (see :mod:`costctl.job`); only when ``signal`` is set does it also send that signal, to the
    worker processes (the ranks a launcher such as torchrun started, never the launcher
    itself). ``path`` is a file, a directory or a glob (``checkpoints/*.pt``, ``out/**/*.ckpt``)
    where the job writes checkpoints; the newest match by modification time that passes the
    integrity check (:mod:`costctl.checkpoint_integrity`) is the one to resume from. ``deadline`` is how long a request may take. Periodic requests (``periodic``:
    ``auto`` = on spot/interruptible instances) follow Young/Daly's interval from the measured
    save time (``save_time`` until one is measured) and the mean time between preemptions
    (``mtbf`` until the ledger has observed some), clamped to ``[min_interval, max_interval]``.
    """

    path: str | None = None
    deadline: Duration = timedelta(minutes=10)
    signal: SignalName = None
    periodic: Literal["auto", "on", "off"] = "auto"
    min_interval: Duration = timedelta(minutes=10)
    max_interval: Duration = timedelta(hours=4)
    save_time: Duration = timedelta(seconds=60)
    mtbf: Duration = timedelta(hours=6)

    @model_validator(mode="after")
    def _bounds(self) -> "CheckpointConfig":
        if self.min_interval > self.max_interval:
            raise ValueError(_("min_interval ({minimum}) must not exceed max_interval ({maximum})").format(
                minimum=_format_duration(self.min_interval), maximum=_format_duration(self.max_interval)))
        return self


class PreemptionConfig(_Section):
    """``[preemption]``: preemption notices on spot/interruptible instances.

    The notice source (the sim provider, or the AWS/GCP/Azure metadata service) is polled every
    ``poll_interval``: default 1 s, so that a notice leads to a checkpoint request 0.5 s after it
    is issued at the median (1 s at worst) and a 30 s GCP/Azure notice leaves its time to the
    save. In-guest sources are cheap local HTTP: one small GET on a kept-alive session per poll
    (the sim: one read of its state file), well under 0.5 % of a core; GCP's metadata server is
    long-polled instead (answered when the notice is set). On a notice costctl requests a checkpoint at once and
    ends the job and stops the instance ``margin`` plus ``[watch] grace_period`` before the
    deadline. ``source`` picks the notice source: ``auto`` (the provider's own notices, such as
    the sim's, else the cloud whose metadata service answers), or one of ``aws``, ``gcp``,
    ``azure`` without detection (a machine whose detection fails; a rehearsal against a local
    fake). The ``*_base_url`` keys point the metadata clients elsewhere (tests, proxies).
    """

    source: Literal["auto", "aws", "gcp", "azure"] = "auto"
    poll_interval: Duration = timedelta(seconds=1)
    margin: Duration = timedelta(seconds=10)
    aws_base_url: str | None = None
    gcp_base_url: str | None = None
    azure_base_url: str | None = None


class DownsizeConfig(_Section):
    """``[downsize]``: moving a plateaued run to a cheaper card, and underutilization advice.

    A card fits when its memory is at least the peak GPU memory times ``1 + headroom``. The peak
    comes from GPU telemetry; on a machine without it, from ``peak_memory`` (bytes, e.g.
    ``"6GiB"``). A move happens only when it saves at least ``min_saving_per_hour`` (instance
    currency, per hour of the current card's work). Speed differences are estimated from the
    catalog's dense ``compute_dtype`` peak, weighted by the measured GPU utilization. Runs whose
    peak memory stayed under ``underutilized_memory_fraction`` of the card with a mean GPU
    utilization under ``underutilized_gpu_utilization`` percent get the cheaper-card advice.
    """

    min_saving_per_hour: MoneyAmount = Decimal("0.10")
    headroom: float = Field(default=0.2, ge=0, le=4)
    peak_memory: Annotated[ByteSize, ValueRange(N_("1 byte to 1PiB"))] | None = Field(default=None, ge=1,
                                                                                 le=MAX_PEAK_MEMORY)
    compute_dtype: Literal["fp16", "bf16", "fp32"] = "fp16"
    underutilized_memory_fraction: float = Field(default=0.5, gt=0, le=1)
    underutilized_gpu_utilization: Percent = 50.0


class OomConfig(_Section):
    """``[oom]``: CUDA out-of-memory recovery. ``action = "retry"`` (or ``--on-oom retry``)
    restarts the job with the batch halved and gradient accumulation doubled, down to
    ``min_batch``; ``"advise"`` prints those numbers."""

    action: Literal["advise", "retry"] = "advise"
    min_batch: int = Field(default=1, ge=1, le=MAX_BATCH)


#: Bounds of ``[ledger] sample_retention`` and ``progress_interval``.
SAMPLE_RETENTION_MIN, SAMPLE_RETENTION_MAX = timedelta(hours=1), timedelta(days=3650)
PROGRESS_INTERVAL_MIN, PROGRESS_INTERVAL_MAX = timedelta(seconds=1), timedelta(hours=1)
#: Bounds of ``[ledger] sync_interval`` (fleet mode).
SYNC_INTERVAL_MIN, SYNC_INTERVAL_MAX = timedelta(seconds=1), timedelta(hours=1)
#: A central ledger URL: a PostgreSQL URL (a SQLite one is taken too: a file every machine sees).
_CENTRAL_URL_RE = re.compile(r"^(postgresql|sqlite)(\+\w+)?://")


class LedgerConfig(_Section):
    """``[ledger]``: what the ledger keeps at volume, and fleet mode.

    Raw telemetry samples (one row per GPU per tick) are kept for ``sample_retention``, then
    rolled up into one row per run, GPU and UTC minute and deleted (``costctl db compact``, and
    the watch as it runs; :mod:`costctl.ledger.sample_rollup`); ``off`` keeps them raw.
    Progress (loss) points are stored as rows up to ``progress_points_per_interval`` per series
    and ``progress_interval`` (plus each interval's non-finite points, up to as many again, and
    its last point); the rest of an interval is kept as one row of exact figures (count, NaN
    and inf counts, min, max, first, last): :mod:`costctl.ledger.progress_store`.

    Fleet mode (``central_url``): the watch writes its own ledger as always and sends what
    changed to the team's central ledger every ``sync_interval`` (:mod:`costctl.ledger.sync`),
    waiting up to ``central_flush_timeout`` for it at the end. A run's heartbeat then reaches
    the central ledger at most ``sync_interval`` + :data:`SYNCED_HEARTBEAT_DELAY` late, which
    ``[fleet]``'s default guard lag allows for (:meth:`FleetConfig.lag`).
    """

    sample_retention: bounded_window(SAMPLE_RETENTION_MIN, SAMPLE_RETENTION_MAX, noun=N_("a retention"),  # type: ignore[valid-type]
                                     note=N_("ten years")) = Field(
        default=timedelta(days=7),
        description=N_("raw telemetry is kept this long, then rolled up per minute; \"off\" keeps it raw "
                    "(1h to 87600h)"))
    progress_interval: bounded_duration(PROGRESS_INTERVAL_MIN, PROGRESS_INTERVAL_MAX,  # type: ignore[valid-type]
                                        noun=N_("an interval")) = Field(
        default=timedelta(seconds=60),
        description=N_("the interval progress points are counted in (1s to 1h)"))
    progress_points_per_interval: int = Field(
        default=20, ge=1, le=10_000,
        description=N_("loss points stored as rows per series and interval; the rest are summed up exactly"))
    central_url: str | None = Field(
        default=None,
        description=N_("fleet mode: the team's central ledger (a PostgreSQL URL); this machine's ledger is its "
                       "outbox"))
    sync_interval: bounded_duration(SYNC_INTERVAL_MIN, SYNC_INTERVAL_MAX,  # type: ignore[valid-type]
                                    noun=N_("an interval")) = Field(
        default=timedelta(seconds=10),
        description=N_("fleet mode: between two sends to the central ledger (1s to 1h)"))
    central_flush_timeout: Duration = Field(
        default=timedelta(seconds=15),
        description=N_("fleet mode: longest wait for the central ledger at the end of a watch"))

    @field_validator("central_url")
    @classmethod
    def _central_url(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        if "\x00" in value or not _CENTRAL_URL_RE.match(value.strip()):
            raise ValueError(_("expected a PostgreSQL URL such as postgresql+psycopg://user@host:5432/costctl"))
        return value.strip()


#: Bounds of ``[bill] saved_horizon``.
SAVED_HORIZON_MIN, SAVED_HORIZON_MAX = timedelta(hours=1), timedelta(days=30)


class BillConfig(_Section):
    """``[bill]``: how ``costctl bill`` tells the money story.

    ``saved_horizon`` bounds the counterfactual behind the SAVED column
    (:mod:`costctl.ledger.outcomes`): a stop the provider confirmed is taken to have saved the
    run's rate until the next run on the same instance began, or for ``saved_horizon``, or until
    now, whichever is first. The default, 24 h, is a forgotten instance found the next day;
    the bounds (1 h to 720 h, 30 days) keep the claim to a time someone would plausibly have
    noticed (AutoDL releases an instance shut down for 15 days).
    """

    saved_horizon: bounded_duration(SAVED_HORIZON_MIN, SAVED_HORIZON_MAX, noun=N_("a horizon"),  # type: ignore[valid-type]
                                    note=N_("30 days")) = Field(
        default=timedelta(hours=24),
        description=N_("a confirmed stop saved the run's rate until the next run on the instance, or this long, "
                    "whichever came first (1h to 720h)"))


#: Bounds of ``[fleet] guard_lag``: a second to a day.
GUARD_LAG_MIN, GUARD_LAG_MAX = timedelta(seconds=1), timedelta(hours=24)
#: The default guard lag: this many ``[watch] sample_interval``\ s (a watch records spend, and
#: with it its heartbeat, once a tick; two missed ticks are still guarded) ...
GUARD_LAG_INTERVALS = 3
#: ... but at least this long: the watch's ledger writer batches behind the tick, and the
#: watching machine's clock, which stamps the heartbeat, may run a few seconds off this one's.
GUARD_LAG_FLOOR = timedelta(seconds=30)
#: ... and, for a heartbeat sent by fleet mode's outbox, at least ``[ledger] sync_interval`` plus
#: this: the watch's writer commits its spend at least every 10 s
#: (``costctl.watch.watcher.WRITE_EVERY_S``), and 10 s more for the send itself and the clocks.
SYNCED_HEARTBEAT_DELAY = timedelta(seconds=20)


class FleetConfig(_Section):
    """``[fleet]``: ``costctl fleet`` (every instance of every configured provider account).

    An instance is guarded when a run of this ledger on it has not ended, is watched by a watch
    that stops (not ``--dry-run``, not ``--advise-only``) and its heartbeat
    (``runs.last_seen_at``, which the watch moves with the spend it records every tick) is at
    most ``guard_lag`` old. Unset: :data:`GUARD_LAG_INTERVALS` × ``[watch] sample_interval``, at
    least :data:`GUARD_LAG_FLOOR`, and at least ``[ledger] sync_interval`` +
    :data:`SYNCED_HEARTBEAT_DELAY` (watches in fleet mode send their heartbeat that late at
    worst); set it when the watches writing to this ledger sample or send at other intervals
    than this config says.
    """

    guard_lag: bounded_duration(GUARD_LAG_MIN, GUARD_LAG_MAX, noun=N_("a lag")) | None = Field(  # type: ignore[valid-type]
        default=None,
        description=N_("a watch's heartbeat at most this old guards its instance; default 3 x [watch] "
                       "sample_interval, at least 30s (1s to 24h)"))

    def lag(self, sample_interval: timedelta, sync_interval: timedelta | None = None) -> timedelta:
        """The guard lag in force: ``guard_lag`` when set, else :data:`GUARD_LAG_INTERVALS` ×
        ``sample_interval``, at least :data:`GUARD_LAG_FLOOR` and (given ``[ledger]
        sync_interval``) at least ``sync_interval`` + :data:`SYNCED_HEARTBEAT_DELAY`."""
        if self.guard_lag is not None:
            return self.guard_lag
        synced = sync_interval + SYNCED_HEARTBEAT_DELAY if sync_interval is not None else GUARD_LAG_FLOOR
        return max(GUARD_LAG_INTERVALS * sample_interval, GUARD_LAG_FLOOR, synced)


#: What a patrol policy does to the instances it matches (``[[patrol.policies]] action``).
PatrolAction = Literal["notify", "stop", "release"]
#: The statuses a patrol filter may name (:class:`costctl_providers.base.Status` values).
PatrolStatus = Literal["provisioning", "starting", "running", "stopping", "stopped", "terminated", "error",
                       "unknown"]
#: Bounds of a patrol policy's ``grace``: a second to 30 days.
PATROL_GRACE_MIN, PATROL_GRACE_MAX = timedelta(seconds=1), timedelta(days=30)
#: Bounds of the ``min_age`` and ``stopped_for`` filters: a minute to ten years.
PATROL_AGE_MIN, PATROL_AGE_MAX = timedelta(minutes=1), timedelta(days=3650)
#: Bounds of the ``idle`` filter's window: a minute to 7 days (a window needs observations that
#: cover it, so it also sets how long observations are kept).
PATROL_IDLE_MIN, PATROL_IDLE_MAX = timedelta(minutes=1), timedelta(days=7)
#: Bounds of ``[patrol] interval``: 10 seconds to a day.
PATROL_INTERVAL_MIN, PATROL_INTERVAL_MAX = timedelta(seconds=10), timedelta(hours=24)
#: Bounds of ``[patrol] observation_retention``: an hour to ten years.
PATROL_RETENTION_MIN, PATROL_RETENTION_MAX = timedelta(hours=1), timedelta(days=3650)
#: Bounds of ``[patrol] release_warning``: an hour to 30 days.
PATROL_WARNING_MIN, PATROL_WARNING_MAX = timedelta(hours=1), timedelta(days=30)
#: A patrol policy's name: lower case, digits, ``-`` and ``_``, 1 to 24 characters (it is
#: stored as the decisions' policy, ``patrol:<name>``, in a 32-character column).
PATROL_NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,23}$"


def _listed(value: Any) -> Any:
    """One value stands for a list of it (``provider = "vastai"`` is ``["vastai"]``)."""
    return [value] if isinstance(value, str) else value


def _provider_names(value: list[str] | None) -> list[str] | None:
    """``value`` when each name is an installed provider adapter; else ValueError naming them."""
    if value is None:
        return None
    from costctl_providers.registry import available_providers

    known = available_providers()
    for name in value:
        if name not in known:
            raise ValueError(_("unknown provider {name!r}; expected one of {known}").format(
                name=name, known=", ".join(known)))
    return value


class PatrolFilters(_Section):
    """``filters`` of one ``[[patrol.policies]]``: an instance matches when every filter set
    matches (an unset filter matches everything; a list matches any of its values).

    * ``provider``, ``account`` (``"default"`` for a provider's default account), ``label``
      (shell-style patterns, ``"team-*"``; an instance without a label matches none),
      ``status`` (the normalized status: running, stopped...).
    * ``min_age``: created (else last started, by the provider's times) at least this long ago;
      an unknown age never matches.
    * ``guarded``: true matches the instances a watch of this ledger guards (a run not ended, of
      a watch that stops, heartbeat within ``[fleet] guard_lag``), false every other.
    * ``idle``: every utilization reading the provider gives for the instance (GPU, and CPU where
      the adapter reads it) stayed below ``min_gpu_utilization`` / ``min_cpu_utilization`` over
      this window, by the patrol's own stored observations under the idle policy's coverage rule
      (an observation at or before the window's start, none more than two ``[patrol] interval``
      apart, the newest at most two intervals old); a missing reading counts as busy.
    * ``spend_over`` with ``currency``: the instance's spend in that currency, the larger of the
      provider's figure (price x uptime of the current session) and this ledger's charges, is over
      the amount; an instance billed in another currency never matches (no conversion).
    * ``stopped_for``: stopped at least this long, by the provider's stop time, else by the
      patrol's observations (stopped in every observation since then).
    """

    provider: Annotated[list[str] | None, BeforeValidator(_listed)] = Field(
        default=None, description=N_("provider adapters by name (the [providers.*] tables' names)"))
    account: Annotated[list[str] | None, BeforeValidator(_listed)] = Field(
        default=None, description=N_("named accounts; default for a provider's default account"))
    label: Annotated[list[str] | None, BeforeValidator(_listed)] = Field(
        default=None, description=N_("patterns of the instance's label or name at the provider"))
    status: Annotated[list[PatrolStatus] | None, BeforeValidator(_listed)] = None
    min_age: bounded_duration(PATROL_AGE_MIN, PATROL_AGE_MAX, noun=N_("an age"), note=N_("ten years")) | None = None  # type: ignore[valid-type]
    guarded: StrictBool | None = None
    idle: bounded_duration(PATROL_IDLE_MIN, PATROL_IDLE_MAX, noun=N_("a window")) | None = None  # type: ignore[valid-type]
    min_gpu_utilization: Percent = 5.0
    min_cpu_utilization: float = Field(default=10.0, ge=0, le=100_000)
    spend_over: MoneyAmount | None = None
    currency: Annotated[str | None, Field(pattern=r"^[A-Za-z]{3}$"),
                        BeforeValidator(lambda v: v.upper() if isinstance(v, str) else v)] = Field(
        default=None, validate_default=True)
    stopped_for: bounded_duration(PATROL_AGE_MIN, PATROL_AGE_MAX, noun=N_("a duration"), note=N_("ten years")) | None = None  # type: ignore[valid-type]

    @field_validator("provider", "account", "label", "status", mode="after")
    @classmethod
    def _not_empty(cls, v: list[Any] | None) -> list[Any] | None:
        """A list filter names at least one value: an empty one would match no instance."""
        if v is not None and not v:
            raise ValueError(_("expected at least one value (an empty list matches no instance); leave the filter "
                               "out to match every instance"))
        return v

    @field_validator("provider", mode="after")
    @classmethod
    def _known_providers(cls, v: list[str] | None) -> list[str] | None:
        return _provider_names(v)

    @field_validator("label", mode="after")
    @classmethod
    def _no_empty_pattern(cls, v: list[str] | None) -> list[str] | None:
        """An empty (or blank) pattern matches no label: an instance without a label matches none."""
        for pattern in v or ():
            if not pattern.strip():
                raise ValueError(_("a label pattern is empty and matches no instance; expected a pattern such as "
                                   "\"team-*\""))
        return v

    @field_validator("idle", mode="after")
    @classmethod
    def _idle_needs_running(cls, v: timedelta | None, info: Any) -> timedelta | None:
        """``idle`` reads utilization, which only a running instance reports."""
        status = info.data.get("status")
        if v is not None and status is not None and "running" not in status:
            raise ValueError(_("idle reads utilization, which only a running instance reports, and filters.status "
                               "{status} leaves running out: add \"running\" to status or leave it out").format(
                status=", ".join(status)))
        return v

    @field_validator("min_gpu_utilization", "min_cpu_utilization", mode="after")
    @classmethod
    def _threshold_needs_idle(cls, v: float, info: Any) -> float:
        """A utilization threshold is the ``idle`` filter's: without ``idle`` it has no effect."""
        if info.data.get("idle") is None:
            raise ValueError(_("{key} is the threshold of the idle filter and has no effect without it: set idle "
                               "too, or leave {key} out").format(key=info.field_name))
        return v

    @field_validator("currency", mode="after")
    @classmethod
    def _with_amount(cls, v: str | None, info: Any) -> str | None:
        if v is None and info.data.get("spend_over") is not None:
            raise ValueError(_("spend_over needs the currency it is in (no conversion): set currency too, like "
                               "\"USD\" or \"CNY\""))
        if v is not None and info.data.get("spend_over") is None:
            raise ValueError(_("currency is the currency of spend_over: set spend_over too"))
        if v is not None and not is_known_currency(v):
            raise ValueError(_("expected an ISO 4217 currency code costctl knows, like USD, CNY or EUR"))
        return v

    @field_validator("stopped_for", mode="after")
    @classmethod
    def _stopped_for_needs_stopped(cls, v: timedelta | None, info: Any) -> timedelta | None:
        """``stopped_for`` matches stopped instances only: a ``status`` without ``"stopped"``, or
        ``idle`` (a running instance's readings), contradicts it."""
        if v is None:
            return v
        status = info.data.get("status")
        if status is not None and "stopped" not in status:
            raise ValueError(_("stopped_for matches stopped instances only, and filters.status {status} leaves "
                               "stopped out: add \"stopped\" to status or leave it out").format(
                status=", ".join(status)))
        if info.data.get("idle") is not None:
            raise ValueError(_("stopped_for matches stopped instances only, and idle running ones: no instance "
                               "matches both; split them into two policies"))
        return v


class PatrolPolicyConfig(_Section):
    """One ``[[patrol.policies]]``: a name, the instances it matches (``filters``), what it
    does to them (``action``: notify | stop | release) and the grace period between the mark
    (a notification now) and the action. ``release`` destroys a stopped instance's disk: it also
    needs ``allow_release = true`` and a ``stopped_for`` filter."""

    name: str
    action: PatrolAction
    grace: bounded_duration(PATROL_GRACE_MIN, PATROL_GRACE_MAX, noun=N_("a grace period"), note=N_("30 days")) = Field(  # type: ignore[valid-type]
        default=timedelta(hours=1),
        description=N_("marked instances are acted on this long after the notification (1s to 720h)"))
    allow_release: StrictBool = Field(default=False, validate_default=True)
    filters: PatrolFilters = Field(default=None, validate_default=True)  # type: ignore[assignment]

    @field_validator("name", mode="after")
    @classmethod
    def _name(cls, v: str) -> str:
        if not re.match(PATROL_NAME_PATTERN, v):
            raise ValueError(_("expected 1 to 24 characters: lower-case letters, digits, - and _, starting with a "
                               "letter or a digit"))
        return v

    @field_validator("allow_release", mode="after")
    @classmethod
    def _release_allowed(cls, v: bool, info: Any) -> bool:
        if info.data.get("action") == "release" and not v:
            raise ValueError(_("action \"release\" destroys the instance's disk: set allow_release = true to allow it"))
        return v

    @field_validator("filters", mode="before")
    @classmethod
    def _filters(cls, v: Any, info: Any) -> Any:
        """Checked as written (so the line quotes the table, not the model): some filter set,
        and a release's ``stopped_for`` (``status``, if set, only ``"stopped"``)."""
        if isinstance(v, PatrolFilters):
            v = v.model_dump(exclude_unset=True)
        thresholds = ("min_gpu_utilization", "min_cpu_utilization")
        if isinstance(v, dict) and v and not set(v) - set(thresholds):  # the more specific problem: no idle
            key = next(k for k in thresholds if k in v)
            raise ValueError(_("{key} is the threshold of the idle filter and has no effect without it: set idle "
                               "too, or leave {key} out").format(key=key))
        if v is None or (isinstance(v, dict) and not v):
            raise ValueError(_("set at least one filter (a policy without one would match every instance)"))
        if info.data.get("action") == "release" and isinstance(v, dict):
            if v.get("stopped_for") is None:
                raise ValueError(_("action \"release\" needs filters.stopped_for (how long the instance must "
                                   "have been stopped)"))
            if v.get("status") not in (None, "stopped", ["stopped"]):
                raise ValueError(_("action \"release\" acts on stopped instances only: leave filters.status "
                                   "unset or set it to \"stopped\""))
        return v

    @property
    def decision_policy(self) -> str:
        """The ``policy`` of this policy's decisions in the ledger: ``patrol:<name>``."""
        return f"patrol:{self.name}"


class PatrolConfig(_Section):
    """``[patrol]``: ``costctl patrol`` sweeps every configured provider account with the
    ``[[patrol.policies]]`` (see :class:`PatrolPolicyConfig`).

    Safety: with ``act_on = "known"`` (the default) a policy acts only on instances a watch of
    this ledger ran on, or whose label matches one of ``labels``; ``"all"`` acts on every
    instance of the accounts (a team key lists colleagues' instances too). ``interval`` is the
    sweeps' nominal interval (the default of ``--every``, and the idle filter's coverage:
    observations more than two intervals apart leave a gap). Observations are kept
    ``observation_retention``, and at least as long as the policies' windows need.
    ``release_warning`` is how long before a provider's own release of a stopped instance
    (AutoDL: 15 days shut down) the patrol warns (``off``: never).
    """

    act_on: Literal["known", "all"] = "known"
    labels: list[str] = Field(default_factory=list)
    interval: bounded_duration(PATROL_INTERVAL_MIN, PATROL_INTERVAL_MAX, noun=N_("an interval")) = Field(  # type: ignore[valid-type]
        default=timedelta(minutes=5),
        description=N_("the sweeps' nominal interval: the default of --every and the idle filter's coverage "
                       "(10s to 24h)"))
    observation_retention: bounded_duration(PATROL_RETENTION_MIN, PATROL_RETENTION_MAX, noun=N_("a retention"),  # type: ignore[valid-type]
                                            note=N_("ten years")) = Field(
        default=timedelta(days=7),
        description=N_("observations are kept this long, and as long as the policies' windows need (1h to "
                       "87600h)"))
    release_warning: bounded_window(PATROL_WARNING_MIN, PATROL_WARNING_MAX, noun=N_("a warning time"),  # type: ignore[valid-type]
                                    note=N_("30 days")) = Field(
        default=timedelta(hours=48),
        description=N_("warn this long before a provider releases a stopped instance by itself (1h to 720h, "
                       "or off)"))
    policies: list[PatrolPolicyConfig] = Field(default_factory=list)

    @field_validator("policies", mode="after")
    @classmethod
    def _unique(cls, v: list[PatrolPolicyConfig]) -> list[PatrolPolicyConfig]:
        seen: set[str] = set()
        for policy in v:
            if policy.name in seen:
                raise ValueError(_("two policies are named {name!r}: each name must be unique").format(name=policy.name))
            seen.add(policy.name)
        return v


class HooksConfig(_Section):
    """``[hooks]``: ``before_stop`` is a shell command run (with ``before_stop_timeout``) before
    costctl stops an instance, e.g. to sync outputs; its failure is recorded, not fatal."""

    before_stop: str | None = None
    before_stop_timeout: Duration = timedelta(seconds=60)


class StopConfig(_Section):
    """``[stop]``: how a stop is carried through until the provider confirms it.

    After a stop is sent, the instance's status is read every ``poll_interval``; while it still
    reads running ``resend_interval`` after the last request, the stop is sent again (stop and
    power-off are idempotent). A send that failed with a transient error (after the adapter's
    own retries) is sent again after a backoff from ``poll_interval`` doubling up to
    ``resend_interval``. When nothing is confirmed by ``deadline`` after the decision (or on a
    permanent error: a rejected credential, a missing capability), the instance's self-stop is
    tried where it has one (``[instance] self_stop``, an AutoDL container's ``shutdown``), else
    the stop is recorded as failed and the watch exits with status 69. The deadline counts from
    the first stop request (the before_stop hook and the end of the job come first, each with its
    own timeout). A self-stop that returns while this machine is still running
    ``self_stop_grace`` later did not stop it: failed too. A stop not confirmed
    ``unconfirmed_after`` after the first request (e.g. stuck in the provider's "stopping") is
    said once as "not confirmed yet" (the ``stop_failed`` notification: the loudest), long before
    the deadline; default 2 minutes (a provider normally confirms a stop within one), 1s to 8760h;
    one not shorter than ``deadline`` leaves only the deadline's failure to be said.
    """

    poll_interval: Duration = timedelta(seconds=5)
    resend_interval: Duration = timedelta(seconds=60)
    deadline: Duration = timedelta(minutes=15)
    self_stop_grace: Duration = timedelta(minutes=2)
    unconfirmed_after: Duration = timedelta(minutes=2)

    @model_validator(mode="after")
    def _ordered(self) -> "StopConfig":
        if self.poll_interval > self.deadline or self.resend_interval > self.deadline:
            raise ValueError(_("stop.poll_interval ({poll}) and stop.resend_interval ({resend}) must not be longer "
                               "than stop.deadline ({deadline})").format(
                poll=format_duration(self.poll_interval), resend=format_duration(self.resend_interval),
                deadline=format_duration(self.deadline)))
        return self


#: The events a notification can be sent for (``[notify] events``; :mod:`costctl.notify.events`
#: says which decisions and stop states each one covers).
NOTIFY_EVENTS: tuple[str, ...] = ("stop_pending", "stop_done", "stop_failed", "budget", "advice", "preemption",
                                  "job_end")
NotifyEvent = Literal["stop_pending", "stop_done", "stop_failed", "budget", "advice", "preemption", "job_end"]

_URL_SCHEME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://\S+$")


def _notify_target(value: Any) -> Any:
    """A bare URL string stands for ``{url = "..."}`` (the global ``events``)."""
    return value if isinstance(value, (dict, NotifyTarget)) else {"url": value}


class NotifyTarget(_Section):
    """One ``[notify] urls`` entry: an Apprise URL (``json://host:port/path``, ``dingtalk://...``,
    ``tgram://...``; ``autodl://TOKEN`` for AutoDL's WeChat push) and, optionally, the events it
    gets (default: ``[notify] events``). The URL is a secret: it is never printed, logged or
    stored; costctl names it ``notify URL N (scheme://host)``."""

    url: SecretStr
    events: list[NotifyEvent] | None = None

    @field_validator("url", mode="before")
    @classmethod
    def _url(cls, v: Any) -> Any:
        text = v.get_secret_value() if isinstance(v, SecretStr) else v
        if not isinstance(text, str) or not _URL_SCHEME_RE.match(text.strip()):
            # never quote the value: it may hold a token
            raise ValueError(_("expected an Apprise URL such as json://host:port/path or dingtalk://TOKEN"))
        return text.strip()


class NotifyConfig(_Section):
    """``[notify]``: messages to people through Apprise (DingTalk, Feishu/Lark, WeCom, Slack,
    Telegram, email, ntfy, ``json://`` webhooks...) and AutoDL's WeChat push (``autodl://TOKEN``).

    ``urls`` lists the targets (a URL, or ``{url = "...", events = [...]}`` for its own events);
    ``events`` is what the others get. Messages are sent from a short-lived child process
    (``python -m costctl.notify.send``; the URLs go through its stdin), never holding up a stop
    or a tick, each within ``timeout``. ``warn_before`` is how long before a pending stop the
    ``stop_pending`` warning comes (``off``: none). At most ``max_per_hour`` messages go out in
    any hour (a stop done or failed always goes); the same event is sent once.
    """

    urls: list[Annotated[NotifyTarget, BeforeValidator(_notify_target)]] = Field(default_factory=list)
    events: list[NotifyEvent] = Field(default_factory=lambda: list(NOTIFY_EVENTS))
    warn_before: Window = timedelta(minutes=5)
    max_per_hour: int = Field(default=12, ge=1, le=3600)
    timeout: bounded_duration(timedelta(seconds=1), timedelta(minutes=10),  # type: ignore[valid-type]
                              noun=N_("a timeout")) = timedelta(seconds=30)
    queue_max: int = Field(default=20, ge=1, le=1000)


class SnoozeConfig(_Section):
    """``[snooze]``: ``costctl snooze 1h`` from a shell of the same user postpones a pending idle
    autostop of the running watches, each time by at most ``max`` (``off``: the watch takes no
    snooze and opens no control socket). Budget caps and a failed stop are never snoozed."""

    max: Window = timedelta(hours=4)


#: An ISO 4217 code, upper-cased ("cny" -> "CNY").
Currency = Annotated[
    str, Field(pattern=r"^[A-Za-z]{3}$"), BeforeValidator(lambda v: v.upper() if isinstance(v, str) else v)
]


class PriceOverrideConfig(_Section):
    """One ``[[catalog.prices]]`` row: a price per GPU-hour that wins over shipped and imported ones.

    ``gpu`` is any spelling the catalog knows (or a new name); ``billing`` on-demand|spot;
    ``seen`` is the date the price was seen (YYYY-MM-DD); ``tier`` the provider's price tier
    when it has several (RunPod ``secure`` / ``community``).
    """

    provider: str = Field(min_length=1)
    gpu: str = Field(min_length=1)
    billing: Literal["on-demand", "spot"] = "on-demand"
    price_per_gpu_hour: MoneyAmount
    currency: Currency
    seen: date
    source: str | None = None
    tier: str | None = None


#: ``[serve] fleet_refresh`` and ``fleet_timeout`` bounds.
SERVE_FLEET_REFRESH_MIN, SERVE_FLEET_REFRESH_MAX = timedelta(seconds=10), timedelta(hours=24)
SERVE_FLEET_TIMEOUT_MIN, SERVE_FLEET_TIMEOUT_MAX = timedelta(seconds=1), timedelta(minutes=10)


class ServeConfig(_Section):
    """``[serve]``: ``costctl serve``, the metrics endpoint and dashboard.

    ``token``: what every request must carry (``Authorization: Bearer TOKEN``, or ``?token=`` in
    a browser's URL), at least 16 characters; required to bind an address that is not loopback
    unless ``--behind-proxy``. A secret: set it here or in ``COSTCTL_SERVE__TOKEN`` rather than
    on the command line (``--token``), where other users of the machine can read it.

    ``fleet_refresh``: how often the dashboard's instances table reads the configured provider
    accounts (``costctl fleet``'s read, in a background thread); ``fleet_timeout``: how long one
    such read waits for an account before showing it as unreadable (the page never waits).
    """

    token: SecretStr | None = Field(default=None, description=N_("the token every request must carry (at least 16 "
                                                                   "characters); none: no check on a loopback bind"))
    fleet_refresh: bounded_duration(SERVE_FLEET_REFRESH_MIN, SERVE_FLEET_REFRESH_MAX,  # type: ignore[valid-type]
                                    noun=N_("an interval")) = Field(
        default=timedelta(seconds=60),
        description=N_("how often the dashboard's instances table reads the provider accounts (10s to 24h)"))
    fleet_timeout: bounded_duration(SERVE_FLEET_TIMEOUT_MIN, SERVE_FLEET_TIMEOUT_MAX,  # type: ignore[valid-type]
                                    noun=N_("a time limit")) = Field(
        default=timedelta(seconds=20),
        description=N_("an account that has not answered a fleet read by then is shown as unreadable (1s to 10m)"))


class UiConfig(_Section):
    """``[ui]``: how costctl talks to people.

    ``language``: ``auto`` (from ``LANGUAGE``/``LC_ALL``/``LC_MESSAGES``/``LANG``: any ``zh*``
    locale gives Simplified Chinese, ``C`` and the rest English), ``en`` or ``zh_CN``
    (:mod:`costctl.i18n`). ``--help`` follows ``COSTCTL_UI__LANGUAGE`` and the locale variables
    (it is printed before any config file is read).
    """

    language: Literal["auto", "en", "zh_CN"] = Field(
        default="auto", description=N_("auto (from LANG/LC_ALL), en or zh_CN (Simplified Chinese)"))


class ExchangeRateConfig(_Section):
    """One ``[[catalog.exchange_rates]]`` row: ``1 base = rate quote`` as seen on ``as_of``."""

    base: Currency
    quote: Currency
    rate: Annotated[Decimal, Field(ge=MIN_EXCHANGE_RATE, le=MAX_EXCHANGE_RATE)]
    as_of: date


class CatalogConfig(_Section):
    """``[catalog]``: price overrides, exchange rates (prices in different currencies are ranked
    together only through one of these), and the ``currency`` to rank in when rates allow."""

    prices: list[PriceOverrideConfig] = Field(default_factory=list)
    exchange_rates: list[ExchangeRateConfig] = Field(default_factory=list)
    currency: Currency | None = None


class Settings(BaseSettings):
    """The whole configuration. Build it with :func:`load_settings`, not directly.

    ``providers`` holds one free-form table per provider (``[providers.autodl]``); each
    adapter validates its own table. ``database_url`` is any SQLAlchemy URL (default: a
    SQLite file in the user data dir).
    """

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter="__",
        extra="forbid",
        validate_default=True,
        case_sensitive=False,
    )

    database_url: str | None = None
    data_dir: Path | None = None
    instance: InstanceConfig = InstanceConfig()
    watch: WatchConfig = WatchConfig()
    ledger: LedgerConfig = LedgerConfig()
    bill: BillConfig = BillConfig()
    fleet: FleetConfig = FleetConfig()
    patrol: PatrolConfig = PatrolConfig()
    policies: PoliciesConfig = Field(default_factory=PoliciesConfig)  # type: ignore[valid-type]
    hooks: HooksConfig = HooksConfig()
    stop: StopConfig = StopConfig()
    checkpoint: CheckpointConfig = CheckpointConfig()
    preemption: PreemptionConfig = PreemptionConfig()
    downsize: DownsizeConfig = DownsizeConfig()
    oom: OomConfig = OomConfig()
    notify: NotifyConfig = NotifyConfig()
    snooze: SnoozeConfig = SnoozeConfig()
    serve: ServeConfig = ServeConfig()
    catalog: CatalogConfig = CatalogConfig()
    ui: UiConfig = UiConfig()
    providers: dict[str, dict[str, Any]] = Field(default_factory=dict)

    _toml_path: ClassVar[Path | None] = None
    _config_path: Path | None = PrivateAttr(default=None)

    @field_validator("database_url", "data_dir", mode="before")
    @classmethod
    def _no_nul(cls, value: Any) -> Any:
        if isinstance(value, (str, Path)) and "\x00" in str(value):
            raise ValueError(_("expected text without NUL bytes"))
        return value

    @model_validator(mode="after")
    def _patrol_names_configured(self) -> "Settings":
        """Each ``[[patrol.policies]]`` filter ``provider`` names a configured provider, and its
        ``account`` an account of one (:func:`patrol_filter_problem`); else a ValidationError
        located at the filter's value, so the line names the policy's index, the key and the value."""
        found = patrol_filter_problem(self)
        if found is not None:
            loc, value, problem = found
            raise ValidationError.from_exception_data(type(self).__name__, [InitErrorDetails(
                type=PydanticCustomError("value_error", "{problem}", {"problem": problem}), loc=loc, input=value)])
        return self

    @model_validator(mode="after")
    def _guard_lag_covers_sync(self) -> "Settings":
        """In fleet mode (``[ledger] central_url`` set) a ``[fleet] guard_lag`` set in the same
        config is at least ``[ledger] sync_interval`` + :data:`SYNCED_HEARTBEAT_DELAY`: a watch's
        heartbeat reaches the central ledger that late at worst, so a shorter lag reads every
        guarded instance as unguarded (and a patrol may stop it). Else a ValidationError located at
        ``fleet.guard_lag``."""
        found = guard_lag_problem(self)
        if found is not None:
            written, problem = found
            raise ValidationError.from_exception_data(type(self).__name__, [InitErrorDetails(
                type=PydanticCustomError("value_error", "{problem}", {"problem": problem}), loc=("fleet", "guard_lag"),
                input=written)])
        return self

    @property
    def config_path(self) -> Path | None:
        """The TOML file these settings were read from (None: defaults and environment only)."""
        return self._config_path

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, _BoundedEnvSource(settings_cls)]
        if cls._toml_path is not None:
            sources.append(_TomlSource(settings_cls, toml_file=cls._toml_path))
        return tuple(sources)


class _TomlSource(TomlConfigSettingsSource):
    """pydantic-settings' TOML source, reading the file through :func:`costctl.tomlfile.load`
    (one leading UTF-8 byte-order mark allowed, as Windows editors write it)."""

    def _read_file(self, file_path: Any) -> dict[str, Any]:
        return tomlfile.load(Path(file_path))


def _configured_accounts(settings: Settings) -> dict[str, list[str]]:
    """Provider -> its named accounts (``[providers.<name>.accounts.*]``), for each configured
    provider (``[instance] provider`` first, then each ``[providers.*]`` table, as
    :func:`costctl.cloud.configured_providers`); a malformed ``accounts`` reads as none (the
    provider's own check says what is wrong with it)."""
    names = [settings.instance.provider, *(n for n in settings.providers if n != settings.instance.provider)]
    accounts: dict[str, list[str]] = {}
    for name in names:
        raw = settings.providers.get(name, {}).get("accounts", {}) if isinstance(settings.providers.get(name), dict) \
            else {}
        accounts[name] = [str(a) for a in raw] if isinstance(raw, dict) else []
    return accounts


def guard_lag_problem(settings: Settings) -> tuple[str, str] | None:
    """``([fleet] guard_lag as written, the problem)`` when the config is in fleet mode
    (``[ledger] central_url``) and sets a guard lag shorter than ``[ledger] sync_interval`` +
    :data:`SYNCED_HEARTBEAT_DELAY` (the latest a fleet-mode watch's heartbeat reaches the central
    ledger); None otherwise (no central ledger, guard_lag unset: its default allows for it)."""
    lag, sync = settings.fleet.guard_lag, settings.ledger.sync_interval
    if settings.ledger.central_url is None or lag is None or lag >= sync + SYNCED_HEARTBEAT_DELAY:
        return None
    least = sync + SYNCED_HEARTBEAT_DELAY
    return format_duration(lag), _(
        "shorter than [ledger] sync_interval ({sync}) + {delay}: in fleet mode a watch's heartbeat reaches the "
        "central ledger only every sync_interval, so every guarded instance would read unguarded; expected at "
        "least {least}, or leave guard_lag out").format(sync=format_duration(sync),
                                                          delay=format_duration(SYNCED_HEARTBEAT_DELAY),
                                                          least=format_duration(least))


def patrol_filter_problem(settings: Settings) -> tuple[tuple[str | int, ...], str, str] | None:
    """The first ``[[patrol.policies]]`` filter naming what is not configured, as ``(location,
    value, problem)``: a ``provider`` no ``[providers.*]`` table (nor ``[instance] provider``)
    configures, or an ``account`` that is neither ``"default"`` nor an account of one of the
    policy's providers (every configured provider when the policy sets none); None when all hold."""
    accounts = _configured_accounts(settings)
    for index, policy in enumerate(settings.patrol.policies):
        f = policy.filters
        for i, name in enumerate(f.provider or ()):
            if name not in accounts:
                return (("patrol", "policies", index, "filters", "provider", i), name, _(
                    "provider {name!r} is not configured (no [providers.{name}] table, and [instance] provider is "
                    "{instance}); expected one of {known}").format(
                    name=name, instance=settings.instance.provider, known=", ".join(accounts)))
        scope = f.provider or list(accounts)
        named = [f"{a} ({p})" for p in scope for a in accounts.get(p, ())]
        for i, account in enumerate(f.account or ()):
            if account != "default" and not any(account in accounts.get(p, ()) for p in scope):
                return (("patrol", "policies", index, "filters", "account", i), account, _(
                    "no account {account!r} is configured for {providers}; expected default (a provider's default "
                    "account) or one of: {known}").format(account=account, providers=", ".join(scope),
                                                          known=", ".join(named) or _("none")))
    return None


class _BoundedEnvSource(EnvSettingsSource):
    """pydantic-settings' environment source, its JSON values (a table or a list in one
    variable) read by :func:`costctl.jsonio.loads`: nesting past the parser's recursion limit is
    a one-line :class:`ConfigError` naming the variable, never a ``RecursionError``."""

    def decode_complex_value(self, field_name: str, field: Any, value: Any) -> Any:
        """Raises:
            ConfigError: ``value`` nests arrays/objects too deeply to read.
        """
        if isinstance(value, str):
            try:
                jsonio.loads(value)
            except jsonio.JsonTooDeep:
                raise ConfigError(_deep_variable(value)) from None
            except ValueError:
                pass  # no JSON at all: pydantic-settings says so in its own way
        return super().decode_complex_value(field_name, field, value)


def _deep_variable(value: str) -> str:
    """The line for a ``COSTCTL_*`` variable whose JSON value nests too deeply."""
    names = sorted(name for name, held in os.environ.items()
                   if held == value and name.upper().startswith(ENV_PREFIX))
    return _("environment variable {name}: JSON nested too deeply to read; expected a JSON object or list "
             "a few levels deep").format(name=names[0] if names else ENV_PREFIX + "*")


# Environment variables that belong to costctl but are not settings keys: the job-side protocol
# (every ``ENV_*`` of costctl.job: a costctl started from inside a job — the relay's on-exit
# watch — inherits them), the config file's location, the log reader's engine (COSTCTL_PARSER,
# read by costctl.progress.lines at import) and the test suite's (COSTCTL_TEST_*, COSTCTL_CORPUS).
_NON_SETTING_ENV = {"COSTCTL_CONFIG", "COSTCTL_RUN_ID", "COSTCTL_CORPUS", "COSTCTL_PARSER",
                    *(value for name, value in vars(_job).items() if name.startswith("ENV_"))}
_NON_SETTING_ENV_PREFIXES = ("COSTCTL_TEST_",)


#: Dotted key prefixes whose values are secrets, never quoted in a message (an Apprise URL
#: holds its service's token).
SECRET_KEYS = ("notify.urls", "serve.token")


def _one_line(err: ValidationError, path: Path | None = None) -> str:
    """``err``'s first problem as one line; ``path``: the config file the value came from (a
    float is then quoted as the file writes it, :func:`_written_float`)."""
    first = ordered_problems(err)[0]
    loc = first["loc"]
    if first["type"] == "extra_forbidden" and len(loc) == 2 and loc[0] == "policies":
        return _("unknown policy [policies.{name}]; known: {known} (a third-party policy registers through the "
                 "{group} entry-point group)").format(name=loc[1], known=", ".join(known_policies()),
                                                      group=ENTRY_POINT_GROUP)
    written = _written_float(path, tuple(loc)) if path is not None and isinstance(first.get("input"), float) else None
    return one_line(err, unknown_hint=_("(check the spelling; `costctl init` writes every key)"), ranges=key_range,
                    secret_keys=SECRET_KEYS, written=written)


class _WrittenFloat(str):
    """A TOML float's text as written (``tomllib``'s ``parse_float``): ``1e400``, not ``inf``."""


def _written_float(path: Path, loc: tuple[Any, ...]) -> str | None:
    """The text of the TOML float at ``loc`` in the config file ``path`` as the user wrote it
    (``1e400`` or ``1e-400``, which the parser reads as ``inf`` and ``0.0``); None when the file
    no longer reads or holds no float there."""
    try:
        node: Any = tomlfile.load(path, parse_float=_WrittenFloat)
    except (OSError, ValueError, RecursionError):
        return None
    for part in loc:
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        else:
            return None
    return str(node) if isinstance(node, _WrittenFloat) else None


def key_range(loc: tuple[Any, ...]) -> str:
    """The documented range of the setting at ``loc`` (``("policies", "idle",
    "min_gpu_utilization")`` -> ``"0 to 100"``): :func:`costctl.config_types.value_range` of
    its field; ``""`` for a key with none or no such key."""
    from pydantic.fields import FieldInfo

    from .config_types import value_range

    model: Any = settings_model()
    field: FieldInfo | None = None
    for part in loc:
        if isinstance(part, int):  # a row of a list ([[catalog.prices]]): its model comes next
            continue
        while typing.get_origin(model) is list and typing.get_args(model):
            model = typing.get_args(model)[0]
        if not (isinstance(model, type) and issubclass(model, BaseModel)) or part not in model.model_fields:
            return ""
        field = model.model_fields[part]
        model = field.annotation
    return value_range(field) if field is not None else ""


def _setting_variables() -> dict[tuple[str, ...], str]:
    """The ``COSTCTL_*`` settings variables set now: their key path (lower case, ``("policies",
    "idle", "time_window")``) -> the variable's name as set."""
    found: dict[tuple[str, ...], str] = {}
    for name in os.environ:
        upper = name.upper()
        if (upper.startswith(ENV_PREFIX) and upper not in _NON_SETTING_ENV
                and not upper.startswith(_NON_SETTING_ENV_PREFIXES)):
            found[tuple(upper[len(ENV_PREFIX):].lower().split("__"))] = name
    return found


def _in_overrides(overrides: dict[str, Any] | None, path: tuple[str, ...]) -> bool:
    """Whether ``overrides`` (the CLI flags' nested dict) sets ``path`` or a table above it."""
    node: Any = overrides or {}
    for part in path:
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def _json_holds(text: str, path: tuple[str, ...]) -> bool:
    """Whether the JSON object ``text`` (a table or a list given in one variable) sets ``path``:
    the keys it names, down to a list or a plain value, which holds the rest of the path
    (``["json://x", 5]`` holds ``1.url``)."""
    try:
        node: Any = jsonio.loads(text)
    except ValueError:
        return False
    for part in path:
        if not isinstance(node, dict):
            # a list, or a value where the model wanted a table: the variable gave the whole
            # value there (a list is never merged with the config file's), so the bad item too
            return True
        lowered = {str(k).lower(): v for k, v in node.items()}
        if part not in lowered:
            return False
        node = lowered[part]
    return True


def env_variable_for(path: tuple[str, ...], overrides: dict[str, Any] | None = None) -> str | None:
    """The ``COSTCTL_*`` variable a setting's value at ``path`` came from: the variable naming
    the key itself (``COSTCTL_POLICIES__IDLE__TIME_WINDOW``), else one naming a table above it
    whose JSON value sets the key (``COSTCTL_POLICIES__IDLE='{"time_window": "10m"}'``). None
    when no variable gave it (the config file, a default) or a command-line option did
    (``overrides``, which win over the environment)."""
    if _in_overrides(overrides, path):
        return None
    variables = _setting_variables()
    if path in variables:
        return variables[path]
    for cut in range(len(path) - 1, 0, -1):
        name = variables.get(path[:cut])
        if name is not None and _json_holds(os.environ[name], path[cut:]):
            return name
    return None


def _where(err: ValidationError, path: Path | None, overrides: dict[str, Any] | None) -> str:
    """``err``'s first problem as one line, naming where the bad value came from: an environment
    variable by its name, a value of the config file after the file's path, a command-line
    option (or a default) alone."""
    first = ordered_problems(err)[0]
    loc = tuple(str(p).lower() for p in first["loc"])
    key = ".".join(str(p) for p in first["loc"])
    variable = env_variable_for(loc, overrides) if loc else None
    if variable is not None:
        if variable.upper() == ENV_PREFIX + "__".join(loc).upper():  # the variable names the key itself
            if first["type"] == "extra_forbidden":
                return _("unknown environment variable {variable} (no key '{key}' in the config; "
                         "`costctl init` writes every key)").format(variable=variable, key=key)
            return one_line(err, ranges=key_range, secret_keys=SECRET_KEYS,
                            shown_key=_("environment variable {variable}").format(variable=variable))
        return _("environment variable {variable}: {problem}").format(variable=variable, problem=_one_line(err))
    if _in_overrides(overrides, loc) or path is None:
        return _one_line(err)
    return _("{path}: {problem}").format(path=path, problem=_one_line(err, path))


def _table_variable(message: str) -> str:
    """pydantic-settings could not read a variable holding a table or a list (its value is no
    JSON of that kind): one line naming the variable, its value (hidden for a secret's: notify
    URLs hold tokens) and what is allowed."""
    variables = _setting_variables()
    for parts, name in sorted(variables.items()):
        value = os.environ[name]
        kind = _complex_kind(parts)
        if kind is None:
            continue
        try:
            parsed = jsonio.loads(value)
        except ValueError:
            parsed = _NOT_JSON
        if kind == "table" and not isinstance(parsed, dict):
            return _("environment variable {name} = {value}: expected a JSON object for the table [{table}], "
                     "or one variable per key ({name}__<KEY>=...)").format(
                name=name, value=_shown_env_value(parts, value), table=".".join(parts))
        if kind == "list" and not isinstance(parsed, list):
            return _("environment variable {name} = {value}: expected a JSON list, like {name}='[\"a\", \"b\"]'").format(
                name=name, value=_shown_env_value(parts, value))
    return _("cannot read the COSTCTL_* environment variables: {problem}").format(problem=message)


#: what :func:`json.loads` gave for a value that is no JSON at all.
_NOT_JSON = object()


def _shown_env_value(parts: tuple[str, ...], value: str) -> str:
    """An environment variable's value as a message quotes it: ``(hidden)`` under a secret key
    (:data:`SECRET_KEYS`), else its ``repr``, cut (:func:`costctl.validation.describe_value`)."""
    key = ".".join(parts)
    if any(key == s or key.startswith(s + ".") or s.startswith(key + ".") for s in SECRET_KEYS):
        return _("(hidden)")
    return describe_value(value)


def _complex_kind(parts: tuple[str, ...]) -> str | None:
    """``"table"`` when the key path ``parts`` names a table of the settings (a section, a
    policy's section, a provider's table), ``"list"`` when it names a list-valued key (``[notify]
    urls``): the values pydantic-settings reads from one variable as JSON; None otherwise."""
    model: Any = settings_model()
    for part in parts:
        if isinstance(model, type) and issubclass(model, BaseModel) and part in model.model_fields:
            model = model.model_fields[part].annotation
        elif model is dict or typing.get_origin(model) is dict:
            model = dict
        else:
            return None
    if (isinstance(model, type) and issubclass(model, BaseModel)) or model is dict or typing.get_origin(model) is dict:
        return "table"
    if model in (list, set, tuple, frozenset) or typing.get_origin(model) in (list, set, tuple, frozenset):
        return "list"
    return None


_settings_models: dict[type, type[Settings]] = {}


def settings_model() -> type[Settings]:
    """The Settings class for the policies registered now: :class:`Settings` itself when only
    the built-ins are, else a subclass whose ``policies`` field also holds the plugin policies
    (cached per registry state). Does not discover plugins: :func:`load_settings` does."""
    model = policies_model()
    if model is PoliciesConfig:
        return Settings
    cls = _settings_models.get(model)
    if cls is None:
        cls = create_model("Settings", __base__=Settings, __module__=__name__,
                           policies=(model, Field(default_factory=model)))  # type: ignore[call-overload]
        cls.__doc__ = Settings.__doc__
        _settings_models[model] = cls
    return cls


def find_config_file(explicit: Path | None, cwd: Path | None = None) -> Path | None:
    """The config file to read: ``explicit``, else ``$COSTCTL_CONFIG``, else ./costctl.toml if present.

    Raises:
        ConfigError: if an explicitly named file does not exist.
    """
    if explicit is None and os.environ.get("COSTCTL_CONFIG"):
        explicit = Path(os.environ["COSTCTL_CONFIG"])
    if explicit is not None:
        if explicit.is_dir():
            raise ConfigError(_("config file {path} is a directory; expected a TOML file (`costctl init` "
                                "writes one)").format(path=explicit))
        if not explicit.is_file():
            raise ConfigError(_("config file {path} does not exist (or is not a file)").format(path=explicit))
        return explicit
    candidate = (cwd or Path.cwd()) / CONFIG_FILE_NAME
    if candidate.is_file():
        return candidate
    if candidate.exists():  # a directory (or a socket...) in the config file's place: never ignored
        raise ConfigError(_("{path} is not a file: costctl reads its config from a TOML file of that name in the "
                            "working directory; rename it, or give --config FILE").format(path=candidate))
    return None


def load_settings(config: Path | None = None, overrides: dict[str, Any] | None = None) -> Settings:
    """Load and validate settings.

    Args:
        config: a TOML file (``--config``); default: ``$COSTCTL_CONFIG`` or ./costctl.toml.
        overrides: nested dict from CLI flags, highest precedence.

    Raises:
        ConfigError: unreadable/invalid TOML, unknown key or section, or a bad value, or a
            policy plugin (``costctl.policies`` entry point) that cannot be loaded — one line.
    """
    path = find_config_file(config)
    discover_policies()  # the costctl.policies entry points (once per process); ConfigError if broken
    settings_cls = settings_model()
    if path is not None:
        require_regular_file(path)
        try:
            tomlfile.load(path)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(toml_error_text(str(path), exc)) from None
        except UnicodeDecodeError as exc:  # TOML is UTF-8
            raise ConfigError(_("{path}: not valid TOML: {problem}").format(
                path=path, problem=_("not UTF-8 text at byte {offset}").format(offset=exc.start))) from None
        except RecursionError:
            raise ConfigError(_("{path}: not valid TOML: {problem}").format(
                path=path, problem=_("arrays or tables nested too deeply"))) from None
        except ValueError as exc:  # an integer past Python's 4,300-digit conversion limit
            raise ConfigError(_("{path}: not valid TOML: {problem}").format(
                path=path, problem=_("a number too long to read ({detail})").format(detail=str(exc)[:60]))) from None
        except OSError as exc:
            raise ConfigError(_("{path}: cannot read: {problem}").format(path=path, problem=exc.strerror)) from None
    for key in os.environ:
        upper = key.upper()
        if (upper.startswith(ENV_PREFIX) and upper not in _NON_SETTING_ENV
                and not upper.startswith(_NON_SETTING_ENV_PREFIXES)):
            top = upper[len(ENV_PREFIX):].split("__", 1)[0].lower()
            if top not in Settings.model_fields:
                raise ConfigError(_("unknown environment variable {variable} (no key '{key}' in the config)").format(
                    variable=key, key=top))
    Settings._toml_path = path
    try:
        settings = settings_cls(**(overrides or {}))
        settings._config_path = path
        return settings
    except ValidationError as exc:
        raise ConfigError(_where(exc, path, overrides)) from None
    except SettingsError as exc:  # a table's variable that is no JSON object
        raise ConfigError(_table_variable(str(exc))) from None
    finally:
        Settings._toml_path = None
