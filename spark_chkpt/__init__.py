"""spark-chkpt: Flink-style aligned snapshots for PySpark Structured Streaming.

``register(spark=spark)`` (or ``register(spark)``) makes every format of the project
available to a SparkSession: ``chkpt-kafka`` (source).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spark_chkpt.errors import ChkptError, ConfigError, DataLossError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__version__ = "0.1.0"
__all__ = ["ChkptError", "ConfigError", "DataLossError", "__version__", "register"]


def register(spark: SparkSession) -> list[str]:
    """Register every spark-chkpt format with ``spark``; returns the format names."""
    from spark_chkpt.connectors import DATA_SOURCES

    for source in DATA_SOURCES:
        spark.dataSource.register(source)
    return [source.name() for source in DATA_SOURCES]
