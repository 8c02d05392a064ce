"""The formats and the CLI on a secured Kafka cluster: one real Apache Kafka broker with a
SASL_SSL listener (SCRAM-SHA-512 over TLS, a CA the tests make), ``StandardAuthorizer``
and ACLs, shared by the module. Jobs run as a user runs them
(``tests/user_scripts/secured_job.py``: a subprocess from a folder outside the repo, no
``PYSPARK_PYTHON``, the credentials in its environment), several queries to one Spark
JVM: the chains in two runs (the first killed, with its whole process tree, inside a
transactions commit; the second restarts it and runs the others), the refusals in one
more; output is read back by a plain ``read_committed`` consumer with credentials of its
own (``bob``); the CLI (``status``, ``lineage``) runs from a folder outside the repo with
``--kafka-config``. A job moved from Spark's own ``kafka`` → ``delta`` formats
(``spark-chkpt migrate``) runs in the chains' two runs; the broker's second listener
(SASL_PLAINTEXT) serves the protocol-mismatch tests, and the sink's librdkafka producer
meets the refusals the kafka-python path meets.

Before the client factory the ``chkpt-kafka`` sink could not start on such a cluster (its
topic lookups built bare clients and timed out as an outage), a wrong password was an
outage after the bootstrap timeout, and a missing ACL was kafka-python's own error in
Spark's dump.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from spark_chkpt.kafka.client.factory import kafka_consumer
from spark_chkpt.kafka.client.topics import create_topic
from spark_chkpt.testing.generator import produce_page_views
from spark_chkpt.testing.kafka_broker import EmbeddedKafka
from spark_chkpt.testing.processes import kill_tree
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


@dataclass
class Run:
    """One run of the user's script: its exit code, output, and each job's outcome."""

    code: int
    stdout: str
    stderr: str
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)

    def section(self, job: str) -> str:
        """The part of stderr written while ``job`` ran."""
        text = self.stderr.split(f"=== begin {job}\n", 1)[1]
        return text.split(f"=== end {job}\n", 1)[0]

    def first_error_line(self, job: str) -> str:
        said = self.section(job)
        return next(line for line in said.splitlines() if "Error" in line or "spark-chkpt:" in line)


def _command(folder: Path, work: Path) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(SCRIPT, folder / "my_job.py")
    return [sys.executable, "my_job.py", str(work)]


def _parsed(code: int, stdout: str, stderr: str) -> Run:
    run = Run(code=code, stdout=stdout, stderr=stderr)
    for line in stdout.splitlines():
        if line.startswith("{"):
            outcome = json.loads(line)
            run.jobs[outcome["job"]] = outcome
    return run


def run_jobs(folder: Path, work: Path, jobs: list[dict[str, Any]]) -> Run:
    result = subprocess.run(
        _command(folder, work),
        cwd=folder,
        env=user_env(JOBS=json.dumps(jobs)),
        capture_output=True,
        text=True,
        timeout=500,
    )
    return _parsed(result.returncode, result.stdout, result.stderr)


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


def _client_properties(kafka: EmbeddedKafka, folder: Path) -> Path:
    config = folder / "client.properties"
    config.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="alice" password="{kafka.users["alice"]}";\n'
        f"ssl.ca.location={kafka.ca_pem}\n"
    )
    return config


# ----------------------------------------------------------------------------- the chains


@dataclass
class Chains:
    """The chains' two runs of the user's script in ``work``: ``killed`` (a Kafka →
    Kafka transactions job, killed with its process tree inside batch 1's commit,
    between its transactions) and ``restarted`` (that job again, then Kafka → Kafka
    with barriers into ``middle`` and Kafka → Delta from ``middle``). Before the killed
    job, ``killed`` runs a user's job on Spark's own ``kafka`` → ``delta`` formats, which
    ``migrated`` (``spark-chkpt migrate --to chkpt``, from a folder outside the repo)
    moves to the chkpt formats; ``restarted`` goes on with it after more input."""

    work: Path
    killed: Run
    restarted: Run
    source: str
    txn_out: str
    middle: str
    commits_when_killed: list[str]
    migrated: subprocess.CompletedProcess[str]
    cli_outputs: list[str] = field(default_factory=list)


@pytest.fixture(scope="module")
def chains(kafka: EmbeddedKafka, tmp_path_factory: pytest.TempPathFactory) -> Chains:
    base = tmp_path_factory.mktemp("secured-chains")
    folder, work = base / "my-project", base / "work"
    source = _source(kafka, "sec-in")
    txn_out, middle = _topic(kafka, "sec-out-txn"), _topic(kafka, "sec-mid")
    moved = _source(kafka, "sec-migrate")
    options = kafka.options("alice")
    # The barrier job gives its CA as a job moved from Spark's connector does: a PEM
    # truststore by the Java client's names.
    spark_style = {k: v for k, v in options.items() if k != "kafka.ssl.cafile"}
    spark_style.update(
        {"kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.location": str(kafka.ca_pem)}
    )
    txn = {
        "name": "txn",
        "source": source,
        "sink": "kafka",
        "out": txn_out,
        "delivery": "exactly-once-transactions",
        "options": options,
        "maxOffsetsPerTrigger": EVENTS // 4,
        # a read task per task slot: each batch commits two transactions, and the stall
        # below sits between them (a batch this small is one task by default)
        "sourceOptions": {"recordsPerTask": "1"},
    }
    # A job moved from Spark's connector: the same query and options (Spark's names,
    # the CA a PEM truststore), first on Spark's own formats, then on the chkpt ones.
    migrating = {"name": "moved", "source": moved, "sink": "delta", "options": spark_style}
    # Run 1: Spark's kafka -> delta to the topic's end; then the transactions job,
    # stalled in batch 1's commit after its first transaction committed, then killed
    # with its whole process tree (kill -9).
    stalled = base / "stalled"
    jars = os.environ.get("SPARK_CHKPT_JARS_DIR")
    env = user_env(
        JOBS=json.dumps([{**migrating, "formats": "spark"}, txn]),
        **({"SPARK_CHKPT_JARS_DIR": jars} if jars else {}),
        SPARK_CHKPT_STALL_AT="between-transactions@1",
        SPARK_CHKPT_STALL_SIGNAL=str(stalled),
        SPARK_CHKPT_STALL_SECONDS="600",
    )
    out_path, err_path = base / "killed.out", base / "killed.err"
    with open(out_path, "w") as out, open(err_path, "w") as err:
        job = subprocess.Popen(
            _command(folder, work),
            cwd=folder,
            env=env,
            stdout=out,
            stderr=err,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 300
        while not stalled.exists() and job.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert stalled.exists(), err_path.read_text()[-4000:]
        done = (work / "txn" / "chk" / "commits").iterdir()
        commits = sorted(p.name for p in done if p.name.isdigit())
    finally:
        if job.poll() is None:
            kill_tree(job.pid)
        job.wait(timeout=60)
    killed = _parsed(job.returncode, out_path.read_text(), err_path.read_text())
    # More input, then the move, as a user runs it: no Kafka client (the checkpoint and
    # the table say where the query is), so no credentials.
    produce_page_views(
        bootstrap_servers=kafka.bootstrap_servers,
        topic=moved,
        first=EVENTS,
        count=EVENTS,
        spread_over=2,
        settings=kafka.client_settings("admin"),
    )
    outside = base / "elsewhere"
    outside.mkdir()
    migrated = chkpt_cli(
        outside, "migrate", str(work / "moved" / "chk"), "--to", "chkpt",
        "--table", str(work / "moved" / "table"), "--watch", "1",
    )  # fmt: skip
    # Run 2: the moved job on the chkpt formats, the transactions job again from its
    # checkpoint, then the barrier chain.
    restarted = run_jobs(
        folder,
        work,
        [
            migrating,
            txn,
            {
                "name": "barriers",
                "source": source,
                "sink": "kafka",
                "out": middle,
                "delivery": "barriers",
                "options": spark_style,
            },
            {"name": "delta", "source": middle, "sink": "delta", "options": options},
        ],
    )
    return Chains(
        work=work,
        killed=killed,
        restarted=restarted,
        source=source,
        txn_out=txn_out,
        middle=middle,
        commits_when_killed=commits,
        migrated=migrated,
    )


def test_kafka_to_kafka_transactions_killed_mid_commit_and_restarted_exactly_once(
    kafka: EmbeddedKafka, chains: Chains
) -> None:
    assert chains.killed.code == -9, chains.killed.stderr[-4000:]
    assert "done" not in chains.killed.stdout
    # Killed inside batch 1's commit: batch 0 committed, batch 1 not.
    assert chains.commits_when_killed == ["0"], chains.commits_when_killed
    assert chains.restarted.code == 0 and "done" in chains.restarted.stdout, (
        chains.restarted.stderr[-4000:]
    )
    assert chains.restarted.jobs["txn"]["ok"]
    views = read_committed(kafka, chains.txn_out)
    assert sorted(v["event_id"] for v in views) == list(range(EVENTS))
    assert (chains.work / "txn" / "chk" / "commits").is_dir()


def test_kafka_to_kafka_with_barriers_runs_on_sasl_ssl(
    kafka: EmbeddedKafka, chains: Chains
) -> None:
    """Its options name the CA as Spark's connector does (a PEM truststore)."""
    assert chains.restarted.jobs["barriers"]["ok"], chains.restarted.section("barriers")[-4000:]
    views = read_committed(kafka, chains.middle)
    assert sorted(v["event_id"] for v in views) == list(range(EVENTS))
    # A plain consumer with its own credentials; the control topic was made by the sink.
    assert (chains.work / "barriers" / "chk" / "commits").is_dir()
    assert (chains.work / "events-log").exists() and any((chains.work / "events-log").iterdir())


def test_kafka_to_delta_runs_on_sasl_ssl(chains: Chains) -> None:
    from deltalake import DeltaTable

    assert chains.restarted.jobs["delta"]["ok"], chains.restarted.section("delta")[-4000:]
    table = DeltaTable(str(chains.work / "delta" / "table"))
    rows = table.to_pyarrow_table().column("json").to_pylist()
    assert sorted(json.loads(r)["event_id"] for r in rows) == list(range(EVENTS))


def test_migrate_from_sparks_connector_on_sasl_ssl_every_record_once(
    kafka: EmbeddedKafka, chains: Chains
) -> None:
    """A job on Spark's own ``kafka`` → ``delta`` with Spark's option names for SASL_SSL
    (the CA a PEM truststore) reads the topic to its end; ``spark-chkpt migrate --to
    chkpt`` from a folder outside the repo; the same job on ``chkpt-kafka`` →
    ``chkpt-delta`` goes on after more input: each of the topic's records once in the
    table, read back by delta-rs and by a plain consumer's count."""
    from deltalake import DeltaTable

    native = chains.killed.jobs.get("moved")
    assert native and native["ok"], chains.killed.section("moved")[-4000:]
    said = chains.migrated.stdout + chains.migrated.stderr
    assert chains.migrated.returncode == 0, said[-4000:]
    assert "migrated:" in said, said[-4000:]
    assert chains.restarted.jobs["moved"]["ok"], chains.restarted.section("moved")[-4000:]
    rows = DeltaTable(str(chains.work / "moved" / "table")).to_pyarrow_table()
    ids = sorted(json.loads(r)["event_id"] for r in rows.column("json").to_pylist())
    assert ids == list(range(2 * EVENTS)), (len(ids), len(set(ids)))
    assert len(read_committed(kafka, "sec-migrate")) == 2 * EVENTS
    chains.cli_outputs.append(said)
    assert kafka.users["alice"] not in said


def test_status_reaches_the_cluster_with_kafka_config(
    tmp_path: Path, kafka: EmbeddedKafka, chains: Chains
) -> None:
    assert chains.restarted.jobs["barriers"]["ok"]
    secret = kafka.users["alice"]
    config = _client_properties(kafka, tmp_path)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    servers = kafka.bootstrap_servers
    chk = str(chains.work / "barriers" / "chk")
    by_option = chkpt_cli(
        outside,
        "status",
        chk,
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
        chk,
        "--bootstrap-servers",
        servers,
        "--json",
        SPARK_CHKPT_KAFKA_CONFIG=str(config),
    )
    assert by_environment.returncode == 0, by_environment.stderr[-4000:]
    assert json.loads(by_environment.stdout) == status
    for done in (by_option, by_environment):
        chains.cli_outputs.append(done.stdout + done.stderr)
        assert secret not in done.stdout + done.stderr


def test_lineage_follows_the_secured_control_topic_with_kafka_config(
    tmp_path: Path, kafka: EmbeddedKafka, chains: Chains
) -> None:
    """``lineage`` from a folder outside the repo walks from the Delta table's version
    through the middle topic's barriers to the upstream job's snapshots: it reads the
    control topic ``__chkpt.<middle>`` on the secured cluster with --kafka-config."""
    assert chains.restarted.jobs["delta"]["ok"]
    config = _client_properties(kafka, tmp_path)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    table = str(chains.work / "delta" / "table")
    servers = kafka.bootstrap_servers
    text = chkpt_cli(
        outside,
        "lineage",
        table,
        "--version",
        "0",
        "--bootstrap-servers",
        servers,
        "--kafka-config",
        str(config),
    )
    assert text.returncode == 0, (text.stdout + text.stderr)[-4000:]
    assert "stage 0 (the table's writer)" in text.stdout and "stage 1" in text.stdout
    assert f"read {chains.middle} (aligned)" in text.stdout
    as_json = chkpt_cli(
        outside,
        "lineage",
        table,
        "--version",
        "0",
        "--bootstrap-servers",
        servers,
        "--json",
        SPARK_CHKPT_KAFKA_CONFIG=str(config),
    )
    assert as_json.returncode == 0, as_json.stderr[-4000:]
    stages = [n["stage"] for n in json.loads(as_json.stdout)["snapshots"]]
    assert 0 in stages and 1 in stages, stages
    # Without the credentials the walk cannot read the control topic: the protocol
    # mismatch is named, not an outage.
    bare = chkpt_cli(outside, "lineage", table, "--version", "0", "--bootstrap-servers", servers)
    said = bare.stdout + bare.stderr
    assert "KafkaSecurityProtocolError" in said and "kafka.security.protocol" in said, said
    for done in (text, as_json, bare):
        chains.cli_outputs.append(done.stdout + done.stderr)
        assert kafka.users["alice"] not in done.stdout + done.stderr


def test_savepoint_rewind_of_the_kafka_sink_with_kafka_config(
    tmp_path: Path, kafka: EmbeddedKafka, chains: Chains
) -> None:
    """A savepoint of the transactions job at its snapshot 0, restored with ``--mode
    rewind`` from a folder outside the repo: the restore revokes the later snapshots in
    the secured control topic ``__chkpt.<out>`` with --kafka-config's credentials. The
    savepoint and the restored checkpoint are under the chains' folder, which the secret
    test greps."""
    assert chains.restarted.jobs["txn"]["ok"]
    config = _client_properties(kafka, tmp_path)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    created = chkpt_cli(
        outside, "savepoint", "create", str(chains.work / "txn" / "chk"),
        "--dir", str(chains.work / "savepoints"), "--batch", "0",
    )  # fmt: skip
    assert created.returncode == 0, (created.stdout + created.stderr)[-4000:]
    location = created.stdout.strip().splitlines()[-1]
    restored = chkpt_cli(
        outside, "savepoint", "restore", location, "--checkpoint",
        str(chains.work / "restored"), "--mode", "rewind", "--bootstrap-servers",
        kafka.bootstrap_servers, "--kafka-config", str(config),
    )  # fmt: skip
    assert restored.returncode == 0, (restored.stdout + restored.stderr)[-4000:]
    assert f"topic {chains.txn_out}: snapshots 1, " in restored.stdout, restored.stdout
    assert "after 0 revoked at generation 1" in restored.stdout, restored.stdout
    for done in (created, restored):
        chains.cli_outputs.append(done.stdout + done.stderr)
        assert kafka.users["alice"] not in done.stdout + done.stderr


def test_pipeline_savepoint_of_the_secured_chain_with_kafka_config(
    tmp_path: Path, kafka: EmbeddedKafka, chains: Chains
) -> None:
    """``savepoint create --pipeline`` of the barrier job and the Delta job reading its
    topic, from a folder outside the repo: the cut is found in the secured control topic
    with --kafka-config's credentials (without them: refused naming the setting, nothing
    written). The downstream's batch ends exactly at the join's offsets."""
    assert chains.restarted.jobs["barriers"]["ok"] and chains.restarted.jobs["delta"]["ok"]
    config = _client_properties(kafka, tmp_path)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    saved = chains.work / "pipeline-savepoints"
    # A job is named by its checkpoint's folder: copies named apart (both are "chk").
    jobs = chains.work / "pipeline-jobs"
    for name in ("barriers", "delta"):
        shutil.copytree(chains.work / name / "chk", jobs / name)
    create = [
        "savepoint", "create", "--pipeline", "secured",
        "--job", str(jobs / "barriers"), "--job", str(jobs / "delta"),
        "--dir", str(saved), "--bootstrap-servers", kafka.bootstrap_servers,
    ]  # fmt: skip
    refused = chkpt_cli(outside, *create)
    assert refused.returncode != 0, refused.stdout
    assert "kafka.security.protocol" in refused.stderr, refused.stderr[-3000:]
    assert chkpt_cli(outside, "savepoint", "list", str(saved)).returncode != 0
    created = chkpt_cli(outside, *create, "--kafka-config", str(config))
    assert created.returncode == 0, (created.stdout + created.stderr)[-4000:]
    location = created.stdout.strip().splitlines()[-1]
    manifest = json.loads((Path(location.removeprefix("file://")) / "pipeline.json").read_text())
    (join,) = manifest["joins"]
    batch = jobs / "delta" / "offsets" / str(join["downstream_batch"])
    assert json.loads(batch.read_text().splitlines()[2])[chains.middle] == join["offsets"]
    for done in (refused, created):
        chains.cli_outputs.append(done.stdout + done.stderr)
        assert kafka.users["alice"] not in done.stdout + done.stderr


# --------------------------------------------------------------------------- the refusals


@dataclass
class Refusals:
    """One run of the user's script whose jobs are each refused by the cluster."""

    work: Path
    run: Run
    topics: dict[str, str]


@pytest.fixture(scope="module")
def refusals(kafka: EmbeddedKafka, tmp_path_factory: pytest.TempPathFactory) -> Refusals:
    base = tmp_path_factory.mktemp("secured-refusals")
    source = _source(kafka, "sec-in-refused")
    alice = kafka.options("alice")
    topics: dict[str, str] = {}
    # alice may see this topic, not write it.
    topics["nowrite"] = _topic(kafka, "deny-out-write")
    kafka.grant("alice", "DESCRIBE", topic=topics["nowrite"])
    # alice may write this topic, not create its control topic.
    topics["nocreate"] = _topic(kafka, "deny-out-create")
    for operation in SINK_ACLS:
        kafka.grant("alice", operation, topic=topics["nocreate"])
    # alice holds no ACL on this one.
    topics["hidden"] = _topic(kafka, "deny-in-hidden")
    # alice may see this topic, not read it.
    topics["noread"] = _source(kafka, "deny-in-noread")
    kafka.grant("alice", "DESCRIBE", topic=topics["noread"])
    # carol may read the source and write the topic and its control topic, but holds no
    # ACL on the transactional ids.
    topics["notxn-in"] = _source(kafka, "deny-in-txn")
    topics["notxn"] = _topic(kafka, "deny-out-txn")
    for operation in SOURCE_ACLS:
        kafka.grant("carol", operation, topic=topics["notxn-in"])
    for operation in SINK_ACLS:
        kafka.grant("carol", operation, topic=topics["notxn"])
    for operation in CONTROL_ACLS:
        kafka.grant("carol", operation, topic=f"__chkpt.{topics['notxn']}")

    def barriers(name: str) -> dict[str, Any]:
        return {
            "name": name,
            "source": source,
            "sink": "kafka",
            "out": topics[name],
            "delivery": "barriers",
            "options": alice,
        }

    jobs = [
        # First, before any client of the process has logged in as alice.
        {
            "name": "wrongpw",
            "source": source,
            "sink": "delta",
            "options": kafka.options("alice", password="not-the-password"),
        },
        {
            "name": "unknownca",
            "source": source,
            "sink": "delta",
            "options": {**alice, "kafka.ssl.cafile": "/etc/ssl/certs/ca-certificates.crt"},
        },
        {
            "name": "plaintext",
            "source": source,
            "sink": "delta",
            "options": {"kafka.bootstrap.servers": kafka.bootstrap_servers},
        },
        barriers("nowrite"),
        barriers("nocreate"),
        {"name": "hidden", "source": topics["hidden"], "sink": "delta", "options": alice},
        {"name": "noread", "source": topics["noread"], "sink": "delta", "options": alice},
        {
            "name": "notxn",
            "source": topics["notxn-in"],
            "sink": "kafka",
            "out": topics["notxn"],
            "delivery": "exactly-once-transactions",
            "options": kafka.options("carol"),
        },
    ]
    run = run_jobs(base / "my-project", base / "work", jobs)
    return Refusals(work=base / "work", run=run, topics=topics)


def _wrong_password(first: str, section: str, took: float, topics: dict[str, str]) -> None:
    assert first.startswith("spark-chkpt: KafkaAuthenticationError: Kafka broker"), section
    assert "SASL_SSL SCRAM-SHA-512 login as principal 'alice'" in first
    assert "kafka.sasl.jaas.config" in first and "not-the-password" not in section
    assert "bootstrap.timeout" not in section
    assert took < 90, took  # the bootstrap timeout is 30 s per client, several clients


def _unknown_ca(first: str, section: str, took: float, topics: dict[str, str]) -> None:
    assert first.startswith("spark-chkpt: KafkaAuthenticationError: TLS handshake"), section
    assert "CERTIFICATE_VERIFY_FAILED" in first and "kafka.ssl.cafile" in first


def _plaintext(first: str, section: str, took: float, topics: dict[str, str]) -> None:
    assert first.startswith("spark-chkpt: KafkaSecurityProtocolError: Kafka broker"), section
    assert "speaks TLS, but the client's kafka.security.protocol is PLAINTEXT" in first
    assert "bootstrap.timeout" not in section and "BrokerUnavailableError" not in section
    assert took < 60, took


def _missing_write(first: str, section: str, took: float, topics: dict[str, str]) -> None:
    assert first.startswith("spark-chkpt: KafkaAuthorizationError:"), section
    assert "--allow-principal User:alice --operation" in first


def _missing_create(first: str, section: str, took: float, topics: dict[str, str]) -> None:
    out = topics["nocreate"]
    assert first.startswith("spark-chkpt: KafkaAuthorizationError:"), section
    assert f"refused CREATE on topic '__chkpt.{out}' to principal 'alice'" in first
    assert f"--operation CREATE --topic '__chkpt.{out}'" in first


def _invisible(first: str, section: str, took: float, topics: dict[str, str]) -> None:
    assert first.startswith("spark-chkpt: MissingTopicError:"), section
    assert "does not exist on" in first and "or is not visible to principal 'alice'" in first
    assert "failOnMissingTopic=false" not in section


def _missing_read(first: str, section: str, took: float, topics: dict[str, str]) -> None:
    source = topics["noread"]
    assert first.startswith("spark-chkpt: KafkaAuthorizationError:"), section
    assert f"refused READ on topic '{source}' to principal 'alice'" in first
    assert f"--allow-principal User:alice --operation READ --topic '{source}'" in section


def _missing_transactional_id(
    first: str, section: str, took: float, topics: dict[str, str]
) -> None:
    assert first.startswith("spark-chkpt: KafkaAuthorizationError:"), section
    assert "on transactional-id 'chkpt-' to principal 'carol'" in first
    assert "--operation WRITE --transactional-id 'chkpt-' --resource-pattern-type prefixed" in (
        section
    )


Check = Callable[[str, str, float, dict[str, str]], None]


@pytest.mark.parametrize(
    ("job", "check"),
    [
        ("wrongpw", _wrong_password),
        ("unknownca", _unknown_ca),
        ("plaintext", _plaintext),
        ("nowrite", _missing_write),
        ("nocreate", _missing_create),
        ("hidden", _invisible),
        ("noread", _missing_read),
        ("notxn", _missing_transactional_id),
    ],
    ids=[
        "wrong-password",
        "unknown-ca",
        "plaintext-client-at-tls-port",
        "missing-write-acl",
        "missing-create-acl-on-control-topic",
        "invisible-topic",
        "missing-read-acl",
        "missing-transactional-id-acl",
    ],
)
def test_a_refusal_is_named_on_the_first_line_a_user_sees(
    refusals: Refusals, job: str, check: Check
) -> None:
    run = refusals.run
    assert run.code != 0, run.stdout
    assert job in run.jobs and not run.jobs[job]["ok"], (run.stdout, run.stderr[-4000:])
    section = run.section(job)
    check(run.first_error_line(job), section, run.jobs[job]["took"], refusals.topics)


def test_a_plaintext_client_at_the_tls_port_is_a_protocol_mismatch_not_an_outage(
    kafka: EmbeddedKafka,
) -> None:
    """A client left at kafka.security.protocol=PLAINTEXT (the default) against the
    SASL_SSL listener: the broker drops its connection, which kafka-python reads as a
    broker that is down. Before: ``BrokerUnavailableError`` after the bootstrap timeout,
    advising to raise it."""
    from spark_chkpt.errors import ChkptError
    from spark_chkpt.kafka.client.topics import partition_count
    from spark_chkpt.runtime.report import one_line

    began = time.monotonic()
    with pytest.raises(ChkptError) as raised:
        partition_count(
            bootstrap_servers=kafka.bootstrap_servers,
            name="sec-in",
            settings={"bootstrap_timeout_ms": 20_000},
        )
    took = time.monotonic() - began
    said = one_line(raised.value)
    assert said.startswith(
        f"spark-chkpt: KafkaSecurityProtocolError: Kafka broker {kafka.bootstrap_servers} "
        "speaks TLS, but the client's kafka.security.protocol is PLAINTEXT"
    ), said
    assert "set kafka.security.protocol to SASL_SSL" in said
    assert "bootstrap.timeout" not in said and "BrokerUnavailableError" not in said
    assert took < 15, took  # at the first failed connection, not after the timeout


def test_a_plaintext_client_at_the_sasl_port_is_a_protocol_mismatch_not_an_outage(
    kafka: EmbeddedKafka,
) -> None:
    """A client that forgot kafka.security.protocol at the broker's SASL_PLAINTEXT
    listener: the broker answers its ApiVersions, then closes the connection on its
    metadata request. Before: ``BrokerUnavailableError`` after the bootstrap timeout."""
    from spark_chkpt.errors import ChkptError
    from spark_chkpt.kafka.client.topics import partition_count
    from spark_chkpt.runtime.report import one_line

    servers = f"{kafka.host}:{kafka.sasl_plaintext_port}"
    began = time.monotonic()
    with pytest.raises(ChkptError) as raised:
        partition_count(
            bootstrap_servers=servers, name="sec-in", settings={"bootstrap_timeout_ms": 20_000}
        )
    took = time.monotonic() - began
    said = one_line(raised.value)
    assert said.startswith(
        f"spark-chkpt: KafkaSecurityProtocolError: Kafka broker {servers} accepted the "
        "connection and closed it on the client's first request: its listener likely "
        "requires SASL, but the client's kafka.security.protocol is PLAINTEXT"
    ), said
    assert "bootstrap.timeout" not in said and "BrokerUnavailableError" not in said
    assert took < 15, took


@pytest.mark.parametrize("where", ["sasl-plaintext-listener", "plaintext-broker"])
def test_a_tls_client_at_a_listener_without_tls_is_a_protocol_mismatch(
    kafka: EmbeddedKafka, request: pytest.FixtureRequest, where: str
) -> None:
    """alice's SASL_SSL settings at the secured broker's SASL_PLAINTEXT listener, and at
    the tests' plaintext broker: the listener drops the TLS handshake (it reads the
    ClientHello as a request far over its size limit). Before: a TLS handshake failure
    naming the CA file (the SASL listener) or an outage after the bootstrap timeout."""
    from spark_chkpt.errors import ChkptError
    from spark_chkpt.kafka.client.topics import partition_count
    from spark_chkpt.runtime.report import one_line

    if where == "plaintext-broker":
        servers = request.getfixturevalue("bootstrap_servers")
        expected = f"Kafka broker {servers} answers plaintext Kafka requests"
    else:
        servers = f"{kafka.host}:{kafka.sasl_plaintext_port}"
        expected = f"Kafka broker {servers} does not speak TLS"
    began = time.monotonic()
    with pytest.raises(ChkptError) as raised:
        partition_count(
            bootstrap_servers=servers,
            name="sec-in",
            settings={**kafka.client_settings("alice"), "bootstrap_timeout_ms": 20_000},
        )
    took = time.monotonic() - began
    said = one_line(raised.value)
    assert said.startswith(f"spark-chkpt: KafkaSecurityProtocolError: {expected}"), said
    assert "kafka.security.protocol is SASL_SSL" in said, said
    assert "bootstrap.timeout" not in said and kafka.users["alice"] not in said
    assert took < 15, took


@pytest.mark.parametrize(
    "case", ["wrong-password", "unknown-ca", "missing-write-acl", "plaintext-at-tls", "tls-at-sasl"]
)
def test_the_librdkafka_producer_names_a_refusal_as_the_kafka_python_path_does(
    kafka: EmbeddedKafka, tmp_path: Path, case: str
) -> None:
    """The sink's write task on librdkafka (kafka.client=confluent, the sink's default),
    its settings translated by the factory's path, meets each refusal the kafka-python
    tests meet: the same named error, at once. Before: wrong password and missing ACL
    were ``chkpt-kafka sink: producing failed: ...`` (librdkafka's own words), a
    PLAINTEXT client at the TLS port an outage after the delivery timeout."""
    import pyarrow as pa

    from spark_chkpt.errors import ChkptError
    from spark_chkpt.kafka.sink.confluent_writer import ConfluentProducer
    from spark_chkpt.kafka.sink.options import KafkaSinkConfig
    from spark_chkpt.runtime.report import one_line

    # alice may write "sec-*"; of "deny-*" she may only see this one.
    topic = _topic(kafka, f"{'deny' if case == 'missing-write-acl' else 'sec'}-rdk-{case}", 1)
    if case == "missing-write-acl":
        kafka.grant("alice", "DESCRIBE", topic=topic)
    options = kafka.options("alice")
    if case == "wrong-password":
        options = kafka.options("alice", password="not-the-password")
    elif case == "unknown-ca":
        options["kafka.ssl.cafile"] = "/etc/ssl/certs/ca-certificates.crt"
    elif case == "plaintext-at-tls":
        options = {"kafka.bootstrap.servers": kafka.bootstrap_servers}
    elif case == "tls-at-sasl":
        options["kafka.bootstrap.servers"] = f"{kafka.host}:{kafka.sasl_plaintext_port}"
    began = time.monotonic()
    with pytest.raises(ChkptError) as raised:  # a TLS refusal: at the options' check
        config = KafkaSinkConfig.from_options(
            {
                **options,
                "topic": topic,
                "checkpointLocation": str(tmp_path / "chk"),
                "kafka.delivery.timeout.ms": "30000",
            }
        )
        producer = ConfluentProducer(config=config, batch_id=0, task=0)
        try:
            producer.send(pa.record_batch({"value": pa.array([b"v"])}))
            producer.finish()
        finally:
            producer.close()
    took = time.monotonic() - began
    said = one_line(raised.value)
    expected = {
        "wrong-password": "KafkaAuthenticationError: Kafka broker",
        "unknown-ca": "KafkaAuthenticationError: TLS handshake",
        "missing-write-acl": "KafkaAuthorizationError: Kafka broker",
        "plaintext-at-tls": "KafkaSecurityProtocolError: Kafka broker",
        "tls-at-sasl": "KafkaSecurityProtocolError: Kafka broker",
    }[case]
    assert said.startswith(f"spark-chkpt: {expected}"), said
    assert took < 20, took
    assert "not-the-password" not in said and kafka.users["alice"] not in said
    if case == "missing-write-acl":
        assert f"refused WRITE on topic '{topic}' to principal 'alice'" in said, said
    if case == "wrong-password":
        assert "login as principal 'alice'" in said and "kafka.sasl.jaas.config" in said, said


# ----------------------------------------------------------------------------- the secrets


def test_no_secret_in_any_file_the_runs_wrote(
    kafka: EmbeddedKafka, chains: Chains, refusals: Refusals
) -> None:
    """Checkpoints, the table's log, the control topics' snapshots, the logs at INFO,
    Spark's event logs and every output of the runs and of the CLI: no password."""
    looked_at = assert_no_secret_in(
        kafka,
        chains.work,
        chains.killed.stdout,
        chains.killed.stderr,
        chains.restarted.stdout,
        chains.restarted.stderr,
        *chains.cli_outputs,
    )
    assert (chains.work / "delta" / "table" / "_delta_log").is_dir()
    assert len(list((chains.work / "logs").glob("job-*.log"))) == 2  # both runs at INFO
    assert looked_at > 20, looked_at
    assert assert_no_secret_in(kafka, refusals.work, refusals.run.stdout, refusals.run.stderr)
