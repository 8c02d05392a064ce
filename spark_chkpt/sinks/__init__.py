"""One object per sink kind (:class:`SinkKind`), found by the kind a snapshot records.

The savepoint, pipeline, status and CLI code ask a sink's object (its rewind, its fork
check, how to describe its target, its barrier topics, how ``status`` reads its progress,
which commands it supports) instead of comparing the kind's name; sinks outside the
package register through the entry point group ``spark_chkpt.sinks``; see
:mod:`spark_chkpt.sinks.registry`.
"""

from spark_chkpt.sinks.registry import (
    ENTRY_POINT_GROUP,
    SinkKind,
    Tool,
    find_sink_kind,
    kind_holding,
    plugin_data_sources,
    register_sink_kind,
    require_tool,
    require_tool_at,
    sink_kind,
    sink_kinds,
)

__all__ = [
    "ENTRY_POINT_GROUP",
    "SinkKind",
    "Tool",
    "find_sink_kind",
    "kind_holding",
    "plugin_data_sources",
    "register_sink_kind",
    "require_tool",
    "require_tool_at",
    "sink_kind",
    "sink_kinds",
]
