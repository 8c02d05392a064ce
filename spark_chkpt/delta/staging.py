"""Phase 1 of the Delta commit (executors): stage Parquet files the log does not reference.

A task writes its Arrow batches into Parquet files under the table directory (Hive-style
``col=value/`` folders when partitioned) and returns a :class:`StagedOutput`: each
file's path, size, partition values and Delta statistics. Nothing is visible until the
driver's coordinator commits the add actions. File names carry the batch, the task,
the writer's tag (:func:`app_tag` of its app id) and a random attempt tag, so a crashed
attempt's files are recognisable later and each writer cleans up only its own:
``part-b00042-t00003-q<app tag>-<attempt>-000.chkpt.snappy.parquet``. Names without the
writer's tag (``part-b00042-t00003-<attempt>-000...``, written before it existed) still
match :data:`STAGED_NAME`; their ``app`` group is None.

On a column-mapped table (a :class:`~spark_chkpt.delta.features.column_mapping.ColumnMapping`
given), the files hold the physical names and Parquet field ids, nested struct fields
too, and the partition columns as well; statistics and partition values are keyed by the
physical names; and files go to random two-character folders instead of ``col=value/``
ones, as delta-spark writes them.

Memory is bounded: batches stream into at most ``max_open_files`` open Parquet writers,
each closed at ``max_records_per_file`` rows or ``target_file_bytes`` of Arrow data.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import random
import re
import string
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from spark_chkpt.delta.features.column_mapping import ColumnMapping
from spark_chkpt.fs import Location

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq

log = logging.getLogger(__name__)


def app_tag(app_id: str) -> str:
    """The writer's tag in its staged file names: 8 hex digits of SHA-256 of the app id
    (stable across processes and machines; two app ids share one with odds 2^-32)."""
    return hashlib.sha256(app_id.encode("utf-8")).hexdigest()[:8]


STAGED_NAME = re.compile(
    r"^part-b(?P<batch>\d+)-t(?P<task>\d+)-(?:q(?P<app>[0-9a-f]{8})-)?"
    r"(?P<attempt>[0-9a-f]{12})-\d+\.chkpt\.snappy\.parquet$"
)
NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"
_STRING_STATS_MAX = 64


@dataclass(frozen=True)
class StagedFile:
    """One Parquet file written by a task, described as a Delta add action needs it."""

    path: str  # relative to the table root, as on disk
    size: int
    partition_values: dict[str, str | None]
    modification_time: int  # ms since the epoch
    rows: int
    stats: str  # Delta statistics JSON


@dataclass
class StagedOutput:
    """What one task attempt staged; Spark returns it to the driver's ``commit``."""

    attempt: str
    batch_id: int | None
    task: int
    files: list[StagedFile] = field(default_factory=list)
    # the column mapping the files were written with (None: none): the commit checks it,
    # and adds the columns it planned, rather than a mapping planned again on its side
    mapping: ColumnMapping | None = None
    identity: tuple[Any, ...] = ()  # IdentityUse each (delta.identity): the marks it moves

    @property
    def rows(self) -> int:
        return sum(f.rows for f in self.files)

    @property
    def bytes(self) -> int:
        return sum(f.size for f in self.files)


def normalize_schema(schema: pa.Schema) -> pa.Schema:
    """Arrow types delta-rs accepts: tz-aware timestamps as ``timestamp[us, tz=UTC]``
    (Spark hands ``Etc/UTC``, which delta-rs rejects), nanoseconds cut to microseconds."""
    import pyarrow as pa

    def fix(t: pa.DataType) -> pa.DataType:
        if pa.types.is_timestamp(t):
            return pa.timestamp("us", tz="UTC" if t.tz else None)
        if pa.types.is_struct(t):
            return pa.struct([f.with_type(fix(f.type)) for f in t])
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            return pa.list_(t.value_field.with_type(fix(t.value_type)))
        if pa.types.is_map(t):
            return pa.map_(fix(t.key_type), t.item_field.with_type(fix(t.item_type)))
        return t

    return pa.schema([f.with_type(fix(f.type)) for f in schema], metadata=schema.metadata)


def partition_value_string(value: Any) -> str | None:
    """Delta's partition value strings: ``"1"``, ``"true"``, ``"2026-01-01 00:00:00.000000"``."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value != value:
        return "NaN"  # Spark's spelling
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.timezone.utc).replace(tzinfo=None)
        return value.strftime("%Y-%m-%d %H:%M:%S.%f")
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


def partition_dir(columns: Sequence[str], values: Sequence[str | None]) -> str:
    return "/".join(
        f"{c}={NULL_PARTITION if v is None or v == '' else quote(v, safe='')}"
        for c, v in zip(columns, values, strict=True)
    )


def _stat_value(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.timezone.utc)
        return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, float) and value != value:  # NaN
        return None
    return value


class _ColumnStats:
    """Running min/max/null count of one top-level column, Delta-style."""

    def __init__(self, arrow_type: pa.DataType) -> None:
        import pyarrow as pa

        self.nulls = 0
        self.min: Any = None
        self.max: Any = None
        self.bounded = not (
            pa.types.is_binary(arrow_type)
            or pa.types.is_large_binary(arrow_type)
            or pa.types.is_nested(arrow_type)
            or pa.types.is_boolean(arrow_type)
            or pa.types.is_null(arrow_type)
            or pa.types.is_decimal(arrow_type)  # JSON floats would make inexact bounds
        )
        self.counts_nulls = not (pa.types.is_binary(arrow_type) or pa.types.is_nested(arrow_type))
        self.is_string = pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type)
        self.is_timestamp = pa.types.is_timestamp(arrow_type)

    def update(self, column: pa.Array) -> None:
        import pyarrow.compute as pc

        self.nulls += column.null_count
        if not self.bounded or column.null_count == len(column):
            return
        mm = pc.min_max(column)
        lo, hi = mm["min"].as_py(), mm["max"].as_py()
        if lo is None or hi is None:
            return
        self.min = lo if self.min is None else min(self.min, lo)
        self.max = hi if self.max is None else max(self.max, hi)

    def bounds(self) -> tuple[Any, Any] | None:
        if not self.bounded or self.min is None:
            return None
        lo, hi = self.min, self.max
        if self.is_string and (len(lo) > _STRING_STATS_MAX or len(hi) > _STRING_STATS_MAX):
            return None  # a cut string is no valid upper bound
        if self.is_timestamp and hi.microsecond % 1000:
            hi = hi + dt.timedelta(microseconds=1000 - hi.microsecond % 1000)  # ms, rounded up
        return _stat_value(lo), _stat_value(hi)


class _OpenFile:
    def __init__(
        self,
        *,
        location: Location,
        relative: str,
        schema: pa.Schema,
        partition_values: dict[str, str | None],
        physical: pa.Schema | None = None,
        unbounded: Sequence[str] = (),
    ) -> None:
        """``physical``: the file's schema (column mapping), else ``schema``;
        ``unbounded``: columns written without statistics (partition columns)."""
        import pyarrow.parquet as pq

        self.location = location
        self.relative = relative
        self.partition_values = partition_values
        self.rows = 0
        self.arrow_bytes = 0
        # Statistics are gathered from the logical batch, keyed by the names in the file.
        self.physical = physical
        names = physical.names if physical is not None else schema.names
        self.stats = {
            stored: (f.name, _ColumnStats(f.type))
            for stored, f in zip(names, schema, strict=True)
            if f.name not in unbounded
        }
        location.fs.create_dir(location.path.rsplit("/", 1)[0], recursive=True)
        self._stream = location.fs.open_output_stream(location.path)
        self.writer: pq.ParquetWriter = pq.ParquetWriter(
            self._stream, physical if physical is not None else schema, compression="snappy"
        )

    def write(self, batch: pa.RecordBatch) -> None:
        if self.physical is not None:
            self.writer.write_batch(ColumnMapping.to_physical(batch, self.physical))
        else:
            self.writer.write_batch(batch)
        self.rows += batch.num_rows
        self.arrow_bytes += batch.nbytes
        for name, stats in self.stats.values():
            stats.update(batch.column(name))

    def close(self) -> StagedFile:
        self.writer.close()
        self._stream.close()
        info = self.location.fs.get_file_info(self.location.path)
        stats: dict[str, Any] = {
            "numRecords": self.rows,
            "minValues": {},
            "maxValues": {},
            "nullCount": {},
        }
        for name, (_, col) in self.stats.items():
            if col.counts_nulls:
                stats["nullCount"][name] = col.nulls
            bounds = col.bounds()
            if bounds is not None:
                stats["minValues"][name], stats["maxValues"][name] = bounds
        return StagedFile(
            path=self.relative,
            size=int(info.size),
            partition_values=self.partition_values,
            modification_time=int(time.time() * 1000),
            rows=self.rows,
            stats=json.dumps(stats, separators=(",", ":")),
        )


class ParquetStager:
    """Writes one task's Arrow batches as staged Parquet files (phase 1 of the commit)."""

    def __init__(
        self,
        *,
        table: Location,
        schema: pa.Schema,
        partition_by: Sequence[str],
        app_id: str,
        batch_id: int | None,
        task: int,
        max_records_per_file: int,
        target_file_bytes: int,
        max_open_files: int = 64,
        mapping: ColumnMapping | None = None,
    ) -> None:
        """``mapping``: the table's column mapping (None: the table has none, or is
        created by this batch), every column of ``schema`` in it."""
        self.table = table
        self.schema = normalize_schema(schema)
        self.partition_by = list(partition_by)
        self.data_schema = self.schema
        for name in self.partition_by:
            self.data_schema = self.data_schema.remove(self.data_schema.get_field_index(name))
        self.mapping = mapping
        if mapping is not None:
            # delta-spark writes a column-mapped table's partition columns into its files
            # too (and reads them from there); their values also stay in the log.
            self.data_schema = self.schema
        self.physical = mapping.physical_schema(self.data_schema) if mapping is not None else None
        self.partition_names = (
            [mapping.physical_name(c) for c in self.partition_by]
            if mapping is not None
            else self.partition_by
        )
        self.output = StagedOutput(
            attempt=uuid.uuid4().hex[:12], batch_id=batch_id, task=task, mapping=mapping
        )
        self.app_tag = app_tag(app_id)
        self.max_records_per_file = max_records_per_file
        self.target_file_bytes = target_file_bytes
        self.max_open_files = max_open_files
        self._open: dict[tuple[str | None, ...], _OpenFile] = {}
        self._seq = 0

    def _file_for(self, key: tuple[str | None, ...]) -> _OpenFile:
        current = self._open.get(key)
        if current is not None:
            return current
        if len(self._open) >= self.max_open_files:
            oldest = next(iter(self._open))
            self.output.files.append(self._open.pop(oldest).close())
        if self.mapping is not None:  # delta-spark's random prefix (the name would be opaque)
            folder = "".join(random.choices(string.ascii_letters + string.digits, k=2))
        else:
            folder = partition_dir(self.partition_by, key) if self.partition_by else ""
        name = (
            f"part-b{self.output.batch_id or 0:05d}-t{self.output.task:05d}-q{self.app_tag}-"
            f"{self.output.attempt}-{self._seq:03d}.chkpt.snappy.parquet"
        )
        self._seq += 1
        relative = f"{folder}/{name}" if folder else name
        opened = _OpenFile(
            location=self.table.child(relative),
            relative=relative,
            schema=self.data_schema,
            partition_values=dict(zip(self.partition_names, key, strict=True)),
            physical=self.physical,
            unbounded=self.partition_by,
        )
        self._open[key] = opened
        return opened

    def _groups(
        self, batch: pa.RecordBatch
    ) -> Iterable[tuple[tuple[str | None, ...], pa.RecordBatch]]:
        if not self.partition_by:
            yield (), batch
            return
        import pyarrow as pa

        table = pa.Table.from_batches([batch])
        rows = pa.array(range(table.num_rows), type=pa.int64())
        groups = (
            table.select(self.partition_by)
            .append_column("__row", rows)
            .group_by(self.partition_by, use_threads=False)
            .aggregate([("__row", "list")])
        )
        data = table if self.mapping is not None else table.drop_columns(self.partition_by)
        for group in groups.to_pylist():  # one entry per distinct key, NaN and null included
            key = tuple(partition_value_string(group[name]) for name in self.partition_by)
            for chunk in data.take(pa.array(group["__row_list"], type=pa.int64())).to_batches():
                yield key, chunk

    def add(self, batch: pa.RecordBatch) -> None:
        """Stage one Arrow batch (Spark's column order and types)."""
        if batch.num_rows == 0:
            return
        if batch.schema != self.schema:
            batch = batch.cast(self.schema)
        for key, part in self._groups(batch):
            offset = 0
            while offset < part.num_rows:  # a file never exceeds maxRecordsPerFile
                target = self._file_for(key)
                room = self.max_records_per_file - target.rows
                piece = part.slice(offset, room)
                target.write(piece)
                offset += piece.num_rows
                if (
                    target.rows >= self.max_records_per_file
                    or target.arrow_bytes >= self.target_file_bytes
                ):
                    self.output.files.append(self._open.pop(key).close())

    def finish(self) -> StagedOutput:
        for key in list(self._open):
            self.output.files.append(self._open.pop(key).close())
        return self.output

    def discard(self) -> None:
        """Remove everything this attempt wrote (the task failed before returning)."""
        for opened in self._open.values():
            try:
                opened.writer.close()
            except Exception:  # closing a half-written file may fail; it is deleted next
                log.debug("closing %s failed", opened.relative, exc_info=True)
        paths = [o.relative for o in self._open.values()] + [f.path for f in self.output.files]
        self._open.clear()
        for relative in paths:
            self.table.child(relative).delete()
