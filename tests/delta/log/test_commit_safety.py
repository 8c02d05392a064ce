"""The store's safe commit setting by default; unsafe S3 settings refused by name."""

from __future__ import annotations

import pytest

from spark_chkpt.delta.log.commit_safety import commit_storage_options
from spark_chkpt.delta.sink.options import DeltaSinkConfig
from spark_chkpt.errors import ConfigError, UnsafeCommitError


@pytest.mark.parametrize("uri", ["s3://b/t", "s3a://b/t"])
def test_s3_commits_with_conditional_put_by_default(uri: str) -> None:
    assert commit_storage_options(uri=uri, storage_options={"AWS_REGION": "x"}) == {
        "AWS_REGION": "x",
        "aws_conditional_put": "etag",
    }


@pytest.mark.parametrize(
    "uri", ["abfss://c@a.dfs.core.windows.net/t", "gs://b/t", "/Volumes/c/s/v/t", "/tmp/t"]
)
def test_other_stores_get_nothing(uri: str) -> None:
    assert commit_storage_options(uri=uri, storage_options={"k": "v"}) == {"k": "v"}


def test_the_users_own_choice_stays() -> None:
    options = {"AWS_S3_LOCKING_PROVIDER": "dynamodb", "AWS_S3_ALLOW_UNSAFE_RENAME": "true"}
    assert commit_storage_options(uri="s3://b/t", storage_options=options) == options


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("AWS_S3_ALLOW_UNSAFE_RENAME", "true"),
        ("aws_s3_allow_unsafe_rename", "TRUE"),
        ("aws_conditional_put", "disabled"),
        ("conditional_put", "disabled"),
    ],
)
def test_unsafe_s3_settings_are_refused_by_name(key: str, value: str) -> None:
    with pytest.raises(UnsafeCommitError) as raised:
        commit_storage_options(uri="s3://b/t", storage_options={key: value})
    assert raised.value.option == f"storage.{key}"
    assert isinstance(raised.value, ConfigError)


def test_the_sink_refuses_an_unsafe_rename() -> None:
    options = {
        "path": "s3://b/t",
        "checkpointLocation": "s3a://b/chk",
        "storage.AWS_S3_ALLOW_UNSAFE_RENAME": "true",
    }
    with pytest.raises(UnsafeCommitError, match=r"storage\.aws_s3_allow_unsafe_rename"):
        DeltaSinkConfig.from_options(options)


def test_the_sink_commits_to_s3_with_conditional_put() -> None:
    config = DeltaSinkConfig.from_options({"path": "s3://b/t", "checkpointLocation": "/tmp/c"})
    assert config.storage_options == {"aws_conditional_put": "etag"}
    local = DeltaSinkConfig.from_options({"path": "/tmp/t", "checkpointLocation": "/tmp/c"})
    assert local.storage_options == {}
