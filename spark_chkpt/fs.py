"""One filesystem layer for checkpoint and table paths: ``pyarrow.fs``.

Local paths, ``file://``, ``s3://``, ``gs://``, ``abfss://`` and Databricks
``/Volumes/...`` (a local mount on Databricks) all resolve through
:func:`resolve`; the rest of the project never calls ``open`` or ``os`` on them.
"""

from __future__ import annotations

import posixpath
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

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


def resolve(uri: str) -> Location:
    """``Location`` for a local path or a URI pyarrow knows (s3://, gs://, abfss://, ...)."""
    import pyarrow.fs as pafs

    uri = qualify(uri)
    if "://" not in uri:
        return Location(pafs.LocalFileSystem(), uri)
    fs, path = pafs.FileSystem.from_uri(uri)
    return Location(fs, path)
