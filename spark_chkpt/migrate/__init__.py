"""``spark-chkpt migrate``: a stopped query moves between Spark's own ``kafka`` source /
``delta`` sink and ``chkpt-kafka`` / ``chkpt-delta`` on its checkpoint, with no record
lost or repeated.

What was found on Spark 4.2 with delta-spark 4.4 (``tests/integration/test_migrate.py``):

* Spark's ``kafka`` source and ``chkpt-kafka`` write the same line per source in
  ``offsets/N``: ``{"topic":{"0":42,"1":40}}``, the next offset to read per partition.
  ``chkpt-kafka`` adds an ``__chkpt__`` report only when it reads a topic with barriers.
  On restart Spark hands that line to whichever source the query now names (the V2
  Kafka stream parses it as ``KafkaSourceOffset``, a Python data source gets the JSON):
  the offset log is taken over as it is, both ways. ``commits/N`` holds only
  ``nextBatchWatermarkMs`` for both. ``sources/0/0`` (Spark's record of the Kafka
  source's initial offsets) is read only when there is no offset log; ``chkpt-kafka``
  never reads it.
* delta-spark's streaming sink commits ``txn(appId=<query id>, version=<batch id>)``;
  ``chkpt-delta`` commits ``txn(<query id or txnAppId>, <batch id>)`` with the same
  default: a batch committed by one is skipped by the other on a replay.
* What the chkpt side adds: the snapshot record of the last batch
  (``chkpt/snapshots/N.json``), the generation (``chkpt/epoch.json`` and the table's
  ``txn(<appId>#generation)``).

:mod:`~spark_chkpt.migrate.options` parses what the command is given,
:mod:`~spark_chkpt.migrate.plan` reads and checks (nothing written), with
:mod:`~spark_chkpt.migrate.state` for keyed state,
:mod:`~spark_chkpt.migrate.apply` writes.
"""
