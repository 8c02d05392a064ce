"""Ending another producer's Kafka transaction: ``EndTxn`` and fencing by transactional id.

The ``chkpt-kafka`` sink's write tasks leave their transactions open; the driver ends
them, as Flink's ``FlinkKafkaInternalProducer.resumeTransaction`` does, with the producer
id and epoch the task returned. librdkafka has no such call; kafka-python's protocol
classes do it here (and ``DescribeTransactions``, for the producer id and epoch of a
librdkafka producer): ``FindCoordinator`` (key type 1, the transaction coordinator of the
id), ``EndTxn`` (v3 at most: the transaction protocol v1, whose producer epoch stays the
same for the whole transaction) and ``InitProducerId`` (fencing: the coordinator aborts
the id's open transaction and bumps its epoch).

More: docs/concepts/kafka-internals.md (spark_chkpt/kafka/client/transactions.py).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from enum import Enum
from typing import Any, TypeVar

from spark_chkpt.deadline import Deadline
from spark_chkpt.errors import BrokerError, CoordinatorRetryError
from spark_chkpt.kafka.client.outage import retry_within

_T = TypeVar("_T")

log = logging.getLogger(__name__)

# Answers after which the coordinator is looked up again: it moved, or its broker died
# (refused, unanswered, in reconnect backoff), and its transaction log's new leader
# becomes the coordinator.
_MOVED = (
    "CoordinatorNotAvailableError",
    "NotCoordinatorError",
    "RequestTimedOutError",
    "KafkaConnectionError",
    "KafkaTimeoutError",
    "NodeNotReadyError",
)
# Answers asked again: the coordinator moved, still loads its log, or still writes the
# markers of the id's previous transaction.
_RETRIED = ("ConcurrentTransactionsError", "CoordinatorLoadInProgressError", *_MOVED)


# The pause between two tries: a coordinator still writing the markers of the id's
# previous transaction (CONCURRENT_TRANSACTIONS) is done within milliseconds.
_RETRY_PAUSE_S = 0.05


class EndResult(str, Enum):
    """The outcome of ending one transaction."""

    DONE = "done"  # committed (or aborted) now or earlier with the same epoch
    FENCED = "fenced"  # the epoch moved on: aborted by the broker's timeout or fenced
    INVALID_STATE = "invalid-state"  # the transaction ended the other way


class TransactionClient:
    """One connection manager to the cluster's transaction coordinators."""

    def __init__(self, *, bootstrap_servers: str, settings: Mapping[str, Any]) -> None:
        from spark_chkpt.kafka.client.factory import connection_settings, kafka_admin

        allowed = {
            k: v
            for k, v in connection_settings(settings).items()
            if k.startswith(("security_", "ssl_", "sasl_")) or k in ("request_timeout_ms",)
        }
        self._admin = kafka_admin(
            bootstrap_servers=bootstrap_servers,
            settings=allowed,
            client_id="spark-chkpt-transactions",
        )

    def close(self) -> None:
        self._admin.close()

    def _send(self, transactional_id: str, request: Any) -> Any:
        from kafka.protocol.metadata import CoordinatorType

        admin = self._admin

        async def call() -> Any:
            node = await admin._find_coordinator_id(
                transactional_id, key_type=CoordinatorType.TRANSACTION
            )
            return await admin._manager.send(request, node_id=node)

        return admin._manager.run(call)

    def _retrying(self, transactional_id: str, build: Any, *, timeout_s: float) -> tuple[str, Any]:
        """``build()``'s request until its error is not a retriable one; (error name,
        response)."""
        import kafka.errors as errors

        def one_try() -> tuple[str, Any]:
            try:
                response = self._send(transactional_id, build())
                name = errors.for_code(response.error_code).__name__
            except (errors.KafkaError, OSError) as e:
                name, response = type(e).__name__, None
            if name in _RETRIED:
                raise CoordinatorRetryError(name)
            return name, response

        try:
            return self._ask_coordinator(
                transactional_id,
                one_try,
                doing=f"ending a transaction of transactional id {transactional_id!r}",
                retriable=lambda e: isinstance(e, CoordinatorRetryError),
                error_name=str,  # CoordinatorRetryError carries the broker's error's name
                timeout_s=timeout_s,
            )
        except CoordinatorRetryError as e:
            raise BrokerError(
                f"transaction coordinator of transactional id {transactional_id!r} "
                f"still answers {e} after {timeout_s:.0f}s"
            ) from None

    def _ask_coordinator(
        self,
        transactional_id: str,
        one_try: Callable[[], _T],
        *,
        doing: str,
        retriable: Callable[[BaseException], bool],
        error_name: Callable[[BaseException], str],
        timeout_s: float,
    ) -> _T:
        """``one_try()`` asked of ``transactional_id``'s coordinator again while it
        raises an error ``retriable`` accepts, within ``timeout_s``; the coordinator is
        looked up again after an error whose name (``error_name``) says it moved."""

        def before_retry(error: BaseException) -> None:
            if error_name(error) in _MOVED:
                self._forget_coordinator(transactional_id)

        return retry_within(
            one_try,
            deadline=Deadline.after(seconds=timeout_s),
            doing=doing,
            retriable=retriable,
            before_retry=before_retry,
            pause_s=_RETRY_PAUSE_S,
            quiet=True,
        )

    def _forget_coordinator(self, transactional_id: str) -> None:
        """Drop the cached coordinator of ``transactional_id`` (it moved)."""
        from kafka.protocol.metadata import CoordinatorType

        coordinators = self._admin._manager.cluster._coordinators
        coordinators.pop((CoordinatorType.TRANSACTION, transactional_id), None)

    def end(
        self,
        *,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        commit: bool,
        timeout_s: float = 60.0,
    ) -> EndResult:
        """``EndTxn`` (commit or abort) of the transaction ``producer_id``/``epoch`` opened
        under ``transactional_id``."""
        from kafka.protocol.producer.transaction import EndTxnRequest

        name, _ = self._retrying(
            transactional_id,
            lambda: EndTxnRequest(
                transactional_id=transactional_id,
                producer_id=producer_id,
                producer_epoch=epoch,
                committed=commit,
                max_version=3,
            ),
            timeout_s=timeout_s,
        )
        if name == "NoError":
            return EndResult.DONE
        if name in ("ProducerFencedError", "InvalidProducerEpochError"):
            return EndResult.FENCED
        if name == "InvalidTxnStateError":
            return EndResult.INVALID_STATE
        raise BrokerError(
            f"EndTxn({'commit' if commit else 'abort'}) of transactional id "
            f"{transactional_id!r} (producer id {producer_id}, epoch {epoch}) failed: {name}"
        )

    def describe(self, *, transactional_id: str, timeout_s: float = 60.0) -> tuple[str, int, int]:
        """The state (``Ongoing``, ``CompleteCommit``, ...), producer id and epoch of
        ``transactional_id``'s transaction as its coordinator knows them
        (``DescribeTransactions``): how the driver learns a librdkafka producer's id and
        epoch, which librdkafka does not tell."""
        import kafka.errors as errors

        def one_try() -> tuple[str, int, int]:
            described = self._admin.describe_transactions([transactional_id])
            found = described[transactional_id]
            return found.state.value, int(found.producer_id), int(found.producer_epoch)

        def again(error: BaseException) -> bool:
            return isinstance(error, errors.KafkaError) and type(error).__name__ in _RETRIED

        try:
            return self._ask_coordinator(
                transactional_id,
                one_try,
                doing=f"describing transactional id {transactional_id!r}",
                retriable=again,
                error_name=lambda error: type(error).__name__,
                timeout_s=timeout_s,
            )
        except (errors.KafkaError, OSError) as e:
            raise BrokerError(
                f"DescribeTransactions of transactional id {transactional_id!r} "
                f"failed: {type(e).__name__}: {e}"
            ) from e

    def fence(
        self, *, transactional_id: str, transaction_timeout_ms: int, timeout_s: float = 60.0
    ) -> tuple[int, int]:
        """``InitProducerId`` on ``transactional_id``: the coordinator aborts its open
        transaction, if any, and bumps the epoch; returns the new (producer id, epoch)."""
        from kafka.protocol.producer.transaction import InitProducerIdRequest

        name, response = self._retrying(
            transactional_id,
            lambda: InitProducerIdRequest(
                transactional_id=transactional_id,
                transaction_timeout_ms=transaction_timeout_ms,
                producer_id=-1,
                producer_epoch=-1,
                max_version=4,
            ),
            timeout_s=timeout_s,
        )
        if name != "NoError":
            raise BrokerError(f"fencing transactional id {transactional_id!r} failed: {name}")
        return int(response.producer_id), int(response.producer_epoch)


# Idle clients by (servers, settings), per process: a write task asks for its
# transaction's producer id and epoch once per batch, and a new client's bootstrap
# (connect, api versions, metadata) cost more than the question.
_IDLE: dict[tuple[str, tuple[tuple[str, str], ...]], list[TransactionClient]] = {}
_IDLE_LOCK = threading.Lock()


@contextmanager
def pooled_client(
    *, bootstrap_servers: str, settings: Mapping[str, Any], fresh: bool = False
) -> Iterator[TransactionClient]:
    """A :class:`TransactionClient` of this process's pool, for one caller at a time:
    back into the pool after the block, closed instead when the block raised (its
    connection state is then not to be trusted). ``fresh``: a new client, not an idle
    one (pooled after the block all the same)."""
    key = (bootstrap_servers, tuple(sorted((k, repr(v)) for k, v in settings.items())))
    client = None
    if not fresh:
        with _IDLE_LOCK:
            idle = _IDLE.get(key)
            client = idle.pop() if idle else None
    if client is None:
        client = TransactionClient(bootstrap_servers=bootstrap_servers, settings=settings)
    try:
        yield client
    except BaseException:
        client.close()
        raise
    with _IDLE_LOCK:
        _IDLE.setdefault(key, []).append(client)


def describe_pooled(
    *, bootstrap_servers: str, settings: Mapping[str, Any], transactional_id: str
) -> tuple[str, int, int]:
    """:meth:`TransactionClient.describe` through the pool. An idle client whose broker
    was restarted since its last use fails in kafka-python's transport (a cancelled
    metadata refresh, a closed socket), not with an error :meth:`describe` retries: it
    is closed and a new client asks once more, as every call did before the pool."""
    try:
        with pooled_client(bootstrap_servers=bootstrap_servers, settings=settings) as client:
            return client.describe(transactional_id=transactional_id)
    except Exception as e:  # the next client's answer, or its error, is the one to raise
        log.info("pooled transaction client failed (%s: %s); asking a new one", type(e).__name__, e)
    with pooled_client(
        bootstrap_servers=bootstrap_servers, settings=settings, fresh=True
    ) as client:
        return client.describe(transactional_id=transactional_id)
