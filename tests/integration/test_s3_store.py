"""The project's S3-compatible servers (s3proxy, tests/conftest.py's ``s3_server``; and
SeaweedFS, ``weed_s3``, for racing writers) and what each client does on them: a plain
S3 client's conditional PUT, delta-rs's commits,
and the project's own pyarrow.fs files, given only delta-rs's ``storage.*`` options."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from spark_chkpt.fs import resolve
from spark_chkpt.testing.s3_server import ACCESS_KEY, REGION, SECRET_KEY, S3Proxy
from spark_chkpt.testing.seaweedfs import SeaweedS3

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
)


@pytest.fixture
def no_aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing about the server in the environment: only the options say where it is
    (the SDK's checksum switches stay: s3proxy needs them, they name no endpoint)."""
    for name in _AWS_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_REQUEST_CHECKSUM_CALCULATION", "when_required")
    monkeypatch.setenv("AWS_RESPONSE_CHECKSUM_VALIDATION", "when_required")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def test_s3proxy_ignores_if_none_match_on_put(
    s3_server: S3Proxy, s3_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The answer docs/how-to/cluster.md gives: s3proxy 2.6.0 does NOT honour S3's
    # conditional write (If-None-Match: * on PUT): a second put of one key succeeds and
    # replaces the first, where S3 answers 412 PreconditionFailed. So the racing writers
    # run on SeaweedFS (test_s3_other_writers.py, and the test below). A newer s3proxy
    # that honours it fails this test: then update the docs.
    import boto3

    for key, value in s3_server.env.items():
        monkeypatch.setenv(key, value)
    client = boto3.client("s3", endpoint_url=s3_server.endpoint)
    client.put_object(Bucket=s3_bucket, Key="once", Body=b"first", IfNoneMatch="*")
    second = client.put_object(Bucket=s3_bucket, Key="once", Body=b"second", IfNoneMatch="*")
    assert second["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert client.get_object(Bucket=s3_bucket, Key="once")["Body"].read() == b"second"


def test_seaweedfs_honours_if_none_match_on_put(
    weed_s3: SeaweedS3, weed_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The server the racing-writer tests run on: a second conditional PUT of a key is
    # refused (412), and of 8 racing for one new key, 5 times over, exactly one wins.
    import concurrent.futures

    import boto3
    from botocore.exceptions import ClientError

    client = boto3.client(
        "s3", endpoint_url=weed_s3.endpoint, aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY, region_name=REGION,
    )  # fmt: skip
    client.put_object(Bucket=weed_bucket, Key="once", Body=b"first", IfNoneMatch="*")
    with pytest.raises(ClientError, match="PreconditionFailed"):
        client.put_object(Bucket=weed_bucket, Key="once", Body=b"second", IfNoneMatch="*")
    assert client.get_object(Bucket=weed_bucket, Key="once")["Body"].read() == b"first"

    def put(key: str, writer: int) -> bool:
        try:
            client.put_object(Bucket=weed_bucket, Key=key, Body=b"%d" % writer, IfNoneMatch="*")
        except ClientError as e:
            assert e.response["Error"]["Code"] in (
                "PreconditionFailed",
                "ConditionalRequestConflict",
            )
            return False
        return True

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        for race in range(5):
            assert sum(pool.map(lambda w, k=f"race-{race}": put(k, w), range(8))) == 1


def test_delta_rs_commits_on_s3proxy(s3_server: S3Proxy, s3_bucket: str, no_aws_env: None) -> None:
    uri = f"s3://{s3_bucket}/table"
    options = s3_server.storage_options
    write_deltalake(uri, pa.table({"id": [0, 1]}), storage_options=options)
    write_deltalake(uri, pa.table({"id": [2]}), storage_options=options, mode="append")
    table = DeltaTable(uri, storage_options=options)
    assert table.version() == 1
    assert sorted(table.to_pyarrow_table().column("id").to_pylist()) == [0, 1, 2]


@pytest.mark.parametrize("scheme", ["s3", "s3a"])
def test_project_files_follow_the_storage_options(
    s3_server: S3Proxy, s3_bucket: str, no_aws_env: None, scheme: str
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
    assert {"0.json", "part-0.bin"} <= names  # (s3proxy lists pyarrow's folder markers)
    assert big.delete() and not big.exists()


def test_the_cli_runs_the_server_until_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    # `spark-chkpt s3 --bucket B`: the endpoint on stdout once the bucket exists, the
    # settings for each client on stderr, and a clean stop on SIGTERM.
    import signal
    import subprocess
    import sys

    import boto3

    command = [str(Path(sys.executable).with_name("spark-chkpt")), "s3", "--bucket", "cli-bkt"]
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        endpoint = server.stdout.readline().strip()
        assert endpoint.startswith("http://127.0.0.1:")
        monkeypatch.setenv("AWS_REQUEST_CHECKSUM_CALCULATION", "when_required")
        monkeypatch.setenv("AWS_RESPONSE_CHECKSUM_VALIDATION", "when_required")
        client = boto3.client(
            "s3",
            endpoint_url=endpoint,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            region_name=REGION,
        )
        assert "cli-bkt" in [b["Name"] for b in client.list_buckets()["Buckets"]]
    finally:
        server.send_signal(signal.SIGTERM)
        _, err = server.communicate(timeout=30)
    assert server.returncode == 0, err[-2000:]
    assert "storage.AWS_ENDPOINT_URL=" + endpoint in err
