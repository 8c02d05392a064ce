"""The one door to Kafka clients: every consumer, producer and admin client the project
creates, on either library, is built here from the user's settings.

A secured cluster (SASL, TLS, ACLs) needs every client, not most of them, to carry the
``kafka.*`` security settings: one topic lookup made without them waits out the bootstrap
timeout and fails as an outage. So no module constructs a kafka-python ``KafkaConsumer``,
``KafkaProducer``, ``KafkaAdminClient`` or ``KafkaNetClient``, nor a confluent-kafka
``Consumer``, ``Producer`` or ``AdminClient`` itself (``tests/kafka/client/test_client_factory.py``
walks the source tree for them): it asks this module, passing the kafka-python settings
translated from the options (:func:`~spark_chkpt.kafka.client.settings.kafka_client_settings`)
or the librdkafka properties translated from those.

The command line's clients get their settings another way: ``--kafka-config FILE`` (a
properties file, as Kafka's own tools take) is read once by the CLI and set with
:func:`use_process_settings` as the defaults under every client the process builds, so
each command reaches a secured cluster however deep in the library its clients are made.
A query's own options (``kafka.*``) are never process-wide. A client that cannot be
built because the broker refused its credentials, its certificate or its ACLs raises
the error :mod:`spark_chkpt.kafka.client.access` names, at once, not after a timeout.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from spark_chkpt.errors import KafkaAuthenticationError

# kafka-python settings an admin client (and a bare metadata lookup) keeps of a
# consumer's or producer's: how to reach and authenticate to the cluster.
_CONNECTION_PREFIXES = ("security_", "ssl_", "sasl_")
_CONNECTION_NAMES = {
    "request_timeout_ms",
    "reconnect_backoff_ms",
    "reconnect_backoff_max_ms",
    "retry_backoff_ms",
    "connections_max_idle_ms",
    "metadata_max_age_ms",
    "client_dns_lookup",
    "api_version",
    "bootstrap_timeout_ms",
}


# The CLI's --kafka-config, translated to kafka-python settings (empty in a Spark job).
_PROCESS_SETTINGS: dict[str, Any] = {}


def use_process_settings(settings: Mapping[str, Any]) -> None:
    """Make kafka-python ``settings`` the defaults under every client this process builds
    from now on (the CLI's ``--kafka-config``); a caller's own settings win."""
    _PROCESS_SETTINGS.clear()
    _PROCESS_SETTINGS.update(settings)


def process_settings() -> dict[str, Any]:
    """The settings :func:`use_process_settings` set (a copy)."""
    return dict(_PROCESS_SETTINGS)


def _with_defaults(settings: Mapping[str, Any] | None) -> dict[str, Any]:
    return {**_PROCESS_SETTINGS, **(settings or {})}


def connection_settings(settings: Mapping[str, Any] | None) -> dict[str, Any]:
    """The part of kafka-python ``settings`` that says how to reach and authenticate to
    the cluster (security protocol, SASL, TLS, connection timeouts)."""
    return {
        k: v
        for k, v in (settings or {}).items()
        if k.startswith(_CONNECTION_PREFIXES) or k in _CONNECTION_NAMES
    }


def _accepted(settings: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """``settings`` the client class knows (a producer's settings given to a consumer
    keep their connection part)."""
    return {k: v for k, v in settings.items() if k in defaults}


class _RefusedLogin(logging.Filter):
    """Raises the named error from kafka-python's log call of a refused SASL login, or of
    a failed bootstrap connection of a PLAINTEXT client to a TLS or SASL listener.

    kafka-python logs a bootstrap connection whose SASL login the broker refused
    ("Bootstrap connection to ... failed: SaslAuthenticationFailedError") and tries again
    until its bootstrap timeout; the log call, inside its bootstrap loop, is the one place
    the refusal is seen. An error raised by a logger's filter leaves through that call, so
    the client's construction fails at once with the error that names the login."""

    def __init__(self, *, servers: str, settings: Mapping[str, Any]) -> None:
        super().__init__()
        self._servers = servers
        self._settings = settings
        # A refusal the connection's own task logged ("Connection failed"): a bootstrap
        # that then runs out of time (a loaded machine) failed on it, not on an outage.
        self.seen: KafkaAuthenticationError | None = None

    def filter(self, record: logging.LogRecord) -> bool:
        from kafka.errors import SaslAuthenticationFailedError

        from spark_chkpt.kafka.client.access import authentication_error
        from spark_chkpt.kafka.client.listener import protocol_mismatch

        message = str(record.msg)
        args = record.args if isinstance(record.args, tuple) else ()
        if not message.startswith("Bootstrap"):
            # e.g. "Connection failed": a task of its own, where a raise is lost
            for arg in args:
                if isinstance(arg, SaslAuthenticationFailedError):
                    seen = authentication_error(arg, servers=self._servers, settings=self._settings)
                    self.seen = seen or self.seen
            return True
        for arg in args:
            if isinstance(arg, SaslAuthenticationFailedError):
                error = authentication_error(arg, servers=self._servers, settings=self._settings)
                if error is not None:
                    raise error from arg
            elif isinstance(arg, Exception):
                mismatch = protocol_mismatch(servers=self._servers, settings=self._settings)
                if mismatch is not None:
                    raise mismatch from arg
        if not args and " failed" in message:
            # "Bootstrap attempt to N failed: ...": connected, then the first request
            # (metadata) failed, as at a SASL listener that closes the connection.
            mismatch = protocol_mismatch(servers=self._servers, settings=self._settings)
            if mismatch is not None:
                raise mismatch
        return True


_MANAGER_LOG = "kafka.net.manager"


def _read_then_close(transport: Any) -> Any:
    """kafka-python 3's transport read loop, the bytes of the last read delivered before
    the peer's close is: :func:`_deliver_bytes_before_eof`."""

    async def read() -> None:
        from kafka.errors import KafkaProtocolError

        while transport._read and not transport._closed:
            await transport._net.wait_read(transport._sock)
            data, error = transport._sock_recv()
            if data and transport._protocol is not None:
                transport.last_read = time.monotonic()
                try:
                    transport._protocol.data_received(data)
                except KafkaProtocolError as e:
                    return transport.abort(error=e)
                if error is not None:  # the responses' waiters run before the close
                    await transport._net.sleep(_EOF_GRACE_S)
            if error is not None:
                return transport.abort(error=error)
        return None

    return read()


# How long a connection the peer closed stays open for the waiters of the responses read
# with the close (a few loop turns).
_EOF_GRACE_S = 0.05


def _deliver_bytes_before_eof() -> None:
    """kafka-python 3.0's transports drop the bytes read together with the peer's close:
    a broker that refuses a SASL login answers with the error and closes the connection,
    and where the client read both at once (a busy machine) it saw "socket disconnected"
    and tried again until its bootstrap timeout, so a wrong password was reported as a
    broker that did not answer. The read loop of every transport (TCP and TLS) delivers
    those bytes first, then closes."""
    from kafka.net import transport

    if getattr(transport.KafkaTCPTransport, "_chkpt_reads_before_eof", False):
        return
    transport.KafkaTCPTransport._read_from_sock = _read_then_close
    transport.KafkaTCPTransport._chkpt_reads_before_eof = True


@contextmanager
def _named_failures(*, servers: str, settings: Mapping[str, Any]) -> Iterator[None]:
    from spark_chkpt.kafka.client.access import access_error, check_tls

    check_tls(servers=servers, settings=settings)
    _deliver_bytes_before_eof()
    refused = _RefusedLogin(servers=servers, settings=settings)
    manager = logging.getLogger(_MANAGER_LOG)
    manager.addFilter(refused)
    try:
        yield
    except Exception as e:
        named = access_error(e, servers=servers, settings=settings)
        if named is None and refused.seen is not None and _bootstrap_timed_out(e):
            named = refused.seen
        if named is None:
            raise
        raise named from e
    finally:
        manager.removeFilter(refused)


def _bootstrap_timed_out(error: Exception) -> bool:
    """kafka-python's ``Unable to bootstrap``: its bootstrap loop ran out of time."""
    from kafka.errors import KafkaTimeoutError

    return isinstance(error, KafkaTimeoutError) and "Unable to bootstrap" in str(error)


def _servers(bootstrap_servers: str | list[str]) -> list[str]:
    if isinstance(bootstrap_servers, str):
        return [s.strip() for s in bootstrap_servers.split(",") if s.strip()]
    return list(bootstrap_servers)


def _setup_waits_request_timeout(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` whose network client gives a new connection's setup as long as a request.

    kafka-python 3 bounds a connection's setup (TCP connect, then its ApiVersions and SASL
    exchanges) by ``socket_connection_setup_timeout_ms``, 10 s, which its clients neither
    take nor pass on: a metadata lookup that opened a connection to a frozen broker failed
    after 10 s although ``kafka.request.timeout.ms`` was 30 s. A query waits out a pause
    within its request timeout, on an open connection or a new one: the setup is given
    the request timeout (a refused connection still fails at once). A ``kafka_client``
    the caller set is kept."""
    if "kafka_client" in config:
        return config
    from kafka.net.compat import KafkaNetClient

    timeout_ms = int(config.get("request_timeout_ms") or 30_000)

    def network_client(**configs: Any) -> Any:
        setup = {
            "socket_connection_setup_timeout_ms": timeout_ms,
            "socket_connection_setup_timeout_max_ms": timeout_ms,
        }
        return KafkaNetClient(**{**configs, **setup})

    return {**config, "kafka_client": network_client}


def _client_config(
    config: Mapping[str, Any], *, bootstrap_servers: str | list[str]
) -> dict[str, Any]:
    """A kafka-python client's ``config`` on ``bootstrap_servers``, its connection setup
    given the request timeout (:func:`_setup_waits_request_timeout`)."""
    return _setup_waits_request_timeout(
        {**config, "bootstrap_servers": _servers(bootstrap_servers)}
    )


def kafka_consumer(
    *, bootstrap_servers: str | list[str], settings: Mapping[str, Any] | None = None, **fixed: Any
) -> Any:
    """A kafka-python ``KafkaConsumer`` with the user's ``settings`` and the caller's
    ``fixed`` ones (``group_id``, ``client_id``...; these win)."""
    from kafka import KafkaConsumer

    accepted = _accepted(_with_defaults(settings), KafkaConsumer.DEFAULT_CONFIG)
    config = _client_config({**accepted, **fixed}, bootstrap_servers=bootstrap_servers)
    with _named_failures(servers=",".join(config["bootstrap_servers"]), settings=config):
        return KafkaConsumer(**config)


def kafka_producer(
    *, bootstrap_servers: str | list[str], settings: Mapping[str, Any] | None = None, **fixed: Any
) -> Any:
    """A kafka-python ``KafkaProducer`` with the user's ``settings`` and the caller's
    ``fixed`` ones (these win)."""
    from kafka import KafkaProducer

    accepted = _accepted(_with_defaults(settings), KafkaProducer.DEFAULT_CONFIG)
    config = _client_config({**accepted, **fixed}, bootstrap_servers=bootstrap_servers)
    with _named_failures(servers=",".join(config["bootstrap_servers"]), settings=config):
        return KafkaProducer(**config)


def kafka_admin(
    *,
    bootstrap_servers: str | list[str],
    settings: Mapping[str, Any] | None = None,
    client_id: str = "spark-chkpt-admin",
    **fixed: Any,
) -> Any:
    """A kafka-python ``KafkaAdminClient`` with the connection part of ``settings``."""
    from kafka.admin import KafkaAdminClient

    accepted = _accepted(
        connection_settings(_with_defaults(settings)), KafkaAdminClient.DEFAULT_CONFIG
    )
    config = _client_config(
        {**accepted, "client_id": client_id, **fixed}, bootstrap_servers=bootstrap_servers
    )
    with _named_failures(servers=",".join(config["bootstrap_servers"]), settings=config):
        return KafkaAdminClient(**config)


def confluent_consumer(config: Mapping[str, Any]) -> Any:
    """A confluent-kafka (librdkafka) ``Consumer`` of ``config``: librdkafka properties,
    the user's translated by :func:`~spark_chkpt.kafka.client.settings.librdkafka_settings`."""
    import confluent_kafka

    _check_librdkafka_tls(config)
    return confluent_kafka.Consumer(dict(config))


def confluent_producer(config: Mapping[str, Any]) -> Any:
    """A confluent-kafka (librdkafka) ``Producer`` of ``config`` (translated by
    :func:`~spark_chkpt.kafka.client.settings.librdkafka_producer_settings`)."""
    import confluent_kafka

    _check_librdkafka_tls(config)
    return confluent_kafka.Producer(dict(config))


def confluent_admin(config: Mapping[str, Any]) -> Any:
    """A confluent-kafka (librdkafka) ``AdminClient`` of ``config``."""
    from confluent_kafka.admin import AdminClient

    _check_librdkafka_tls(config)
    return AdminClient(dict(config))


def _check_librdkafka_tls(config: Mapping[str, Any]) -> None:
    from spark_chkpt.kafka.client.access import check_tls

    servers = config.get("bootstrap.servers")
    if servers:
        check_tls(servers=str(servers), settings=config)
