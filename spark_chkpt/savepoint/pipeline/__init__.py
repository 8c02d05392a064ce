"""Pipeline savepoints: one savepoint per job of a pipeline joined by chkpt-kafka topics,
at cuts that match through the barriers, restored together.

Upstream snapshot N and the downstream batch ending right after barrier N on every
partition are one consistent cut. :mod:`.create` reads the jobs' checkpoints and the
barrier index, finds the cut (:mod:`.cut`, pure), savepoints every job and writes the
manifest (:mod:`.manifest`) last; :mod:`.restore` checks every job, then restores them
upstream first, as a rewind or a fork into new topics (:mod:`.fork`). The protocol:
docs/concepts/savepoints.md (spark_chkpt/savepoint/pipeline/__init__.py).
"""
