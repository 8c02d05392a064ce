"""Delta: what both Delta sinks share (staging, replay, hooks, rewind), the table through
delta-rs (table/), the project's own log commits (log/), the writer protocol's features
(features/), the chkpt-delta sink (sink/) and DeltaUpsert (upsert/)."""
