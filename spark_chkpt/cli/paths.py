"""The command line's checks of the folders it is given, made before any work (and
before Spark starts): a path that does not exist is named as such, a folder of
savepoints given where one savepoint is expected lists the savepoints inside."""

from __future__ import annotations

from spark_chkpt.errors import PathNotFoundError, SavepointError


def require_folder(path: str, *, what: str) -> None:
    """:class:`PathNotFoundError` if ``path`` (local or any ``pyarrow.fs`` URI) does not
    exist or is a file, not a folder; ``what`` is the argument's name in the message
    (``checkpoint``)."""
    import pyarrow.fs as pafs

    from spark_chkpt.fs import qualify, resolve

    location = resolve(qualify(path))
    kind = location.fs.get_file_info(location.path).type
    if kind == pafs.FileType.NotFound:
        raise PathNotFoundError(f"{what} {path} does not exist")
    if kind == pafs.FileType.File:
        raise PathNotFoundError(f"{what} {path} is a file, not a folder: give the {what}'s folder")


def require_savepoint(path: str) -> None:
    """``path`` exists and holds a savepoint's manifest; given the folder that keeps
    savepoints instead, :class:`SavepointError` lists the savepoints in it."""
    from spark_chkpt.fs import qualify, resolve
    from spark_chkpt.savepoint.manifest import MANIFEST, list_savepoints

    require_folder(path, what="savepoint")
    if resolve(qualify(path)).child(MANIFEST).exists():
        return
    inside = list_savepoints(savepoint_dir=path)
    if not inside:
        return  # load_savepoint names what is missing
    names = "\n  ".join(
        f"{p.location}  (snapshot {p.manifest.batch_id}, {p.manifest.reason})" for p in inside
    )
    raise SavepointError(
        f"{path} is a folder of savepoints, not one savepoint; give one of the "
        f"{len(inside)} in it (newest last):\n  {names}"
    )
