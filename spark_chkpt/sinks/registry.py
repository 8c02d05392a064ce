"""The sink kinds, by the name their snapshot records carry (``SnapshotRecord.sink``).

Each sink's object lives in its own package (``delta/sink/kind.py``,
``delta/upsert/kind.py``, ``kafka/sink/kind.py``) and answers, for the tools above the
sinks, every question that depends on the sink: a third sink is its package and one
line in :data:`_BUILT_IN`. A record or savepoint without a sink (an earlier release's)
is a ``chkpt-delta`` one. No module outside a sink's package compares a kind's name
(``tests/sinks/test_sink_registry.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from spark_chkpt.delta.sink.kind import CHKPT_DELTA
from spark_chkpt.delta.upsert.kind import DELTA_UPSERT
from spark_chkpt.errors import ChkptError
from spark_chkpt.kafka.sink.kind import CHKPT_KAFKA
from spark_chkpt.snapshot.record import SnapshotRecord
from spark_chkpt.snapshot.rewind import RewindPoint, RewindRequest, SinkRewind


class SinkKind(Protocol):
    """What the tools above a sink ask of it."""

    # The kind snapshot records and savepoints carry (``SnapshotRecord.sink``).
    name: str
    # The sink writes topics with barriers (and a control topic each): a rewind needs the
    # brokers, a fork renames its topics, its forked writer's app id is its new query id.
    has_barriers: bool
    # The sink option naming what a job writes (a shadow's is checked against production).
    target_option: str
    # ``status`` without the brokers ``progress`` needs: how to get them ("" if none).
    progress_hint: str

    def rewind(self, *, point: RewindPoint, request: RewindRequest) -> SinkRewind:
        """The sink's rewind to ``point`` (restore with ``mode="rewind"``)."""
        ...

    def describe(
        self, *, target: str | None, app_id: str, batch_id: int, version: int | None
    ) -> str:
        """Where snapshot ``batch_id`` is in the sink, in a few words."""
        ...

    def barrier_topics(self, target: str | None) -> tuple[str, ...]:
        """The topics with barriers the sink writes at ``target`` (none: a table)."""
        ...

    def progress(
        self, *, record: SnapshotRecord, bootstrap_servers: str | None
    ) -> dict[str, dict[str, int]] | None:
        """Snapshot ``record``'s barrier offsets per topic and partition, as ``status``
        shows them (None: the sink has none, or no broker to ask)."""
        ...


_BUILT_IN: tuple[SinkKind, ...] = (CHKPT_DELTA, DELTA_UPSERT, CHKPT_KAFKA)
_KINDS: dict[str, SinkKind] = {kind.name: kind for kind in _BUILT_IN}
DEFAULT = CHKPT_DELTA.name  # a record or savepoint that names no sink


def register_sink_kind(kind: SinkKind) -> None:
    """Add ``kind`` (a sink outside the built-in ones); its name must be new."""
    if kind.name in _KINDS and _KINDS[kind.name] is not kind:
        raise ChkptError(f"spark-chkpt: sink kind {kind.name!r} is registered already")
    _KINDS[kind.name] = kind


def sink_kinds() -> Mapping[str, SinkKind]:
    """Every sink kind by name."""
    return dict(_KINDS)


def find_sink_kind(name: str | None) -> SinkKind | None:
    """The kind named ``name`` (None names the default); None if unknown."""
    return _KINDS.get(DEFAULT if name is None else name)


def sink_kind(name: str | None) -> SinkKind:
    """The kind named ``name`` (None names the default); one error if unknown."""
    kind = find_sink_kind(name)
    if kind is None:
        raise ChkptError(
            f"spark-chkpt: sink kind {name!r} is not one this release knows "
            f"({', '.join(sorted(_KINDS))})"
        )
    return kind
