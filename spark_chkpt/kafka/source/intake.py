"""What a read task does with the records a poll brought: a partition's share of the task
(:class:`ReadSpec`) and its state as a channel, each record or column chunk cut at the
range's end and judged by its topic's rules (plain, fan-in, or through the barriers and
held records), passed to the aligner or the partition's pending rows, and counted.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from spark_chkpt.alignment.aligner import Aligner, Forward
from spark_chkpt.alignment.barrier import attempt_of, is_barrier
from spark_chkpt.alignment.cut import RecordFilter
from spark_chkpt.alignment.fanin import FanInFilter
from spark_chkpt.errors import (
    AlignmentError,
)
from spark_chkpt.kafka.client.columnar import (
    ColumnsBuilder,
    Pending,
    RecordColumns,
)
from spark_chkpt.kafka.source.column_judge import (
    Judged,
    fan_in_columns,
    judge_columns,
    plain_columns,
)
from spark_chkpt.kafka.source.judge import RecordJudge, fan_in_verdict, plain_records
from spark_chkpt.offsets import OffsetRange, TopicPartition

if TYPE_CHECKING:
    pass

log = logging.getLogger(__name__)

# Bytes a record takes in a record batch besides its key, value and headers (length,
# attributes, timestamp and offset deltas, the lengths; the batch header shared out).
RECORD_OVERHEAD = 16
# Per topic, the bytes of one record as last read in this Python worker.
RECORD_BYTES: dict[str, float] = {}


@dataclass(frozen=True)
class ReadSpec:
    """One partition's share of a read task."""

    range: OffsetRange
    markers: bool = False  # the topic carries barriers: never emit them
    filter: RecordFilter | None = None  # drop unconfirmed tagged records before its bound
    # Read as plain though its alignment is not "none": its control topic (this name) was
    # not listed. A tagged record or a barrier then means the control topic is gone.
    missing_control: str | None = None
    # A topic several upstream apps write (fan-in): judge each record by this filter
    # (its range begins at the apps' first pending record), without the aligner.
    fan_in: FanInFilter | None = None


@dataclass
class ReadStats:
    """What a read task saw besides the rows it returned."""

    barriers: int = 0
    dropped: int = 0
    dropped_attempts: set[str] = field(default_factory=set)
    revoked: int = 0  # records and barriers of revoked upstream snapshots skipped
    prefetched: int = 0  # records taken from the prefetch buffer instead of Kafka


@dataclass
class Channel:
    spec: ReadSpec
    position: int
    pending: Pending = field(default_factory=Pending)
    ahead: list[Any] = field(default_factory=list)  # fetched past the range's end
    assigned: bool = False
    done: bool = False
    held: list[Any] = field(default_factory=list)  # waiting for a barrier to judge them
    judge: RecordJudge = field(init=False)

    def __post_init__(self) -> None:
        self.judge = RecordJudge(tp=self.spec.range.tp, filter=self.spec.filter)

    @property
    def tp(self) -> TopicPartition:
        return self.spec.range.tp


class RecordIntake:
    """The records a :class:`~spark_chkpt.kafka.source.fetcher.RangeFetcher` takes in,
    judged and passed on; what it counts (:class:`ReadStats`)."""

    stats: ReadStats
    _columnar: bool  # the task's records come as RecordColumns
    _learned: set[str]  # topics whose record size the task measured
    _resize: bool  # a record size learned first-hand: size the fetches again

    def _learn(self, topic: str, rows: int, nbytes: int) -> None:
        """Remember the bytes a record of ``topic`` takes (once per task and topic)."""
        if rows > 0 and topic not in self._learned:
            self._learned.add(topic)
            # the fetches so far were sized without it: size them again
            self._resize = self._resize or topic not in RECORD_BYTES
            RECORD_BYTES[topic] = nbytes / rows + RECORD_OVERHEAD

    def _take(
        self,
        channel: Channel,
        records: list[Any],
        aligner: Aligner[Any] | None,
        channels: dict[TopicPartition, Channel],
    ) -> None:
        if self._columnar:
            self._take_columns(channel, records, aligner, channels)
            return
        spec = channel.spec
        end = spec.range.end
        if channel.tp.topic not in self._learned:
            self._learn(
                channel.tp.topic,
                len(records),
                sum(len(r.value or b"") + len(r.key or b"") for r in records),
            )
        if records[-1].offset >= end:  # offsets ascend: split once, no per-record test
            split = bisect.bisect_left(records, end, key=lambda r: r.offset)
            channel.ahead, records = records[split:], records[:split]
        if not spec.markers:
            if spec.missing_control is not None:
                _refuse_without_control(spec, records)
            rows, barriers = plain_records(records)
            self.stats.barriers += barriers
            channel.pending.extend_records(rows)
            return
        if spec.fan_in is not None:
            self._take_fan_in(channel, spec.fan_in, records)
            return
        judge = channel.judge
        for record in records:
            verdict, barrier = judge.judge(record, holding=bool(channel.held))
            if verdict == "pass":
                self._pass(channel, record, aligner, channels)
            elif verdict == "hold":
                # Until a barrier confirms its attempt or the range ends without one.
                channel.held.append(record)
            elif verdict == "revoked":
                self.stats.revoked += 1
            else:  # a barrier: held records may be judged now, then the aligner hears it
                assert barrier is not None
                self.stats.barriers += 1
                if channel.held:
                    self._release(channel, aligner, channels)
                if aligner is not None:
                    self._emit(
                        aligner.on_barrier(channel=channel.tp, snapshot_id=barrier.snapshot_id),
                        channels,
                    )

    def _take_fan_in(self, channel: Channel, judge: FanInFilter, records: list[Any]) -> None:
        """A fan-in topic's records: barriers skipped, each record delivered, dropped (a
        failed attempt), skipped as revoked, or left for another batch, by its offset and
        attempt tag (:mod:`spark_chkpt.alignment.fanin`). Not through the aligner: the
        apps number their snapshots each on its own."""
        for record in records:
            verdict, tag = fan_in_verdict(judge, record)
            if verdict == "barrier":
                self.stats.barriers += 1
            elif verdict == "deliver":
                channel.pending.append(record)
            elif verdict == "drop":
                self.stats.dropped += 1
                self.stats.dropped_attempts.add(str(tag))
            elif verdict == "revoked":
                self.stats.revoked += 1

    def _take_columns(
        self,
        channel: Channel,
        chunks: list[RecordColumns],
        aligner: Aligner[Any] | None,
        channels: dict[TopicPartition, Channel],
    ) -> None:
        """:meth:`_take` of records as columns: the same split at the range's end and the
        same rules (:mod:`.column_judge`), decided per chunk instead of per record."""
        spec = channel.spec
        end = spec.range.end
        ahead: list[RecordColumns] = []
        if chunks and channel.tp.topic not in self._learned:
            sample = chunks[0]
            self._learn(channel.tp.topic, len(sample), sample.nbytes + sum(sample.header_len))
        for chunk in chunks:
            if chunk.last_offset >= end:
                chunk, past = chunk.split_at(end)
                if len(past):
                    ahead.append(past)
            if not len(chunk):
                continue
            if not spec.markers:
                rows, barriers, first = plain_columns(chunk)
                if first is not None and spec.missing_control is not None:
                    _refuse_without_control(spec, [chunk.record(first)])
                self.stats.barriers += barriers
                if rows is not None:
                    channel.pending.append(rows)
            elif spec.fan_in is not None:
                self._apply(channel, fan_in_columns(spec.fan_in, chunk), None, channels)
            else:
                self._judge_columns(channel, chunk, aligner, channels, final=False)
        if ahead or (chunks and chunks[-1].last_offset >= end):
            channel.ahead = ahead

    def _judge_columns(
        self,
        channel: Channel,
        chunk: RecordColumns | None,
        aligner: Aligner[Any] | None,
        channels: dict[TopicPartition, Channel],
        *,
        final: bool,
    ) -> None:
        """Judge ``chunk`` after the records held before it (``final``: the range's end,
        so the held records are judged by what is known now)."""
        held, channel.held = channel.held, []
        if held:
            joined = ColumnsBuilder()
            for part in [*held, *([chunk] if chunk is not None else [])]:
                joined.add(part)
            chunk = joined.build()
        if chunk is None or not len(chunk):
            return
        self._apply(channel, judge_columns(channel.judge, chunk, final=final), aligner, channels)

    def _apply(
        self,
        channel: Channel,
        judged: Judged,
        aligner: Aligner[Any] | None,
        channels: dict[TopicPartition, Channel],
    ) -> None:
        """Count what a chunk came to, pass its segments on and hand the aligner the
        barrier after each; keep what is still held."""
        stats = self.stats
        stats.barriers += judged.barriers
        stats.revoked += judged.revoked
        stats.dropped += judged.dropped
        stats.dropped_attempts |= judged.dropped_attempts
        for rows, snapshot in judged.segments:
            if rows is not None:
                self._pass(channel, rows, aligner, channels)
            if snapshot is not None and aligner is not None:
                self._emit(aligner.on_barrier(channel=channel.tp, snapshot_id=snapshot), channels)
        if judged.held is not None:
            channel.held = [judged.held]

    def _pass(
        self,
        channel: Channel,
        record: Any,
        aligner: Aligner[Any] | None,
        channels: dict[TopicPartition, Channel],
    ) -> None:
        if aligner is None:
            channel.pending.append(record)
        else:
            self._emit(aligner.on_record(channel=channel.tp, record=record), channels)

    def _release(
        self,
        channel: Channel,
        aligner: Aligner[Any] | None,
        channels: dict[TopicPartition, Channel],
    ) -> None:
        """Pass the held records that some barrier or the index confirms, in order; drop
        the tagged ones that none does (a failed upstream attempt's output)."""
        held, channel.held = channel.held, []
        for verdict, record in channel.judge.release(held):
            if verdict == "drop":
                self.stats.dropped += 1
                self.stats.dropped_attempts.add(str(attempt_of(record.headers)))
            else:
                self._pass(channel, record, aligner, channels)

    @staticmethod
    def _emit(events: Sequence[Any], channels: dict[TopicPartition, Channel]) -> None:
        for event in events:
            if isinstance(event, Forward):
                channel = event.channel
                if isinstance(channel, TopicPartition):
                    channels[channel].pending.append(event.record)

    def _end_of_range(
        self,
        channel: Channel,
        aligner: Aligner[Any] | None,
        channels: dict[TopicPartition, Channel],
    ) -> None:
        """No barrier comes any more: judge the held records by what is known."""
        if channel.held:
            if self._columnar:
                self._judge_columns(channel, None, aligner, channels, final=True)
            else:
                self._release(channel, aligner, channels)
        if aligner is not None:
            self._emit(aligner.on_end_of_channel(channel=channel.tp), channels)


def _refuse_without_control(spec: ReadSpec, records: Sequence[Any]) -> None:
    """A topic planned as plain because its control topic was not listed must not hold
    the chkpt-kafka sink's records: the sink creates the control topic before any task
    writes, so a tagged record or a barrier means it was deleted (or is hidden from this
    reader), and reading on would take failed upstream attempts' records as data."""
    for record in records:
        headers = record.headers
        if headers and (is_barrier(headers) or attempt_of(headers) is not None):
            what = "a barrier record" if is_barrier(headers) else "a record tagged chkpt.attempt"
            raise AlignmentError(
                f"chkpt-kafka: topic {spec.range.tp.topic} holds {what} (partition "
                f"{spec.range.tp.partition}, offset {record.offset}), written by the "
                f"chkpt-kafka sink, but its control topic {spec.missing_control} does not "
                "exist: it was deleted (or this reader may not see it, or the upstream "
                "query names another controlTopic). Without it this reader cannot tell "
                "committed records from a failed upstream attempt's, and would read those "
                f"twice. Create {spec.missing_control} again (one partition, retention.ms=-1"
                "; restarting the upstream query creates it), then restart this query: "
                "barriers written after that confirm their attempts, and the barrier records "
                "already in the topic confirm theirs. Or set option controlTopic to the "
                "upstream's control topic; or, to read every record including failed "
                "attempts' (at least once), set alignment=none."
            )
