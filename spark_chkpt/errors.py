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


class BrokerUnavailableError(ChkptError):
    """The Kafka broker did not answer within a client timeout; the message names the
    broker and the option that sets the timeout."""

    retriable = True


class QueryIdentityError(ChkptError):
    """A sink already holds batch N of this app id with other source offsets: the
    checkpoint is not the one that wrote the table (a fresh checkpoint that reuses the
    app id, or a copy of a checkpoint running next to the original)."""


class JvmArtifactError(ChkptError):
    """A JVM artifact from Maven Central (the Kafka broker's jars, Spark's Kafka connector,
    delta-spark) is not fetched, or fetching it failed; the message names the artifact and
    the command."""


class ControlTopicConfigError(ChkptError):
    """A control topic exists with a setting under which the broker would drop index
    entries (compaction, a finite ``retention.bytes``, a ``retention.ms`` shorter than its
    data topic's); the message names the topic, the setting and the fix."""
