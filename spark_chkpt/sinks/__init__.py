"""One object per sink kind (:class:`SinkKind`), found by the kind a snapshot records.

The savepoint, pipeline, status and CLI code ask a sink's object (its rewind, how to
describe its target, its barrier topics, how ``status`` reads its progress) instead of
comparing the kind's name; see :mod:`spark_chkpt.sinks.registry`.
"""

from spark_chkpt.sinks.registry import (
    SinkKind,
    find_sink_kind,
    register_sink_kind,
    sink_kind,
    sink_kinds,
)

__all__ = ["SinkKind", "find_sink_kind", "register_sink_kind", "sink_kind", "sink_kinds"]
