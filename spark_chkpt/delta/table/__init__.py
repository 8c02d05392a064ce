"""The Delta table through delta-rs: open, commit, restore, its history, a catalog's names."""
