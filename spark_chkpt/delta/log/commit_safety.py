"""What a Delta commit needs from its store so that two writers of one version cannot
both succeed, set by default where the table's URI names the store.

delta-rs writes commit ``N`` with put-if-absent. Azure (``abfss://``, ``abfs://``,
``az://``, ``adl://``) and GCS (``gs://``, ``gcs://``) create objects if absent natively:
nothing to set. S3 has no atomic rename; delta-rs 1.x puts commits with ``If-None-Match:
*`` (S3 conditional writes, object_store's ``aws_conditional_put``), and this sets
``aws_conditional_put=etag`` unless the user chose: the same put-if-absent, named. The
user's settings that give it up are refused with :class:`UnsafeCommitError`:
``AWS_S3_ALLOW_UNSAFE_RENAME=true`` (plain overwrite) or ``aws_conditional_put=disabled``
without ``AWS_S3_LOCKING_PROVIDER`` (a DynamoDB lock).

The project's own commits (:mod:`spark_chkpt.delta.log.commit`) need the same
guarantee of the file they write: :func:`put_if_absent` (a hard link on local files, a
PUT with ``If-None-Match: *`` on S3, through boto3 on the endpoint and credentials of
the same storage options), and :func:`put_if_absent_store` names a store that has none
here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from spark_chkpt.errors import UnsafeCommitError
from spark_chkpt.fs import S3_SCHEMES, s3_options

if TYPE_CHECKING:
    from spark_chkpt.fs import Location

NATIVE_PUT_IF_ABSENT = ("abfss", "abfs", "az", "adl", "azure", "gs", "gcs")
_TRUE = ("true", "1", "yes")


def _get(options: Mapping[str, str], name: str) -> tuple[str, str] | None:
    """The user's key (as spelled) and value of ``name``, any case, with or without the
    ``aws_`` prefix delta-rs also accepts."""
    wanted = {name.lower(), name.lower().removeprefix("aws_")}
    for key, value in options.items():
        if key.lower() in wanted:
            return key, value
    return None


def commit_storage_options(
    *, uri: str, storage_options: Mapping[str, str], option_format: str = "storage.{}"
) -> dict[str, str]:
    """``storage_options`` with the safe commit default of ``uri``'s store added; raises
    :class:`UnsafeCommitError` (naming the option as the user gave it: ``option_format``
    of its key, ``chkpt-delta``'s ``storage.*`` by default) where the user's own setting
    lets two commits of one version both succeed."""
    options = dict(storage_options)
    scheme = uri.partition("://")[0].lower() if "://" in uri else ""
    if scheme not in S3_SCHEMES:
        return options  # local files: rename-if-absent; Azure, GCS: put-if-absent
    lock = _get(options, "aws_s3_locking_provider")
    unsafe = _get(options, "aws_s3_allow_unsafe_rename")
    if unsafe is not None and unsafe[1].strip().lower() in _TRUE and not (lock and lock[1]):
        raise UnsafeCommitError(
            option_format.format(unsafe[0]),
            unsafe[1],
            "lets two writers both commit one Delta version on S3 (an overwrite, no "
            "put-if-absent): leave it out (delta-rs then commits with S3's conditional "
            "put, If-None-Match) or set storage.AWS_S3_LOCKING_PROVIDER=dynamodb",
        )
    conditional = _get(options, "aws_conditional_put")
    disabled = conditional is not None and conditional[1].strip().lower() == "disabled"
    if conditional is not None and disabled and not (lock and lock[1]):
        raise UnsafeCommitError(
            option_format.format(conditional[0]),
            conditional[1],
            "S3 commits need put-if-absent: leave it out (the default 'etag': S3's "
            "conditional put) or set storage.AWS_S3_LOCKING_PROVIDER=dynamodb",
        )
    if conditional is None and not (lock and lock[1]):
        options["aws_conditional_put"] = "etag"
    return options


# -- put-if-absent for the project's own commits (spark_chkpt.delta.log.commit) -----------

# boto3's client argument for each of pyarrow's S3FileSystem arguments that
# spark_chkpt.fs.s3_options reads from the storage options.
_BOTO3_ARGS = {
    "endpoint_override": "endpoint_url",
    "region": "region_name",
    "access_key": "aws_access_key_id",
    "secret_key": "aws_secret_access_key",
    "session_token": "aws_session_token",
}


def put_if_absent_store(uri: str) -> str | None:
    """None if spark-chkpt can create a file of ``uri``'s table only if absent (local
    files: a hard link; S3: a conditional PUT, with boto3); else the store's name."""
    scheme = uri.partition("://")[0].lower() if "://" in uri else ""
    if scheme in ("", "file"):
        return None
    if scheme in S3_SCHEMES:
        try:
            import boto3  # noqa: F401
        except ImportError:
            return f"{scheme}:// without boto3 installed"
        return None
    return f"{scheme}://"


def s3_client(storage_options: Mapping[str, str]) -> Any:
    """A boto3 S3 client on the endpoint, region and credentials of ``storage_options``
    (delta-rs's keys, any case; what they leave out comes from boto3's defaults)."""
    import boto3
    from botocore.config import Config

    given, allow_http, virtual = s3_options(storage_options)
    kwargs: dict[str, Any] = {_BOTO3_ARGS[k]: v for k, v in given.items()}
    endpoint = kwargs.get("endpoint_url")
    if endpoint and "://" not in endpoint:
        kwargs["endpoint_url"] = ("http://" if allow_http else "https://") + endpoint
    config = Config(
        s3={"addressing_style": "virtual" if virtual else "path" if endpoint else "auto"},
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
    )
    return boto3.client("s3", config=config, **kwargs)


def put_if_absent(
    location: Location, text: str, *, uri: str, storage_options: Mapping[str, str]
) -> bool:
    """Create the file at ``location`` with ``text`` unless it exists: True when created,
    False when another writer's file is there (the race is lost). Local files: a
    temporary file hard-linked to the name; S3: a PUT with ``If-None-Match: *`` (412:
    lost). Other stores: ``ValueError`` (their tables are refused before this)."""
    if location.is_local:
        try:
            location.create_exclusive(text)
        except FileExistsError:
            return False
        return True
    store = put_if_absent_store(uri)
    if store is not None:
        raise ValueError(f"{uri}: no put-if-absent for {store} in spark-chkpt")
    from botocore.exceptions import ClientError

    bucket, _, key = location.path.partition("/")
    try:
        s3_client(storage_options).put_object(
            Bucket=bucket, Key=key, Body=text.encode("utf-8"), IfNoneMatch="*"
        )
    except ClientError as e:
        status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        code = e.response.get("Error", {}).get("Code")
        if status in (409, 412) or code in ("PreconditionFailed", "ConditionalRequestConflict"):
            return False
        raise
    return True
