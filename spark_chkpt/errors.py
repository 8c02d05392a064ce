"""The project's error hierarchy: one root, a ``retriable`` flag where callers retry."""

from __future__ import annotations


class ChkptError(Exception):
    """Root of every error spark-chkpt raises on purpose."""

    retriable: bool = False


class ConfigError(ChkptError, ValueError):
    """An option has a value that is not allowed; the message names the option."""

    def __init__(self, option: str, value: object, allowed: str) -> None:
        self.option = option
        self.value = value
        self.allowed = allowed
        shown = "<missing>" if value is None else repr(value)
        super().__init__(f"option '{option}' = {shown}: {allowed}")


class DataLossError(ChkptError):
    """Offsets the query must read no longer exist in Kafka (retention, topic recreated)."""


class KafkaReadError(ChkptError):
    """Reading a topic-partition failed or timed out."""

    retriable = True


class BrokerError(ChkptError):
    """The embedded broker could not be started or did not answer."""


class WorkerPythonError(ChkptError):
    """The interpreter Spark's Python workers would run cannot import spark_chkpt."""


class QueryIdentityError(ChkptError):
    """Two different runs claim the same (appId, batchId)."""
