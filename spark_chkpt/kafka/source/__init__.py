"""The chkpt-kafka source: options, planner, fetcher, offset reader, records."""
