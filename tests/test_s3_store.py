"""The project's S3-compatible server (moto, tests/conftest.py's ``s3_server``) and what
each client does on it: a plain S3 client's conditional PUT, delta-rs's commits, and the
project's own pyarrow.fs files, given only delta-rs's ``storage.*`` options. And the same
races through a proxy that strips ``If-None-Match`` (a server that ignores conditional
writes), where the assertions that hold on moto fail: they can."""

from __future__ import annotations

import concurrent.futures
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from spark_chkpt.fs import resolve
from spark_chkpt.testing.s3_proxy import ProxyMode, StoreProxy
from spark_chkpt.testing.s3_server import ACCESS_KEY, REGION, SECRET_KEY, S3Server
from tests.helpers import racing_appends

pytestmark = pytest.mark.integration

_AWS_ENV = (
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_PROFILE",
    "AWS_REQUEST_CHECKSUM_CALCULATION",
    "AWS_RESPONSE_CHECKSUM_VALIDATION",
)


@pytest.fixture
def no_aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing about the server in the environment, and the SDKs' default checksums:
    only the options say where it is."""
    for name in _AWS_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def _boto3(endpoint: str):  # type: ignore[no-untyped-def]
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3", endpoint_url=endpoint, aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY, region_name=REGION,
        config=Config(retries={"max_attempts": 1}, max_pool_connections=16),
    )  # fmt: skip


def _race(endpoint: str, bucket: str, *, races: int, writers: int = 8) -> list[int]:
    """``races`` times, ``writers`` conditional PUTs of one new key at once: the number
    of winners of each race."""
    from botocore.exceptions import ClientError

    client = _boto3(endpoint)

    def put(key: str, writer: int) -> bool:
        try:
            client.put_object(Bucket=bucket, Key=key, Body=b"%d" % writer, IfNoneMatch="*")
        except ClientError as e:
            assert e.response["Error"]["Code"] == "PreconditionFailed", e
            return False
        return True

    with concurrent.futures.ThreadPoolExecutor(writers) as pool:
        return [
            sum(pool.map(lambda w, k=f"race-{race}": put(k, w), range(writers)))
            for race in range(races)
        ]


def test_the_server_honours_if_none_match_on_put(
    s3_server: S3Server, s3_bucket: str, no_aws_env: None
) -> None:
    # The server the racing-writer tests run on: a second conditional PUT of a key is
    # refused (412), and of 8 racing for one new key, 20 times over, exactly one wins.
    from botocore.exceptions import ClientError

    client = _boto3(s3_server.endpoint)
    client.put_object(Bucket=s3_bucket, Key="once", Body=b"first", IfNoneMatch="*")
    with pytest.raises(ClientError, match="PreconditionFailed"):
        client.put_object(Bucket=s3_bucket, Key="once", Body=b"second", IfNoneMatch="*")
    assert client.get_object(Bucket=s3_bucket, Key="once")["Body"].read() == b"first"
    assert _race(s3_server.endpoint, s3_bucket, races=20) == [1] * 20
    assert s3_server.answers(method="PUT", status=412, under=f"/{s3_bucket}/race-") == 20 * 7


def test_a_server_that_ignores_if_none_match_lets_every_racer_win(
    s3_server: S3Server, s3_bucket: str, no_aws_env: None
) -> None:
    # The negative control of the test above: through the proxy that strips the header
    # (as s3proxy 2.6.0 ignored it), every PUT "wins" and the last one replaces the rest.
    with StoreProxy(upstream=s3_server.endpoint, mode=ProxyMode.IGNORE_IF_NONE_MATCH) as proxy:
        client = _boto3(proxy.endpoint)
        client.put_object(Bucket=s3_bucket, Key="once", Body=b"first", IfNoneMatch="*")
        client.put_object(Bucket=s3_bucket, Key="once", Body=b"second", IfNoneMatch="*")
        assert client.get_object(Bucket=s3_bucket, Key="once")["Body"].read() == b"second"
        assert _race(proxy.endpoint, s3_bucket, races=5) == [8] * 5
    # Every PUT went through stripped; one the SDK sent again (its read timed out on a
    # loaded machine: CI under load counted 43) is stripped again.
    assert proxy.counts["if-none-match stripped"] >= 2 + 5 * 8
    assert s3_server.answers(method="PUT", status=412, under=f"/{s3_bucket}/") == 0


def test_delta_rs_commits_on_the_server(
    s3_server: S3Server, s3_bucket: str, no_aws_env: None
) -> None:
    uri = f"s3://{s3_bucket}/table"
    options = s3_server.storage_options
    write_deltalake(uri, pa.table({"id": [0, 1]}), storage_options=options)
    write_deltalake(uri, pa.table({"id": [2]}), storage_options=options, mode="append")
    table = DeltaTable(uri, storage_options=options)
    assert table.version() == 1
    assert sorted(table.to_pyarrow_table().column("id").to_pylist()) == [0, 1, 2]


def test_racing_delta_rs_commits_conflict_and_lose_nothing(
    s3_server: S3Server, s3_bucket: str, no_aws_env: None
) -> None:
    # Of the commits racing for each version exactly one wins: the others got 412 on the
    # version's _delta_log file (conflicts happened) and retried with the next version;
    # every append that returned is in the table once, one version each.
    uri = f"s3://{s3_bucket}/race"
    committed = racing_appends(uri, s3_server.storage_options)
    found = DeltaTable(uri, storage_options=s3_server.storage_options)
    assert sorted(found.to_pyarrow_table().column("n").to_pylist()) == [-1, *committed]
    assert found.version() == len(committed)
    conflicts = s3_server.answers(method="PUT", status=412, under=f"/{s3_bucket}/race/_delta_log/")
    assert conflicts > 0


def test_racing_delta_rs_commits_lose_appends_where_if_none_match_is_ignored(
    s3_server: S3Server, s3_bucket: str, no_aws_env: None
) -> None:
    # The negative control: the same race through the proxy that strips If-None-Match.
    # Writers of one version each "commit" it, the last PUT replaces the others: appends
    # that returned are missing from the table, and no 412 was answered.
    uri = f"s3://{s3_bucket}/race"
    with StoreProxy(upstream=s3_server.endpoint, mode=ProxyMode.IGNORE_IF_NONE_MATCH) as proxy:
        options = {**s3_server.storage_options, "AWS_ENDPOINT_URL": proxy.endpoint}
        committed = racing_appends(uri, options)
        found = DeltaTable(uri, storage_options=options)
        rows = found.to_pyarrow_table().column("n").to_pylist()
    assert proxy.counts["if-none-match stripped"] > 48
    assert s3_server.answers(method="PUT", status=412, under=f"/{s3_bucket}/") == 0
    assert len(committed) == 48  # every writer was told its commit succeeded
    assert len(rows) - 1 < len(committed)  # ... and some of them are not in the table
    assert found.version() < len(committed)


@pytest.mark.parametrize("scheme", ["s3", "s3a"])
def test_project_files_follow_the_storage_options(
    s3_server: S3Server, s3_bucket: str, no_aws_env: None, scheme: str
) -> None:
    # chkpt-delta hands its storage.* options (delta-rs's keys, lower-cased) to pyarrow:
    # the staged files and snapshot records go to the endpoint they name, not AWS's.
    options = {k.lower(): v for k, v in s3_server.storage_options.items()}
    root = resolve(f"{scheme}://{s3_bucket}/chk", storage_options=options)
    assert root.path == f"{s3_bucket}/chk"
    record = root.child("chkpt", "snapshots", "0.json")
    record.write_atomic('{"batch": 0}')
    assert record.read_text() == '{"batch": 0}'
    big = root.child("staged", "part-0.bin")  # past one multipart part (5 MiB)
    with big.fs.open_output_stream(big.path) as out:
        out.write(b"x" * (6 * 1024 * 1024))
    assert big.read_bytes() == b"x" * (6 * 1024 * 1024)
    names = {i.base_name for i in root.list(recursive=True) if i.is_file}
    assert {"0.json", "part-0.bin"} <= names
    assert big.delete() and not big.exists()


def test_the_cli_runs_the_server_until_stopped(no_aws_env: None) -> None:
    # `spark-chkpt s3 --bucket B`: the endpoint on stdout once the bucket exists, the
    # settings for each client on stderr, and a clean stop on SIGTERM.
    import signal
    import subprocess
    import sys

    command = [str(Path(sys.executable).with_name("spark-chkpt")), "s3", "--bucket", "cli-bkt"]
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        endpoint = server.stdout.readline().strip()
        assert endpoint.startswith("http://127.0.0.1:")
        client = _boto3(endpoint)
        assert "cli-bkt" in [b["Name"] for b in client.list_buckets()["Buckets"]]
        client.put_object(Bucket="cli-bkt", Key="k", Body=b"v", IfNoneMatch="*")
        assert client.get_object(Bucket="cli-bkt", Key="k")["Body"].read() == b"v"
    finally:
        server.send_signal(signal.SIGTERM)
        _, err = server.communicate(timeout=30)
    assert server.returncode == 0, err[-2000:]
    assert "storage.AWS_ENDPOINT_URL=" + endpoint in err
    assert "moto" in err


_WRITE_THROUGH = """
import sys
import boto3
from spark_chkpt.fs import resolve
endpoint, bucket = sys.argv[1], sys.argv[2]
options = {"aws_endpoint_url": endpoint, "aws_access_key_id": "k", "aws_secret_access_key": "s",
           "aws_region": "us-east-1", "aws_allow_http": "true"}
for name, write in (
    ("pyarrow", lambda: resolve(f"s3a://{bucket}/chk", storage_options=options)
        .child("chkpt", "snapshots", "0.json").write_atomic("{}")),
    ("boto3", lambda: boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="k",
        aws_secret_access_key="s", region_name="us-east-1").put_object(
        Bucket=bucket, Key="b", Body=b"x")),
):
    try:
        write()
        print(name, "ok")
    except Exception as e:
        print(name, "failed:", str(e).splitlines()[0])
"""


def test_the_checksum_settings_get_past_a_store_that_refuses_checksums(
    s3_server: S3Server, s3_bucket: str, no_aws_env: None
) -> None:
    # What the explanation of the checksum wall tells a user to set is what gets pyarrow
    # and boto3 past a store that answers 400 to the newer SDKs' checksum headers (the
    # proxy's REJECT_CHECKSUMS): without the two settings both fail, with them both write.
    import os
    import subprocess
    import sys

    from spark_chkpt.runtime.report import explain

    def write(**env: str) -> list[str]:
        done = subprocess.run(
            [sys.executable, "-c", _WRITE_THROUGH, proxy.endpoint, s3_bucket],
            env={**os.environ, **env}, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout.splitlines()

    with StoreProxy(upstream=s3_server.endpoint, mode=ProxyMode.REJECT_CHECKSUMS) as proxy:
        refused = write()
        assert [line.split(" ")[:2] for line in refused] == [
            ["pyarrow", "failed:"],
            ["boto3", "failed:"],
        ], refused
        assert all("AWS_REQUEST_CHECKSUM_CALCULATION" in (explain(x) or "") for x in refused)
        assert proxy.counts["refused"] == 2
        settings = {
            "AWS_REQUEST_CHECKSUM_CALCULATION": "when_required",
            "AWS_RESPONSE_CHECKSUM_VALIDATION": "when_required",
        }
        assert write(**settings) == ["pyarrow ok", "boto3 ok"]
        assert proxy.counts["refused"] == 2


def test_the_own_append_commit_puts_if_absent_on_the_server(
    s3_server: S3Server, s3_bucket: str, no_aws_env: None
) -> None:
    # spark-chkpt's own commit (a row-tracked table delta-rs refuses) on S3: its put of
    # a _delta_log file lets one of 8 racers win (7 answered 412), and an append
    # through the sink's DeltaTarget lands with its row ids, read back by delta-rs.
    import json

    import pyarrow.parquet as pq

    from spark_chkpt.delta.log.commit_safety import put_if_absent
    from spark_chkpt.delta.staging import StagedFile
    from spark_chkpt.delta.table.target import DeltaTarget
    from tests.delta.log.test_log_commit import upgrade_text

    uri, options = f"s3://{s3_bucket}/rows", s3_server.storage_options
    write_deltalake(uri, pa.table({"id": [0]}), storage_options=options)
    log_dir = resolve(uri, storage_options=options).child("_delta_log")
    upgrade = upgrade_text(DeltaTable(uri, storage_options=options), hwm=9)

    def put(n: int) -> bool:
        return put_if_absent(
            log_dir.child(f"{1:020d}.json"), upgrade, uri=uri, storage_options=options
        )

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        won = list(pool.map(put, range(8)))
    assert won.count(True) == 1
    assert s3_server.answers(method="PUT", status=412, under=f"/{s3_bucket}/rows/_delta_log/") == 7
    target = DeltaTarget(uri=uri, storage_options=options)
    data = resolve(uri, storage_options=options).child("part-own.parquet")
    pq.write_table(pa.table({"id": pa.array([1, 2, 3], pa.int64())}), data.path, filesystem=data.fs)
    size = int(data.fs.get_file_info(data.path).size)
    target.commit(
        table=target.require(),
        schema=pa.schema([("id", pa.int64())]),
        partition_by=(),
        files=[StagedFile("part-own.parquet", size, {}, 1, 3, '{"numRecords":3}')],
        app_id="app",
        version=0,
        metadata={"chkpt.batchId": 0},
    )
    found = DeltaTable(uri, storage_options=options)
    assert found.version() == 2 and found.transaction_version("app") == 0
    assert sorted(found.to_pyarrow_table().column("id").to_pylist()) == [0, 1, 2, 3]
    added = [json.loads(line) for line in log_dir.child(f"{2:020d}.json").read_text().splitlines()]
    assert [a["add"]["baseRowId"] for a in added if "add" in a] == [10]
    marks = [a["domainMetadata"]["configuration"] for a in added if "domainMetadata" in a]
    assert marks == ['{"rowIdHighWaterMark":12}']


def test_a_rewind_of_an_own_commit_table_on_s3_is_the_own_restore(
    s3_server: S3Server, s3_bucket: str, no_aws_env: None
) -> None:
    # a savepoint rewind (DeltaRewind: plan, then apply) of a row-tracked table on S3,
    # which delta-rs refuses to restore: spark-chkpt's own RESTORE commit, put if absent
    # on the server, read back by delta-rs with the row-id high-water mark kept
    import json

    import pyarrow.parquet as pq

    from spark_chkpt.delta.log.commit import load_state
    from spark_chkpt.delta.log.commit_safety import put_if_absent
    from spark_chkpt.delta.rewind import DeltaRewind
    from spark_chkpt.delta.rollback import REWIND_KEY
    from spark_chkpt.delta.staging import StagedFile
    from spark_chkpt.delta.table.target import DeltaTarget
    from spark_chkpt.snapshot.rewind import RewindPoint
    from tests.delta.log.test_log_commit import ON, ROW_TRACKING, upgrade_text

    uri, options = f"s3://{s3_bucket}/rewound", s3_server.storage_options
    write_deltalake(uri, pa.table({"id": pa.array([0], pa.int64())}), storage_options=options)
    root = resolve(uri, storage_options=options)
    upgrade = upgrade_text(DeltaTable(uri, storage_options=options), hwm=9)
    assert put_if_absent(
        root.child("_delta_log", f"{1:020d}.json"), upgrade, uri=uri, storage_options=options
    )
    target = DeltaTarget(uri=uri, storage_options=options)
    for batch in range(3):  # versions 2, 3, 4: two rows each, row ids 10 .. 15
        name = f"part-{batch}.parquet"
        data = root.child(name)
        rows = pa.table({"id": pa.array([10 * batch + 1, 10 * batch + 2], pa.int64())})
        pq.write_table(rows, data.path, filesystem=data.fs)
        size = int(data.fs.get_file_info(data.path).size)
        target.commit(
            table=target.require(),
            schema=pa.schema([("id", pa.int64())]),
            partition_by=(),
            files=[StagedFile(name, size, {}, 1, 2, '{"numRecords":2}')],
            app_id="app",
            version=batch,
            metadata={"chkpt.batchId": batch},
        )
    point = RewindPoint(
        savepoint_id="sp-0", app_id="app", batch_id=0, source_offsets=[], target=uri, version=2
    )
    rewind = DeltaRewind(point=point, storage_options=options)
    generation = rewind.plan()
    rewound = rewind.apply(generation=generation, checkpoint_location="file:///unused")
    assert rewound.rolled_back_from == 4 and rewound.restore_version == 5
    found = DeltaTable(uri, storage_options=options)
    assert found.version() == 5 and found.transaction_version("app") == 0
    assert sorted(found.to_pyarrow_table().column("id").to_pylist()) == [0, 1, 2]
    text = root.child("_delta_log", f"{5:020d}.json").read_text()
    actions = [json.loads(line) for line in text.splitlines()]
    info = actions[0]["commitInfo"]
    assert info["operation"] == "RESTORE" and REWIND_KEY in info
    assert "inCommitTimestamp" in info
    assert len([a for a in actions if "remove" in a]) == 2
    assert not [a for a in actions if "add" in a]
    state = load_state(root, version=5, features=ROW_TRACKING, configuration=ON)
    assert state.high_water_mark() == 15  # row ids 10 .. 15 stay used: never lowered
    # the commit file was one PUT on the server (the own commit's, If-None-Match: *)
    commit = f"/{s3_bucket}/rewound/_delta_log/{5:020d}.json"
    assert s3_server.answers(method="PUT", status=200, under=commit) == 1
