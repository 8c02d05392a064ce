"""A lost checkpoint rebuilt from the Delta table's snapshot records."""
