"""Delta: the table through delta-rs and staging (shared), the chkpt-delta sink, DeltaUpsert."""
