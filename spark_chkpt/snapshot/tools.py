"""The commands that read a sink's target beyond the snapshot protocol, which a sink
kind may or may not support (:attr:`spark_chkpt.sinks.SinkKind.tools`).

``recover`` rebuilds a checkpoint from the snapshot records the target holds, ``diff``
compares two targets at equal offsets, ``lineage`` walks from the target's snapshot to
its upstream ones, ``migrate`` moves a query between Spark's own formats and the
kind's. Each asks the kind (:func:`spark_chkpt.sinks.require_tool`) before reading.
"""

from __future__ import annotations

from typing import Literal

Tool = Literal["recover", "diff", "lineage", "migrate"]
