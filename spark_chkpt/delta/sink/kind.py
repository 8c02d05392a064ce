"""The ``chkpt-delta`` sink as the tools above it ask it (:mod:`spark_chkpt.sinks`): a
Delta table's kind, rewound by :class:`~spark_chkpt.delta.rewind.DeltaRewind` (with its
dead-letter table)."""

from __future__ import annotations

from spark_chkpt.delta.rewind import DeltaTableKind

CHKPT_DELTA = DeltaTableKind(name="chkpt-delta")
