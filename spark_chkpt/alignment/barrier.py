"""Barrier markers carried through Kafka between queries, and their index records.

At snapshot N the ``chkpt-kafka`` sink of an upstream query writes one **barrier
record** into every partition of the topic it wrote, after all of snapshot N's data.
Every data record the sink writes carries the header ``chkpt.attempt`` (the tag of the
task attempt that produced it); the barrier names the attempts whose records belong to
snapshot N. A downstream reader cuts its micro-batch at a barrier present on every
partition and drops tagged records no barrier confirms (a failed attempt's output).

The sink also writes **index records** to a control topic (``__chkpt.<topic>`` by
default) so readers find barrier positions without scanning data: an ``intent`` before
the barriers (it fixes which attempts snapshot N confirms, so a replayed commit cannot
confirm a second attempt) and a ``complete`` record with every barrier's offset after.

More: docs/concepts/kafka-internals.md (spark_chkpt/alignment/barrier.py).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from spark_chkpt.errors import CorruptMarkerError, InvalidTypeError

ATTEMPT_HEADER = "chkpt.attempt"
BARRIER_HEADER = "chkpt.barrier"
PROJECT_HEADERS = frozenset({ATTEMPT_HEADER, BARRIER_HEADER})
BARRIER_KEY = b"__chkpt_barrier__"
MARKER_VERSION = 1
CONTROL_PREFIX = "__chkpt."


def control_topic_for(topic: str) -> str:
    """The default control topic of a data topic (``__`` keeps it out of patterns)."""
    return f"{CONTROL_PREFIX}{topic}"


def _where(topic: str, partition: int, offset: int) -> str:
    return f"{topic}-{partition} offset {offset}"


def _decode(
    value: bytes | None, *, what: str, topic: str, partition: int, offset: int
) -> dict[str, Any]:
    try:
        doc = json.loads(value or b"")
    except (ValueError, UnicodeDecodeError) as e:
        raise CorruptMarkerError(
            f"corrupt {what} at {_where(topic, partition, offset)}: not JSON "
            f"({e}); value starts {bytes(value or b'')[:80]!r}"
        ) from e
    if not isinstance(doc, dict):
        raise CorruptMarkerError(
            f"corrupt {what} at {_where(topic, partition, offset)}: "
            f"expected a JSON object, got {type(doc).__name__}"
        )
    version = doc.get("v")
    if type(version) is not int or version != MARKER_VERSION:
        raise CorruptMarkerError(
            f"{what} at {_where(topic, partition, offset)} has format version "
            f"{version!r}; this reader understands {MARKER_VERSION}"
        )
    return doc


def _field(
    doc: Mapping[str, Any], name: str, kind: type | tuple[type, ...], *, what: str, where: str
) -> Any:
    value = doc.get(name)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise CorruptMarkerError(f"corrupt {what} at {where}: field {name!r} is {value!r}")
    return value


@dataclass(frozen=True)
class Barrier:
    """Barrier record ``snapshot_id`` of upstream query ``app_id`` in one partition."""

    app_id: str
    snapshot_id: int
    attempts: tuple[str, ...]

    def value(self) -> bytes:
        return json.dumps(
            {
                "v": MARKER_VERSION,
                "app": self.app_id,
                "snapshot": self.snapshot_id,
                "attempts": list(self.attempts),
            },
            separators=(",", ":"),
        ).encode()

    @staticmethod
    def headers() -> list[tuple[str, bytes]]:
        return [(BARRIER_HEADER, str(MARKER_VERSION).encode())]

    @classmethod
    def parse(cls, value: bytes | None, *, topic: str, partition: int, offset: int) -> Barrier:
        doc = _decode(value, what="barrier record", topic=topic, partition=partition, offset=offset)
        where = _where(topic, partition, offset)
        attempts = _field(doc, "attempts", list, what="barrier record", where=where)
        return cls(
            app_id=_field(doc, "app", str, what="barrier record", where=where),
            snapshot_id=_field(doc, "snapshot", int, what="barrier record", where=where),
            attempts=tuple(str(a) for a in attempts),
        )


def is_barrier(headers: Sequence[tuple[str, bytes]] | None) -> bool:
    return any(k == BARRIER_HEADER for k, _ in headers or ())


def attempt_of(headers: Sequence[tuple[str, bytes]] | None) -> str | None:
    """The attempt tag of a record: the last ``chkpt.attempt`` header, the one its writer
    added (the sink strips forwarded tags, but records written before it did may carry an
    upstream stage's tag first)."""
    tag = None
    for key, value in headers or ():
        if key == ATTEMPT_HEADER:
            tag = bytes(value).decode("ascii", errors="replace")
    return tag


def without_project_headers(
    headers: Sequence[tuple[str, bytes]],
) -> list[tuple[str, bytes]]:
    """``headers`` minus this project's own (attempt tags, barrier marks): a job that
    forwards the headers it read (``includeHeaders=true``) must not pass an upstream
    stage's tag on, or downstream readers would judge its records by the wrong attempt."""
    return [(k, v) for k, v in headers if k not in PROJECT_HEADERS]


@dataclass(frozen=True)
class IndexEntry:
    """One record of the control topic: snapshot N of an app in one data topic.

    A ``revoke`` entry (a savepoint rewind to snapshot N) keeps ``snapshot_id`` N and
    revokes the app's snapshots ``revoked`` (every snapshot after N of a generation
    older than its own): ``attempts`` are the attempts they confirmed, ``starts`` and
    ``positions`` the revoked offsets ``[start, end)`` per partition (from right after
    barrier N to the log end when the rewind ran)."""

    kind: Literal["intent", "complete", "revoke"]
    app_id: str
    snapshot_id: int
    topic: str
    attempts: tuple[str, ...]
    positions: Mapping[int, int] = field(default_factory=dict)  # partition -> barrier offset
    counts: Mapping[int, int] = field(default_factory=dict)  # partition -> confirmed records
    created_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    offset: int | None = None  # where it sits in the control topic (set when read)
    # The data topic's Kafka topic id when written: entries of a deleted and recreated
    # topic of the same name must not cut the new one (None: written before ids were).
    topic_id: str | None = None
    # The snapshot's source offsets (Spark's offsets/N, topic-partition offsets only):
    # which run of (app, snapshot) wrote the entry. None in entries written before it.
    sources: tuple[Any, ...] | None = None
    # The writer's generation of the app id (fencing; 0: a fresh checkpoint's, or an
    # entry written before generations were).
    generation: int = 0
    # revoke entries only: the snapshots revoked, and where the revoked offsets begin.
    revoked: tuple[int, ...] = ()
    starts: Mapping[int, int] = field(default_factory=dict)

    def revoked_range(self, partition: int) -> tuple[int, int] | None:
        """A ``revoke`` entry's revoked offsets ``[start, end)`` on ``partition`` (None:
        nothing revoked there)."""
        if self.kind != "revoke" or partition not in self.positions:
            return None
        start, end = self.starts.get(partition, 0), self.positions[partition]
        return (start, end) if end > start else None

    # delivery "exactly-once-transactions": the Kafka transactions the intent fixes, as
    # (transactional id, producer id, producer epoch); the coordinator commits them.
    transactions: tuple[tuple[str, int, int], ...] = ()
    # An intent whose transactions the broker aborted, all of them (nothing of the
    # snapshot is visible): the snapshot's next commit writes an intent of its own.
    void: bool = False

    def key(self) -> bytes:
        return self.app_id.encode()

    def value(self) -> bytes:
        return json.dumps(
            {
                "v": MARKER_VERSION,
                "kind": self.kind,
                "app": self.app_id,
                "snapshot": self.snapshot_id,
                "topic": self.topic,
                "attempts": list(self.attempts),
                "positions": {str(p): o for p, o in sorted(self.positions.items())},
                "counts": {str(p): n for p, n in sorted(self.counts.items())},
                "created_ms": self.created_ms,
                **({"topic_id": self.topic_id} if self.topic_id else {}),
                **({} if self.sources is None else {"sources": list(self.sources)}),
                **({"generation": self.generation} if self.generation else {}),
                **(
                    {
                        "revoked": list(self.revoked),
                        "starts": {str(p): o for p, o in sorted(self.starts.items())},
                    }
                    if self.kind == "revoke"
                    else {}
                ),
                **(
                    {"transactions": [list(t) for t in self.transactions]}
                    if self.transactions
                    else {}
                ),
                **({"void": True} if self.void else {}),
            },
            separators=(",", ":"),
        ).encode()

    @classmethod
    def parse(cls, value: bytes | None, *, topic: str, partition: int, offset: int) -> IndexEntry:
        what = "barrier index record"
        where = _where(topic, partition, offset)
        doc = _decode(value, what=what, topic=topic, partition=partition, offset=offset)
        kind = doc.get("kind")
        if kind not in ("intent", "complete", "revoke"):
            raise CorruptMarkerError(f"corrupt {what} at {where}: kind {kind!r}")
        try:
            positions = {
                int(p): int(o)
                for p, o in _field(doc, "positions", dict, what=what, where=where).items()
            }
            raw_counts = doc.get("counts") or {}
            if not isinstance(raw_counts, dict):
                raise InvalidTypeError(f"field 'counts' is {raw_counts!r}")
            counts = {int(p): int(n) for p, n in raw_counts.items()}
            created_ms = int(doc.get("created_ms") or 0)
            topic_id = doc.get("topic_id")
            if topic_id is not None and not isinstance(topic_id, str):
                raise InvalidTypeError(f"field 'topic_id' is {topic_id!r}")
            generation = int(doc.get("generation") or 0)
            raw_sources = doc.get("sources")
            if raw_sources is not None and not isinstance(raw_sources, list):
                raise InvalidTypeError(f"field 'sources' is {raw_sources!r}")
            raw_revoked = doc.get("revoked") or []
            raw_starts = doc.get("starts") or {}
            if not isinstance(raw_revoked, list) or not isinstance(raw_starts, dict):
                raise InvalidTypeError(
                    f"fields 'revoked', 'starts' are {raw_revoked!r}, {raw_starts!r}"
                )
            revoked = tuple(int(s) for s in raw_revoked)
            starts = {int(p): int(o) for p, o in raw_starts.items()}
            transactions = tuple(
                (str(t[0]), int(t[1]), int(t[2])) for t in doc.get("transactions") or ()
            )
        except (TypeError, ValueError) as e:
            raise CorruptMarkerError(f"corrupt {what} at {where}: {e}") from e
        return cls(
            kind=kind,
            app_id=_field(doc, "app", str, what=what, where=where),
            snapshot_id=_field(doc, "snapshot", int, what=what, where=where),
            topic=_field(doc, "topic", str, what=what, where=where),
            attempts=tuple(str(a) for a in _field(doc, "attempts", list, what=what, where=where)),
            positions=positions,
            counts=counts,
            created_ms=created_ms,
            offset=offset,
            topic_id=topic_id,
            sources=None if raw_sources is None else tuple(raw_sources),
            generation=generation,
            revoked=revoked,
            starts=starts,
            transactions=transactions,
            void=bool(doc.get("void")),
        )
