"""Configuration: ``costctl.toml`` plus ``COSTCTL_*`` environment variables (pydantic-settings).

Precedence, highest first: explicit overrides (CLI flags) > environment > TOML file > defaults.
Nested keys in the environment use ``__``: ``COSTCTL_POLICIES__IDLE__TIME_WINDOW=10m``.

Durations are written ``90s``, ``30m``, ``2h``, ``1h30m`` or a number of seconds; windows also
accept ``off`` (disabled; never zero). Money is a string or number, held as Decimal.
Unknown keys and sections are errors. :func:`load_settings` turns every problem into one
:class:`~costctl.errors.ConfigError` line naming the key, the value and what is allowed.
"""

from __future__ import annotations

import os
import re
import tomllib
from datetime import date, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import (
    BaseModel,
    BeforeValidator,
    ByteSize,
    ConfigDict,
    Field,
    PlainSerializer,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from .errors import ConfigError
from .money import parse_decimal
from .validation import one_line

CONFIG_FILE_NAME = "costctl.toml"
ENV_PREFIX = "COSTCTL_"

_DURATION_RE = re.compile(r"^\s*(?:(\d+(?:\.\d+)?)\s*h)?\s*(?:(\d+(?:\.\d+)?)\s*m)?\s*(?:(\d+(?:\.\d+)?)\s*s)?\s*$")
DURATION_ALLOWED = "a duration like 90s, 30m, 2h, 1h30m or a number of seconds (at least 1s)"
WINDOW_ALLOWED = DURATION_ALLOWED + ", or off"


def parse_duration(value: Any) -> timedelta:
    """Parse ``90s``, ``30m``, ``2h``, ``1h30m``, a bare number of seconds, or a timedelta.

    Returns:
        a positive timedelta (>= 1 s).

    Raises:
        ValueError: for anything else, including zero, negatives and ``off``.
    """
    if isinstance(value, timedelta):
        td = value
    elif isinstance(value, bool):
        raise ValueError(f"expected {DURATION_ALLOWED}")
    elif isinstance(value, (int, float, Decimal)):
        td = timedelta(seconds=float(value))
    elif isinstance(value, str):
        text = value.strip().lower()
        try:
            td = timedelta(seconds=float(text))
        except ValueError:
            m = _DURATION_RE.match(text)
            if not text or not m or not any(m.groups()):
                raise ValueError(f"expected {DURATION_ALLOWED}") from None
            h, mi, s = (float(g) if g else 0.0 for g in m.groups())
            td = timedelta(hours=h, minutes=mi, seconds=s)
    else:
        raise ValueError(f"expected {DURATION_ALLOWED}")
    if td < timedelta(seconds=1):
        raise ValueError(f"expected {DURATION_ALLOWED}")
    return td


def parse_window(value: Any) -> timedelta | None:
    """Like :func:`parse_duration`, but ``off`` (or ``false``) disables the window: returns None."""
    if value is None or value is False:
        return None
    if isinstance(value, str) and value.strip().lower() in {"off", "false", "none", "disabled"}:
        return None
    try:
        return parse_duration(value)
    except ValueError:
        raise ValueError(f"expected {WINDOW_ALLOWED}") from None


def _format_duration(td: timedelta | None) -> str:
    if td is None:
        return "off"
    secs = td.total_seconds()
    if secs % 3600 == 0:
        return f"{int(secs // 3600)}h"
    if secs % 60 == 0:
        return f"{int(secs // 60)}m"
    return f"{secs:g}s"


def _money(value: Any) -> Decimal:
    try:
        amount = parse_decimal(value)
    except ConfigError:
        raise ValueError("expected an amount of money like 2.5 or \"2.50\"") from None
    if amount < 0:
        raise ValueError("expected an amount of money >= 0")
    return amount


Duration = Annotated[timedelta, BeforeValidator(parse_duration), PlainSerializer(_format_duration)]
Window = Annotated[timedelta | None, BeforeValidator(parse_window), PlainSerializer(_format_duration)]
MoneyAmount = Annotated[Decimal, BeforeValidator(_money), PlainSerializer(str)]
Percent = Annotated[float, Field(ge=0, le=100)]
Action = Literal["advise", "stop"]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


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

    @field_validator("currency")
    @classmethod
    def _upper(cls, v: str) -> str:
        return v.upper()


class WatchConfig(_Section):
    """``[watch]``: the sampling loop.

    ``sample_interval`` is how often telemetry is read and policies evaluated; ``grace_period``
    is how long a child gets between SIGTERM and SIGKILL; ``timezone`` (IANA name) decides
    where a day starts for daily caps and ``bill --by day``.
    """

    sample_interval: Duration = timedelta(seconds=5)
    grace_period: Duration = timedelta(seconds=10)
    timezone: str = "UTC"
    on_exit: Literal["guard", "stop", "leave"] = "guard"
    total_steps: int | None = Field(default=None, ge=1)
    status_line: bool = True

    @field_validator("timezone")
    @classmethod
    def _tz(cls, v: str) -> str:
        try:
            ZoneInfo(v)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError("expected an IANA time zone name such as UTC or Asia/Shanghai") from None
        return v

    @property
    def tz(self) -> ZoneInfo:
        """The configured zone as a ZoneInfo."""
        return ZoneInfo(self.timezone)


class IdleConfig(_Section):
    """``[policies.idle]``: autostop when every present signal stayed idle for ``time_window``.

    Names follow dstack's ``utilization_policy`` (``min_gpu_utilization``, ``time_window``),
    but costctl requires ALL GPUs to be idle (dstack stops when ANY GPU is).
    ``min_cpu_utilization`` is percent of one core, summed over the watched process tree.
    """

    action: Action = "stop"
    time_window: Window = timedelta(minutes=30)
    min_gpu_utilization: Percent = 5.0
    min_cpu_utilization: float = Field(default=10.0, ge=0)
    count_ssh_sessions: bool = False


class StallConfig(_Section):
    """``[policies.stall]``: the job is alive but reported no progress for ``stall_window``."""

    action: Action = "advise"
    stall_window: Window = timedelta(minutes=30)


class BudgetConfig(_Section):
    """``[policies.budget]``: caps in the instance's currency.

    ``total`` caps the instance's whole recorded spend, ``daily`` the spend of the current day
    in ``[watch] timezone``. A warning is raised at ``warn_at`` (fraction, default 0.8) of a
    cap and the action at 1.0.
    """

    action: Action = "stop"
    total: MoneyAmount | None = None
    daily: MoneyAmount | None = None
    warn_at: float = Field(default=0.8, gt=0, le=1)


class PlateauConfig(_Section):
    """``[policies.plateau]``: PyTorch ``ReduceLROnPlateau``'s rule, applied to the loss.

    ``mode`` min|max, ``threshold``, ``threshold_mode`` rel|abs, ``patience`` (bad progress
    points tolerated), ``cooldown`` (points ignored after firing), as in
    ``torch.optim.lr_scheduler.ReduceLROnPlateau``. ``smoothing`` in [0, 1) is TensorBoard's
    debiased EMA weight (0 = off). ``monitor`` picks the train or the eval loss.
    """

    action: Literal["advise", "stop", "downsize"] = "advise"
    mode: Literal["min", "max"] = "min"
    threshold: float = Field(default=1e-4, ge=0)
    threshold_mode: Literal["rel", "abs"] = "rel"
    patience: int = Field(default=10, ge=0)
    cooldown: int = Field(default=0, ge=0)
    smoothing: float = Field(default=0.0, ge=0, lt=1)
    monitor: Literal["train", "eval"] = "train"


class DivergenceConfig(_Section):
    """``[policies.divergence]``: a NaN or infinite loss."""

    action: Action = "advise"


class PoliciesConfig(_Section):
    """``[policies.*]`` sections."""

    idle: IdleConfig = IdleConfig()
    stall: StallConfig = StallConfig()
    budget: BudgetConfig = BudgetConfig()
    plateau: PlateauConfig = PlateauConfig()
    divergence: DivergenceConfig = DivergenceConfig()


def _signal_name(value: Any) -> str | None:
    """``"off"``/None -> None; ``"SIGUSR1"``, ``"usr1"``, ``10`` -> ``"SIGUSR1"`` (a signal a
    process can handle: never SIGKILL or SIGSTOP)."""
    import signal as _signal

    if value is None or value is False:
        return None
    if isinstance(value, str) and value.strip().lower() in {"off", "none", "false", ""}:
        return None
    allowed = "off, or a signal name such as SIGUSR1 or SIGUSR2 (never SIGKILL/SIGSTOP)"
    try:
        if isinstance(value, int) and not isinstance(value, bool):
            sig = _signal.Signals(value)
        elif isinstance(value, str):
            name = value.strip().upper()
            sig = _signal.Signals[name if name.startswith("SIG") else "SIG" + name]
        else:
            raise ValueError
    except (KeyError, ValueError):
        raise ValueError(f"expected {allowed}") from None
    if sig in (_signal.SIGKILL, _signal.SIGSTOP):
        raise ValueError(f"expected {allowed}")
    return sig.name


SignalName = Annotated[str | None, BeforeValidator(_signal_name)]


class CheckpointConfig(_Section):
    """``[checkpoint]``: how costctl asks the job for a checkpoint and where it looks for one.

    costctl asks by creating the file named in the job's ``$COSTCTL_CHECKPOINT_REQUEST``
    (see :mod:`costctl.job`); only when ``signal`` is set does it also send that signal, to the
    worker processes (the ranks a launcher such as torchrun started, never the launcher
    itself). ``path`` is a file, a directory or a glob (``checkpoints/*.pt``, ``out/**/*.ckpt``)
    where the job writes checkpoints; the newest match by modification time is the one to
    resume from. ``deadline`` is how long a request may take. Periodic requests (``periodic``:
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
            raise ValueError(
                f"min_interval ({_format_duration(self.min_interval)}) must not exceed "
                f"max_interval ({_format_duration(self.max_interval)})"
            )
        return self


class PreemptionConfig(_Section):
    """``[preemption]``: preemption notices on spot/interruptible instances.

    The notice source (the sim provider, or the AWS/GCP/Azure metadata service) is polled every
    ``poll_interval`` (AWS recommends 5 s). On a notice costctl requests a checkpoint at once and
    ends the job and stops the instance ``margin`` plus ``[watch] grace_period`` before the
    deadline. The ``*_base_url`` keys point the metadata clients elsewhere (tests, proxies).
    """

    poll_interval: Duration = timedelta(seconds=5)
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
    peak_memory: ByteSize | None = None
    compute_dtype: Literal["fp16", "bf16", "fp32"] = "fp16"
    underutilized_memory_fraction: float = Field(default=0.5, gt=0, le=1)
    underutilized_gpu_utilization: Percent = 50.0


class OomConfig(_Section):
    """``[oom]``: CUDA out-of-memory recovery. ``action = "retry"`` (or ``--on-oom retry``)
    restarts the job with the batch halved and gradient accumulation doubled, down to
    ``min_batch``; ``"advise"`` prints those numbers."""

    action: Literal["advise", "retry"] = "advise"
    min_batch: int = Field(default=1, ge=1)


class HooksConfig(_Section):
    """``[hooks]``: ``before_stop`` is a shell command run (with ``before_stop_timeout``) before
    costctl stops an instance, e.g. to sync outputs; its failure is recorded, not fatal."""

    before_stop: str | None = None
    before_stop_timeout: Duration = timedelta(seconds=60)


#: An ISO 4217 code, upper-cased ("cny" -> "CNY").
Currency = Annotated[
    str, Field(pattern=r"^[A-Za-z]{3}$"), BeforeValidator(lambda v: v.upper() if isinstance(v, str) else v)
]


class PriceOverrideConfig(_Section):
    """One ``[[catalog.prices]]`` row: a price per GPU-hour that wins over shipped and imported ones.

    ``gpu`` is any spelling the catalog knows (or a new name); ``billing`` on-demand|spot;
    ``seen`` is the date the price was seen (YYYY-MM-DD).
    """

    provider: str = Field(min_length=1)
    gpu: str = Field(min_length=1)
    billing: Literal["on-demand", "spot"] = "on-demand"
    price_per_gpu_hour: MoneyAmount
    currency: Currency
    seen: date
    source: str | None = None


class ExchangeRateConfig(_Section):
    """One ``[[catalog.exchange_rates]]`` row: ``1 base = rate quote`` as seen on ``as_of``."""

    base: Currency
    quote: Currency
    rate: Annotated[Decimal, Field(gt=0)]
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
    policies: PoliciesConfig = PoliciesConfig()
    hooks: HooksConfig = HooksConfig()
    checkpoint: CheckpointConfig = CheckpointConfig()
    preemption: PreemptionConfig = PreemptionConfig()
    downsize: DownsizeConfig = DownsizeConfig()
    oom: OomConfig = OomConfig()
    catalog: CatalogConfig = CatalogConfig()
    providers: dict[str, dict[str, Any]] = Field(default_factory=dict)

    _toml_path: ClassVar[Path | None] = None
    _config_path: Path | None = PrivateAttr(default=None)

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
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        if cls._toml_path is not None:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=cls._toml_path))
        return tuple(sources)


# Environment variables that belong to costctl but are not settings keys.
# Environment variables that belong to costctl but are not settings keys: the job-side protocol
# (costctl.job), the config file's location, and the test suite's (COSTCTL_TEST_*, COSTCTL_CORPUS).
_NON_SETTING_ENV = {"COSTCTL_CONFIG", "COSTCTL_CHECKPOINT_REQUEST", "COSTCTL_RESUME_FROM",
                    "COSTCTL_BATCH_SIZE", "COSTCTL_ACCUM_STEPS", "COSTCTL_RUN_ID", "COSTCTL_CORPUS"}
_NON_SETTING_ENV_PREFIXES = ("COSTCTL_TEST_",)


def _one_line(err: ValidationError) -> str:
    return one_line(err, unknown_hint="(check the spelling; `costctl init` writes every key)")


def find_config_file(explicit: Path | None, cwd: Path | None = None) -> Path | None:
    """The config file to read: ``explicit``, else ``$COSTCTL_CONFIG``, else ./costctl.toml if present.

    Raises:
        ConfigError: if an explicitly named file does not exist.
    """
    if explicit is None and os.environ.get("COSTCTL_CONFIG"):
        explicit = Path(os.environ["COSTCTL_CONFIG"])
    if explicit is not None:
        if not explicit.is_file():
            raise ConfigError(f"config file {explicit} does not exist (or is not a file)")
        return explicit
    candidate = (cwd or Path.cwd()) / CONFIG_FILE_NAME
    return candidate if candidate.is_file() else None


def load_settings(config: Path | None = None, overrides: dict[str, Any] | None = None) -> Settings:
    """Load and validate settings.

    Args:
        config: a TOML file (``--config``); default: ``$COSTCTL_CONFIG`` or ./costctl.toml.
        overrides: nested dict from CLI flags, highest precedence.

    Raises:
        ConfigError: unreadable/invalid TOML, unknown key or section, or a bad value — one line.
    """
    path = find_config_file(config)
    if path is not None:
        try:
            with path.open("rb") as fh:
                tomllib.load(fh)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: not valid TOML: {exc}") from None
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    for key in os.environ:
        upper = key.upper()
        if (upper.startswith(ENV_PREFIX) and upper not in _NON_SETTING_ENV
                and not upper.startswith(_NON_SETTING_ENV_PREFIXES)):
            top = upper[len(ENV_PREFIX):].split("__", 1)[0].lower()
            if top not in Settings.model_fields:
                raise ConfigError(f"unknown environment variable {key} (no key '{top}' in the config)")
    Settings._toml_path = path
    try:
        settings = Settings(**(overrides or {}))
        settings._config_path = path
        return settings
    except ValidationError as exc:
        where = f"{path}: " if path else ""
        raise ConfigError(f"{where}{_one_line(exc)}") from None
    finally:
        Settings._toml_path = None
