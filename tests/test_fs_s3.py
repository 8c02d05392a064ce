"""pyarrow.fs on S3 takes the endpoint, region and credentials of delta-rs's storage options
(chkpt-delta's ``storage.*``), and ``s3a://`` is the same bucket as ``s3://``."""

from __future__ import annotations

from typing import Any

import pytest

from spark_chkpt.fs import resolve, s3_filesystem


def _settings(fs: Any) -> dict[str, Any]:
    return dict(fs.__reduce__()[1][0])  # pyarrow's own pickling: the constructor arguments


@pytest.mark.parametrize(
    "options",
    [
        {
            "AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
            "AWS_REGION": "eu-west-1",
            "AWS_ACCESS_KEY_ID": "k",
            "AWS_SECRET_ACCESS_KEY": "s",
        },
        {  # chkpt-delta lower-cases its options; delta-rs accepts both
            "aws_endpoint": "127.0.0.1:9000",
            "aws_allow_http": "true",
            "region": "eu-west-1",
            "access_key_id": "k",
            "secret_access_key": "s",
        },
    ],
)
def test_s3_filesystem_takes_the_storage_options(options: dict[str, str]) -> None:
    settings = _settings(s3_filesystem(options))
    assert settings["endpoint_override"].endswith("127.0.0.1:9000")
    assert settings["scheme"] == "http"
    assert settings["region"] == "eu-west-1"
    assert (settings["access_key"], settings["secret_key"]) == ("k", "s")
    assert settings["force_virtual_addressing"] is False


def test_https_endpoint_stays_https() -> None:
    settings = _settings(s3_filesystem({"AWS_ENDPOINT_URL": "https://s3.example.com"}))
    assert settings["scheme"] == "https"


@pytest.mark.parametrize("scheme", ["s3", "s3a"])
def test_resolve_s3_with_options(scheme: str) -> None:
    location = resolve(
        f"{scheme}://bucket/a/b/", storage_options={"AWS_ENDPOINT_URL": "http://127.0.0.1:9"}
    )
    assert location.path == "bucket/a/b"
    assert _settings(location.fs)["endpoint_override"] == "http://127.0.0.1:9"


@pytest.fixture
def remembered(monkeypatch: pytest.MonkeyPatch) -> None:
    """An empty registry of remembered options (it is per process)."""
    from spark_chkpt import fs

    monkeypatch.setattr(fs, "_REMEMBERED", {})


def _endpoint(uri: str) -> str:
    return str(_settings(resolve(uri).fs)["endpoint_override"])


def test_two_queries_in_one_bucket_keep_their_own_options(remembered: None) -> None:
    # Two chkpt-delta queries in one process, tables and checkpoints in one bucket, each
    # on its own endpoint: each checkpoint is read where its own query's options point
    # (the registry was one entry per bucket, the second query's options replaced the
    # first's for both).
    from spark_chkpt.delta.sink.options import DeltaSinkConfig

    for name, port in (("a", 9001), ("b", 9002)):
        DeltaSinkConfig.from_options(
            {
                "path": f"s3://shared/{name}/table",
                "checkpointLocation": f"s3a://shared/{name}/chk",
                "deadLetterPath": f"s3://shared/{name}/dead",
                "storage.AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
            }
        )
    assert _endpoint("s3a://shared/a/chk/offsets/0") == "http://127.0.0.1:9001"
    assert _endpoint("s3://shared/a/dead/_delta_log") == "http://127.0.0.1:9001"
    assert _endpoint("s3a://shared/b/chk/chkpt/snapshots/0.json") == "http://127.0.0.1:9002"
    assert _endpoint("s3://shared/b/table") == "http://127.0.0.1:9002"


def test_a_path_under_neither_query_is_refused_when_their_options_differ(
    remembered: None,
) -> None:
    from spark_chkpt.errors import StorageOptionsConflictError
    from spark_chkpt.fs import remember_bucket_options

    remember_bucket_options("s3://shared/a", {"AWS_ENDPOINT_URL": "http://127.0.0.1:9001"})
    remember_bucket_options("s3://other/x", {"AWS_ENDPOINT_URL": "http://127.0.0.1:9003"})
    assert _endpoint("s3://shared/savepoints") == "http://127.0.0.1:9001"  # one store: used
    remember_bucket_options("s3a://shared/b/", {"AWS_ENDPOINT_URL": "http://127.0.0.1:9002"})
    with pytest.raises(
        StorageOptionsConflictError, match=r"s3://shared/savepoints .*s3://shared/a, s3://shared/b"
    ):
        resolve("s3a://shared/savepoints")
    # Options given with the path, or a remembered folder holding it, still decide.
    explicit = resolve("s3://shared/savepoints", storage_options={"endpoint": "http://h:1"})
    assert _settings(explicit.fs)["endpoint_override"] == "http://h:1"
    assert _endpoint("s3://shared/b/chk") == "http://127.0.0.1:9002"


def test_delta_upsert_refuses_unsafe_commit_options_and_remembers_its_checkpoint(
    remembered: None,
) -> None:
    # DeltaUpsert took storage_options as given: no put-if-absent default, unsafe
    # settings accepted, and its s3a:// checkpoint read with other options (or none).
    from spark_chkpt.delta.upsert.front import DeltaUpsert
    from spark_chkpt.errors import UnsafeCommitError

    with pytest.raises(UnsafeCommitError, match=r"storage_options\['AWS_S3_ALLOW_UNSAFE_RENAME'\]"):
        DeltaUpsert(
            path="s3://b/t",
            keys=["k"],
            checkpoint_location="s3a://b/chk",
            storage_options={"AWS_S3_ALLOW_UNSAFE_RENAME": "true"},
        )
    upsert = DeltaUpsert(
        path="s3://b/t",
        keys=["k"],
        checkpoint_location="s3a://b/chk",
        storage_options={"AWS_ENDPOINT_URL": "http://127.0.0.1:9004"},
    )
    assert upsert.storage_options["aws_conditional_put"] == "etag"
    assert _endpoint("s3a://b/chk/metadata") == "http://127.0.0.1:9004"
