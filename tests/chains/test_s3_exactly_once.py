"""Kafka → chkpt-delta on object storage: the table at ``s3://`` (delta-rs, options from
``storage.*``), Spark's checkpoint at ``s3a://`` (hadoop-aws), both on the project's S3
server (moto, tests/conftest.py), the real Kafka broker, and the real job as a driver
process killed with SIGKILL after the Delta commit of batch 1 (the kill chain that ran on
local disk in test_exactly_once.py, moved here). After the restart every event is in the
table once, read back with delta-rs and with delta-spark on ``s3a://``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from deltalake import DeltaTable

from spark_chkpt.conf import settings_file
from spark_chkpt.fs import resolve
from spark_chkpt.runtime.jars import s3a_jars
from spark_chkpt.session import load_properties
from spark_chkpt.testing.generator import PAGE_VIEW_SCHEMA_DDL, produce_page_views
from spark_chkpt.testing.s3_proxy import ProxyMode, StoreProxy
from spark_chkpt.testing.s3_server import S3Server
from tests.helpers import user_env

pytestmark = pytest.mark.fault

EVENTS = 3000
PER_BATCH = 1000  # 3 partitions, 3 batches: the kill strikes batch 1
_AWS_ENV = (
    "AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE",
    "AWS_REQUEST_CHECKSUM_CALCULATION", "AWS_RESPONSE_CHECKSUM_VALIDATION",
)  # fmt: skip

# delta-spark reads the table back through s3a:// in its own driver process: the test
# process's session has no hadoop-aws (its 650 MB would ride along in every test).
_READ_BACK = """
import json, sys
from spark_chkpt.session import build_session
conf = json.loads(sys.argv[2])
spark = build_session(app_name="s3-read-back", master="local[1]", connectors=True, s3a=True,
                      conf=conf)
spark.sparkContext.setLogLevel("ERROR")
rows = spark.read.format("delta").load(sys.argv[1]).select("event_id").collect()
print("IDS=" + json.dumps(sorted(r[0] for r in rows)))
spark.stop()
"""


@pytest.fixture
def topic(make_topic: Callable[..., str], bootstrap_servers: str) -> str:
    name = make_topic(partitions=3)
    produce_page_views(bootstrap_servers=bootstrap_servers, topic=name, first=0, count=EVENTS)
    return name


def spark_conf_file(tmp_path: Path, s3: S3Server, endpoint: str) -> Path:
    """The job's spark-defaults: the project's, plus hadoop-aws and the fs.s3a settings."""
    defaults = settings_file("spark-defaults.conf")
    settings = load_properties(defaults) if defaults is not None else {}
    settings.update(s3.hadoop_settings())
    settings["spark.hadoop.fs.s3a.endpoint"] = endpoint
    settings["spark.jars"] = s3a_jars()
    path = tmp_path / "spark-defaults.conf"
    path.write_text("".join(f"{k} {v}\n" for k, v in settings.items()))
    return path


def run_job(
    tmp_path: Path,
    s3: S3Server,
    bucket: str,
    servers: str,
    topic: str,
    *,
    kill_at: str | None = None,
    endpoint: str | None = None,
) -> subprocess.CompletedProcess:
    """The job on ``s3`` (or on the server at ``endpoint``, a proxy in front of it)."""
    endpoint = endpoint or s3.endpoint
    command = [
        sys.executable, "-m", "spark_chkpt.jobs.kafka_to_delta",
        "--spark-conf", str(spark_conf_file(tmp_path, s3, endpoint)),
        "--bootstrap-servers", servers,
        "--topic", topic,
        "--table", f"s3://{bucket}/table",
        "--checkpoint", f"s3a://{bucket}/chk",
        "--schema", PAGE_VIEW_SCHEMA_DDL,
        "--trigger", "availableNow",
        "--max-offsets-per-trigger", str(PER_BATCH),
        "--master", "local[2]",
        "--set", "sink.partitionBy=app",
        "--set", "sink.orphanRetention=0ms",
        "--set", "job.queryName=s3_fault_test",
    ]  # fmt: skip
    for key, value in {**s3.storage_options, "AWS_ENDPOINT_URL": endpoint}.items():
        command += ["--set", f"sink.storage.{key}={value}"]
    # Nothing about the server in the environment (and the SDKs' default checksums):
    # where the server is, the job learns from its options and fs.s3a settings alone.
    env = user_env(AWS_EC2_METADATA_DISABLED="true")
    for name in _AWS_ENV:
        env.pop(name, None)
    if kill_at:
        env["SPARK_CHKPT_KILL_AT"] = kill_at
    return subprocess.run(
        command,
        cwd=tmp_path,
        env=env,
        start_new_session=True,
        capture_output=True,
        text=True,
        timeout=420,
    )


def test_kill_after_delta_commit_on_s3(
    tmp_path: Path,
    s3_server: S3Server,
    s3_bucket: str,
    bootstrap_servers: str,
    topic: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in _AWS_ENV:
        monkeypatch.delenv(name, raising=False)
    options = s3_server.storage_options
    table_uri = f"s3://{s3_bucket}/table"
    chk = resolve(f"s3a://{s3_bucket}/chk", storage_options=options)

    killed = run_job(
        tmp_path, s3_server, s3_bucket, bootstrap_servers, topic, kill_at="after-delta-commit@1"
    )
    assert killed.returncode == -9, killed.stderr[-3000:]
    # Visible in Delta, but neither the snapshot store nor Spark's commit log has it.
    app_id = json.loads(chk.child("metadata").read_text())["id"]
    assert DeltaTable(table_uri, storage_options=options).transaction_version(app_id) == 1
    assert chk.child("chkpt", "snapshots", "0.json").exists()
    assert not chk.child("chkpt", "snapshots", "1.json").exists()
    assert not chk.child("commits", "1").exists()

    done = run_job(tmp_path, s3_server, s3_bucket, bootstrap_servers, topic)
    assert done.returncode == 0, done.stderr[-3000:]
    table = DeltaTable(table_uri, storage_options=options)
    ids = sorted(table.to_pyarrow_table().column("event_id").to_pylist())
    assert ids == list(range(EVENTS))  # every event once (delta-rs)
    assert table.transaction_version(app_id) == 2
    assert all(chk.child("chkpt", "snapshots", f"{b}.json").exists() for b in (0, 1, 2))

    read_back = subprocess.run(
        [sys.executable, "-c", _READ_BACK, f"s3a://{s3_bucket}/table",
         json.dumps({**s3_server.hadoop_settings(), "spark.ui.enabled": "false",
                     "spark.databricks.delta.snapshotPartitions": "1"})],
        env=user_env(AWS_EC2_METADATA_DISABLED="true"),
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert read_back.returncode == 0, read_back.stderr[-3000:]
    line = [x for x in read_back.stdout.splitlines() if x.startswith("IDS=")][-1]
    assert json.loads(line[len("IDS=") :]) == list(range(EVENTS))  # (delta-spark)


def test_a_store_that_refuses_checksums_is_named_on_the_first_line(
    tmp_path: Path, s3_server: S3Server, s3_bucket: str, bootstrap_servers: str, topic: str
) -> None:
    # The job against a store that answers 400 to the newer AWS SDKs' request checksums
    # (the proxy in front of moto), without the two settings: the failure's first line
    # says what refused it and names the settings, before Spark's report of it.
    with StoreProxy(upstream=s3_server.endpoint, mode=ProxyMode.REJECT_CHECKSUMS) as store:
        failed = run_job(
            tmp_path, s3_server, s3_bucket, bootstrap_servers, topic, endpoint=store.endpoint
        )
    assert failed.returncode != 0, failed.stdout[-2000:]
    assert store.counts["refused"] > 0, store.counts
    lines = failed.stderr.splitlines()
    first = next(line for line in lines if "Error" in line or "spark-chkpt:" in line)
    # (pyarrow's first read of the checkpoint fails as it did on s3proxy 2.6.0: "AWS Error
    # INTERNAL_FAILURE during GetObject operation: Failed to flush response stream")
    assert first.startswith("spark-chkpt: S3 checksums ("), failed.stderr[-4000:]
    for setting in (
        "AWS_REQUEST_CHECKSUM_CALCULATION=when_required",
        "AWS_RESPONSE_CHECKSUM_VALIDATION=when_required",
        "spark.hadoop.fs.s3a.checksum.generation=false",
        "storage.aws_checksum_algorithm",
    ):
        assert setting in first, first
