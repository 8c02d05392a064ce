"""Spark Python DataSource classes: the ``chkpt-kafka`` source and the sinks."""

from pyspark.sql.datasource import DataSource

from spark_chkpt.connectors.delta import DeltaDataSource
from spark_chkpt.connectors.kafka import KafkaDataSource

DATA_SOURCES: tuple[type[DataSource], ...] = (KafkaDataSource, DeltaDataSource)

__all__ = ["DATA_SOURCES", "DeltaDataSource", "KafkaDataSource"]
