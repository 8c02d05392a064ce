"""What ``register()`` sets on a session that has not set it itself.

Each setting is measured with ``make bench BENCH_ARGS="--batch-cost-only"``; the
performance page gives the figures, the reference page (docs/reference/options.md,
"Session settings") what each trades. A value the session already has (spark-submit's
``--conf``, the builder's ``config``, ``spark.conf.set``) always wins.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# The offset and commit logs through Hadoop's FileSystem API instead of FileContext:
# about 30-50 ms less per micro-batch on a local checkpoint (walCommit + commitOffsets
# 69 -> 28 ms, medians of 1,000-record Kafka -> Delta batches). Both managers write a
# temporary file and rename it onto the log entry. Onto an existing entry, FileSystem's
# manager checks and refuses, then renames (HDFS's rename itself refuses too); FileContext's
# does the same check inside Hadoop on local disks and object stores. Spark falls back to
# this manager for every file system FileContext does not cover.
CHECKPOINT_FILE_MANAGER = "spark.sql.streaming.checkpointFileManagerClass"
REGISTER_DEFAULTS = {
    CHECKPOINT_FILE_MANAGER: (
        "org.apache.spark.sql.execution.streaming.checkpointing."
        "FileSystemBasedCheckpointFileManager"
    ),
}


def apply_register_defaults(spark: SparkSession) -> dict[str, str]:
    """Set each of :data:`REGISTER_DEFAULTS` the session has not set; what was set.

    Nothing is set on Databricks (``DATABRICKS_RUNTIME_VERSION``), whose runtime brings
    its own checkpoint file manager."""
    if os.environ.get("DATABRICKS_RUNTIME_VERSION"):
        return {}
    from spark_chkpt.runtime.spark_version import spark_class

    applied: dict[str, str] = {}
    for key, given in REGISTER_DEFAULTS.items():
        value = spark_class(given)  # the class as the running Spark line names it
        if spark.conf.get(key, None) is None:
            spark.conf.set(key, value)
            applied[key] = value
    return applied
