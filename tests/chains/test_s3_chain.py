"""Savepoint create / rewind / fork, ``recover`` from the table, the dead-letter table and
``DeltaUpsert`` on object storage: tables on ``s3://``, checkpoints and savepoints on
``s3a://``, all on the project's S3 server (moto), in one user script
(``tests/user_scripts/s3_chain.py``) started from a folder outside the repo, ``spark-chkpt
recover`` run from it as from a shell. Every id in
once, every malformed record in its dead-letter table once, read back with delta-rs here
and with delta-spark in the script."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from deltalake import DeltaTable

from spark_chkpt.testing.s3_server import S3Server
from tests.helpers import user_env

pytestmark = pytest.mark.integration

SCRIPT = Path(__file__).resolve().parents[1] / "user_scripts" / "s3_chain.py"
PART = 30  # records per part, as the script produces them: every tenth malformed


def good(*parts: int) -> list[int]:
    return [i for p in parts for i in range(p * PART, (p + 1) * PART) if i % 10 != 3]


def bad(*parts: int) -> list[int]:  # one partition: a record's offset is its number
    return [i for p in parts for i in range(p * PART, (p + 1) * PART) if i % 10 == 3]


def test_savepoints_recovery_dead_letters_and_upserts_on_s3(
    tmp_path: Path,
    s3_server: S3Server,
    s3_bucket: str,
    bootstrap_servers: str,
    make_topic: Callable[..., str],
) -> None:
    topic = make_topic(partitions=1)
    folder = tmp_path / "my-project"
    folder.mkdir()
    shutil.copy(SCRIPT, folder / "my_job.py")
    config = {
        "servers": bootstrap_servers,
        "topic": topic,
        "bucket": s3_bucket,
        "storage": s3_server.storage_options,
        "hadoop": s3_server.hadoop_settings(),
    }
    # Where the server is, the script learns from its options alone; the SDKs keep
    # their default checksums (moto takes them).
    env = user_env(AWS_EC2_METADATA_DISABLED="true")
    for name in (
        "AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE",
        "AWS_REQUEST_CHECKSUM_CALCULATION", "AWS_RESPONSE_CHECKSUM_VALIDATION",
    ):  # fmt: skip
        env.pop(name, None)
    done = subprocess.run(
        [sys.executable, "my_job.py", json.dumps(config)],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    steps = [line[5:] for line in done.stdout.splitlines() if line.startswith("STEP ")]
    assert [s.partition(":")[0] for s in steps] == [
        "savepoint 1",  # part 0: two batches of 20 and 10 records
        "part 1",
        "rewind",
        "fork",
        "recover",
        "part 2",
        "upsert",
    ], done.stdout[-3000:]
    # The rewound query re-ran batches 2 and 3: the table's last snapshot is 3.
    assert f"checkpoint s3a://{s3_bucket}/chk-recovered written" in steps[4], steps[4]
    assert "resumes at batch 4" in steps[4], steps[4]

    options = s3_server.storage_options
    uri = f"s3://{s3_bucket}"

    def column(table: str, name: str) -> list[int]:
        found = DeltaTable(f"{uri}/{table}", storage_options=options).to_pyarrow_table()
        return sorted(found.column(name).to_pylist())

    upsert_rows = DeltaTable(f"{uri}/upsert", storage_options=options).to_pyarrow_table()
    expected = {
        "table": good(0, 1, 2),  # rewound past part 1 and recovered: each id once
        "dead": bad(0, 1, 2),
        "fork": good(1),  # the fork reads what came after the savepoint
        "fork_dead": bad(1),
        "upsert": sorted([k, n] for k, n in Counter(i % 4 for i in good(0, 1, 2)).items()),
    }
    assert {  # delta-rs
        "table": column("table", "id"),
        "dead": column("dead", "offset"),
        "fork": column("fork", "id"),
        "fork_dead": column("fork-dead", "offset"),
        "upsert": sorted([r["bucket"], r["count"]] for r in upsert_rows.to_pylist()),
    } == expected
    line = [x for x in done.stdout.splitlines() if x.startswith("RESULT=")][-1]
    assert json.loads(line[len("RESULT=") :]) == expected  # delta-spark
