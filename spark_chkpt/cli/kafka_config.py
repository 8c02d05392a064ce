"""``--kafka-config FILE``: a secured cluster's client settings for the commands that reach
Kafka, as Kafka's own tools take them (``--command-config``).

The file is a Java properties file of Kafka client settings::

    security.protocol=SASL_SSL
    sasl.mechanism=SCRAM-SHA-512
    sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\
        username="alice" password="...";
    ssl.ca.location=/etc/kafka/ca.pem

The same file can be named by ``SPARK_CHKPT_KAFKA_CONFIG`` (the option wins). Its
settings are translated as a query's ``kafka.*`` options are
(:func:`~spark_chkpt.kafka.client.settings.kafka_client_settings`) and become the
defaults of every Kafka client the command builds
(:func:`~spark_chkpt.kafka.client.factory.use_process_settings`). A value is never
printed: an error names the file and the setting only.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from spark_chkpt.errors import ConfigError

ENVIRONMENT = "SPARK_CHKPT_KAFKA_CONFIG"

# librdkafka's and the Java tools' names that mean a kafka-python setting.
_ALIASES = {
    "ssl.ca.location": "ssl.cafile",
    "ssl.certificate.location": "ssl.certfile",
    "ssl.key.location": "ssl.keyfile",
    "ssl.key.password": "ssl.password",
}


def add_argument(parser: argparse.ArgumentParser) -> None:
    """``--kafka-config FILE`` on a command that takes ``--bootstrap-servers``."""
    parser.add_argument(
        "--kafka-config",
        default=None,
        metavar="FILE",
        help="a properties file of Kafka client settings for a secured cluster "
        "(security.protocol, sasl.mechanism, sasl.jaas.config, ssl.ca.location...), as "
        f"Kafka's tools take with --command-config; default: ${ENVIRONMENT}",
    )


def read_properties(path: Path) -> dict[str, str]:
    """A Java properties file's ``key=value`` (or ``key: value``) pairs; ``#`` and ``!``
    comments, a trailing backslash continues a line."""
    pairs: dict[str, str] = {}
    logical = ""
    for raw in path.read_text().splitlines():
        line = raw.strip() if not logical else raw.lstrip()
        if not logical and (not line or line.startswith(("#", "!"))):
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            logical += line[:-1]
            continue
        logical += line
        key, sep, value = _split(logical)
        logical = ""
        if sep:
            pairs[key.strip()] = value.strip()
    return pairs


def _split(line: str) -> tuple[str, str, str]:
    cut = [i for i in (line.find("="), line.find(":")) if i >= 0]
    if not cut:
        return line, "", ""
    at = min(cut)
    return line[:at], line[at], line[at + 1 :]


def settings_of(path: Path) -> dict[str, Any]:
    """The kafka-python settings of properties file ``path``. Raises :class:`ConfigError`
    naming the file and the setting, never its value."""
    if not path.is_file():
        raise ConfigError("--kafka-config", str(path), "no such file")
    properties = read_properties(path)
    options: dict[str, str] = {}
    for key, value in properties.items():
        name = key.lower()
        if name in ("ssl.truststore.location",):
            if properties.get("ssl.truststore.type", "").upper() != "PEM":
                raise ConfigError(
                    f"{key} in {path}",
                    "<not shown>",
                    "a JKS/PKCS12 truststore is for Java clients: give the CA's PEM file "
                    "as ssl.ca.location (or ssl.truststore.type=PEM)",
                )
            name = "ssl.cafile"
        if name in ("ssl.truststore.type", "bootstrap.servers"):
            continue
        if name == "sasl.username" or name == "sasl.password":
            continue  # librdkafka's pair: read below
        options["kafka." + _ALIASES.get(name, name)] = value
    if "sasl.username" in properties and "kafka.sasl.jaas.config" not in options:
        user = properties["sasl.username"]
        secret = properties.get("sasl.password", "")
        options["kafka.sasl.jaas.config"] = (
            f'ScramLoginModule required username="{user}" password="{secret}";'
        )
    from spark_chkpt.kafka.client.settings import kafka_client_settings

    try:
        return kafka_client_settings(options, role="consumer")
    except ConfigError as e:
        raise ConfigError(
            f"{e.option.removeprefix('kafka.')} in {path}", "<not shown>", e.allowed
        ) from None


def apply(args: argparse.Namespace) -> bool:
    """Make the command's ``--kafka-config`` (or ``$SPARK_CHKPT_KAFKA_CONFIG``) the
    defaults of its Kafka clients; whether a file was given."""
    given = getattr(args, "kafka_config", None) or os.environ.get(ENVIRONMENT)
    if not given:
        return False
    from spark_chkpt.kafka.client.factory import use_process_settings

    use_process_settings(settings_of(Path(given).expanduser()))
    return True
