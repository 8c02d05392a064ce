"""One filesystem layer for checkpoint and table paths: ``pyarrow.fs``.

Local paths, ``file://``, ``s3://`` (and Hadoop's ``s3a://``, the same objects),
``gs://``, ``abfss://`` and Databricks ``/Volumes/...`` (a local mount on Databricks) all
resolve through :func:`resolve`; the rest of the project never calls ``open`` or ``os``
on them.

S3 settings: given ``storage_options`` (delta-rs's keys, as ``chkpt-delta``'s
``storage.*`` options carry them: ``AWS_ENDPOINT_URL``, ``AWS_REGION``,
``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_ALLOW_HTTP``,
any case, with or without the ``AWS_`` prefix), pyarrow talks to the same endpoint with the
same credentials as delta-rs; without them, pyarrow's own defaults apply (the AWS
environment variables and profile).
"""

from __future__ import annotations

import json
import posixpath
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from spark_chkpt.errors import ChkptError, StorageOptionsConflictError

if TYPE_CHECKING:
    import pyarrow.fs as pafs


@dataclass(frozen=True)
class Location:
    """A filesystem and a path on it."""

    fs: pafs.FileSystem
    path: str

    @property
    def is_local(self) -> bool:
        import pyarrow.fs as pafs

        return isinstance(self.fs, pafs.LocalFileSystem)

    def child(self, *parts: str) -> Location:
        return Location(self.fs, posixpath.join(self.path, *parts))

    def exists(self) -> bool:
        import pyarrow.fs as pafs

        return bool(self.fs.get_file_info(self.path).type != pafs.FileType.NotFound)

    def read_text(self) -> str:
        with self.fs.open_input_stream(self.path) as stream:
            return bytes(stream.read()).decode("utf-8")

    def read_json_object(self) -> dict[str, Any] | None:
        """The JSON object the file holds (None: no such file, or another JSON value);
        one error naming the file if it is not JSON."""
        try:
            doc = json.loads(self.read_text())
        except FileNotFoundError:
            return None
        except ValueError as e:
            raise ChkptError(f"{self.path} is unreadable: {e}") from e
        return doc if isinstance(doc, dict) else None

    def read_bytes(self) -> bytes:
        with self.fs.open_input_stream(self.path) as stream:
            return bytes(stream.read())

    def copy_to(self, target: Location, *, chunk: int = 8 * 1024 * 1024) -> int:
        """Copy this file to ``target`` (any filesystem, parents created), streamed in
        ``chunk``-byte reads; returns the bytes copied. Not atomic: callers copy into a
        folder that nothing reads until they say it is complete."""
        target.fs.create_dir(posixpath.dirname(target.path), recursive=True)
        copied = 0
        with (
            self.fs.open_input_stream(self.path) as src,
            target.fs.open_output_stream(target.path) as out,
        ):
            while True:
                data = src.read(chunk)
                if not data:
                    return copied
                out.write(data)
                copied += len(data)

    def write_atomic(self, text: str) -> None:
        """Write so a reader sees the old content or the new, never a torn file.

        Local and HDFS-like stores: write a temporary sibling, then rename. Object stores
        (S3, GCS, ABFS) make a single PUT visible atomically, so write in place.
        """
        parent = posixpath.dirname(self.path)
        self.fs.create_dir(parent, recursive=True)
        data = text.encode("utf-8")
        if not self.is_local:
            with self.fs.open_output_stream(self.path) as out:
                out.write(data)
            return
        tmp = posixpath.join(parent, f".{posixpath.basename(self.path)}.{uuid.uuid4().hex}.tmp")
        with self.fs.open_output_stream(tmp) as out:
            out.write(data)
        self.fs.move(tmp, self.path)

    def create_exclusive(self, text: str) -> None:
        """Create the file with ``text`` unless it exists (then :class:`FileExistsError`),
        whole or not at all: a temporary sibling hard-linked to the name (``link`` fails
        if the name exists). Local filesystems only (the caller checks ``is_local``)."""
        import os

        if not self.is_local:
            raise ValueError(f"{self.path}: create-if-absent is implemented for local files only")
        parent = posixpath.dirname(self.path)
        self.fs.create_dir(parent, recursive=True)
        tmp = posixpath.join(parent, f".{posixpath.basename(self.path)}.{uuid.uuid4().hex}.tmp")
        with self.fs.open_output_stream(tmp) as out:
            out.write(text.encode("utf-8"))
        try:
            os.link(tmp, self.path)
        finally:
            os.unlink(tmp)

    def list(self, *, recursive: bool = False) -> list[pafs.FileInfo]:
        import pyarrow.fs as pafs

        if not self.exists():
            return []
        selector = pafs.FileSelector(self.path, recursive=recursive, allow_not_found=True)
        return list(self.fs.get_file_info(selector))

    def delete(self) -> bool:
        """Delete the file; False if it was already gone."""
        try:
            self.fs.delete_file(self.path)
        except FileNotFoundError:
            return False
        return True

    def delete_dir(self) -> bool:
        """Delete the folder and everything in it; False if it was already gone."""
        if not self.exists():
            return False
        self.fs.delete_dir(self.path)
        return True

    def __str__(self) -> str:
        return self.path


def qualify(uri: str) -> str:
    """``uri`` as every process of a cluster reads it: local paths made absolute.

    Call it on the driver. An executor's working directory is not the driver's (on
    ``local-cluster`` and real clusters it is the executor's work folder), so a relative
    ``path`` or ``checkpointLocation`` must be fixed before the options are shipped.
    ``file:/x`` and ``file:///x`` become ``/x``; other URIs are kept as given.
    """
    import os

    if uri.startswith("file:"):
        uri = "/" + uri[len("file:") :].lstrip("/")
    if "://" in uri:
        return uri
    return os.path.abspath(os.path.expanduser(uri))


S3_SCHEMES = ("s3", "s3a")

# pyarrow.fs.S3FileSystem's argument -> the storage option names that set it (lower case,
# delta-rs's spellings: object_store's ``AWS_*`` keys and their short forms).
_S3_OPTION_NAMES: dict[str, tuple[str, ...]] = {
    "endpoint_override": ("aws_endpoint_url", "aws_endpoint_url_s3", "aws_endpoint", "endpoint"),
    "region": ("aws_region", "region", "aws_default_region"),
    "access_key": ("aws_access_key_id", "access_key_id"),
    "secret_key": ("aws_secret_access_key", "secret_access_key"),
    "session_token": ("aws_session_token", "session_token", "aws_token", "token"),
}
_TRUE = ("true", "1", "yes")


def same_table(a: str, b: str | None) -> bool:
    """Whether ``a`` and ``b`` name the same table (or folder), once qualified."""
    return b is not None and qualify(a).rstrip("/") == qualify(b).rstrip("/")


def s3_options(storage_options: Mapping[str, str]) -> tuple[dict[str, str], bool, bool]:
    """The S3 endpoint, region and credentials ``storage_options`` name (delta-rs's keys,
    any case; the first spelling given wins), keyed by pyarrow's ``S3FileSystem``
    arguments; whether ``AWS_ALLOW_HTTP`` is true; whether
    ``AWS_VIRTUAL_HOSTED_STYLE_REQUEST`` is true."""
    options = {k.lower(): v for k, v in storage_options.items()}
    given: dict[str, str] = {}
    for argument, names in _S3_OPTION_NAMES.items():
        value = next((options[n] for n in names if options.get(n)), None)
        if value:
            given[argument] = value
    allow_http = options.get("aws_allow_http", options.get("allow_http", "")).lower() in _TRUE
    virtual = options.get(
        "aws_virtual_hosted_style_request", options.get("virtual_hosted_style_request", "")
    )
    return given, allow_http, virtual.lower() in _TRUE


def s3_filesystem(storage_options: Mapping[str, str]) -> pafs.S3FileSystem:
    """pyarrow's S3 filesystem on the endpoint, region and credentials ``storage_options``
    name (delta-rs's keys, any case); what they leave out comes from pyarrow's defaults.
    ``AWS_ALLOW_HTTP=true`` lets an ``http://`` endpoint (or one without a scheme) be
    plain HTTP; ``AWS_VIRTUAL_HOSTED_STYLE_REQUEST=true`` forces bucket-in-hostname
    addressing (otherwise path style whenever an endpoint is given)."""
    import pyarrow.fs as pafs

    given, allow_http, virtual = s3_options(storage_options)
    kwargs: dict[str, object] = dict(given)
    endpoint = given.get("endpoint_override", "")
    if endpoint.startswith("http://") or (endpoint and allow_http and "://" not in endpoint):
        kwargs["scheme"] = "http"
    if virtual:
        kwargs["force_virtual_addressing"] = True
    return pafs.S3FileSystem(**kwargs)


def resolve(uri: str, *, storage_options: Mapping[str, str] | None = None) -> Location:
    """``Location`` for a local path or a URI pyarrow knows (s3://, gs://, abfss://, ...).

    ``s3a://`` (Hadoop's name, what Spark's ``checkpointLocation`` uses) is read as
    ``s3://``. ``storage_options``: the S3 endpoint, region and credentials of
    :func:`s3_filesystem` (ignored for other stores). Without them, the options this
    process was given for that location or its bucket (:func:`remembered_options`: a
    ``chkpt-delta`` table's ``storage.*`` also reach its checkpoint), else
    for ``s3a://`` the running SparkContext's ``fs.s3a.*`` settings
    (:func:`hadoop_s3a_options`), else pyarrow's defaults (the AWS environment)."""
    import pyarrow.fs as pafs

    uri = qualify(uri)
    if "://" not in uri:
        return Location(pafs.LocalFileSystem(), uri)
    scheme, _, rest = uri.partition("://")
    if scheme.lower() in S3_SCHEMES:
        options = dict(storage_options or {})
        if not any(k.lower() in _S3_KEYS for k in options):
            options = remembered_options(rest)
        if not any(k.lower() in _S3_KEYS for k in options) and scheme.lower() == "s3a":
            options = hadoop_s3a_options()
        if any(k.lower() in _S3_KEYS for k in options):
            return Location(s3_filesystem(options), rest.rstrip("/"))
        uri = f"s3://{rest}"
    fs, path = pafs.FileSystem.from_uri(uri)
    return Location(fs, path)


# "bucket/key/prefix" -> the storage options given for that location, in this process.
_REMEMBERED: dict[str, dict[str, str]] = {}


def remember_bucket_options(uri: str, storage_options: Mapping[str, str]) -> None:
    """Use ``storage_options`` for ``uri`` and every ``s3://``/``s3a://`` path under it
    that :func:`resolve` is given without options of its own, in this process.

    ``chkpt-delta`` calls it for its table, its dead-letter table and its checkpoint: the
    snapshot records and Spark's checkpoint metadata it reads from Python (driver and
    Python workers, where no ``fs.s3a.*`` setting is at hand) are on the same store.
    Each location keeps its own options, so two queries of one process with different
    options (another endpoint, other credentials) each reach their own folders; a path
    under none of them takes the options remembered in its bucket when they all agree
    (:func:`remembered_options`). No-op for other URIs or options without S3 settings."""
    scheme, sep, rest = uri.partition("://")
    if not sep or scheme.lower() not in S3_SCHEMES:
        return
    if any(k.lower() in _S3_KEYS for k in storage_options):
        _REMEMBERED[rest.strip("/")] = dict(storage_options)


def remembered_options(location: str) -> dict[str, str]:
    """The options :func:`remember_bucket_options` holds for ``location`` (``bucket/key``,
    no scheme): those of the nearest remembered folder holding it; else those remembered
    anywhere in its bucket, if they all name one store with one identity; else none.
    Raises :class:`StorageOptionsConflictError` where the bucket's remembered options
    differ: the path could be on either store, and guessing would read or write the
    wrong one."""
    location = location.strip("/")
    parts = location.split("/")
    for end in range(len(parts), 0, -1):
        found = _REMEMBERED.get("/".join(parts[:end]))
        if found is not None:
            return dict(found)
    bucket = parts[0]
    in_bucket = {
        key: options
        for key, options in _REMEMBERED.items()
        if key == bucket or key.startswith(bucket + "/")
    }
    settings = {_store_identity(options) for options in in_bucket.values()}
    if len(settings) > 1:
        raise StorageOptionsConflictError(
            f"s3://{location} is under none of the locations this process was given S3 "
            f"options for, and those in bucket {bucket} name different stores or "
            f"credentials ({', '.join(f's3://{k}' for k in sorted(in_bucket))}): pass the "
            "path's own storage options (or set spark.hadoop.fs.s3a.* for s3a:// paths)"
        )
    return dict(next(iter(in_bucket.values()))) if in_bucket else {}


def _store_identity(options: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The S3 settings of ``options`` (endpoint, region, credentials), comparable."""
    lowered = {k.lower(): v for k, v in options.items()}
    return tuple(sorted((k, v) for k, v in lowered.items() if k in _S3_KEYS))


_S3_KEYS = frozenset(n for names in _S3_OPTION_NAMES.values() for n in names) | {
    "aws_allow_http",
    "allow_http",
}


# Hadoop S3A setting -> the storage option of :func:`s3_filesystem` it maps to.
_HADOOP_S3A = {
    "fs.s3a.endpoint": "aws_endpoint_url",
    "fs.s3a.endpoint.region": "aws_region",
    "fs.s3a.access.key": "aws_access_key_id",
    "fs.s3a.secret.key": "aws_secret_access_key",
    "fs.s3a.session.token": "aws_session_token",
}


def hadoop_s3a_options() -> dict[str, str]:
    """The S3 endpoint, region and credentials the running SparkContext's Hadoop
    configuration gives S3A (``spark.hadoop.fs.s3a.*``), as storage options; empty
    where no SparkContext runs in this process (an executor's Python worker) or it sets
    none of them. ``fs.s3a.connection.ssl.enabled=false`` allows plain HTTP."""
    try:
        from pyspark import SparkContext

        context = SparkContext._active_spark_context
        if context is None:
            return {}
        hadoop = context._jsc.hadoopConfiguration()
    except Exception:  # no JVM reachable: pyarrow's own defaults apply
        return {}
    options = {}
    for key, option in _HADOOP_S3A.items():
        value = hadoop.get(key)
        if value:
            options[option] = str(value)
    if options and str(hadoop.get("fs.s3a.connection.ssl.enabled", "true")).lower() == "false":
        options["aws_allow_http"] = "true"
    return options
