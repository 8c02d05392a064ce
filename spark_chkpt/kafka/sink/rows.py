"""What the sink's two producers share: one Arrow batch as Spark's Kafka-sink columns
and the header rule (what a task attempt wrote is its committable,
:mod:`spark_chkpt.kafka.sink.committable`).

:func:`sink_rows` turns a batch into Python lists once (Arrow's ``to_pylist``, in C) and
checks it before a record is produced: no ``value`` column, a null topic, and the control
topic of every topic a ``topic`` column names (created before its first record). The
producers then run one tight loop over the lists.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import TYPE_CHECKING, Any

from spark_chkpt.alignment.barrier import (
    control_topic_for,
    without_project_headers,
)
from spark_chkpt.errors import ChkptError
from spark_chkpt.kafka.control.topic import ensure_control_topic
from spark_chkpt.kafka.sink.committable import Header
from spark_chkpt.kafka.sink.options import KafkaSinkConfig

if TYPE_CHECKING:
    import pyarrow as pa


@dataclass(frozen=True)
class SinkRows:
    """One batch's columns as Python values; absent columns are ``None`` or repeated."""

    values: list[Any]
    keys: Iterable[Any]
    topics: Iterable[str]
    partitions: list[int | None] | None
    headers: list[Sequence[Mapping[str, Any]] | None] | None


def _column(batch: pa.RecordBatch, name: str) -> list[Any] | None:
    index = batch.schema.get_field_index(name)
    return batch.column(index).to_pylist() if index >= 0 else None


def sink_rows(batch: pa.RecordBatch, *, config: KafkaSinkConfig, controlled: set[str]) -> SinkRows:
    """The batch's columns, checked. ``controlled``: topics whose control topic this task
    has made sure of (updated here)."""
    values = _column(batch, "value")
    if values is None:
        raise ChkptError("chkpt-kafka sink: the query has no 'value' column")
    keys = _column(batch, "key")
    topics: Iterable[str]
    if config.topic:
        topics = repeat(config.topic)
    else:
        column = _column(batch, "topic")
        if column is None:
            raise ChkptError("chkpt-kafka sink: set option 'topic' or write a 'topic' column")
        if None in column:
            raise ChkptError(
                f"chkpt-kafka sink: row {column.index(None)} of the batch has a null topic "
                "and no 'topic' option is set"
            )
        # streamWriter() created the option's control topic; a topic column can name new
        # topics, whose control topic must exist before their first record does.
        for name in set(column) - controlled:
            ensure_control_topic(
                bootstrap_servers=config.bootstrap_servers,
                name=config.control_topic or control_topic_for(name),
                settings=config.producer_settings,
                replication_factor=config.control_replication_factor,
                min_insync_replicas=config.control_min_insync_replicas,
            )
            controlled.add(name)
        topics = column
    return SinkRows(
        values=values,
        keys=repeat(None) if keys is None else keys,
        topics=topics,
        partitions=_column(batch, "partition"),
        headers=_column(batch, "headers"),
    )


def tagged_headers(raw: Sequence[Mapping[str, Any]] | None, tag: Header) -> list[Header]:
    """A record's headers: the ones it was given, minus project (``chkpt.*``) headers a job
    forwards from its input, plus this attempt's tag."""
    headers = [(h["key"], as_bytes(h["value"]) or b"") for h in raw or ()]
    if headers:
        headers = without_project_headers(headers)
    headers.append(tag)
    return headers


def as_bytes(value: Any) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    return str(value).encode("utf-8")


def producing_failed(error: object) -> ChkptError:
    return ChkptError(f"chkpt-kafka sink: producing failed: {error}")
