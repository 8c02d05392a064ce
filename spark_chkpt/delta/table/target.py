"""The Delta table a sink writes: schema checks, atomic commits through delta-rs, orphans.

:class:`DeltaTarget` is the one door to delta-rs (``deltalake``) for the engine: the
transactions (``txn(appId)``), the commit of staged files with their ``commitInfo``
(:func:`commit_properties`), a lost race as ``CommitConflictError`` (:func:`committing`),
``restore_to`` for a rewind, the schema rules and the orphaned files of failed
attempts. More: docs/concepts/delta-internals.md (spark_chkpt/delta/table/target.py).
"""

from spark_chkpt.delta.table.protocol import ProtocolChecks
from spark_chkpt.delta.table.writer import TableWriter


class DeltaTarget(TableWriter, ProtocolChecks):
    """One Delta table addressed by URI: read (:class:`~spark_chkpt.delta.table.reader.
    TableReader`), checked against what it requires of a writer
    (:class:`~spark_chkpt.delta.table.protocol.ProtocolChecks`) and committed to
    (:class:`~spark_chkpt.delta.table.writer.TableWriter`)."""
