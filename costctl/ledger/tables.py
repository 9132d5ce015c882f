"""The ledger's tables as SQLAlchemy Core :class:`~sqlalchemy.Table` objects, on :data:`metadata`.

This module imports SQLAlchemy Core only (no ``sqlalchemy.orm``): read paths that need no ORM
objects (``costctl bill``'s queries, :mod:`costctl.ledger.queries`) build their statements on
these tables and start faster. The ORM classes of :mod:`costctl.ledger.schema` are mapped onto
these same tables (``__table__``), and :data:`metadata` is Alembic's target metadata, so there is
one definition of the schema. What each table holds is described in :mod:`costctl.ledger.schema`.
The Alembic migrations in ``alembic/versions`` create exactly these tables; a test checks they
match.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)

from .types import CanonicalText, DecimalText, JSONText, UTCDateTime

#: Constraint names are fixed so that Alembic's batch mode on SQLite can find them.
NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

#: The ledger's schema (Alembic's target metadata).
metadata = MetaData(naming_convention=NAMING_CONVENTION)

#: ``runs.mode`` values: a dry run (``costctl watch --dry-run``: stops recorded, nothing stopped)
#: and an advise-only watch (every stop recorded as advice). NULL: a watch that guards.
DRY_RUN, ADVISE_ONLY = "dry-run", "advise-only"
RUN_MODES = (DRY_RUN, ADVISE_ONLY)

#: Surrogate keys of the high-volume tables: BIGINT on PostgreSQL, INTEGER (rowid) on SQLite.
BigId = BigInteger().with_variant(Integer(), "sqlite")


def _runs_fk() -> ForeignKey:
    return ForeignKey("runs.id")


def _instances_fk() -> ForeignKey:
    return ForeignKey("instances.id")


def _origin_id() -> Column[int]:
    """``origin_id``: in a central ledger, the row's id in the ledger of the watch that wrote
    it (fleet mode, :mod:`costctl.ledger.outbox`); NULL for a row written here. With the run's
    id (a uuid) it names the row across machines: "run id plus sequence"."""
    return Column("origin_id", BigInteger)


def _origin_index(table: str) -> Index:
    """The unique ``(run_id, origin_id)`` index the central ledger's upserts conflict on
    (NULL origin ids, the rows written here, never conflict)."""
    return Index(f"uq_{table}_run_id_origin_id", "run_id", "origin_id", unique=True)


#: The partial index's condition on the telemetry tables (:func:`_telemetry_origin_index`).
TELEMETRY_ORIGIN_WHERE = text("origin_id IS NOT NULL")


def _telemetry_origin_index(table: str) -> Index:
    """The unique ``(run_id, origin_id)`` index of a telemetry table (``samples``,
    ``progress``, ``progress_buckets``), partial (``WHERE origin_id IS NOT NULL``): only a
    central ledger's rows are in it, so a watch's own inserts (one sample per GPU per tick,
    origin_id NULL) pay nothing for it."""
    return Index(f"uq_{table}_run_id_origin_id", "run_id", "origin_id", unique=True,
                 sqlite_where=TELEMETRY_ORIGIN_WHERE, postgresql_where=TELEMETRY_ORIGIN_WHERE)


instances = Table(
    "instances", metadata,
    Column("id", Integer, primary_key=True),
    Column("provider", String(32), nullable=False),
    Column("provider_instance_id", String(128), nullable=False),
    Column("gpu", String(64)),
    Column("gpu_count", Integer, nullable=False, default=1),
    Column("billing", String(16), nullable=False),
    Column("price_per_hour", DecimalText()),
    Column("currency", String(3), nullable=False),
    Column("region", String(64)),
    Column("created_at", UTCDateTime(), nullable=False),
    UniqueConstraint("provider", "provider_instance_id"),
)

runs = Table(
    "runs", metadata,
    Column("id", String(32), primary_key=True),
    Column("instance_pk", Integer, _instances_fk(), nullable=False, index=True),
    Column("command", JSONText()),
    Column("host", String(255)),
    Column("log_path", Text),
    Column("started_at", UTCDateTime(), nullable=False),
    Column("ended_at", UTCDateTime()),
    Column("last_seen_at", UTCDateTime(), nullable=False),
    Column("exit_code", Integer),
    Column("status", String(16), nullable=False),
    Column("pid", Integer),
    Column("charged_until", UTCDateTime()),
    Column("gpu", String(64)),
    Column("gpu_count", Integer),
    Column("billing", String(16)),
    Column("price_per_hour", DecimalText()),
    Column("price_currency", String(3)),
    Column("peak_memory_bytes", BigInteger),
    Column("memory_total_bytes", BigInteger),
    Column("mean_utilization", Float),
    Column("gpu_samples", Integer),
    Column("points", BigInteger),
    # A resumed run: the run it continues (the one that saved the checkpoint it resumed from,
    # else the newest earlier run of the same command) and that checkpoint's path. A link,
    # not a foreign key: the bill follows the links to show a job's chain of runs.
    Column("continues_run_id", String(32), index=True),
    Column("resumed_from", Text),
    # How the run was watched: "dry-run", "advise-only", or NULL for a watch that guards
    # (stops the instance when a policy says so). The bill marks the first two.
    Column("mode", String(16)),
)

samples = Table(
    "samples", metadata,
    Column("id", BigId, primary_key=True),
    Column("run_id", String(32), _runs_fk(), nullable=False),
    Column("time", UTCDateTime(), nullable=False),
    Column("gpu_index", Integer),
    Column("utilization", Float),
    Column("memory_used_bytes", BigInteger),
    Column("memory_total_bytes", BigInteger),
    Column("power_w", Float),
    Column("status", String(16), nullable=False),
    Column("source", String(32), nullable=False),
    Column("error", CanonicalText),
    Index("ix_samples_run_id_time", "run_id", "time"),
    _origin_id(),
    Index("ix_samples_time", "time"),
    _telemetry_origin_index("samples"),
)

progress = Table(
    "progress", metadata,
    Column("id", BigId, primary_key=True),
    Column("run_id", String(32), _runs_fk(), nullable=False),
    Column("time", UTCDateTime()),
    Column("step", BigInteger),
    Column("epoch", Float),
    Column("total", BigInteger),
    Column("kind", String(8), nullable=False),
    Column("name", String(64), nullable=False),
    Column("value", Float),
    Column("value_special", String(8)),
    _origin_id(),
    Index("ix_progress_run_id_time", "run_id", "time"),
    _telemetry_origin_index("progress"),
    CheckConstraint("(value IS NULL) <> (value_special IS NULL)", name="one_value"),
)

sample_minutes = Table(
    "sample_minutes", metadata,
    Column("id", BigId, primary_key=True),
    Column("run_id", String(32), _runs_fk(), nullable=False),
    Column("gpu_index", Integer),
    Column("minute", UTCDateTime(), nullable=False),
    Column("samples", Integer, nullable=False),
    Column("ok_samples", Integer, nullable=False),
    Column("utilization_sum", Float),
    Column("utilization_count", Integer, nullable=False),
    Column("utilization_max", Float),
    Column("memory_used_max", BigInteger),
    Column("memory_total_max", BigInteger),
    Column("power_sum", Float),
    Column("power_count", Integer, nullable=False),
    Column("status", String(16), nullable=False),
    Column("source", String(32), nullable=False),
    Column("error", CanonicalText),
    Index("ix_sample_minutes_run_id_minute", "run_id", "minute"),
)

progress_buckets = Table(
    "progress_buckets", metadata,
    Column("id", BigId, primary_key=True),
    Column("run_id", String(32), _runs_fk(), nullable=False),
    Column("kind", String(8), nullable=False),
    Column("name", String(64), nullable=False),
    Column("start_at", UTCDateTime(), nullable=False),
    Column("end_at", UTCDateTime(), nullable=False),
    Column("count", BigInteger, nullable=False),
    Column("kept", Integer, nullable=False),
    Column("nan_count", BigInteger, nullable=False),
    Column("posinf_count", BigInteger, nullable=False),
    Column("neginf_count", BigInteger, nullable=False),
    Column("min", Float),
    Column("max", Float),
    Column("first_value", Float),
    Column("first_special", String(8)),
    Column("first_step", BigInteger),
    Column("first_time", UTCDateTime()),
    Column("last_value", Float),
    Column("last_special", String(8)),
    Column("last_step", BigInteger),
    Column("last_time", UTCDateTime()),
    Column("last_epoch", Float),
    Column("last_total", BigInteger),
    _origin_id(),
    Index("ix_progress_buckets_run_id_start_at", "run_id", "start_at"),
    _telemetry_origin_index("progress_buckets"),
    CheckConstraint("(first_value IS NULL) <> (first_special IS NULL)", name="one_first"),
    CheckConstraint("(last_value IS NULL) <> (last_special IS NULL)", name="one_last"),
)

charges = Table(
    "charges", metadata,
    Column("id", Integer, primary_key=True),
    Column("run_id", String(32), _runs_fk(), nullable=False),
    Column("instance_pk", Integer, _instances_fk(), nullable=False),
    Column("start_at", UTCDateTime(), nullable=False),
    Column("end_at", UTCDateTime(), nullable=False),
    Column("rate_per_hour", DecimalText(), nullable=False),
    Column("currency", String(3), nullable=False),
    Column("duration_us", BigInteger, nullable=False, server_default=text("0")),
    Index("ix_charges_instance_pk_end_at", "instance_pk", "end_at"),
    Index("ix_charges_run_id_end_at", "run_id", "end_at"),
    Index("ix_charges_end_at", "end_at"),
    CheckConstraint("end_at > start_at", name="positive_interval"),
)

charge_rollups = Table(
    "charge_rollups", metadata,
    Column("run_id", String(32), _runs_fk(), primary_key=True),
    Column("bucket_s", BigInteger, primary_key=True),
    Column("rate_per_hour", DecimalText(), primary_key=True),
    Column("currency", String(3), primary_key=True),
    Column("instance_pk", Integer, _instances_fk(), nullable=False),
    Column("duration_us", BigInteger, nullable=False),
    Column("first_us", BigInteger, nullable=False),
    Column("last_us", BigInteger, nullable=False),
    Index("ix_charge_rollups_bucket_s", "bucket_s"),
    Index("ix_charge_rollups_instance_pk_bucket_s", "instance_pk", "bucket_s"),
)

# A decision belongs to a run of a watch (``run_id``), or, made from outside by ``costctl
# patrol``, to an instance (``instance_pk``, ``run_id`` NULL); at least one of them is set.
decisions = Table(
    "decisions", metadata,
    Column("id", Integer, primary_key=True),
    Column("run_id", String(32), _runs_fk()),
    Column("time", UTCDateTime(), nullable=False),
    Column("policy", String(32), nullable=False),
    Column("action", String(16), nullable=False),
    Column("reason", CanonicalText, nullable=False),
    Column("evidence", JSONText(), nullable=False),
    Column("outcome", CanonicalText),
    Column("dry_run", Boolean, nullable=False, default=False),
    Column("key", String(128)),
    _origin_id(),
    Column("instance_pk", Integer, _instances_fk()),
    Index("ix_decisions_run_id_time", "run_id", "time"),
    _origin_index("decisions"),
    Index("ix_decisions_instance_pk_time", "instance_pk", "time"),
    CheckConstraint("run_id IS NOT NULL OR instance_pk IS NOT NULL", name="run_or_instance"),
)

checkpoints = Table(
    "checkpoints", metadata,
    Column("id", Integer, primary_key=True),
    Column("run_id", String(32), _runs_fk(), nullable=False),
    Column("reason", String(64), nullable=False),
    Column("requested_at", UTCDateTime(), nullable=False),
    Column("deadline", UTCDateTime(), nullable=False),
    Column("signal", String(16)),
    Column("outcome", String(16)),
    Column("completed_at", UTCDateTime()),
    Column("saved_at", UTCDateTime()),
    Column("save_s", Float),
    Column("path", Text),
    Column("size_bytes", BigInteger),
    # The save's own duration per the job's acknowledgement record (start to end), seconds.
    Column("save_duration_s", Float),
    _origin_id(),
    Index("ix_checkpoints_run_id_requested_at", "run_id", "requested_at"),
    _origin_index("checkpoints"),
)

waste = Table(
    "waste", metadata,
    Column("id", Integer, primary_key=True),
    Column("run_id", String(32), _runs_fk(), nullable=False),
    Column("instance_pk", Integer, _instances_fk(), nullable=False),
    Column("start_at", UTCDateTime(), nullable=False),
    Column("end_at", UTCDateTime(), nullable=False),
    Column("rate_per_hour", DecimalText(), nullable=False),
    Column("currency", String(3), nullable=False),
    Column("reason", String(32), nullable=False),
    Column("detail", CanonicalText),
    _origin_id(),
    Index("ix_waste_run_id", "run_id"),
    _origin_index("waste"),
    CheckConstraint("end_at >= start_at", name="ordered_interval"),
)

# A stop of a watch's run (``run_id``), or of ``costctl patrol`` (``run_id`` NULL: its decision,
# ``decision_id``, names the instance).
stop_events = Table(
    "stop_events", metadata,
    Column("id", Integer, primary_key=True),
    Column("run_id", String(32), _runs_fk()),
    Column("decision_id", Integer, ForeignKey("decisions.id")),
    Column("time", UTCDateTime(), nullable=False),
    Column("state", String(16), nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("detail", CanonicalText),
    _origin_id(),
    Index("ix_stop_events_run_id_time", "run_id", "time"),
    _origin_index("stop_events"),
)

#: Fleet mode's outbox (:mod:`costctl.ledger.outbox`): the rows of this ledger changed since
#: they were last sent to the central ledger, one entry per row (``table_name``: ``runs``,
#: ``charges``, ``decisions``, ``checkpoints``, ``waste``, ``stop_events``; ``row_key``: the
#: row's primary key as text). ``version`` grows with every change of the row, so an entry
#: sent while its row changed again is kept for the next send. Written only by a ledger opened
#: with an outbox (a watch with ``[ledger] central_url``); empty everywhere else.
outbox = Table(
    "outbox", metadata,
    Column("table_name", String(32), primary_key=True),
    Column("row_key", String(64), primary_key=True),
    Column("version", BigInteger, nullable=False, server_default=text("1")),
)

#: ``costctl patrol``'s own readings of every instance it lists, one row per instance per sweep:
#: the provider's status word and its instantaneous GPU and CPU utilization (percent; NULL when
#: the listing reported none). The idle filter reads them over its window under the idle
#: policy's coverage rule; the stopped-for filter dates a stop from them where the provider
#: gives no stop time. Keyed by the provider's names (not ``instances``: an observation does not
#: make an instance known to the ledger); rows older than ``[patrol] observation_retention``
#: are deleted by the sweeps.
#: Fleet mode's telemetry cursors (:mod:`costctl.ledger.telemetry_sync`): per append-only
#: telemetry table (``samples``, ``progress``, ``progress_buckets``), the highest local id the
#: central ledger has (rows up to it were sent or skipped, in id order). Advanced only after
#: the central commit; no row until a first send.
sync_cursors = Table(
    "sync_cursors", metadata,
    Column("table_name", String(32), primary_key=True),
    Column("last_id", BigInteger, nullable=False),
)

patrol_observations = Table(
    "patrol_observations", metadata,
    Column("id", BigId, primary_key=True),
    Column("provider", String(32), nullable=False),
    Column("instance_id", String(128), nullable=False),
    Column("account", String(64)),
    Column("time", UTCDateTime(), nullable=False),
    Column("status", String(16), nullable=False),
    Column("gpu_utilization", Float),
    Column("cpu_utilization", Float),
    Index("ix_patrol_observations_provider_instance_id_time", "provider", "instance_id", "time"),
    Index("ix_patrol_observations_time", "time"),
)

__all__ = ["ADVISE_ONLY", "DRY_RUN", "RUN_MODES", "BigId", "NAMING_CONVENTION", "metadata", "instances", "runs", "samples", "progress", "sample_minutes",
           "progress_buckets", "charges", "charge_rollups", "decisions", "checkpoints", "waste", "stop_events", "outbox",
           "sync_cursors", "patrol_observations", "TELEMETRY_ORIGIN_WHERE"]
