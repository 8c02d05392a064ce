"""The chkpt-delta sink: options, writer (phase 1), committer (phase 2), dead letters."""
