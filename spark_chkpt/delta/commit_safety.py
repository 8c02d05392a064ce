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
"""

from __future__ import annotations

from collections.abc import Mapping

from spark_chkpt.errors import UnsafeCommitError

S3_SCHEMES = ("s3", "s3a")
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
