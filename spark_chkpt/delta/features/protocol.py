"""Delta table features: the one table of what spark-chkpt's Delta writers honour, and
the check of a table's protocol and metadata against it (driver side).

Every writer feature a table requires (its ``writerFeatures``, those its legacy
``minWriterVersion`` implies, and its reader features) is looked up in :data:`FEATURES`:
implemented (what implementing means here) or refused (why, and the way forward); a
feature :data:`FEATURES` does not know is refused, never ignored. The check runs before
any file is staged and again on the table the commit is about to write, so a feature
another writer turned on meanwhile fails by name, not as a commit conflict. Only this
module and :mod:`spark_chkpt.delta.table.target` read a table's protocol
(:func:`read_protocol`); the rest is pure.

More: docs/concepts/delta-features.md (what delta-rs enforces itself, and why).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from spark_chkpt.errors import ConfigError, TableFeatureError

Operation = Literal["append", "overwrite", "merge", "spark_merge"]
# spark_merge: DeltaUpsert's MERGE committed through delta-spark (the session has it)
# (name, nullable, metadata) of each top-level column
Column = tuple[str, bool, Mapping[str, Any]]


@dataclass(frozen=True)
class TableProtocol:
    """What a writer must know of a table: its protocol, configuration and columns."""

    uri: str
    min_reader_version: int
    min_writer_version: int
    reader_features: frozenset[str]
    writer_features: frozenset[str]
    configuration: Mapping[str, str] = field(default_factory=dict)
    columns: tuple[Column, ...] = ()

    def flag(self, key: str) -> bool:
        return str(self.configuration.get(key, "false")).strip().lower() == "true"

    def required(self) -> list[str]:
        """Every feature the table requires of a writer, in the protocol's order."""
        names: list[str] = []
        if self.min_writer_version >= 7:
            names += sorted(self.writer_features)
        else:
            for version, implied in _LEGACY_WRITER:
                if self.min_writer_version >= version:
                    names += implied
        if self.min_reader_version >= 3:
            names += sorted(self.reader_features)
        elif self.min_reader_version == 2:
            names.append("columnMapping")
        # domainMetadata last: rowTracking and clustering require it, and the feature a
        # user turned on is the one to name
        return sorted(dict.fromkeys(names), key=lambda n: n == "domainMetadata")


_LEGACY_WRITER: tuple[tuple[int, tuple[str, ...]], ...] = (
    (2, ("appendOnly", "invariants")),
    (3, ("checkConstraints",)),
    (4, ("changeDataFeed", "generatedColumns")),
    (5, ("columnMapping",)),
    (6, ("identityColumns",)),
)


@dataclass(frozen=True)
class Feature:
    """One Delta table feature: ``implemented`` (``meaning``: what spark-chkpt does for
    it) or refused (``meaning``: why; ``way_forward``: what a user can do).
    ``in_use``: for a refused feature that matters only when the table uses it (column
    mapping with a mode set): the test; None: refused whenever the table lists it.
    ``refuses``: for an implemented one, the operations it forbids on the table
    (``appendOnly``: those that remove rows), when ``in_use`` holds, for ``refusal``.
    ``on_creation``: whether a table the sink's first batch creates may have it."""

    name: str
    implemented: bool
    meaning: str
    way_forward: str = ""
    in_use: Callable[[TableProtocol], bool] | None = None
    refuses: frozenset[str] = frozenset()
    refusal: str = ""  # why ``refuses`` (none: the table is append-only)
    on_creation: bool = True  # False: a table the sink creates may not have it


def _append_only(t: TableProtocol) -> bool:
    return t.flag("delta.appendOnly")


_DELTA_SPARK = "write this table with format('delta') (delta-spark)"

# The features spark-chkpt honours with its own commit (appends and complete-mode
# replacements); DeltaUpsert's MERGE on such tables goes through delta-spark when the
# session has it, else is refused (delta-rs commits it and refuses such tables).
_APPENDS_ONLY = (
    "spark-chkpt commits appends and complete-mode replacements to such tables itself, "
    "but DeltaUpsert's MERGE needs delta-spark in the session (delta-rs 1.x refuses such "
    "tables)"
)
_APPENDS: dict[str, Any] = {
    "way_forward": "run the query in a session with delta-spark (DeltaUpsert then commits "
    f"its MERGE through it), write the table with chkpt-delta, or {_DELTA_SPARK}",
    "refuses": frozenset({"merge"}),
    "refusal": _APPENDS_ONLY,
    "on_creation": False,
}

FEATURES: dict[str, Feature] = {
    f.name: f
    for f in (
        Feature(
            "appendOnly",
            True,
            "appends are written as ever; with delta.appendOnly=true, what removes rows "
            "(outputMode('complete'), DeltaUpsert's updates and deletes) is refused",
            way_forward="write the table with chkpt-delta in append mode, or unset "
            "delta.appendOnly on it (ALTER TABLE ... SET TBLPROPERTIES "
            "('delta.appendOnly'='false'))",
            in_use=_append_only,
            refuses=frozenset({"overwrite", "merge", "spark_merge"}),
        ),
        Feature(
            "invariants",
            True,
            "a column's delta.invariants expression is checked on the executors before a "
            "file is staged: a violating batch fails naming it and sample rows; an "
            "expression spark-chkpt cannot evaluate is refused at the start",
        ),
        Feature(
            "checkConstraints",
            True,
            "the table's CHECK constraints (delta.constraints.*) and NOT NULL columns are "
            "checked on the executors before a file is staged: a violating batch fails "
            "naming the constraint, its expression and sample rows; an expression "
            "spark-chkpt cannot evaluate is refused at the start",
        ),
        Feature(
            "changeDataFeed",
            True,
            "appends and complete-mode replacements need no change files (delta-spark "
            "reads their add and remove actions as inserts and deletes); DeltaUpsert's "
            "MERGE, delta-rs's, writes _change_data files as delta-spark's MERGE does",
        ),
        Feature(
            "generatedColumns",
            True,
            "a generated column (delta.generationExpression) the batch lacks is computed "
            "on the executors; one the batch gives must equal its expression, else the "
            "batch fails naming the column; an expression spark-chkpt cannot evaluate is "
            "refused at the start",
        ),
        Feature(
            "columnMapping",
            True,
            "staged files use the columns' physical names and Parquet field ids "
            "(delta.columnMapping.mode name or id), their statistics and partition values "
            "are keyed by physical names; mergeSchema names new columns col-<uuid> with "
            "the next ids and advances delta.columnMapping.maxColumnId (local tables; on "
            "an object store it is refused naming ALTER TABLE ... ADD COLUMNS); a rename "
            "or drop by another writer under a staged batch fails the batch naming the "
            "column",
        ),
        Feature(
            "identityColumns",
            True,
            "appends and outputMode('complete')'s replacements are committed by "
            "spark-chkpt itself: the write tasks generate the values a GENERATED ALWAYS "
            "column (which the query must not give) or a BY DEFAULT column (NULL or "
            "absent) lacks, unique across tasks and the same on a task's retry, above the "
            "high-water mark read at planning (a replacement too: the mark never goes "
            "back, as with delta-spark's INSERT OVERWRITE); the commit moves "
            "delta.identity.highWaterMark in its metaData action, and fails if another "
            "writer moved it meanwhile",
            way_forward="write the table with chkpt-delta, run DeltaUpsert in a session "
            f"with delta-spark (it commits the MERGE through it), or {_DELTA_SPARK}",
            # delta-spark's MERGE generates the values and moves the mark; delta-rs's
            # cannot commit to such tables
            refuses=frozenset({"merge"}),
            refusal="spark-chkpt commits appends and outputMode('complete') to such tables "
            "itself (identity values generated, the high-water mark moved), but "
            "DeltaUpsert's MERGE needs delta-spark in the session (delta-rs 1.x refuses "
            "such tables)",
            on_creation=False,
        ),
        Feature(
            "deletionVectors",
            True,
            "new files carry no deletion vector; the table's are kept as they are "
            "(appends), and delta-rs's MERGE applies them to the files it rewrites",
        ),
        Feature(
            "timestampNtz",
            True,
            "TIMESTAMP_NTZ columns are staged as Parquet timestamps without a time zone",
        ),
        Feature(
            "v2Checkpoint",
            True,
            "delta-rs commits to and checkpoints such tables (it supports the feature)",
        ),
        Feature(
            "domainMetadata",
            True,
            "appends are committed by spark-chkpt itself (delta-rs 1.x refuses such "
            "tables): every domain (liquid clustering's delta.clustering among them) is "
            "kept as it is, the row-tracking domain advanced in the same commit",
            **_APPENDS,
        ),
        Feature(
            "clustering",
            True,
            "appends are committed by spark-chkpt itself, as unclustered files (no "
            "clusteringProvider), with statistics for every column; the clustering "
            "columns (the delta.clustering domain) are kept",
            **_APPENDS,
        ),
        Feature(
            "rowTracking",
            True,
            "appends are committed by spark-chkpt itself: each file gets a baseRowId above "
            "the row-id high-water mark (consecutive by its row count) and "
            "defaultRowCommitVersion, and the delta.rowTracking domain's "
            "rowIdHighWaterMark is advanced in the same commit",
            **_APPENDS,
        ),
        Feature(
            "inCommitTimestamp",
            True,
            "appends are committed by spark-chkpt itself, commitInfo first with an "
            "inCommitTimestamp greater than the previous commit's",
            **_APPENDS,
        ),
        Feature(
            "typeWidening",
            True,
            "appends are committed by spark-chkpt itself with the table's current (widened) "
            "types and defaultRowCommitVersion on each file; nothing is widened by "
            "spark-chkpt (a batch whose type differs from the table's is refused)",
            **_APPENDS,
        ),
        Feature(
            "typeWidening-preview",
            True,
            "appends are committed by spark-chkpt itself with the table's current (widened) "
            "types and defaultRowCommitVersion on each file; nothing is widened by "
            "spark-chkpt (a batch whose type differs from the table's is refused)",
            **_APPENDS,
        ),
        Feature(
            "allowColumnDefaults",
            False,
            "column defaults are not filled in by this version, and delta-rs 1.x refuses "
            "such tables",
            way_forward=f"{_DELTA_SPARK}",
        ),
        Feature(
            "vacuumProtocolCheck",
            False,
            "delta-rs 1.x refuses to commit to a table with this feature",
            way_forward=f"{_DELTA_SPARK}",
        ),
        Feature(
            "icebergCompatV1",
            False,
            "Iceberg compatibility (UniForm) needs column mapping and Iceberg metadata "
            "this version does not write",
            way_forward=f"{_DELTA_SPARK}",
        ),
        Feature(
            "icebergCompatV2",
            False,
            "Iceberg compatibility (UniForm) needs column mapping and Iceberg metadata "
            "this version does not write",
            way_forward=f"{_DELTA_SPARK}",
        ),
        Feature(
            "variantType",
            False,
            "VARIANT columns do not reach a Python sink as Delta's variant encoding; not "
            "written by this version",
            way_forward=f"{_DELTA_SPARK}",
        ),
        Feature(
            "variantType-preview",
            False,
            "VARIANT columns do not reach a Python sink as Delta's variant encoding; not "
            "written by this version",
            way_forward=f"{_DELTA_SPARK}",
        ),
    )
}

_UNKNOWN_WAY = (
    f"{_DELTA_SPARK}, or use a version of spark-chkpt that lists the feature on its "
    "docs' Delta table features page"
)


def _message(*, writer: str, uri: str, name: str, reason: str, way: str) -> str:
    return (
        f"{writer}: Delta table {uri} requires table feature '{name}': {reason}. "
        f"Way forward: {way}. Nothing was staged."
    )


def check_table(table: TableProtocol, *, writer: str, operation: Operation) -> None:
    """Raise :class:`TableFeatureError` for the first feature ``table`` requires that
    ``writer`` (``chkpt-delta``, ``DeltaUpsert``) cannot honour for ``operation``."""
    for name in table.required():
        feature = FEATURES.get(name)
        if feature is None:
            raise TableFeatureError(
                _message(
                    writer=writer,
                    uri=table.uri,
                    name=name,
                    reason="unknown to this version of spark-chkpt (a feature may change "
                    "what a writer must do, so it is refused, never ignored)",
                    way=_UNKNOWN_WAY,
                ),
                feature=name,
                table=table.uri,
            )
        used = feature.in_use is None or feature.in_use(table)
        if not feature.implemented and used:
            raise TableFeatureError(
                _message(
                    writer=writer,
                    uri=table.uri,
                    name=name,
                    reason=feature.meaning,
                    way=feature.way_forward,
                ),
                feature=name,
                table=table.uri,
            )
        if feature.implemented and used and operation in feature.refuses:
            what = {
                "overwrite": "outputMode('complete') removes every row of the table on each batch",
                "merge": "its MERGE updates and deletes rows",
                "spark_merge": "its MERGE updates and deletes rows",
            }[operation]
            reason = (
                feature.refusal or f"the table is append-only (delta.appendOnly=true) and {what}"
            )
            raise TableFeatureError(
                _message(
                    writer=writer,
                    uri=table.uri,
                    name=name,
                    reason=reason,
                    way=feature.way_forward,
                ),
                feature=name,
                table=table.uri,
            )


def read_protocol(table: Any, *, uri: str) -> TableProtocol:
    """The :class:`TableProtocol` of a delta-rs ``DeltaTable`` at its loaded version."""
    proto = table.protocol()
    metadata = table.metadata()
    return TableProtocol(
        uri=uri,
        min_reader_version=int(proto.min_reader_version),
        min_writer_version=int(proto.min_writer_version),
        reader_features=frozenset(proto.reader_features or ()),
        writer_features=frozenset(proto.writer_features or ()),
        configuration={k: v for k, v in (metadata.configuration or {}).items() if v is not None},
        columns=tuple(
            (f.name, bool(f.nullable), dict(f.metadata or {})) for f in table.schema().fields
        ),
    )


# -- table properties on creation ---------------------------------------------------------

# The Delta table properties a writer may set when its first batch creates the table
# (delta-spark's names; Spark hands a Python sink its option names lower-cased) and the
# feature each turns on when "true" (or, for columnMapping.mode, when not "none").
CREATION_PROPERTIES: dict[str, str | None] = {
    "delta.appendOnly": "appendOnly",
    "delta.enableChangeDataFeed": "changeDataFeed",
    "delta.enableDeletionVectors": "deletionVectors",
    "delta.enableRowTracking": "rowTracking",
    "delta.enableInCommitTimestamps": "inCommitTimestamp",
    "delta.enableTypeWidening": "typeWidening",
    "delta.columnMapping.mode": "columnMapping",
    "delta.checkpointPolicy": "v2Checkpoint",
    "delta.checkpointInterval": None,
    "delta.logRetentionDuration": None,
    "delta.deletedFileRetentionDuration": None,
    "delta.setTransactionRetentionDuration": None,
    "delta.dataSkippingNumIndexedCols": None,
    "delta.dataSkippingStatsColumns": None,
    "delta.targetFileSize": None,
    "delta.checkpoint.writeStatsAsJson": None,
    "delta.checkpoint.writeStatsAsStruct": None,
    "delta.isolationLevel": None,
    "delta.randomizeFilePrefixes": None,
    "delta.autoOptimize.autoCompact": None,
}
CREATION_PREFIX = "delta."


def _turns_on(name: str, value: str) -> str | None:
    feature = CREATION_PROPERTIES[name]
    if feature is None:
        return None
    v = value.strip().lower()
    if name == "delta.columnMapping.mode":
        return feature if v != "none" else None
    if name == "delta.checkpointPolicy":
        return feature if v == "v2" else None
    return feature if v == "true" else None


def check_creation_properties(
    options: Mapping[str, str], *, writer: str = "chkpt-delta"
) -> dict[str, str]:
    """The table properties among ``options`` (names starting ``delta.``, any case) by
    delta-spark's names; :class:`ConfigError` for a name Delta does not know (naming the
    closest), :class:`TableFeatureError` for one that turns on a refused feature
    or one spark-chkpt appends to but does not create (``on_creation``)."""
    known = {name.lower(): name for name in CREATION_PROPERTIES}
    props: dict[str, str] = {}
    for raw, value in options.items():
        if not raw.lower().startswith(CREATION_PREFIX):
            continue
        name = known.get(raw.lower())
        if name is None:
            close = difflib.get_close_matches(raw.lower(), list(known), n=1, cutoff=0.6)
            hint = f" (did you mean {known[close[0]]}?)" if close else ""
            raise ConfigError(
                raw,
                value,
                f"not a Delta table property this sink sets on the table it creates{hint}; "
                f"those it takes: {', '.join(CREATION_PROPERTIES)}",
            )
        feature_name = _turns_on(name, str(value))
        feature = FEATURES.get(feature_name) if feature_name else None
        if feature is not None and not (feature.implemented and feature.on_creation):
            reason = (
                feature.meaning
                if not feature.implemented
                else "spark-chkpt appends to such tables but does not create them (delta-rs "
                "creates the table, and refuses the feature)"
            )
            raise TableFeatureError(
                f"{writer}: option {name}={value} would create the table with table feature "
                f"'{feature.name}': {reason}. Way forward: leave the option out, or create "
                "the table with delta-spark (CREATE TABLE ... TBLPROPERTIES) first. "
                "Nothing was staged.",
                feature=feature.name,
                table="",
            )
        props[name] = str(value)
    return props
