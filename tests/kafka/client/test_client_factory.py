"""Every Kafka client the project creates comes through ``spark_chkpt.kafka.client.factory``.

A client built elsewhere would miss the user's ``kafka.*`` security settings: on a secured
cluster it waits out the bootstrap timeout and fails as an outage (a bare
``KafkaConsumer(bootstrap_servers=...)`` in the topic administration did exactly that).
"""

from __future__ import annotations

import ast
from collections import deque
from pathlib import Path

import pytest

from spark_chkpt.errors import KafkaAuthenticationError, KafkaAuthorizationError
from spark_chkpt.kafka.client import access, factory, listener

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("spark_chkpt", "connectors", "jobs")
FACTORY = ROOT / "spark_chkpt" / "kafka" / "client" / "factory.py"
CLIENTS = {
    "KafkaConsumer",
    "KafkaProducer",
    "KafkaAdminClient",
    "KafkaNetClient",
    "Consumer",
    "Producer",
    "AdminClient",
}


def _constructions(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
        if name in CLIENTS:
            found.append(f"{path.relative_to(ROOT)}:{node.lineno} {name}(...)")
    return found


def test_no_kafka_client_is_constructed_outside_the_factory() -> None:
    outside = [
        each
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if path != FACTORY
        for each in _constructions(path)
    ]
    assert not outside, "Kafka clients built outside kafka/client/factory.py:\n" + "\n".join(
        outside
    )


def test_the_walk_sees_a_construction() -> None:
    """The check above can fail: the factory itself constructs every kind."""
    names = {each.rsplit(" ", 1)[1].removesuffix("(...)") for each in _constructions(FACTORY)}
    assert names == CLIENTS


SCRAM = {
    "security_protocol": "SASL_SSL",
    "sasl_mechanism": "SCRAM-SHA-512",
    "sasl_plain_username": "alice",
    "sasl_plain_password": "s3cret-pw",
}


def test_an_admin_client_keeps_the_connection_settings_only() -> None:
    kept = factory.connection_settings({**SCRAM, "linger_ms": 5, "acks": "all"})
    assert kept == SCRAM


def test_a_refused_login_names_mechanism_principal_and_setting_never_the_password() -> None:
    from kafka.errors import SaslAuthenticationFailedError

    error = access.access_error(
        SaslAuthenticationFailedError("SaslAuthenticationFailedError: Authentication failed"),
        servers="h:9093",
        settings=SCRAM,
    )
    assert isinstance(error, KafkaAuthenticationError)
    text = str(error)
    assert "SASL_SSL SCRAM-SHA-512" in text and "'alice'" in text
    assert "kafka.sasl.jaas.config" in text
    assert "s3cret-pw" not in text


def test_a_missing_acl_names_resource_operation_and_the_grant() -> None:
    from kafka.errors import TopicAuthorizationFailedError

    error = access.access_error(
        TopicAuthorizationFailedError({"orders"}),
        servers="h:9093",
        settings=SCRAM,
        asked=access.Asked(operation="WRITE"),
    )
    assert isinstance(error, KafkaAuthorizationError)
    assert "WRITE on topic 'orders' to principal 'alice'" in str(error)
    assert "--allow-principal User:alice --operation WRITE --topic 'orders'" in str(error)


def test_a_librdkafka_transactional_id_refusal_is_named() -> None:
    error = access.access_error(
        RuntimeError("KafkaError{code=TRANSACTIONAL_ID_AUTHORIZATION_FAILED}"),
        servers="h:9093",
        settings={"sasl.username": "alice"},
        asked=access.Asked(resource="chkpt-app", resource_kind="transactional-id"),
    )
    assert isinstance(error, KafkaAuthorizationError)
    assert "--transactional-id 'chkpt-app' --resource-pattern-type prefixed" in str(error)


def test_the_sinks_topic_is_not_named_for_a_refused_transactional_id() -> None:
    error = access.access_error(
        RuntimeError("the producer: TRANSACTIONAL_ID_AUTHORIZATION_FAILED: ..."),
        servers="h:9093",
        settings=SCRAM,
        asked=access.Asked(operation="WRITE", resource="orders"),
    )
    assert isinstance(error, KafkaAuthorizationError)
    assert "refused WRITE on transactional-id 'chkpt-' to principal 'alice'" in str(error)
    assert "--transactional-id 'chkpt-' --resource-pattern-type prefixed" in str(error)


@pytest.mark.parametrize("text", ["broker down", "Unable to bootstrap from ['h:1']"])
def test_other_errors_are_left_alone(text: str) -> None:
    assert access.access_error(RuntimeError(text), servers="h:1", settings=SCRAM) is None


def test_a_plaintext_listener_or_a_tls_client_is_no_protocol_mismatch() -> None:
    """The probe behind :func:`listener.protocol_mismatch` calls a broker that drops the
    TLS handshake (a plaintext listener reads it as a garbled request) or that is down
    finds no mismatch: those stay the outage they are. A TLS client is never probed."""
    import socket
    import threading

    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def plaintext_broker() -> None:
        conn, _ = server.accept()
        conn.recv(4)  # the request's size: far over the limit, the connection dropped
        conn.close()
        conn, _ = server.accept()  # the plaintext probe: answered
        conn.recv(64)
        conn.sendall(b"\x00\x00\x00\x08\x00\x00\x00\x01\x00\x00\x00\x00")
        conn.close()

    thread = threading.Thread(target=plaintext_broker, daemon=True)
    thread.start()
    servers = f"127.0.0.1:{port}"
    try:
        assert listener.protocol_mismatch(servers=servers, settings={}) is None
        thread.join(timeout=5)
    finally:
        server.close()
    down = socket.create_server(("127.0.0.1", 0))
    down_port = down.getsockname()[1]
    down.close()
    assert listener.protocol_mismatch(servers=f"127.0.0.1:{down_port}", settings={}) is None
    assert (
        listener.protocol_mismatch(servers="no-such-host:1", settings={"security_protocol": "SSL"})
        is None
    )


def test_a_listener_that_closes_a_plaintext_request_is_named_a_sasl_listener() -> None:
    """A SASL listener answers no request before the login: it accepts the connection
    and closes it on the probe's metadata request (a TLS handshake it drops the same
    way). A PLAINTEXT client there is named; before, no mismatch was found and the
    client waited out its bootstrap timeout as an outage."""
    import socket
    import threading

    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def sasl_listener() -> None:
        for _ in range(2):  # the TLS probe, then the plaintext one
            conn, _ = server.accept()
            conn.recv(64)
            conn.close()

    thread = threading.Thread(target=sasl_listener, daemon=True)
    thread.start()
    try:
        error = listener.protocol_mismatch(servers=f"127.0.0.1:{port}", settings={})
        thread.join(timeout=5)
    finally:
        server.close()
    assert error is not None
    assert str(error).startswith(
        f"Kafka broker 127.0.0.1:{port} accepted the connection and closed it on the "
        "client's first request: its listener likely requires SASL"
    ), error
    assert "kafka.security.protocol to SASL_PLAINTEXT" in str(error)


def test_a_refused_login_is_raised_from_the_bootstrap_loop_only() -> None:
    """kafka-python logs a refused SASL login twice: "Connection failed" in the
    connection's own task (scheduled apart: an error raised there never reaches the
    caller, and the bootstrap then waits out its timeout), then "Bootstrap connection to
    ... failed" in the bootstrap loop the caller waits on. Only the second raises."""
    import logging

    from kafka.errors import SaslAuthenticationFailedError

    settings = {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512"}
    refused = factory._RefusedLogin(servers="b:9093", settings=settings)
    exc = SaslAuthenticationFailedError("SaslAuthenticationFailedError: bad credentials")

    def record(msg: str, *args: object) -> logging.LogRecord:
        return logging.LogRecord("kafka.net.manager", logging.WARNING, "", 0, msg, args, None)

    assert refused.filter(record("Connection failed: %s", exc)) is True
    with pytest.raises(KafkaAuthenticationError):
        refused.filter(
            record("Bootstrap connection to %s failed: %s (backoff %.2f secs)", 0, exc, 1.0)
        )


def test_a_refused_login_seen_only_in_a_connection_task_names_a_bootstrap_timeout() -> None:
    """CI beside a CPU burner: a wrong password was reported as a broker that did not
    answer (``Unable to bootstrap``) after 41 s. The refusal was logged only by the
    connection's own task ("Connection failed"), and the bootstrap loop ran out of time
    before it saw one itself. A bootstrap that times out after a refused login raises
    the refusal."""
    import logging

    from kafka.errors import KafkaTimeoutError, SaslAuthenticationFailedError

    settings = {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512"}
    exc = SaslAuthenticationFailedError("SaslAuthenticationFailedError: bad credentials")
    manager = logging.getLogger("kafka.net.manager")
    with (
        pytest.raises(
            KafkaAuthenticationError, match="refused the SASL_SSL SCRAM-SHA-512 login"
        ) as raised,
        factory._named_failures(servers="b:9093", settings=settings),
    ):
        manager.error("Connection failed: %s", exc)
        raise KafkaTimeoutError("Unable to bootstrap from ['b:9093']")
    assert isinstance(raised.value.__cause__, KafkaTimeoutError)
    with (
        pytest.raises(KafkaTimeoutError),
        factory._named_failures(servers="b:9093", settings=settings),
    ):
        raise KafkaTimeoutError("Unable to bootstrap from ['b:9093']")  # nothing refused


class _Done:
    """An awaitable that is ready at once (a socket readable, a sleep over)."""

    def __await__(self):  # type: ignore[no-untyped-def]
        return iter(())


class _Net:
    def wait_read(self, sock: object) -> _Done:
        return _Done()

    def sleep(self, delay: float) -> _Done:
        return _Done()


class _Protocol:
    _sensors = None

    def __init__(self) -> None:
        self.seen: list[tuple[str, object]] = []

    def data_received(self, data: bytes) -> None:
        self.seen.append(("data", data))

    def connection_lost(self, error: object) -> None:
        self.seen.append(("lost", error))


def test_the_bytes_read_with_the_peers_close_reach_the_connection_before_the_close() -> None:
    """A broker refusing a SASL login sends the error and closes; read in one go (a busy
    machine), kafka-python 3.0's transport dropped the error and reported "socket
    disconnected", so its client tried again until the bootstrap timeout and a wrong
    password came out as an outage. The read loop the factory installs delivers the
    bytes, then closes: the connection sees the refusal first."""
    from kafka.errors import KafkaConnectionError
    from kafka.net.transport import KafkaSSLTransport, KafkaTCPTransport

    factory._deliver_bytes_before_eof()
    closed = KafkaConnectionError("socket disconnected")
    for kind in (KafkaTCPTransport, KafkaSSLTransport):
        protocol = _Protocol()
        transport = object.__new__(kind)
        transport.__dict__.update(
            _read=True,
            _closed=False,
            _sock=None,
            _net=_Net(),
            _write_buffer=deque(),
            _read_task=None,
            _write_task=None,
            _protocol=protocol,
            _sock_recv=lambda: (b"the refusal", closed),
        )
        with pytest.raises(StopIteration):
            transport._read_from_sock().send(None)
        assert protocol.seen == [("data", b"the refusal"), ("lost", closed)], kind
