"""Spark Python DataSource classes: the ``chkpt-kafka`` source and the sinks."""

from pyspark.sql.datasource import DataSource

from spark_chkpt.connectors.kafka import KafkaDataSource

DATA_SOURCES: tuple[type[DataSource], ...] = (KafkaDataSource,)

__all__ = ["DATA_SOURCES", "KafkaDataSource"]
