"""Options of the ``chkpt-delta`` sink, parsed once on the driver and frozen."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from spark_chkpt.delta.features.protocol import CREATION_PREFIX, check_creation_properties
from spark_chkpt.delta.log.commit_safety import commit_storage_options
from spark_chkpt.errors import ConfigError
from spark_chkpt.fs import qualify, remember_bucket_options
from spark_chkpt.options import (
    SnapshotTiming,
    check_option_names,
    lowercase,
    parse_bool,
    parse_duration_ms,
    parse_positive_int,
    parse_size,
)
from spark_chkpt.snapshot.settings import (
    SNAPSHOT_OPTIONS,
    SnapshotConfig,
    snapshot_options,
)

# The query column that carries a malformed record to the dead-letter table (a struct;
# null for good rows). See ``deadLetterPath``.
DEAD_LETTER_COLUMN = "_dead_letter"

# Every option of the sink as documented (check_option_names refuses a name close to one).
_KNOWN_DELTA_OPTIONS = (
    "path",
    "partitionBy",
    "mergeSchema",
    *SNAPSHOT_OPTIONS,
    "maxRecordsPerFile",
    "targetFileSize",
    "orphanRetention",
    "otherWriters",
    "deadLetterPath",
    "table",
    "tableLocation",
    "deadLetterTable",
    "deadLetterTableLocation",
    "autoCompact",
    "autoCompactMinNumFiles",
    "autoCompactMaxFileSize",
)

# Databricks' defaults (spark.databricks.delta.autoCompact.minNumFiles, .maxFileSize)
AUTO_COMPACT_MIN_FILES = 50
AUTO_COMPACT_MAX_FILE_BYTES = 128 * 1024**2


def auto_compact_value(option: str, raw: str) -> bool:
    """Option ``autoCompact`` or the table property ``delta.autoOptimize.autoCompact``
    as Databricks takes it: ``true``, ``auto`` (or ``legacy``) on, ``false`` off."""
    value = raw.strip().lower()
    if value in ("true", "auto", "legacy"):
        return True
    if value == "false":
        return False
    raise ConfigError(option, raw, "true (or auto) or false")


def _table_path(opts: Mapping[str, str]) -> str:
    """The table's location: ``path``, or ``table`` resolved through the catalog."""
    path = located(opts, "table", "path")
    if not path:
        raise ConfigError(
            "path",
            None,
            "required: the Delta table's location (.option('path', ...) or .start(path)),"
            " or option table naming a Delta table of the session catalog",
        )
    return path


def _other_writers(opts: Mapping[str, str]) -> str:
    """``otherWriters``: ``refuse`` (the default) or ``allow``."""
    other_writers = opts.get("otherwriters", "refuse").strip().lower()
    if other_writers not in ("refuse", "allow"):
        raise ConfigError(
            "otherWriters",
            other_writers,
            "'refuse' (default: a new query fails if the table holds another query's "
            "snapshots of the same topic-partitions) or 'allow'",
        )
    return other_writers


def _storage_options(
    opts: Mapping[str, str], *, path: str, checkpoint: str | None, dead_letters: str | None
) -> dict[str, str]:
    """The ``storage.*`` options with the store's safe commit default, remembered for
    the checkpoint and the dead-letter table too: they are read from Python with no
    options of their own and take the table's (each location its own, so two queries
    of one process with different options do not share them)."""
    storage = commit_storage_options(
        uri=qualify(path),
        storage_options={
            k[len("storage.") :]: v for k, v in opts.items() if k.startswith("storage.")
        },
    )
    for location in (path, checkpoint, dead_letters):
        if location:
            remember_bucket_options(location, storage)
    return storage


@dataclass(frozen=True)
class DeltaSinkConfig(SnapshotConfig):
    """Validated options of the ``chkpt-delta`` sink: the snapshot protocol's
    (:func:`~spark_chkpt.snapshot.settings.snapshot_options`) and the sink's own."""

    path: str
    checkpoint_location: str
    query_name: str | None
    partition_by: tuple[str, ...]
    merge_schema: bool
    txn_app_id: str | None
    retained_snapshots: int
    max_records_per_file: int
    target_file_bytes: int
    orphan_retention_ms: int
    storage_options: Mapping[str, str]
    other_writers: str = "refuse"
    dead_letter_path: str | None = None
    # delta.* options: the table properties of the table the first batch creates
    table_properties: Mapping[str, str] = field(default_factory=dict)
    # snapshotTimeout, minPauseBetweenSnapshots
    timing: SnapshotTiming = field(default_factory=SnapshotTiming)
    # autoCompact: True / False as the option says; None: the table property
    # delta.autoOptimize.autoCompact decides
    auto_compact: bool | None = None
    auto_compact_min_files: int = AUTO_COMPACT_MIN_FILES
    auto_compact_max_file_bytes: int = AUTO_COMPACT_MAX_FILE_BYTES

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> DeltaSinkConfig:
        # First: a misspelled name must be named as such, not as the option it missed.
        check_option_names(
            options,
            known=_KNOWN_DELTA_OPTIONS,
            connector="chkpt-delta",
            prefixes=("storage.", CREATION_PREFIX),
        )
        opts = lowercase(options)
        path = _table_path(opts)
        dead_letter_path = located(opts, "deadLetterTable", "deadLetterPath")
        snapshot = snapshot_options(
            opts,
            checkpoint_needed="exactly-once needs Spark's checkpoint (its offset log "
            "is the snapshot plan)",
        )
        partition_by = tuple(c.strip() for c in opts.get("partitionby", "").split(",") if c.strip())
        other_writers = _other_writers(opts)
        storage = _storage_options(
            opts,
            path=path,
            checkpoint=snapshot["checkpoint_location"],
            dead_letters=dead_letter_path,
        )
        return cls(
            path=qualify(path),  # on the driver: executors have another working folder
            partition_by=partition_by,
            merge_schema=parse_bool("mergeSchema", opts.get("mergeschema"), default=False),
            **snapshot,
            max_records_per_file=parse_positive_int(
                "maxRecordsPerFile", opts.get("maxrecordsperfile"), default=1_000_000
            )
            or 1_000_000,
            target_file_bytes=parse_size(
                "targetFileSize", opts.get("targetfilesize"), default=128 * 1024**2
            ),
            orphan_retention_ms=parse_duration_ms(
                "orphanRetention", opts.get("orphanretention"), default_ms=60 * 60_000
            ),
            storage_options=storage,
            other_writers=other_writers,
            dead_letter_path=qualify(dead_letter_path) if dead_letter_path else None,
            table_properties=check_creation_properties(options),
            auto_compact=(
                auto_compact_value("autoCompact", opts["autocompact"])
                if "autocompact" in opts
                else None
            ),
            auto_compact_min_files=parse_positive_int(
                "autoCompactMinNumFiles",
                opts.get("autocompactminnumfiles"),
                default=AUTO_COMPACT_MIN_FILES,
            )
            or AUTO_COMPACT_MIN_FILES,
            auto_compact_max_file_bytes=parse_size(
                "autoCompactMaxFileSize",
                opts.get("autocompactmaxfilesize"),
                default=AUTO_COMPACT_MAX_FILE_BYTES,
            ),
        )

    def check_columns(self, columns: Sequence[str]) -> None:
        """partitionBy names columns of the query's output."""
        missing = [c for c in self.partition_by if c not in columns]
        if missing:
            raise ConfigError(
                "partitionBy",
                ",".join(self.partition_by),
                f"column(s) {', '.join(missing)} are not in the query's output "
                f"({', '.join(columns)})",
            )
        if self.partition_by and len(self.partition_by) == len(columns):
            raise ConfigError(
                "partitionBy",
                ",".join(self.partition_by),
                "at least one column must stay out of the partition columns",
            )


def located(opts: Mapping[str, str], name_option: str, path_option: str) -> str:
    """The location of the table option ``path_option`` or ``name_option`` gives
    (``opts`` lower-cased; "" if neither): a table name is resolved on the driver when
    the query starts (:func:`spark_chkpt.delta.table.catalog.install_table_option`), which
    hands the sink its location as ``<name_option>Location``."""
    path = opts.get(path_option.lower(), "").strip()
    table = opts.get(name_option.lower(), "").strip()
    if not table:
        return path
    if path:
        raise ConfigError(
            name_option,
            table,
            f"give either option {path_option} or option {name_option}, not both",
        )
    location = opts.get(f"{name_option}Location".lower(), "").strip()
    if not location:
        raise ConfigError(
            name_option,
            table,
            "a catalog table is resolved to its location by the driver's Python process "
            "when the query starts: call spark_chkpt.register(spark) before start() "
            "(classic PySpark; on Spark Connect give option " + path_option + " instead)",
        )
    return location
