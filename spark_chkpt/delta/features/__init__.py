"""The writer protocol's table features: the table of features, column mapping, identity
columns, row rules and generated columns. Pure: no delta-rs, no log."""
