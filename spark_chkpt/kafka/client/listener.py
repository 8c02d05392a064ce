"""What a broker's listener speaks, probed when a client's connection fails: a client
whose ``kafka.security.protocol`` is not the listener's is named as such, not as an
outage.

kafka-python (and librdkafka) read a listener that drops a client speaking the wrong
protocol as a broker that is down, and retry until the bootstrap timeout. One probe per
broker and process says what is wrong instead: a TLS handshake (does the listener speak
TLS?) and one plaintext Kafka request (does it answer, or close the connection it
accepted, as a SASL listener does with any request before the login?). A broker that
refuses the connection or does not answer is left to the client: that is an outage.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Mapping
from typing import Any

from spark_chkpt.errors import KafkaSecurityProtocolError

PROBE_TIMEOUT_S = 5.0

_LIBRDKAFKA = {
    "security_protocol": "security.protocol",
    "ssl_cafile": "ssl.ca.location",
    "ssl_certfile": "ssl.certificate.location",
    "ssl_keyfile": "ssl.key.location",
    "ssl_password": "ssl.key.password",
}


def either(settings: Mapping[str, Any], name: str) -> Any:
    """kafka-python setting ``name`` of ``settings``, or its librdkafka property."""
    value = settings.get(name)
    return value if value is not None else settings.get(_LIBRDKAFKA[name])


def client_protocol(settings: Mapping[str, Any]) -> str:
    """The client's security protocol (kafka-python's or librdkafka's name; PLAINTEXT)."""
    return str(either(settings, "security_protocol") or "PLAINTEXT").upper()


def _addresses(servers: str) -> list[tuple[str, str, int]]:
    found = []
    for server in servers.split(","):
        host, _, port = server.strip().rpartition(":")
        try:
            found.append((server.strip(), host, int(port)))
        except ValueError:
            continue
    return found


# (host, port) -> whether it answered a TLS handshake, probed at most once per process.
_SPEAKS_TLS: dict[tuple[str, int], bool] = {}


def speaks_tls(host: str, port: int) -> bool:
    """Whether ``host:port`` answers a TLS handshake (its certificate not checked: only
    whether the listener speaks TLS at all). A broker that does not answer is not TLS."""
    import ssl

    if (host, port) in _SPEAKS_TLS:
        return _SPEAKS_TLS[(host, port)]
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        raw = socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S)
    except OSError:
        return False  # not remembered: a broker down now may be up later
    try:
        with context.wrap_socket(raw, server_hostname=host):
            answer = True
    except ssl.SSLError as e:
        answer = "ALERT" in str(e).upper()  # a TLS listener that refused this client
    except OSError:
        answer = False  # a plaintext listener drops the handshake as a garbled request
    finally:
        raw.close()
    _SPEAKS_TLS[(host, port)] = answer
    return answer


# A Kafka MetadataRequest v0 for no topic list (api key 3, version 0, correlation id 1,
# client id "spark-chkpt-probe", an empty topic array): a plaintext listener answers
# it; a SASL listener closes the connection (only ApiVersions and SaslHandshake may
# come before the login).
_CLIENT_ID = b"spark-chkpt-probe"
_BODY = struct.pack(">hhih", 3, 0, 1, len(_CLIENT_ID)) + _CLIENT_ID + struct.pack(">i", 0)
_METADATA_REQUEST = struct.pack(">i", len(_BODY)) + _BODY
# (host, port) -> True: answered; False: closed the connection it accepted.
_ANSWERS: dict[tuple[str, int], bool] = {}


def answers_plaintext(host: str, port: int) -> bool | None:
    """Whether ``host:port`` answers a plaintext Kafka request (True), or accepts the
    connection and closes it on the request (False: a SASL or TLS listener); None when
    it refuses the connection or does not answer in time (an outage, not a mismatch)."""
    if (host, port) in _ANSWERS:
        return _ANSWERS[(host, port)]
    try:
        raw = socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S)
    except OSError:
        return None
    try:
        raw.sendall(_METADATA_REQUEST)
        answer = len(raw.recv(4)) == 4
    except TimeoutError:
        return None
    except OSError:
        answer = False  # reset: closed on the request
    finally:
        raw.close()
    _ANSWERS[(host, port)] = answer
    return answer


def protocol_mismatch(
    *, servers: str, settings: Mapping[str, Any]
) -> KafkaSecurityProtocolError | None:
    """The error for a client whose bootstrap connection failed because it speaks
    PLAINTEXT (or SASL_PLAINTEXT) to a broker's TLS listener, or PLAINTEXT to a SASL
    listener, else None."""
    protocol = client_protocol(settings)
    if protocol in ("SSL", "SASL_SSL"):
        return None
    for server, host, port in _addresses(servers):
        if speaks_tls(host, port):
            return KafkaSecurityProtocolError(
                f"Kafka broker {server} speaks TLS, but the client's "
                f"kafka.security.protocol is {protocol}: set kafka.security.protocol to "
                "SASL_SSL (a SASL listener, with kafka.sasl.mechanism and "
                "kafka.sasl.jaas.config) or SSL, as the broker's listener at that port "
                "is configured, and kafka.ssl.cafile to the CA that signed its "
                "certificate; the broker is not down, waiting longer does not help"
            )
        if protocol == "PLAINTEXT" and answers_plaintext(host, port) is False:
            return KafkaSecurityProtocolError(
                f"Kafka broker {server} accepted the connection and closed it on the "
                "client's first request: its listener likely requires SASL, but the "
                "client's kafka.security.protocol is PLAINTEXT: set "
                "kafka.security.protocol to SASL_PLAINTEXT (or SASL_SSL for TLS), with "
                "kafka.sasl.mechanism and kafka.sasl.jaas.config, as the broker's "
                "listener at that port is configured; the broker is not down, waiting "
                "longer does not help"
            )
    return None


def tls_at_plaintext(*, server: str, host: str, port: int, protocol: str) -> None:
    """Raise the error for a TLS client (``protocol``) whose handshake ``host:port``
    dropped: the listener answers plaintext Kafka (PLAINTEXT), or closes a plaintext
    request as well (SASL_PLAINTEXT); else (no answer) return."""
    if speaks_tls(host, port):
        return  # a TLS listener that refused this client's handshake (e.g. mTLS)
    answered = answers_plaintext(host, port)
    if answered is False:
        raise KafkaSecurityProtocolError(
            f"Kafka broker {server} does not speak TLS (it dropped the handshake) and "
            "closed a plaintext request too: its listener likely requires SASL without "
            f"TLS, but the client's kafka.security.protocol is {protocol}: set "
            "kafka.security.protocol to SASL_PLAINTEXT, as the broker's listener at that "
            "port is configured, or point kafka.bootstrap.servers at its TLS listener; "
            "the broker is not down, waiting longer does not help"
        )
    if answered:
        raise KafkaSecurityProtocolError(
            f"Kafka broker {server} answers plaintext Kafka requests, but the client's "
            f"kafka.security.protocol is {protocol}: set kafka.security.protocol to "
            "PLAINTEXT (or SASL_PLAINTEXT for a SASL listener without TLS), as the "
            "broker's listener at that port is configured, or point "
            "kafka.bootstrap.servers at its TLS listener; the broker is not down, "
            "waiting longer does not help"
        )
