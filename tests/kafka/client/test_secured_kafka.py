"""The formats and the CLI on a secured Kafka cluster: one real Apache Kafka broker with a
SASL_SSL listener (SCRAM-SHA-512 over TLS, a CA the tests make), ``StandardAuthorizer``
and ACLs, shared by the module. Jobs run as a user runs them
(``tests/user_scripts/secured_job.py``: a subprocess from a folder outside the repo, no
``PYSPARK_PYTHON``, the credentials in its environment); output is read back by a plain
``read_committed`` consumer with credentials of its own (``bob``).

Before the client factory the ``chkpt-kafka`` sink could not start on such a cluster (its
topic lookups built bare clients and timed out as an outage), a wrong password was an
outage after the bootstrap timeout, and a missing ACL was kafka-python's own error in
Spark's dump.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spark_chkpt.kafka.client.factory import kafka_consumer
from spark_chkpt.kafka.client.topics import create_topic
from spark_chkpt.testing.generator import produce_page_views
from spark_chkpt.testing.kafka_broker import EmbeddedKafka
from tests.helpers import chkpt_cli, user_env

pytestmark = pytest.mark.integration

SCRIPT = Path(__file__).resolve().parents[2] / "user_scripts" / "secured_job.py"
EVENTS = 200
# What alice, the job's principal, may do on the topics whose names start with "sec-"
# and on their control topics; the failure tests use other names.
SOURCE_ACLS = ("READ", "DESCRIBE")
SINK_ACLS = ("WRITE", "DESCRIBE", "DESCRIBE_CONFIGS")
CONTROL_ACLS = ("CREATE", "READ", "WRITE", "DESCRIBE", "DESCRIBE_CONFIGS")


@pytest.fixture(scope="module")
def kafka() -> Iterator[EmbeddedKafka]:
    with EmbeddedKafka(secured=True, users=("alice", "bob", "carol")) as broker:
        for operation in {*SOURCE_ACLS, *SINK_ACLS}:
            broker.grant("alice", operation, topic="sec-", prefixed=True)
        for operation in CONTROL_ACLS:
            broker.grant("alice", operation, topic="__chkpt.sec-", prefixed=True)
        for operation in ("WRITE", "DESCRIBE"):
            broker.grant("alice", operation, transactional_id="chkpt-", prefixed=True)
        broker.grant("bob", "READ", topic="sec-", prefixed=True)
        broker.grant("bob", "DESCRIBE", topic="sec-", prefixed=True)
        yield broker


def _topic(kafka: EmbeddedKafka, name: str, partitions: int = 2) -> str:
    create_topic(
        bootstrap_servers=kafka.bootstrap_servers,
        name=name,
        partitions=partitions,
        settings=kafka.client_settings("admin"),
    )
    return name


def _source(kafka: EmbeddedKafka, name: str) -> str:
    _topic(kafka, name)
    produce_page_views(
        bootstrap_servers=kafka.bootstrap_servers,
        topic=name,
        first=0,
        count=EVENTS,
        spread_over=2,
        settings=kafka.client_settings("admin"),
    )
    return name


def run_job(
    tmp_path: Path, options: dict[str, str], *args: str
) -> tuple[int, str, str, Path, float]:
    folder = tmp_path / "my-project"
    folder.mkdir(exist_ok=True)
    shutil.copy(SCRIPT, folder / "my_job.py")
    work = tmp_path / "work"
    began = time.monotonic()
    result = subprocess.run(
        [sys.executable, "my_job.py", str(work), *args],
        cwd=folder,
        env=user_env(KAFKA_OPTIONS=json.dumps(options)),
        capture_output=True,
        text=True,
        timeout=400,
    )
    took = time.monotonic() - began
    return result.returncode, result.stdout, result.stderr, work, took


def _first_error_line(err: str) -> str:
    return next(line for line in err.splitlines() if "Error" in line or "spark-chkpt:" in line)


def read_committed(kafka: EmbeddedKafka, topic: str) -> list[dict[str, Any]]:
    """Every committed page view in ``topic``, read as ``bob`` (barriers left out)."""
    from kafka import TopicPartition

    consumer = kafka_consumer(
        bootstrap_servers=kafka.bootstrap_servers,
        settings=kafka.client_settings("bob"),
        group_id=None,
        isolation_level="read_committed",
        enable_auto_commit=False,
    )
    try:
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic))]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)
        views: list[dict[str, Any]] = []
        deadline = time.monotonic() + 60
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, "read_committed consumer did not reach the end"
            for records in consumer.poll(timeout_ms=500).values():
                for record in records:
                    try:
                        view = json.loads(record.value)
                    except (ValueError, TypeError):
                        continue  # a barrier record
                    if isinstance(view, dict) and "event_id" in view:
                        views.append(view)
        return views
    finally:
        consumer.close()


def _secrets(kafka: EmbeddedKafka) -> list[str]:
    return list(kafka.users.values())


def assert_no_secret_in(kafka: EmbeddedKafka, folder: Path, *outputs: str) -> int:
    """No password of the cluster's users in any file under ``folder`` nor in
    ``outputs``; the number of files looked at."""
    files = [p for p in folder.rglob("*") if p.is_file()]
    for path in files:
        data = path.read_bytes()
        for secret in _secrets(kafka):
            assert secret.encode() not in data, f"a password is written in {path}"
    for text in outputs:
        for secret in _secrets(kafka):
            assert secret not in text
    return len(files)


@pytest.mark.parametrize("delivery", ["barriers", "exactly-once-transactions"])
def test_kafka_to_kafka_runs_on_sasl_ssl_and_writes_no_secret(
    tmp_path: Path, kafka: EmbeddedKafka, delivery: str
) -> None:
    source = _source(kafka, f"sec-in-{delivery[:8]}")
    out = _topic(kafka, f"sec-out-{delivery[:8]}")
    code, stdout, err, work, _ = run_job(
        tmp_path, kafka.options("alice"), source, "kafka", out, delivery
    )
    assert code == 0 and "done" in stdout, err[-4000:]
    views = read_committed(kafka, out)
    assert sorted(v["event_id"] for v in views) == list(range(EVENTS))
    # A plain consumer with its own credentials; the control topic was made by the sink.
    assert (work / "chk" / "commits").is_dir()
    assert (work / "events-log").exists() and any((work / "events-log").iterdir())
    assert assert_no_secret_in(kafka, work, stdout, err) > 10


def test_kafka_to_delta_runs_on_sasl_ssl(tmp_path: Path, kafka: EmbeddedKafka) -> None:
    from deltalake import DeltaTable

    source = _source(kafka, "sec-in-delta")
    code, stdout, err, work, _ = run_job(tmp_path, kafka.options("alice"), source, "delta")
    assert code == 0 and "done" in stdout, err[-4000:]
    rows = DeltaTable(str(work / "table")).to_pyarrow_table().column("json").to_pylist()
    assert sorted(json.loads(r)["event_id"] for r in rows) == list(range(EVENTS))
    assert_no_secret_in(kafka, work, stdout, err)


def test_status_reaches_the_cluster_with_kafka_config(tmp_path: Path, kafka: EmbeddedKafka) -> None:
    source = _source(kafka, "sec-in-cli")
    out = _topic(kafka, "sec-out-cli")
    code, _stdout, err, work, _ = run_job(
        tmp_path, kafka.options("alice"), source, "kafka", out, "barriers"
    )
    assert code == 0, err[-4000:]
    secret = kafka.users["alice"]
    config = tmp_path / "client.properties"
    config.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="alice" password="{secret}";\nssl.ca.location={kafka.ca_pem}\n'
    )
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    servers = kafka.bootstrap_servers
    by_option = chkpt_cli(
        outside,
        "status",
        str(work / "chk"),
        "--bootstrap-servers",
        servers,
        "--kafka-config",
        str(config),
        "--json",
    )
    assert by_option.returncode == 0, (by_option.stdout + by_option.stderr)[-4000:]
    status = json.loads(by_option.stdout)
    assert status, by_option.stdout
    by_environment = chkpt_cli(
        outside,
        "status",
        str(work / "chk"),
        "--bootstrap-servers",
        servers,
        "--json",
        SPARK_CHKPT_KAFKA_CONFIG=str(config),
    )
    assert by_environment.returncode == 0, by_environment.stderr[-4000:]
    assert json.loads(by_environment.stdout) == status
    for done in (by_option, by_environment):
        assert secret not in done.stdout + done.stderr


def test_a_wrong_password_is_named_at_once(tmp_path: Path, kafka: EmbeddedKafka) -> None:
    source = _source(kafka, "sec-in-wrongpw")
    options = kafka.options("alice", password="not-the-password")
    code, _stdout, err, _work, took = run_job(tmp_path, options, source, "delta")
    assert code != 0
    first = _first_error_line(err)
    assert first.startswith("spark-chkpt: KafkaAuthenticationError: Kafka broker"), err[-4000:]
    assert "SASL_SSL SCRAM-SHA-512 login as principal 'alice'" in first
    assert "kafka.sasl.jaas.config" in first and "not-the-password" not in err
    assert "bootstrap.timeout" not in err
    assert took < 90, took  # the bootstrap timeout is 30 s per client, several clients


def test_an_unknown_ca_is_named(tmp_path: Path, kafka: EmbeddedKafka) -> None:
    source = _source(kafka, "sec-in-ca")
    options = {**kafka.options("alice"), "kafka.ssl.cafile": "/etc/ssl/certs/ca-certificates.crt"}
    code, _stdout, err, _work, _ = run_job(tmp_path, options, source, "delta")
    assert code != 0
    first = _first_error_line(err)
    assert first.startswith("spark-chkpt: KafkaAuthenticationError: TLS handshake"), err[-4000:]
    assert "CERTIFICATE_VERIFY_FAILED" in first and "kafka.ssl.cafile" in first


def test_a_missing_write_acl_names_the_grant(tmp_path: Path, kafka: EmbeddedKafka) -> None:
    source = _source(kafka, "sec-in-nowrite")
    out = _topic(kafka, "deny-out-write")
    kafka.grant("alice", "DESCRIBE", topic=out)  # it may see the topic, not write it
    code, _stdout, err, _work, _ = run_job(
        tmp_path, kafka.options("alice"), source, "kafka", out, "barriers"
    )
    assert code != 0
    first = _first_error_line(err)
    assert first.startswith("spark-chkpt: KafkaAuthorizationError:"), err[-4000:]
    assert "--allow-principal User:alice --operation" in first


def test_a_missing_create_acl_on_the_control_topic_names_the_grant(
    tmp_path: Path, kafka: EmbeddedKafka
) -> None:
    source = _source(kafka, "sec-in-nocreate")
    out = _topic(kafka, "deny-out-create")
    for operation in SINK_ACLS:
        kafka.grant("alice", operation, topic=out)
    code, _stdout, err, _work, _ = run_job(
        tmp_path, kafka.options("alice"), source, "kafka", out, "barriers"
    )
    assert code != 0
    first = _first_error_line(err)
    assert first.startswith("spark-chkpt: KafkaAuthorizationError:"), err[-4000:]
    assert f"refused CREATE on topic '__chkpt.{out}' to principal 'alice'" in first
    assert f"--operation CREATE --topic '__chkpt.{out}'" in first


def test_a_topic_the_principal_cannot_see_is_not_said_to_be_missing(
    tmp_path: Path, kafka: EmbeddedKafka
) -> None:
    hidden = _topic(kafka, "deny-in-hidden")
    code, _stdout, err, _work, _ = run_job(tmp_path, kafka.options("alice"), hidden, "delta")
    assert code != 0
    first = _first_error_line(err)
    assert first.startswith("spark-chkpt: MissingTopicError:"), err[-4000:]
    assert "does not exist on" in first and "or is not visible to principal 'alice'" in first
    assert "failOnMissingTopic=false" not in err


def test_a_missing_read_acl_names_the_grant(tmp_path: Path, kafka: EmbeddedKafka) -> None:
    source = _source(kafka, "deny-in-noread")
    kafka.grant("alice", "DESCRIBE", topic=source)  # it may see the topic, not read it
    code, _stdout, err, _work, _ = run_job(tmp_path, kafka.options("alice"), source, "delta")
    assert code != 0
    first = _first_error_line(err)
    assert first.startswith("spark-chkpt: KafkaAuthorizationError:"), err[-4000:]
    assert f"refused READ on topic '{source}' to principal 'alice'" in first
    assert f"--allow-principal User:alice --operation READ --topic '{source}'" in err


def test_a_missing_transactional_id_acl_names_the_grant(
    tmp_path: Path, kafka: EmbeddedKafka
) -> None:
    """carol may read the source and write the topic and its control topic, but holds
    no ACL on the transactional ids."""
    source = _source(kafka, "deny-in-txn")
    out = _topic(kafka, "deny-out-txn")
    for operation in SOURCE_ACLS:
        kafka.grant("carol", operation, topic=source)
    for operation in SINK_ACLS:
        kafka.grant("carol", operation, topic=out)
    for operation in CONTROL_ACLS:
        kafka.grant("carol", operation, topic=f"__chkpt.{out}")
    code, _stdout, err, _work, _ = run_job(
        tmp_path, kafka.options("carol"), source, "kafka", out, "exactly-once-transactions"
    )
    assert code != 0
    first = _first_error_line(err)
    assert first.startswith("spark-chkpt: KafkaAuthorizationError:"), err[-4000:]
    assert "on transactional-id 'chkpt-' to principal 'carol'" in first
    assert "--operation WRITE --transactional-id 'chkpt-' --resource-pattern-type prefixed" in err
