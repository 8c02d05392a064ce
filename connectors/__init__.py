"""Spark Python DataSource classes: the ``chkpt-kafka`` source and the sinks.

The classes are imported on first use: Spark's Python workers unpickle the registered
``chkpt-kafka`` class by reference to :mod:`spark_chkpt.connectors.kafka`, which imports
this package first, and a Kafka read or write task has no use for the Delta sink's
modules (about 90 ms of imports a worker, measured with ``python -X importtime``).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql.datasource import DataSource

    from spark_chkpt.connectors.delta import DeltaDataSource
    from spark_chkpt.connectors.kafka import KafkaDataSource

    DATA_SOURCES: tuple[type[DataSource], ...]

__all__ = ["DATA_SOURCES", "DeltaDataSource", "KafkaDataSource"]


# Each built-in format's DataSource class and its module, in registration order. A sink
# plugin's format is not listed here: its kind brings it (spark_chkpt.sinks).
_CLASSES = {
    "KafkaDataSource": "spark_chkpt.connectors.kafka",
    "DeltaDataSource": "spark_chkpt.connectors.delta",
}


def __getattr__(name: str) -> Any:
    """``DATA_SOURCES`` and the classes of :data:`_CLASSES`, imported when first asked for."""
    if name in _CLASSES:
        return getattr(import_module(_CLASSES[name]), name)
    if name == "DATA_SOURCES":
        return tuple(getattr(import_module(module), cls) for cls, module in _CLASSES.items())
    raise AttributeError(f"module 'spark_chkpt.connectors' has no attribute {name!r}")
