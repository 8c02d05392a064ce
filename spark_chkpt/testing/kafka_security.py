"""The secured listener of the test broker: SASL_SSL with SCRAM-SHA-512 over TLS (a CA
and a broker certificate made here with openssl), a second SASL_PLAINTEXT listener to
meet a client's protocol mismatch, SCRAM users with their passwords, ACLs granted as the
super user, and one user's credentials as kafka-python settings and Spark options.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from spark_chkpt.errors import BrokerError
from spark_chkpt.testing.processes import LOG_TAIL


class SecuredListener:
    """What :class:`~spark_chkpt.testing.kafka_broker.EmbeddedKafka` adds when
    ``secured``; without it, :meth:`client_settings` is empty and :meth:`options` name
    only the brokers."""

    host: str
    port: int
    controller_port: int
    sasl_plaintext_port: int  # the SASL_PLAINTEXT listener
    users: dict[str, str]  # name -> password; "admin" is the super user
    data_dir: Path
    secured: bool

    @property
    def bootstrap_servers(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def tls_dir(self) -> Path:
        return self.data_dir / "tls"

    @property
    def ca_pem(self) -> Path:
        """The PEM file of the CA that signed the broker's certificate."""
        return self.tls_dir / "ca.pem"

    def _secured_properties(self) -> dict[str, str]:
        listener = f"SASL_SSL://{self.host}:{self.port}"
        # A second listener, SASL without TLS: a client's protocol mismatch at it.
        sasl = f"SASL_PLAINTEXT://{self.host}:{self.sasl_plaintext_port}"
        admin = self.users["admin"]
        jaas = (
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="admin" password="{admin}";'
        )
        return {
            "listeners": f"{listener},{sasl},CONTROLLER://{self.host}:{self.controller_port}",
            "advertised.listeners": f"{listener},{sasl}",
            "inter.broker.listener.name": "SASL_SSL",
            "listener.security.protocol.map": (
                "SASL_SSL:SASL_SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT"
            ),
            "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": jaas,
            "sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": jaas,
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self.tls_dir / "broker-keystore.pem"),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.ca_pem),
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            # The controller listener is PLAINTEXT on loopback: its principal is ANONYMOUS.
            "super.users": "User:admin;User:ANONYMOUS",
        }

    def _make_certificates(self) -> None:
        """A CA and a broker certificate for 127.0.0.1 / localhost (openssl)."""
        if (self.tls_dir / "broker-keystore.pem").is_file():
            return
        self.tls_dir.mkdir(parents=True, exist_ok=True)
        d = self.tls_dir
        ext = d / "san.ext"
        ext.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
        ca = "req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 3"
        csr = "req -newkey rsa:2048 -nodes -keyout broker.key -out broker.csr -subj /CN=localhost"
        sign = (
            "x509 -req -in broker.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
            f"-out broker.pem -days 3 -extfile {ext}"
        )
        for command in (
            [*ca.split(), "-subj", "/CN=spark-chkpt-test-ca"],
            csr.split(),
            sign.split(),
        ):
            done = subprocess.run(
                ["openssl", *command], cwd=d, capture_output=True, text=True, timeout=60
            )
            if done.returncode != 0:
                raise BrokerError(f"openssl {command[0]} failed: {done.stderr[-LOG_TAIL:]}")
        (d / "broker-keystore.pem").write_text(
            (d / "broker.key").read_text() + (d / "broker.pem").read_text()
        )

    def client_settings(self, user: str = "alice") -> dict[str, Any]:
        """``user``'s kafka-python settings for this broker (empty when not secured)."""
        if not self.secured:
            return {}
        return {
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_plain_username": user,
            "sasl_plain_password": self.users[user],
            "ssl_cafile": str(self.ca_pem),
        }

    def options(self, user: str = "alice", *, password: str | None = None) -> dict[str, str]:
        """``user``'s Spark ``kafka.*`` options (``password``: another one, to be refused)."""
        if not self.secured:
            return {"kafka.bootstrap.servers": self.bootstrap_servers}
        secret = self.users[user] if password is None else password
        return {
            "kafka.bootstrap.servers": self.bootstrap_servers,
            "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.mechanism": "SCRAM-SHA-512",
            "kafka.sasl.jaas.config": (
                "org.apache.kafka.common.security.scram.ScramLoginModule required "
                f'username="{user}" password="{secret}";'
            ),
            "kafka.ssl.cafile": str(self.ca_pem),
        }

    def grant(
        self,
        user: str,
        operation: str,
        *,
        topic: str | None = None,
        group: str | None = None,
        transactional_id: str | None = None,
        cluster: bool = False,
        prefixed: bool = False,
    ) -> None:
        """Allow ``user`` ``operation`` (READ, WRITE, CREATE, DESCRIBE, DESCRIBE_CONFIGS...)
        on one resource, as the super user (an ACL through kafka-python's admin client)."""
        from kafka.admin import (
            ACL,
            ACLOperation,
            ACLPermissionType,
            ACLResourcePatternType,
            ResourcePattern,
            ResourceType,
        )

        from spark_chkpt.kafka.client.factory import kafka_admin

        if topic is not None:
            kind, name = ResourceType.TOPIC, topic
        elif group is not None:
            kind, name = ResourceType.GROUP, group
        elif transactional_id is not None:
            kind, name = ResourceType.TRANSACTIONAL_ID, transactional_id
        else:
            kind, name = ResourceType.CLUSTER, "kafka-cluster"
        pattern = ResourcePattern(
            kind,
            name,
            ACLResourcePatternType.PREFIXED if prefixed else ACLResourcePatternType.LITERAL,
        )
        acl = ACL(
            principal=f"User:{user}",
            host="*",
            operation=ACLOperation[operation],
            permission_type=ACLPermissionType.ALLOW,
            resource_pattern=pattern,
        )
        admin = kafka_admin(
            bootstrap_servers=self.bootstrap_servers, settings=self.client_settings("admin")
        )
        try:
            result = admin.create_acls([acl])
        finally:
            admin.close()
        if result.get("failed"):
            raise BrokerError(f"creating ACL {acl} failed: {result['failed']}")
