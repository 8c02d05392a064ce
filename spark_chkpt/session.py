"""SparkSessions for the project's jobs, demo and tests.

``build_session`` registers the project's formats, which also points Spark's Python
workers at an interpreter that can import spark_chkpt (:mod:`spark_chkpt.runtime.interpreter`),
and makes RocksDB with changelog checkpointing the state store (:data:`STATE_STORE_DEFAULTS`,
the same two lines as ``conf/spark-defaults.conf``) unless the caller's ``conf`` or
spark-submit's settings name another. With ``connectors=True`` the session also has
Spark's own Kafka connector (``format("kafka")``) and delta-spark (``format("delta")``,
Delta's SQL extension and catalog): the jars ``make setup`` fetched
(:mod:`spark_chkpt.runtime.jars`).
With ``s3a=True`` it also has Hadoop's S3A filesystem (hadoop-aws and the AWS SDK bundle),
so ``checkpointLocation`` and delta-spark's paths can be ``s3a://``; the endpoint and
credentials are the caller's ``spark.hadoop.fs.s3a.*`` settings.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


# Keyed state in RocksDB with changelog checkpointing: Flink's RocksDB backend with
# incremental checkpoints. Spark's own default is the HDFS-backed in-memory provider.
STATE_STORE_DEFAULTS = {
    "spark.sql.streaming.stateStore.providerClass": (
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
    ),
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
}

# delta-spark's session settings (what `configure_spark_with_delta_pip` sets besides the jars).
DELTA_SETTINGS = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}


def connector_settings() -> dict[str, str]:
    """``spark.jars`` with Spark's Kafka connector and delta-spark, and Delta's extension and
    catalog. Raises :class:`~spark_chkpt.errors.JvmArtifactError` (naming the artifacts and
    ``make setup``) when the jars were not fetched."""
    from spark_chkpt.runtime.jars import spark_jars

    return {"spark.jars": spark_jars(), **DELTA_SETTINGS}


def load_properties(path: str | os.PathLike[str]) -> dict[str, str]:
    """Read a ``spark-defaults.conf``-style file: ``key value`` or ``key=value`` lines."""
    props: dict[str, str] = {}
    for raw in Path(path).read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or " " in key.strip():
            key, _, value = line.partition(" ")
        props[key.strip()] = value.strip()
    return props


def build_session(
    *,
    app_name: str,
    master: str | None = None,
    conf: Mapping[str, str] | None = None,
    connectors: bool = False,
    s3a: bool = False,
) -> SparkSession:
    """``getOrCreate`` a session with the project's formats registered.

    ``master`` defaults to what spark-submit set, else ``local[*]``. The state store
    settings of :data:`STATE_STORE_DEFAULTS` apply where neither ``conf`` nor the
    launching spark-submit sets them. A query restarted from a checkpoint keeps the
    provider it was started with: Spark records it in ``offsets/N``.

    ``connectors``: add :func:`connector_settings` (Spark's Kafka connector, delta-spark).
    They take effect only when this call starts the JVM; ``conf`` wins over them, and
    under spark-submit, pass the jars with ``--jars``/``--packages`` instead.

    ``s3a``: add Hadoop's S3A filesystem to ``spark.jars``
    (:func:`spark_chkpt.runtime.jars.s3a_jars`), with the same rules; ``conf`` gives its
    ``spark.hadoop.fs.s3a.*`` settings.
    """
    from pyspark.sql import SparkSession

    import spark_chkpt

    builder = SparkSession.builder.appName(app_name)
    # Under spark-submit the JVM is already up (PYSPARK_GATEWAY_PORT) with its master.
    launched_by_submit = "PYSPARK_GATEWAY_PORT" in os.environ
    if master or not (launched_by_submit or "spark.master" in (conf or {})):
        builder = builder.master(master or os.environ.get("SPARK_MASTER", "local[*]"))
    defaults = {k: v for k, v in STATE_STORE_DEFAULTS.items() if k not in (conf or {})}
    settings = dict(conf or {})
    if connectors and not launched_by_submit:
        settings = {**connector_settings(), **settings}
    if s3a and not launched_by_submit and "spark.jars" not in (conf or {}):
        from spark_chkpt.runtime.jars import s3a_jars

        settings["spark.jars"] = ",".join(
            j for j in (settings.get("spark.jars", ""), s3a_jars()) if j
        )
    if not launched_by_submit:
        settings = {**defaults, **settings}
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    if launched_by_submit:  # --conf and --properties-file win over the defaults
        launched = spark.sparkContext.getConf()
        for key, value in defaults.items():
            if not launched.contains(key):
                spark.conf.set(key, value)
    spark_chkpt.register(spark)
    return spark
