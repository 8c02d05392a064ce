"""``--kafka-config FILE``: a Java properties file of client settings, never echoed."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_chkpt.cli import kafka_config
from spark_chkpt.errors import ConfigError
from spark_chkpt.kafka.client import factory

SECRET = "pw-that-must-not-show"


def _file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "client.properties"
    path.write_text(text)
    return path


def test_a_scram_file_becomes_kafka_python_settings(tmp_path: Path) -> None:
    path = _file(
        tmp_path,
        "# a secured cluster\n"
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism: SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
        f'    username="alice" password="{SECRET}";\n'
        "ssl.ca.location=/etc/kafka/ca.pem\n",
    )
    settings = kafka_config.settings_of(path)
    assert settings["security_protocol"] == "SASL_SSL"
    assert settings["sasl_mechanism"] == "SCRAM-SHA-512"
    assert settings["sasl_plain_username"] == "alice"
    assert settings["sasl_plain_password"] == SECRET
    assert settings["ssl_cafile"] == "/etc/kafka/ca.pem"


def test_librdkafka_names_and_a_pem_truststore_are_understood(tmp_path: Path) -> None:
    path = _file(
        tmp_path,
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
        f"sasl.username=bob\nsasl.password={SECRET}\n"
        "ssl.truststore.type=PEM\nssl.truststore.location=/ca.pem\n",
    )
    settings = kafka_config.settings_of(path)
    assert settings["sasl_plain_username"] == "bob"
    assert settings["sasl_plain_password"] == SECRET
    assert settings["ssl_cafile"] == "/ca.pem"


def test_a_refused_setting_is_named_without_its_value(tmp_path: Path) -> None:
    path = _file(tmp_path, f"ssl.truststore.location=/x.jks\nssl.truststore.password={SECRET}\n")
    with pytest.raises(ConfigError) as raised:
        kafka_config.settings_of(path)
    assert "ssl.truststore.location" in str(raised.value) and str(path) in str(raised.value)
    assert SECRET not in str(raised.value) and "/x.jks" not in str(raised.value)


def test_the_environment_names_the_file_and_it_reaches_every_client(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import argparse

    path = _file(tmp_path, "security.protocol=SSL\nssl.ca.location=/ca.pem\n")
    monkeypatch.setenv(kafka_config.ENVIRONMENT, str(path))
    monkeypatch.setattr(factory, "_PROCESS_SETTINGS", {})
    assert kafka_config.apply(argparse.Namespace(kafka_config=None))
    assert factory.process_settings()["ssl_cafile"] == "/ca.pem"
    assert factory._with_defaults({"ssl_cafile": "/mine.pem"})["ssl_cafile"] == "/mine.pem"
