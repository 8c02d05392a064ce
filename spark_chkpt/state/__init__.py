"""The state Spark's state stores wrote for a snapshot: listing, files, reader."""
