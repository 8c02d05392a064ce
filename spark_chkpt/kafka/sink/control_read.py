"""Where a restarted ``chkpt-kafka`` coordinator starts reading its control topic.

The coordinator asks its control topic about its own app id only (the fence's newest
generation, an earlier commit of the batch, open intents, revocations). Each commit
records in its snapshot record how far it had read when it passed the fence
(:class:`ReadPoint`: the offset, the control topic's Kafka id, the checkpoint's
generation). Every entry of the app id before that offset is of no further use: the
fence saw no newer generation there, and every batch up to the recorded one had its
``complete`` entry or was finished by ``resume``. So a restarted coordinator (a new
driver, its index cache empty) reads from the newest record's point before the batch it
commits, instead of from offset 0: what it reads grows with the batches since that
record, not with the control topic's age.

Read from the start whenever in doubt: no record (``retainedSnapshots=0``, a first
start, a record of an older release), a record of another app id or sink, a control
topic without a Kafka id (a broker without topic ids, Tansu), a control topic created
again since (another id, or an end before the point:
:class:`~spark_chkpt.kafka.control.topic.ControlTopic` reads it from 0), and an entry of
the app after the point written by an older generation than the recorded one (a stale
writer racing a savepoint rewind, whose ``revoke`` entry may lie before the point).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from spark_chkpt.errors import ChkptError
from spark_chkpt.kafka.control.topic import ControlTopic
from spark_chkpt.snapshot.store import SnapshotStore

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReadPoint:
    """How far a commit had read ``control_topic`` (Kafka id ``id``) when it passed the
    fence under the checkpoint's ``generation``."""

    control_topic: str
    offset: int
    id: str
    generation: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def of(cls, doc: Any) -> ReadPoint | None:
        """The point a record's ``control_read`` entry holds (None: none, or malformed)."""
        if not isinstance(doc, Mapping):
            return None
        topic, offset, id_, generation = (
            doc.get("control_topic"),
            doc.get("offset"),
            doc.get("id"),
            doc.get("generation"),
        )
        if not (
            isinstance(topic, str)
            and isinstance(offset, int)
            and offset >= 0
            and isinstance(id_, str)
            and id_
            and isinstance(generation, int)
        ):
            return None
        return cls(control_topic=topic, offset=offset, id=id_, generation=generation)


def read_point(index: ControlTopic, *, generation: int) -> ReadPoint | None:
    """Where ``index`` stands now, to record (None: the control topic has no Kafka id,
    so a restart could not tell it from one created again)."""
    known = index.control_topic_id()
    if not known:
        return None
    return ReadPoint(
        control_topic=index.control_topic,
        offset=index.position,
        id=known,
        generation=generation,
    )


def recorded_point(
    store: SnapshotStore,
    *,
    app_id: str,
    sink: str,
    topic: str,
    control_topic: str,
    before: int | None,
) -> ReadPoint | None:
    """The point the newest snapshot record before batch ``before`` (any batch: None)
    holds for ``topic``'s ``control_topic``; None where a read from 0 is due."""
    try:
        ids = [i for i in store.batch_ids() if before is None or i < before]
        record = store.get(ids[-1]) if ids else None
    except (ChkptError, OSError) as e:  # the store is a copy: read the control topic
        log.warning("%s: reading control topic %s from its start", e, control_topic)
        return None
    if record is None or record.app_id != app_id or record.sink != sink:
        return None
    point = ReadPoint.of(record.control_read.get(topic))
    if point is None or point.control_topic != control_topic:
        return None
    return point


def doubt(index: ControlTopic, *, point: ReadPoint, app_id: str) -> str | None:
    """Why ``index``, read from ``point``, cannot be trusted (None: it can)."""
    if not index.control_topic_id():
        return "its Kafka id is unknown now"
    older = [e for e in index.entries if e.app_id == app_id and e.generation < point.generation]
    if older:
        return (
            f"entry at offset {older[0].offset} of app id {app_id} is of generation "
            f"{older[0].generation}, older than the recorded {point.generation}"
        )
    return None
