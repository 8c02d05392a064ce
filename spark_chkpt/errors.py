"""The project's errors, all of them: one root, a ``retriable`` flag where callers retry.

Every exception class spark-chkpt defines lives here (``tests/project/test_architecture.py``
checks it), named ``...Error``. Those that callers or tests catch as ``ValueError`` or
``TypeError`` subclass it too. :class:`CommitFailureReason` says why a snapshot's commit
failed, in the spirit of Flink's ``CheckpointFailureReason``.
"""

from __future__ import annotations

from enum import Enum


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


class UnknownOptionError(ConfigError):
    """Options a format does not know, each close to one it does (a typo such as
    ``maxOffsetPerTrigger``): refused at ``load()`` / ``start()`` instead of ignored.
    ``suggestions`` maps each name as the format was handed it to the known names it is
    close to. Spark hands a Python data source its option names lower-cased, so the name
    shown is the lower-cased one; the suggestion is spelled as documented."""

    def __init__(self, *, connector: str, suggestions: dict[str, list[str]]) -> None:
        self.connector = connector
        self.suggestions = suggestions
        parts = [
            f"'{name}' (did you mean {' or '.join(close)}?)"
            for name, close in sorted(suggestions.items())
        ]
        first = sorted(suggestions)[0]
        ChkptError.__init__(
            self,
            f"{connector}: unknown option {', '.join(parts)}"
            + (" (Spark hands option names lower-cased)" if first == first.lower() else ""),
        )
        self.option = first
        self.value = None
        self.allowed = "a known option"


class MissingTopicError(ConfigError):
    """A topic the ``chkpt-kafka`` source is to read (``subscribe``, ``assign``) does not
    exist on the broker when a query plans its start: refused then, naming the topic and
    the topics that do exist (close matches first), instead of a query that reads nothing.
    ``failOnMissingTopic=false`` waits for the topic instead, as Spark's source does.

    On a secured cluster (``secured``) a topic the principal may not DESCRIBE is missing
    from its metadata too: the message says "does not exist or is not visible to this
    principal" and names the ACL, without the hint to wait, which would wait forever."""

    def __init__(
        self,
        *,
        option: str,
        value: str,
        missing: list[str],
        existing: list[str],
        servers: str,
        secured: bool = False,
        principal: str | None = None,
    ) -> None:
        shown = ", ".join(existing[:20]) + (
            f" and {len(existing) - 20} more" if len(existing) > 20 else ""
        )
        names = ", ".join(f"'{t}'" for t in missing)
        if secured:
            who = f"principal {principal!r}" if principal else "this principal"
            allowed = (
                f"topic {names} does not exist on {servers} or is not visible to {who}; "
                f"topics it sees: {shown or 'none'}. If it exists, grant DESCRIBE and READ: "
                f"kafka-acls --bootstrap-server {servers} --add --allow-principal "
                f"User:{principal or '<principal>'} --operation DESCRIBE --operation READ "
                f"--topic '{missing[0]}'"
            )
        else:
            allowed = (
                f"topic {names} does not exist on {servers}; topics there: {shown or 'none'}. "
                "Set failOnMissingTopic=false to wait for it to be created"
            )
        super().__init__(option, value, allowed)
        self.missing = missing
        self.existing = existing


class UnsafeCommitError(ConfigError):
    """A storage option would let two commits of one Delta version both succeed (on S3:
    no conditional put and no lock); the message names the option and the safe setting."""


class StorageOptionsConflictError(ChkptError, ValueError):
    """An ``s3://``/``s3a://`` path given without storage options, in a bucket this
    process was given different S3 options for (two queries on two endpoints or with two
    identities): the message names the path and the locations whose options differ."""


class InvalidArgumentError(ChkptError, ValueError):
    """A programming interface got an argument it does not take (not a user's option:
    those are :class:`ConfigError`); the message names the argument and its value."""


class InvalidTypeError(ChkptError, TypeError):
    """A value has the wrong type (a field of a control-topic entry, a partition Spark
    handed back); the message names it."""


class FormatError(ChkptError, ValueError):
    """A file written in a format this release does not read (a savepoint's manifest)."""


class DataLossError(ChkptError):
    """Offsets the query must read no longer exist in Kafka (retention, topic recreated)."""


class OffsetOutOfRangeError(ChkptError):
    """The broker has no records at a consumer's position (retention, a recreated topic);
    the fetcher turns it into :class:`DataLossError` or skips, per ``failOnDataLoss``."""


class KafkaReadError(ChkptError):
    """Reading a topic-partition failed or timed out."""

    retriable = True


class BrokerError(ChkptError):
    """The embedded broker could not be started or did not answer."""


class CoordinatorRetryError(BrokerError):
    """A transaction coordinator answered with an error another try may cure (it moved,
    is loading, or still ends the id's previous transaction); the message is the
    answer's name. The transaction client retries it, then raises a ``BrokerError``."""

    retriable = True


class S3ServerError(ChkptError):
    """The test S3 server (moto) could not be started or did not answer."""


class ConnectServerError(ChkptError):
    """The test Spark Connect server could not be started or did not answer."""


class WorkerPythonError(ChkptError):
    """The interpreter Spark's Python workers would run cannot import spark_chkpt."""


class BrokerUnavailableError(ChkptError):
    """The Kafka broker did not answer within a client timeout; the message names the
    broker and the option that sets the timeout."""

    retriable = True


class KafkaAuthenticationError(ChkptError):
    """The Kafka broker refused the client's credentials (SASL) or the TLS handshake
    failed (an unknown CA, a wrong certificate); the message names the mechanism, the
    principal when the settings name one (never the password) and the setting to check.
    Raised at once: waiting longer never makes a wrong password right."""


class KafkaSecurityProtocolError(KafkaAuthenticationError):
    """The client's ``kafka.security.protocol`` is not the one the broker's listener
    speaks (a PLAINTEXT or SASL_PLAINTEXT client at a TLS port); the message names the
    broker, both protocols and the option to set. Raised at once, not after the
    bootstrap timeout as an outage."""


class KafkaAuthorizationError(ChkptError):
    """The Kafka broker's ACLs refuse an operation on a resource (topic, group,
    transactional id, cluster); the message names both and the ACL to grant."""


class CorruptMarkerError(ChkptError):
    """A barrier or index record that cannot be read; the message names where it is."""


class AlignmentError(ChkptError):
    """The index cannot be aligned on (for example two upstream queries in one topic)."""


class SchemaMismatchError(ChkptError):
    """The batch's columns disagree with the table's; the message names them."""


class TableFeatureError(ChkptError):
    """A Delta table requires a table feature the project's writers do not honour (or
    an option would create one that does), or an operation its features forbid
    (``delta.appendOnly``): refused before anything is staged, and again at the commit
    if another writer turned the feature on meanwhile. ``feature`` is the feature's
    name in the Delta protocol, ``table`` the table's URI; the message says the way
    forward (:mod:`spark_chkpt.delta.features.protocol`)."""

    def __init__(self, message: str, *, feature: str, table: str) -> None:
        super().__init__(message)
        self.feature = feature
        self.table = table


class CatalogTableError(ChkptError):
    """A table named by the ``table`` / ``deadLetterTable`` option (or
    ``DeltaUpsert(table=...)``, ``toTable``) cannot be written: it does not exist, is a
    view, is not a Delta table, has no location, or is in a catalog other than the
    session's (:mod:`spark_chkpt.delta.table.catalog`). ``table`` is the name as given."""

    def __init__(self, message: str, *, table: str) -> None:
        super().__init__(message)
        self.table = table


class ConstraintViolationError(ChkptError):
    """Rows of a batch break a rule of the Delta table (a CHECK constraint, an
    invariant, a NOT NULL column, a generated column's value): the write task fails
    before staging, naming the rule, its expression and sample rows; nothing of the
    batch is committed."""


class UnsupportedExpressionError(ChkptError, ValueError):
    """A Spark SQL expression of a table's rule (a CHECK constraint, an invariant, a
    generated column) that spark-chkpt does not evaluate; the Delta writers turn it into
    the :class:`TableFeatureError` that names the rule, at the start."""


class DuplicateKeyError(ChkptError):
    """A batch holds one key more than once; the MERGE cannot tell which row wins."""


class QueryIdentityError(ChkptError):
    """A sink already holds batch N of this app id with other source offsets: the
    checkpoint is not the one that wrote the table (a fresh checkpoint that reuses the
    app id, or a copy of a checkpoint running next to the original)."""


class RevokedSnapshotError(ChkptError):
    """A chkpt-kafka reader already read records of upstream snapshots that a savepoint
    rewind of the upstream query revoked since: going on would mix two timelines."""


class FencedError(ChkptError):
    """A writer of an older generation (epoch: the query id plus a restore generation)
    tried to commit to a sink that a rewind, restore, fork or ``recover`` has since moved
    to a newer one. Nothing of the attempt became visible."""


class CommitFailureReason(str, Enum):
    """Why phase 2 of a snapshot failed (Flink: ``CheckpointFailureReason``)."""

    SINK_COMMIT_FAILED = "sink-commit-failed"  # the sink refused the commit (not a conflict)
    TOO_MANY_CONFLICTS = "too-many-conflicts"  # other writers won every retry
    TIMEOUT = "timeout"  # snapshotTimeout passed before the batch was made visible


class CommitError(ChkptError):
    """The sink's commit of a snapshot failed; ``reason`` says how, the message names the
    batch and the table."""

    def __init__(self, message: str, *, reason: CommitFailureReason) -> None:
        super().__init__(message)
        self.reason = reason


class SnapshotTimeoutError(CommitError):
    """A snapshot's commit passed ``snapshotTimeout`` before it made the batch visible
    (Flink's expired checkpoint): nothing of the batch became visible, Spark fails it
    and the restart replays it. The message names the batch, the sink and the option."""

    def __init__(self, message: str) -> None:
        super().__init__(message, reason=CommitFailureReason.TIMEOUT)


class CommitConflictError(ChkptError):
    """Another writer committed to the table first; the commit is retried from the
    idempotency check (:func:`spark_chkpt.snapshot.coordinator.retry_conflicts`)."""

    retriable = True


class NotADeltaTableError(ChkptError):
    """No Delta table at a URI that must hold one; the message is delta-rs's. Callers
    say what they needed the table for
    (:meth:`spark_chkpt.delta.table.target.DeltaTarget.require`)."""


class RecoveryError(ChkptError):
    """The table cannot say where to resume, or the target folder is not empty."""


class MigrationError(ChkptError):
    """``spark-chkpt migrate`` refuses a checkpoint before anything is written: a query
    still running, a gap between Spark's offset and commit logs or the table's
    ``txn(appId)``, a source that is not Kafka, an option the other side cannot honour.
    The message names the batch, file, option or topic."""


class StateFilesError(ChkptError):
    """The files that load a state version are not all on disk; the message names one."""


class SavepointError(ChkptError):
    """A savepoint cannot be made, read or restored; the message names the file,
    option or batch."""


class PathNotFoundError(ChkptError):
    """A folder a command was given (a checkpoint, a savepoint or the folder that keeps
    savepoints) does not exist, or is a file; the message names the command's argument and
    the path, instead of reporting what the missing folder lacks."""


class NoKeyedStateError(ChkptError):
    """``spark-chkpt state`` on a checkpoint with no state files (a stateless query), or
    for an operator it does not have: answered from a listing, before Spark starts."""


class PlannedStartError(BaseException):
    """Not a failure: ``savepoint check`` planned a job's query instead of starting it
    (:mod:`spark_chkpt.savepoint.plan`). A ``BaseException``, so that no ``except
    Exception`` in the job's script, or a supervisor's, takes it for a failure."""

    def __init__(self, writer: object) -> None:
        super().__init__("start() intercepted by spark-chkpt savepoint check: planned, not run")
        self.writer = writer


class InjectedFailureError(RuntimeError):
    """Raised at an armed fail point (:mod:`spark_chkpt.failpoints`): a test's
    stand-in for a failing executor task or commit. Not a :class:`ChkptError` on
    purpose: nothing that handles the project's errors may handle it."""


class JvmArtifactError(ChkptError):
    """A JVM artifact from Maven Central (the Kafka broker's jars, Spark's Kafka connector,
    delta-spark) is not fetched, or fetching it failed; the message names the artifact and
    the command."""


class ControlTopicConfigError(ChkptError):
    """A control topic exists with a setting under which the broker would drop index
    entries (compaction, a finite ``retention.bytes``, a ``retention.ms`` shorter than its
    data topic's); the message names the topic, the setting and the fix."""


class TransactionLostError(DataLossError):
    """A Kafka transaction the ``chkpt-kafka`` sink recorded in an intent entry can no
    longer be committed: the broker aborted it (``transaction.timeout.ms`` ran out while
    the driver was down) or another producer fenced its transactional id. The message
    names the transactional ids, the batch and the settings rule that prevents it."""


class TransactionsAbortedError(ChkptError):
    """Every Kafka transaction a batch's intent entry recorded was aborted by the broker
    (``transaction.timeout.ms``) before the ``chkpt-kafka`` sink committed any: nothing of
    the batch is visible. The intent is marked void and the batch is run again."""


class IdentityColumnError(ChkptError):
    """A batch cannot be written to a Delta table's identity column: it gives values of
    a GENERATED ALWAYS AS IDENTITY column (refused before anything is staged, as
    delta-spark refuses it), or its values would overflow BIGINT. The message names the
    column and the table."""


class IdentityConflictError(ChkptError):
    """Another writer moved an identity column's high-water mark (or dropped the column)
    between a batch's planning and its commit: the values the tasks generated could
    overlap the other writer's, so nothing is committed; Spark's retry of the batch plans
    and stages it again above the new mark (:mod:`spark_chkpt.delta.features.identity`)."""


class UnsupportedSinkError(ChkptError):
    """A command asked a sink kind for something it does not do (``recover`` of a sink
    that records no snapshots in its target, ``diff`` of two non-Delta targets, ...), or
    a sink plugin (entry point group ``spark_chkpt.sinks``) failed to load; the message
    names the kind and the command."""
