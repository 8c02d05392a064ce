"""Savepoints: create, list and the manifest; restore; stop with savepoint."""
