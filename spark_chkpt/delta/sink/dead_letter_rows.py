"""The executor side of the ``chkpt-delta`` sink's dead letters: the rows whose
``_dead_letter`` struct is set, staged for the dead-letter table in the write task. The
driver commits them (:mod:`spark_chkpt.delta.sink.dead_letters`); this module imports
nothing of the driver's, so a write task does not load the committer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spark_chkpt.delta.sink.options import DEAD_LETTER_COLUMN
from spark_chkpt.delta.staging import ParquetStager

if TYPE_CHECKING:
    import pyarrow as pa


def pa_schema_of(struct: pa.DataType) -> pa.Schema:
    """The columns of a dead-letter row: the fields of the ``_dead_letter`` struct."""
    import pyarrow as pa

    return pa.schema([struct.field(i) for i in range(struct.num_fields)])


def split_dead_letters(batch: pa.RecordBatch, dead: ParquetStager) -> pa.RecordBatch:
    """Stage the rows whose ``_dead_letter`` is set in the dead-letter table; returns the
    other rows without the column."""
    import pyarrow as pa
    import pyarrow.compute as pc

    index = batch.schema.get_field_index(DEAD_LETTER_COLUMN)
    column = batch.column(index)
    bad = pc.is_valid(column)
    if pc.any(bad).as_py():
        letters = pc.filter(column, bad)
        dead.add(pa.RecordBatch.from_struct_array(letters))
        batch = batch.filter(pc.invert(bad))
    return batch.remove_column(index)
