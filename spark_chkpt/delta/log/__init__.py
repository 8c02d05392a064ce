"""The project's own commits to a table's _delta_log and the log state kept across batches."""
