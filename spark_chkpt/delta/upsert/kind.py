"""``DeltaUpsert`` as the tools above it ask it (:mod:`spark_chkpt.sinks`): a Delta
table's kind (records name it ``delta-upsert``), rewound by
:class:`~spark_chkpt.delta.rewind.DeltaRewind`."""

from __future__ import annotations

from spark_chkpt.delta.rewind import DeltaTableKind

DELTA_UPSERT = DeltaTableKind(name="delta-upsert")
