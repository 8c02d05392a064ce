"""A broker that does not answer: one error naming the broker and the timeout to raise.

kafka-python reports an outage as one of several low-level errors (a bootstrap that timed
out, a request that timed out, no broker available), deep inside a worker's traceback.
:func:`broker_calls` turns each into a :class:`BrokerUnavailableError` that says which
broker, while doing what, which timeout expired, and what to do. librdkafka reports a
timeout as a delivery error or a flush that leaves records: the sink's librdkafka
producer raises :func:`outage_error` for those. A pause shorter than the timeouts is
waited out by the clients themselves; nothing here retries.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar

from spark_chkpt.deadline import Deadline
from spark_chkpt.errors import (
    BrokerUnavailableError,
    KafkaAuthenticationError,
    KafkaAuthorizationError,
)
from spark_chkpt.runtime.report import report_now

log = logging.getLogger(__name__)

_R = TypeVar("_R")
_REFUSED_RETRY_S = 0.5

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
    from spark_chkpt.kafka.client.access import access_error

    try:
        yield
    except BrokerUnavailableError:
        raise
    except (KafkaAuthenticationError, KafkaAuthorizationError) as e:
        report_now(e)
        raise
    except Exception as e:
        named = access_error(
            e, servers=servers, settings=settings, operation=operation, resource=resource
        )
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


def retry_while_refused(call: Callable[[], _R], *, settings: Mapping[str, Any], doing: str) -> _R:
    """``call()``, again every 0.5 s while the broker refuses connections, for up to the
    request timeout (``kafka.request.timeout.ms``). kafka-python raises a refused
    connection at once (a metadata refresh during a broker restart) where the Java
    client retries; ``call`` must be safe to repeat (the driver's offset and index reads)."""
    _, key, default = _REQUEST
    deadline = Deadline.after(seconds=int(settings.get(key, default)) / 1000)
    while True:
        try:
            return call()
        except Exception as e:
            if not refused(e) or deadline.expired():
                raise
            log.warning("Kafka broker refused the connection while %s (%s): retrying", doing, e)
            time.sleep(_REFUSED_RETRY_S)


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
