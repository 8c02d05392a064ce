"""A broker that does not answer: one error naming the broker and the timeout to raise.

kafka-python reports an outage as one of several low-level errors (a bootstrap that timed
out, a request that timed out, no broker available), deep inside a worker's traceback.
:func:`broker_calls` turns each into a :class:`BrokerUnavailableError` that says which
broker, while doing what, which timeout expired, and what to do. librdkafka reports a
timeout as a delivery error or a flush that leaves records: the sink's librdkafka
producer raises :func:`outage_error` for those. A pause shorter than the timeouts is
waited out by the clients themselves, and by :func:`retry_within` where they give up
early (a refused connection, a request sent again and again to a leader that moved).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar

from spark_chkpt.deadline import Deadline, retry
from spark_chkpt.errors import (
    BrokerUnavailableError,
    KafkaAuthenticationError,
    KafkaAuthorizationError,
)
from spark_chkpt.runtime.report import report_now

log = logging.getLogger(__name__)

_R = TypeVar("_R")

# (option a user sets, kafka-python setting, kafka-python's default) per kind of wait.
_BOOTSTRAP = ("kafka.bootstrap.timeout.ms", "bootstrap_timeout_ms", 30_000)
_REQUEST = ("kafka.request.timeout.ms", "request_timeout_ms", 30_000)
_BLOCK = ("kafka.max.block.ms", "max_block_ms", 60_000)
_DELIVERY = ("kafka.delivery.timeout.ms", "delivery_timeout_ms", 120_000)


def unavailable(
    error: BaseException, *, servers: str, settings: Mapping[str, Any], doing: str
) -> BrokerUnavailableError | None:
    """The error to raise for ``error`` if it means the broker did not answer, else None."""
    from kafka import errors as kafka_errors

    text = str(error)
    no_brokers = _classes(kafka_errors, "NoBrokersAvailable")
    waits = _classes(
        kafka_errors,
        "KafkaTimeoutError",
        "RequestTimedOutError",
        "KafkaConnectionError",
        "NodeNotReadyError",
    )
    if isinstance(error, no_brokers) or (isinstance(error, waits) and "bootstrap" in text.lower()):
        option, key, default = _BOOTSTRAP
    elif isinstance(error, waits) and "update metadata" in text:
        option, key, default = _BLOCK  # a producer waiting for the topic's metadata
    elif isinstance(error, waits) and "expired" in text:
        option, key, default = _DELIVERY  # records the producer could not deliver
    elif isinstance(error, waits):
        option, key, default = _REQUEST
    else:
        return None
    return outage_error(
        servers=servers,
        doing=doing,
        option=option,
        value=settings.get(key, default),
        cause=f"{type(error).__name__}: {text}",
    )


def outage_error(
    *, servers: str, doing: str, option: str, value: Any, cause: str
) -> BrokerUnavailableError:
    """The error for a broker that did not answer within ``option`` (= ``value``)."""
    return BrokerUnavailableError(
        f"Kafka broker {servers} did not answer while {doing}: {option}={value} passed "
        f"({cause}). The broker is down, paused or unreachable. "
        "Nothing of the unfinished batch is committed: restart the query when the broker "
        f"is back and it goes on exactly once; raise {option} to wait out longer outages."
    )


def _classes(module: Any, *names: str) -> tuple[type[BaseException], ...]:
    """The named exception classes the installed kafka-python has (they vary by version)."""
    return tuple(getattr(module, n) for n in names if isinstance(getattr(module, n, None), type))


@contextmanager
def broker_calls(
    *,
    servers: str,
    settings: Mapping[str, Any],
    doing: str,
    operation: str | None = None,
    resource: str | None = None,
) -> Iterator[None]:
    """Run Kafka client calls; an outage leaves as :class:`BrokerUnavailableError`, a
    refused login or ACL as the error naming it (:mod:`spark_chkpt.kafka.client.access`;
    ``operation`` on ``resource``: what the calls need, for the ACL to grant)."""
    from spark_chkpt.kafka.client.access import Asked, access_error

    try:
        yield
    except BrokerUnavailableError:
        raise
    except (KafkaAuthenticationError, KafkaAuthorizationError) as e:
        report_now(e)
        raise
    except Exception as e:
        asked = Asked(operation=operation, resource=resource)
        named = access_error(e, servers=servers, settings=settings, asked=asked)
        if named is not None:
            raise report_now(named) from e
        error = unavailable(e, servers=servers, settings=settings, doing=doing)
        if error is None:
            raise
        raise error from e


def refused(error: BaseException) -> bool:
    """Whether ``error`` says the broker refused or dropped the connection (a broker
    restarting or stopped), or answered metadata without any broker (a KRaft broker
    fenced by its controller after a pause longer than its session timeout, until it
    registers again), rather than a request that went unanswered (a paused broker,
    which the clients' own timeouts wait out)."""
    from kafka import errors as kafka_errors

    classes = _classes(
        kafka_errors, "KafkaConnectionError", "NoBrokersAvailable", "MetadataEmptyBrokerList"
    )
    return isinstance(error, classes)


# The pause between two tries of a request the broker refused or did not answer.
RETRY_PAUSE_S = 0.5


def request_deadline(settings: Mapping[str, Any]) -> Deadline:
    """The deadline of one request timeout (``kafka.request.timeout.ms``) from now, by
    kafka-python ``settings`` (a consumer's ``config`` or the user's settings)."""
    _, key, default = _REQUEST
    return Deadline.after(seconds=float(settings.get(key) or default) / 1000)


def retry_within(
    call: Callable[[], _R],
    *,
    deadline: Deadline,
    doing: str,
    retriable: Callable[[BaseException], bool] = refused,
    before_retry: Callable[[BaseException], None] | None = None,
    pause_s: float | None = None,
    quiet: bool = False,
) -> _R:
    """``call()``, asked again every ``pause_s`` (default :data:`RETRY_PAUSE_S`) while
    it raises an error ``retriable`` accepts (by default a refused connection) until
    ``deadline``; then that error leaves: :func:`spark_chkpt.deadline.retry` with a Kafka
    client's defaults. ``before_retry(error)`` runs before each new try (a metadata
    refresh that finds a moved leader); each retry is logged as a warning unless
    ``quiet`` (a caller whose retries are routine). ``call`` must be safe to repeat."""

    def again(error: BaseException) -> None:
        if not quiet:
            log.warning("Kafka broker did not answer while %s (%s): retrying", doing, error)
        if before_retry is not None:
            before_retry(error)

    return retry(
        lambda _: call(),
        deadline=deadline,
        retriable=retriable,
        pause_s=lambda _: RETRY_PAUSE_S if pause_s is None else pause_s,
        before_retry=again,
    )


def retry_while_refused(call: Callable[[], _R], *, settings: Mapping[str, Any], doing: str) -> _R:
    """``call()``, again while the broker refuses connections, for up to the request
    timeout (``kafka.request.timeout.ms``). kafka-python raises a refused connection at
    once (a metadata refresh during a broker restart) where the Java client retries;
    ``call`` must be safe to repeat (the driver's offset and index reads)."""
    return retry_within(call, deadline=request_deadline(settings), doing=doing)


# A lookup safe to repeat (offsets, watermarks) is asked for twice the request timeout,
# as the Java client's default.api.timeout.ms (60 s) is twice its request.timeout.ms (30 s),
# in tries of a quarter of the request timeout (1 s at least).
LOOKUP_TIMEOUTS = 2
TRIES_PER_TIMEOUT = 4


def lookup_tries(settings: Mapping[str, Any], *, key: str = _REQUEST[1]) -> tuple[Deadline, float]:
    """The deadline of a lookup safe to repeat and the seconds each try may wait, by the
    request timeout in ``settings`` under ``key`` (kafka-python's ``request_timeout_ms``;
    librdkafka's ``socket.timeout.ms``). A broker that died, or a leader that moved, is
    then asked again within a quarter of the request timeout, and a pause that outlasts
    one request is waited out."""
    timeout_s = float(settings.get(key) or _REQUEST[2]) / 1000
    deadline = Deadline.after(seconds=LOOKUP_TIMEOUTS * timeout_s)
    return deadline, max(1.0, timeout_s / TRIES_PER_TIMEOUT)


def unanswered(error: BaseException) -> bool:
    """Whether ``error`` says a request went unanswered or to the wrong broker (a
    timeout, a connection lost or refused, a leader that moved), which another try
    after a metadata refresh may cure: kafka-python's retriable errors."""
    return refused(error) or bool(getattr(error, "retriable", False))


def delivery_timeout_s(settings: Mapping[str, Any]) -> float:
    """How long records may take to be acknowledged: kafka-python's delivery timeout plus
    one request timeout (the longest a healthy producer can need)."""
    delivery = int(settings.get("delivery_timeout_ms", 120_000))
    request = int(settings.get("request_timeout_ms", 30_000))
    return (delivery + request) / 1000


def flush_within(producer: Any, *, settings: Mapping[str, Any]) -> None:
    """``producer.flush()`` that cannot hang. kafka-python's waits forever when a request
    in flight to a broker that froze never completes (seen with a SIGSTOPped broker:
    neither the request timeout nor the delivery timeout fired). Raises
    ``KafkaTimeoutError`` saying the delivery timeout expired."""
    from kafka.errors import KafkaTimeoutError

    seconds = delivery_timeout_s(settings)
    try:
        producer.flush(timeout=seconds)
    except KafkaTimeoutError as e:
        raise KafkaTimeoutError(
            f"records not acknowledged within {seconds:.0f} s: delivery timeout expired ({e})"
        ) from e
