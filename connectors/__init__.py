"""Spark Python DataSource classes: the ``chkpt-kafka`` source and the sinks.

The classes are imported on first use: Spark's Python workers unpickle the registered
``chkpt-kafka`` class by reference to :mod:`spark_chkpt.connectors.kafka`, which imports
this package first, and a Kafka read or write task has no use for the Delta sink's
modules (about 90 ms of imports a worker, measured with ``python -X importtime``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql.datasource import DataSource

    from spark_chkpt.connectors.delta import DeltaDataSource
    from spark_chkpt.connectors.kafka import KafkaDataSource

    DATA_SOURCES: tuple[type[DataSource], ...]

__all__ = ["DATA_SOURCES", "DeltaDataSource", "KafkaDataSource"]


def __getattr__(name: str) -> Any:
    """``DATA_SOURCES``, ``DeltaDataSource`` and ``KafkaDataSource``, imported when
    first asked for."""
    if name == "KafkaDataSource":
        from spark_chkpt.connectors.kafka import KafkaDataSource

        return KafkaDataSource
    if name == "DeltaDataSource":
        from spark_chkpt.connectors.delta import DeltaDataSource

        return DeltaDataSource
    if name == "DATA_SOURCES":
        from spark_chkpt.connectors.delta import DeltaDataSource
        from spark_chkpt.connectors.kafka import KafkaDataSource

        return (KafkaDataSource, DeltaDataSource)
    raise AttributeError(f"module 'spark_chkpt.connectors' has no attribute {name!r}")
