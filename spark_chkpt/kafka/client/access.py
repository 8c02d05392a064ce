"""A secured cluster's refusals, named: wrong credentials, an untrusted certificate, a
missing ACL.

kafka-python logs a refused SASL login and goes on trying to bootstrap until its timeout,
and reports a missing ACL as its own ``TopicAuthorizationFailedError({'t'})``: the user
reads an outage, or a dump. :func:`access_error` turns each such error into one
:class:`~spark_chkpt.errors.KafkaAuthenticationError` (the mechanism, the principal, the
setting to check) or :class:`~spark_chkpt.errors.KafkaAuthorizationError` (the resource,
the operation, the ``kafka-acls`` command that grants it). The principal is the SASL
username of the settings; a password never enters a message.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

from spark_chkpt.errors import (
    ChkptError,
    KafkaAuthenticationError,
    KafkaAuthorizationError,
)
from spark_chkpt.kafka.client.listener import client_protocol, either, tls_at_plaintext

log = logging.getLogger(__name__)

Operation = Literal[
    "READ", "WRITE", "CREATE", "DESCRIBE", "DESCRIBE_CONFIGS", "ALTER", "IDEMPOTENT_WRITE"
]
ResourceKind = Literal["topic", "group", "transactional-id", "cluster"]


@dataclass(frozen=True, kw_only=True)
class Asked:
    """What a caller asked a broker for, to name in an ACL refusal: ``operation`` on
    ``resource``, a resource of ``resource_kind`` (None: what the refusal carries)."""

    operation: str | None = None
    resource: str | None = None
    resource_kind: ResourceKind = "topic"


NOTHING_NAMED = Asked()

_SASL_MARKERS = ("SaslAuthenticationFailed", "SASL authentication error", "Authentication failed")
_TLS_MARKERS = (
    "CERTIFICATE_VERIFY_FAILED",
    "certificate verify failed",
    "SSL handshake failed",
    "SSLError",
    "SSLCertVerificationError",
)


def principal(settings: Mapping[str, Any]) -> str | None:
    """The SASL username of kafka-python ``settings`` (or librdkafka's ``sasl.username``)."""
    name = settings.get("sasl_plain_username") or settings.get("sasl.username")
    return str(name) if name else None


def _mechanism(settings: Mapping[str, Any]) -> str:
    protocol = str(
        settings.get("security_protocol") or settings.get("security.protocol") or "PLAINTEXT"
    )
    mechanism = settings.get("sasl_mechanism") or settings.get("sasl.mechanism")
    return f"{protocol} {mechanism}" if mechanism and "SASL" in protocol.upper() else protocol


def acl_command(
    *, who: str | None, operation: str, kind: ResourceKind, name: str | None, servers: str
) -> str:
    """The ``kafka-acls`` command that grants ``operation`` on a resource to ``who``."""
    if kind == "cluster":
        resource = "--cluster"
    elif kind == "transactional-id":
        resource = f"--transactional-id '{name}' --resource-pattern-type prefixed"
    else:
        resource = f"--{kind} '{name}'"
    return (
        f"kafka-acls --bootstrap-server {servers} --command-config ADMIN.properties --add "
        f"--allow-principal User:{who or '<principal>'} --operation {operation} {resource}"
    )


def authentication_error(
    error: BaseException, *, servers: str, settings: Mapping[str, Any]
) -> KafkaAuthenticationError | None:
    """The error for a refused SASL login or TLS handshake, else None."""
    from kafka import errors as kafka_errors

    text = str(error)
    who = principal(settings)
    as_whom = f" as principal {who!r}" if who else ""
    if isinstance(error, kafka_errors.SaslAuthenticationFailedError) or any(
        marker in text for marker in _SASL_MARKERS
    ):
        return KafkaAuthenticationError(
            f"Kafka broker {servers} refused the {_mechanism(settings)} login{as_whom} "
            f"({_without_secrets(text)}): check kafka.sasl.jaas.config (username and "
            "password) and kafka.sasl.mechanism (the mechanism the broker's listener "
            "enables); a wrong password never works, waiting longer does not help"
        )
    if any(marker in text for marker in _TLS_MARKERS):
        return KafkaAuthenticationError(
            f"TLS handshake with Kafka broker {servers} failed{as_whom} "
            f"({_without_secrets(text)}): check kafka.ssl.cafile (the PEM file of the "
            "CA that signed the broker's certificate; Spark's JVM connector reads "
            "kafka.ssl.truststore.location instead), kafka.ssl.certfile / "
            "kafka.ssl.keyfile for mutual TLS, and kafka.security.protocol"
        )
    return None


_RESOURCE: dict[str, ResourceKind] = {
    "TopicAuthorizationFailedError": "topic",
    "GroupAuthorizationFailedError": "group",
    "TransactionalIdAuthorizationFailedError": "transactional-id",
    "ClusterAuthorizationFailedError": "cluster",
}
# librdkafka's (and the Java client's) names of the same refusals.
_RESOURCE_CODES: dict[str, ResourceKind] = {
    "TopicAuthorizationFailed": "topic",
    "TOPIC_AUTHORIZATION_FAILED": "topic",
    "GroupAuthorizationFailed": "group",
    "GROUP_AUTHORIZATION_FAILED": "group",
    "TransactionalIdAuthorizationFailed": "transactional-id",
    "TRANSACTIONAL_ID_AUTHORIZATION_FAILED": "transactional-id",
    "ClusterAuthorizationFailed": "cluster",
    "CLUSTER_AUTHORIZATION_FAILED": "cluster",
}
# Every transactional id the project uses starts so (the sink's, with
# delivery=exactly-once-transactions: chkpt-<appId>-<topic>-<partition>-<slot>).
TRANSACTIONAL_PREFIX = "chkpt-"
_DEFAULT_OPERATION: dict[str, str] = {
    "topic": "READ",
    "group": "READ",
    "transactional-id": "WRITE",
    "cluster": "IDEMPOTENT_WRITE",
}


def _refused_kind(error: BaseException) -> ResourceKind | None:
    """The kind of resource a broker's ACL refusal is of (by its class, else by the error
    code in its text; a bare authorization error: the cluster), else None."""
    from kafka import errors as kafka_errors

    for cls in type(error).__mro__:
        if cls.__name__ in _RESOURCE:
            return _RESOURCE[cls.__name__]
    text = str(error)
    for marker, each in _RESOURCE_CODES.items():
        if marker in text:
            return each
    return "cluster" if isinstance(error, kafka_errors.AuthorizationError) else None


def _named_resource(error: BaseException) -> str | None:
    for arg in getattr(error, "args", ()):
        if isinstance(arg, (set, frozenset, list, tuple)) and arg:
            return ",".join(sorted(str(a) for a in arg))
        if isinstance(arg, str):
            found = re.search(r"\{'([^']+)'", arg)
            if found:
                return found.group(1)
    return None


def _without_secrets(text: str) -> str:
    return re.sub(r'password\s*=\s*"[^"]*"', 'password="<redacted>"', text)


# (servers, CA file, certificate file) whose TLS handshake succeeded in this process.
_TRUSTED: set[tuple[str, str | None, str | None]] = set()
_HANDSHAKE_TIMEOUT_S = 5.0


def check_tls(*, servers: str, settings: Mapping[str, Any]) -> None:
    """Refuse at once a TLS handshake the first reachable broker of ``servers`` fails
    (an unknown CA, a host name the certificate does not name), with the setting to
    check. kafka-python retries a failed handshake as if the broker were down until its
    bootstrap timeout; this one handshake (a few ms, once per process and settings)
    says what is wrong instead. A broker that does not answer is left to the client."""
    import socket
    import ssl

    protocol = client_protocol(settings)
    if protocol not in ("SSL", "SASL_SSL"):
        return
    cafile = either(settings, "ssl_cafile")
    certfile = either(settings, "ssl_certfile")
    key = (servers, cafile, certfile)
    if key in _TRUSTED:
        return
    context = ssl.create_default_context(cafile=cafile)
    check = settings.get("ssl_check_hostname")
    if check is None:
        check = settings.get("ssl.endpoint.identification.algorithm", "https") == "https"
    context.check_hostname = bool(check)
    if certfile:
        context.load_cert_chain(
            certfile, either(settings, "ssl_keyfile"), password=either(settings, "ssl_password")
        )
    for server in servers.split(","):
        host, _, port = server.strip().rpartition(":")
        try:
            raw = socket.create_connection((host, int(port)), timeout=_HANDSHAKE_TIMEOUT_S)
        except (OSError, ValueError):
            continue
        try:
            with context.wrap_socket(raw, server_hostname=host):
                _TRUSTED.add(key)
                return
        except ssl.SSLError as e:
            if not isinstance(e, ssl.SSLCertVerificationError):  # dropped, not refused
                tls_at_plaintext(
                    server=server.strip(), host=host, port=int(port), protocol=protocol
                )
            error = authentication_error(
                OSError(f"SSL handshake failed: {e}"), servers=servers, settings=settings
            )
            if error is not None:
                raise error from e
            raise
        except OSError:
            tls_at_plaintext(server=server.strip(), host=host, port=int(port), protocol=protocol)
            continue
        finally:
            raw.close()


def access_error(
    error: BaseException,
    *,
    servers: str,
    settings: Mapping[str, Any],
    asked: Asked = NOTHING_NAMED,
) -> ChkptError | None:
    """The named error for ``error`` if it is an authentication refusal or a broker's ACL
    refusal, else None. An ACL refusal names what the caller ``asked`` (it knows what it
    asked, when the refused resource is of its ``resource_kind``; else what the error
    carries)."""
    if isinstance(error, (KafkaAuthenticationError, KafkaAuthorizationError)):
        return error
    named = authentication_error(error, servers=servers, settings=settings)
    kind = _refused_kind(error) if named is None else None
    if kind is None:
        return named
    resource, operation = asked.resource, asked.operation
    if kind != asked.resource_kind:  # e.g. the sink names its topic; the refusal is of its ids
        resource, operation = None, None
    name = resource or _named_resource(error)
    if name is None and kind == "transactional-id":
        name = TRANSACTIONAL_PREFIX
    op = operation or _DEFAULT_OPERATION[kind]
    who = principal(settings)
    target = "the cluster" if kind == "cluster" else f"{kind} {name!r}"
    return KafkaAuthorizationError(
        f"Kafka broker {servers} refused {op} on {target} to principal "
        f"{who or '(the client)'!r}: the ACL is missing. Grant it: "
        + acl_command(who=who, operation=op, kind=kind, name=name, servers=servers)
    )


@contextmanager
def access_checked(
    *,
    servers: str,
    settings: Mapping[str, Any],
    operation: str | None = None,
    resource: str | None = None,
    resource_kind: ResourceKind = "topic",
) -> Iterator[None]:
    """Run Kafka client calls; a refusal leaves as its named error."""
    asked = Asked(operation=operation, resource=resource, resource_kind=resource_kind)
    try:
        yield
    except ChkptError:
        raise
    except Exception as e:
        named = access_error(e, servers=servers, settings=settings, asked=asked)
        if named is None:
            raise
        raise named from e
