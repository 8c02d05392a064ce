"""Pipeline savepoints: one savepoint per job of a pipeline joined by chkpt-kafka topics,
at cuts that match through the barriers, restored together.

A job that writes a topic with the ``chkpt-kafka`` sink completes snapshot N as barrier
N on every partition; a job reading that topic aligned ends a batch right after barrier
N on every partition. So upstream snapshot N and the downstream batch M whose end
offsets are barrier N's offsets + 1 on every partition are one consistent cut of both
jobs: nothing in flight between them.
:func:`~spark_chkpt.savepoint.pipeline.create.create_pipeline_savepoint`:

1. reads each job's checkpoint: the topics it reads (its offsets), the topic it writes
   and its app id (its snapshot records), its committed batches; the jobs form a tree
   (fan-out and a job reading the topics of several listed jobs allowed; so is fan-in,
   two jobs writing one topic: its aligned reader cuts it per app, and each batch's
   report holds each app's pending offsets, :mod:`spark_chkpt.alignment.fanin`, which
   join that app's snapshot as a single app's end offsets do);
2. finds the newest snapshot N of the upstream job (the root) such that every
   downstream job has a committed batch ending at the barrier of its upstream's chosen
   snapshot (and a job reading several upstream jobs' topics, a batch ending at a
   barrier of each: :func:`~spark_chkpt.savepoint.pipeline.cut.find_cut`), reading the
   barrier offsets from the topic's control topic index (live entries only: a revoked
   snapshot never joins); if there is none, it waits (up to ``timeout_s``) for the
   downstream jobs to commit one, then says which job lacks it;
3. savepoints every job at its batch into ``jobs/`` of a hidden in-progress folder,
   then writes the pipeline manifest (``pipeline.json``: each job's savepoint, and the
   joins: topic, upstream app and barrier id, downstream batch, offsets) and publishes
   the folder. On object stores (no rename) it writes in place, manifest last. Either
   way an interrupted run leaves no folder with a manifest: nothing ``list`` shows.

:func:`~spark_chkpt.savepoint.pipeline.restore.restore_pipeline` checks every job's
restore first (without writing) and refuses, naming the job and the reason, before
changing anything; then restores the jobs,
upstream first, each into ``<checkpoint_dir>/<job>``. A rewind of a job that writes
Kafka revokes its snapshots after N (:mod:`spark_chkpt.kafka.sink.rewind`), so the
restored downstream job reads each record of the new timeline once. A fork restores
every job as a new query into new topics and tables, the downstream jobs starting at
the new topics' first offsets (:mod:`spark_chkpt.savepoint.pipeline.fork`).

The rooms: the manifest, load and list (:mod:`~spark_chkpt.savepoint.pipeline.manifest`),
the search for the cut (:mod:`~spark_chkpt.savepoint.pipeline.cut`), create
(:mod:`~spark_chkpt.savepoint.pipeline.create`), restore
(:mod:`~spark_chkpt.savepoint.pipeline.restore`), the fork's topics and tables
(:mod:`~spark_chkpt.savepoint.pipeline.fork`) and the pipeline file
(:mod:`~spark_chkpt.savepoint.pipeline.file`).
"""
