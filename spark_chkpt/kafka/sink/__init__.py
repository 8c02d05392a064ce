"""The chkpt-kafka sink: options, writer (phase 1), committer (phase 2), control topic."""
