"""The sink kinds, by the name their snapshot records carry (``SnapshotRecord.sink``).

Each sink's object lives in its own package (``delta/sink/kind.py``,
``delta/upsert/kind.py``, ``kafka/sink/kind.py``) and answers, for the tools above the
sinks, every question that depends on the sink. A sink outside this package is a
plugin: its distribution declares its kind in the entry point group
:data:`ENTRY_POINT_GROUP` (``spark_chkpt.sinks``), loaded on the first question, or
calls :func:`register_sink_kind`; ``spark_chkpt.register()`` registers its data source
(docs/how-to/write-a-sink.md). A record or savepoint without a sink (an earlier
release's) is a ``chkpt-delta`` one. No module outside a sink's package compares a
kind's name (``tests/sinks/test_sink_registry.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Protocol

from spark_chkpt.errors import ChkptError, UnsupportedSinkError
from spark_chkpt.snapshot.record import SnapshotRecord
from spark_chkpt.snapshot.rewind import RewindPoint, RewindRequest, SinkRewind
from spark_chkpt.snapshot.tools import Tool

if TYPE_CHECKING:
    from pyspark.sql.datasource import DataSource

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "spark_chkpt.sinks"


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
    # The commands that read the sink's target (``recover``, ``diff``, ``lineage``,
    # ``migrate``) it supports; the others refuse it naming the kind (require_tool).
    tools: frozenset[Tool]

    def rewind(self, *, point: RewindPoint, request: RewindRequest) -> SinkRewind:
        """The sink's rewind to ``point`` (restore with ``mode="rewind"``)."""
        ...

    def check_fork(self, *, point: RewindPoint, request: RewindRequest) -> None:
        """Step 2 of a fork (restore with ``mode="fork"``): refuse, before anything is
        written, a ``request`` whose targets are the savepoint's own."""
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

    def holds(self, *, target: str) -> bool:
        """``target`` (a path) is laid out as this sink writes its target: asked by
        ``recover``, ``diff`` and ``lineage`` of a path that is no Delta table, so that
        they refuse a kind they do not support by name."""
        ...

    def data_source(self) -> type[DataSource] | None:
        """The Python DataSource ``spark_chkpt.register()`` registers for the kind (None:
        a built-in kind, whose format ``spark_chkpt.connectors`` registers)."""
        ...


# What a kind answers (SinkKind's members), checked when one is registered.
_MEMBERS = (
    "name",
    "has_barriers",
    "target_option",
    "progress_hint",
    "tools",
    "rewind",
    "check_fork",
    "describe",
    "barrier_topics",
    "progress",
    "holds",
    "data_source",
)
_KINDS: dict[str, SinkKind] = {}  # the built-in kinds added on the first question
_PLUGINS: list[SinkKind] = []  # the kinds registered from outside, in order
_FAILED: dict[str, str] = {}  # plugins whose entry point failed to load: name -> why
_plugins_loaded = False


def _built_in() -> tuple[SinkKind, ...]:
    """The kinds of spark-chkpt's own sinks, imported on the first question (not by
    ``register()`` of a session that has no sink plugin: about 60 ms of imports)."""
    from spark_chkpt.delta.sink.kind import CHKPT_DELTA
    from spark_chkpt.delta.upsert.kind import DELTA_UPSERT
    from spark_chkpt.kafka.sink.kind import CHKPT_KAFKA

    return (CHKPT_DELTA, DELTA_UPSERT, CHKPT_KAFKA)


def _default() -> str:
    """The kind of a record or savepoint that names no sink: ``chkpt-delta``."""
    return _built_in()[0].name


def _seed() -> dict[str, SinkKind]:
    for kind in _built_in():
        _KINDS.setdefault(kind.name, kind)
    return _KINDS


def register_sink_kind(kind: SinkKind) -> None:
    """Add ``kind`` (a sink outside the built-in ones); its name must be new, and it must
    answer every question of :class:`SinkKind` (one error names those it lacks)."""
    missing = [m for m in _MEMBERS if not hasattr(kind, m)]
    if missing:
        raise ChkptError(
            f"spark-chkpt: sink kind {getattr(kind, 'name', kind)!r} lacks "
            f"{', '.join(missing)} of spark_chkpt.sinks.SinkKind"
        )
    kinds = _seed()
    if kind.name in kinds and kinds[kind.name] is not kind:
        raise ChkptError(f"spark-chkpt: sink kind {kind.name!r} is registered already")
    kinds[kind.name] = kind
    if kind not in _PLUGINS:
        _PLUGINS.append(kind)


def load_plugins() -> None:
    """Register the kinds installed distributions declare in :data:`ENTRY_POINT_GROUP`
    (once a process). An entry point names the kind's object; one that fails to load is
    logged and named by the error of a question about its kind, and the other kinds work."""
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        try:
            kind = entry.load()
            register_sink_kind(kind)
        except Exception as e:  # one broken plugin never stops the built-in sinks
            _FAILED[entry.name] = f"{entry.value}: {type(e).__name__}: {e}"
            log.warning("sink plugin %r (%s) not loaded: %s", entry.name, entry.value, e)


def sink_kinds() -> Mapping[str, SinkKind]:
    """Every sink kind by name, the plugins' included."""
    load_plugins()
    return dict(_seed())


def find_sink_kind(name: str | None) -> SinkKind | None:
    """The kind named ``name`` (None names the default); None if unknown."""
    load_plugins()
    return _seed().get(_default() if name is None else name)


def sink_kind(name: str | None) -> SinkKind:
    """The kind named ``name`` (None names the default); one error if unknown."""
    kind = find_sink_kind(name)
    if kind is None:
        failed = "".join(f"; plugin {n!r} failed to load ({why})" for n, why in _FAILED.items())
        raise ChkptError(
            f"spark-chkpt: sink kind {name!r} is not one this release knows "
            f"({', '.join(sorted(_seed()))}){failed}"
        )
    return kind


def require_tool(name: str | None, *, tool: Tool, command: str) -> SinkKind:
    """The kind named ``name``, if it supports ``tool``; else one error naming the kind
    and ``command`` (what the user ran). An unknown kind is refused the same way."""
    kind = find_sink_kind(name)
    if kind is None or tool not in kind.tools:
        raise UnsupportedSinkError(
            f"spark-chkpt {command}: sink kind {name!r} does not support {tool} "
            f"(kinds that do: {', '.join(sorted(_supporting(tool)))})"
        )
    return kind


def kind_holding(target: str) -> SinkKind | None:
    """The kind that writes ``target`` as its layout tells (:meth:`SinkKind.holds`), a
    kind supporting no command before one that does; None if no kind holds it."""
    load_plugins()
    holding = [kind for kind in _seed().values() if kind.holds(target=target)]
    return min(holding, key=lambda kind: len(kind.tools), default=None)


def require_tool_at(target: str, *, tool: Tool, command: str) -> None:
    """For a ``target`` the command cannot read (no Delta table): one error naming the
    kind whose sink wrote it and ``command``, if that kind does not support ``tool``;
    nothing if no kind holds it (the caller says what the target is not)."""
    kind = kind_holding(target)
    if kind is not None and tool not in kind.tools:
        try:
            require_tool(kind.name, tool=tool, command=command)
        except UnsupportedSinkError as e:
            raise UnsupportedSinkError(f"{e}; {target} is written by {kind.name}") from None


def _supporting(tool: Tool) -> list[str]:
    return [name for name, kind in _seed().items() if tool in kind.tools]


def plugin_data_sources() -> list[type[DataSource]]:
    """The data sources of the kinds registered from outside that bring their own."""
    load_plugins()
    kinds = [kind for kind in _PLUGINS if _KINDS.get(kind.name) is kind]  # not removed since
    return [ds for kind in kinds if (ds := kind.data_source()) is not None]
