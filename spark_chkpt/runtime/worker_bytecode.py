"""pyspark's worker code with its bytecode: a cheaper start for every Python process Spark
starts.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` (and py4j's zip) first on the
``PYTHONPATH`` of each Python process it starts: the daemons, the data sources' planners,
the sink's driver-side runner and each query's source runner. pip's pyspark ships those
zips with sources only, and zipimport writes no bytecode cache, so every such process
compiles the pyspark modules it imports: about 0.55 s of CPU a process on this project's
2-core machine (``import pyspark.sql, pyspark.worker`` 0.9 s from pip's zip, 0.35 s from
the same zip with bytecode), several times per job. :func:`add_bytecode` adds, beside each
module's source in a zip, the ``.pyc`` zipimport looks for (unchecked-hash bytecode of
that source, compiled by this interpreter), and replaces the zip in one rename. A Python
of another version finds bytecode of the wrong magic and compiles the source, as before.

``python -m spark_chkpt.runtime.worker_bytecode`` does it to the running pyspark's zips
(``make setup`` runs it in the project's venvs); run it after installing pyspark, while no
Spark runs from that install (a running worker reads the zip it opened by its old index).

More: docs/concepts/runtime.md (spark_chkpt/runtime/worker_bytecode.py).
"""

from __future__ import annotations

import argparse
import importlib.util
import marshal
import os
import sys
import tempfile
import warnings
import zipfile
from dataclasses import dataclass
from pathlib import Path

# A .pyc's flags word: hash-based (bit 0), unchecked (bit 1 clear): the source is never
# read to validate it; the zip is rewritten whole, sources and bytecode together.
_UNCHECKED_HASH = (0b01).to_bytes(4, "little")


@dataclass(frozen=True)
class ZipBytecode:
    """One zip's outcome: its path, the modules compiled into it, and those it already had."""

    path: Path
    compiled: int
    present: int


def worker_zips(*, spark_home: Path | None = None) -> list[Path]:
    """The zips Spark puts on its workers' path: ``pyspark.zip`` and py4j's, under
    ``spark_home`` (by default ``SPARK_HOME``, else the running pyspark's package)."""
    if spark_home is None:
        configured = os.environ.get("SPARK_HOME")
        if configured:
            spark_home = Path(configured)
        else:
            import pyspark

            spark_home = Path(pyspark.__file__).resolve().parent
    lib = spark_home / "python" / "lib"
    return sorted(
        p for p in lib.glob("*.zip") if p.name == "pyspark.zip" or p.name.startswith("py4j")
    )


def _pyc(source: bytes, filename: str) -> bytes:
    with warnings.catch_warnings():  # pyspark's own tests carry a SyntaxWarning or two
        warnings.simplefilter("ignore")
        code = compile(source, filename, "exec", dont_inherit=True)
    return (
        importlib.util.MAGIC_NUMBER
        + _UNCHECKED_HASH
        + importlib.util.source_hash(source)
        + marshal.dumps(code)
    )


def add_bytecode(*, path: Path) -> ZipBytecode:
    """Add this interpreter's bytecode beside each ``.py`` of the zip at ``path`` that has
    none; the zip is rewritten beside itself and renamed over it (nothing if complete)."""
    with zipfile.ZipFile(path) as source:
        names = set(source.namelist())
        sources = [n for n in names if n.endswith(".py")]
        missing = [n for n in sources if n[:-3] + ".pyc" not in names]
        if not missing:
            return ZipBytecode(path=path, compiled=0, present=len(sources))
        handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        os.close(handle)
        try:
            with zipfile.ZipFile(temporary, "w", zipfile.ZIP_DEFLATED) as target:
                for info in source.infolist():
                    data = source.read(info)
                    target.writestr(info, data)
                    if info.filename in missing:
                        entry = zipfile.ZipInfo(info.filename[:-3] + ".pyc", info.date_time)
                        entry.compress_type = zipfile.ZIP_DEFLATED
                        # the file name zipimport gives the source it compiles: tracebacks
                        # read the same with bytecode
                        filename = os.path.join(path, info.filename)
                        target.writestr(entry, _pyc(data, filename))
            os.chmod(temporary, path.stat().st_mode & 0o777)
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
    return ZipBytecode(path=path, compiled=len(missing), present=len(sources) - len(missing))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m spark_chkpt.runtime.worker_bytecode",
        description="Add bytecode to the zips Spark puts on its Python workers' path.",
    )
    parser.add_argument("--spark-home", type=Path, help="default: SPARK_HOME or pyspark's")
    args = parser.parse_args(argv)
    zips = worker_zips(spark_home=args.spark_home)
    if not zips:
        print("spark-chkpt: no pyspark.zip under the Spark home; nothing done", file=sys.stderr)
        return 1
    for path in zips:
        try:
            done = add_bytecode(path=path)
        except OSError as error:
            print(f"spark-chkpt: {path}: {error}; its workers compile pyspark", file=sys.stderr)
            return 1
        print(f"[bytecode] {path}: {done.compiled} modules compiled, {done.present} had bytecode")
    return 0


if __name__ == "__main__":
    sys.exit(main())
