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
