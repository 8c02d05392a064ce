"""Delta: what both Delta sinks share (staging, replay, hooks, rewind), the table through
delta-rs (table/), the project's own log commits (log/), the writer protocol's features
(features/), the chkpt-delta sink (sink/) and DeltaUpsert (upsert/).

delta-rs allocates with its own jemalloc (symbols prefixed ``_rjem_``), which keeps the
pages a commit or a checkpoint freed for reuse. In the process that commits a query's
batches for its whole life (the sink's ``python_streaming_sink_runner``) that kept
memory grew with every batch (about 10 KB a commit, measured by ``bench/soak.py``), so
unless the environment already sets ``_RJEM_MALLOC_CONF``, it is set here, before
delta-rs is first imported, to hand freed pages back at once (:data:`DELTA_RS_MALLOC_CONF`).
"""

import os

DELTA_RS_MALLOC_CONF = "dirty_decay_ms:0,muzzy_decay_ms:0"

os.environ.setdefault("_RJEM_MALLOC_CONF", DELTA_RS_MALLOC_CONF)
