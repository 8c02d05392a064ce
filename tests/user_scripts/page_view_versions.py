"""Versions of the seeds' page-view counts job (``jobs/page_views.py``, complete mode
into ``chkpt-delta``), as a user keeps them: each ``build_<version>(spark)`` returns the
query's ``DataStreamWriter``, for ``spark-chkpt savepoint check SAVEPOINT
page_view_versions.py:build_<version>``. Run as a script (``python
page_view_versions.py --version V``) it starts version V, as users' scripts do: then
``spark-chkpt savepoint check SAVEPOINT page_view_versions.py -- --version V``.

The job's settings come from the environment: ``PV_SERVERS``, ``PV_TOPIC``, ``PV_TABLE``,
``PV_CHECKPOINT``.
"""

import argparse
import os

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import spark_chkpt
from spark_chkpt.jobs import kafka_to_delta, page_views


def settings() -> dict[str, str]:
    return {
        **page_views.DEFAULTS,
        "source.kafka.bootstrap.servers": os.environ["PV_SERVERS"],
        "source.subscribe": os.environ["PV_TOPIC"],
        "sink.path": os.environ["PV_TABLE"],
        "sink.checkpointLocation": os.environ["PV_CHECKPOINT"],
    }


def views(spark):  # type: ignore[no-untyped-def]
    return kafka_to_delta.build_query_input(spark, {**settings(), "job.kafkaColumns": "false"})


def writer(counts):  # type: ignore[no-untyped-def]
    s = settings()
    return (
        counts.writeStream.format("chkpt-delta")
        .outputMode("complete")
        .option("path", s["sink.path"])
        .option("checkpointLocation", s["sink.checkpointLocation"])
        .queryName("page_view_counts")
    )


def build_original(spark):  # type: ignore[no-untyped-def]
    """What ``jobs/page_views.py --mode complete`` runs."""
    return writer(page_views.counts(spark, settings()))


def build_filtered(spark):  # type: ignore[no-untyped-def]
    """Version 2: app5 is retired, its views no longer count (a filter before the
    aggregate)."""
    return writer(views(spark).filter(F.col("app") != "app5").groupBy("app").count())


def build_doubled(spark):  # type: ignore[no-untyped-def]
    """Version 2: the same state, another output (count * 2): for the shadow diff."""
    counts = views(spark).groupBy("app").count()
    return writer(counts.select("app", (F.col("count") * 2).alias("count")))


def build_aliased(spark):  # type: ignore[no-untyped-def]
    """Version 2: the count column renamed ``views`` (the state keeps its buffer)."""
    return writer(views(spark).groupBy("app").agg(F.count("*").alias("views")))


def build_renamed(spark):  # type: ignore[no-untyped-def]
    """Version 2: the count renamed ``views`` and computed as a sum of ones."""
    return writer(views(spark).groupBy("app").agg(F.sum(F.lit(1)).alias("views")))


def build_key_int(spark):  # type: ignore[no-untyped-def]
    """Version 2: apps are numbered (the key's type changes from string to int)."""
    app = F.regexp_extract("app", r"(\d+)", 1).cast("int")
    return writer(views(spark).withColumn("app", app).groupBy("app").count())


def build_stateless(spark):  # type: ignore[no-untyped-def]
    """Version 2: the raw views, appended (the aggregation removed)."""
    return writer(views(spark).select("app")).outputMode("append")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--version", default="original")
    args = parser.parse_args()
    session = SparkSession.builder.appName("page_view_counts").getOrCreate()
    spark_chkpt.register(session)
    globals()[f"build_{args.version}"](session).start().awaitTermination()
