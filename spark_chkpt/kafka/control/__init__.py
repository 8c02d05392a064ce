"""The control topic: the barrier index every ``chkpt-kafka`` sink writes and every
aligned reader, savepoint and lineage walk reads (``topic``), shared protocol types in a
home of their own rather than inside the sink."""
