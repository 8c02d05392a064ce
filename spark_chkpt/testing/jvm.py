"""Spark JVMs that start cheaply, for the test suite.

Each kill chain restarts its job, and a Spark driver's start cost about 15 CPU-seconds
on the 2-core machine (the JIT's C2 compiler, loading Spark's classes), for jobs that
live seconds. tests/conftest.py gives every Spark JVM the suite starts these options
through ``SPARK_SUBMIT_OPTS``, which spark-submit adds to the driver's command line:
C1 only (``-XX:TieredStopAtLevel=1``), the serial collector, and a class-data sharing
archive of the classes a session loads (:func:`ensure_archive`, recorded once per Java
and pyspark under ``.cache/cds/``). Two kill tests of tests/chains/test_exactly_once.py
took 106 CPU-seconds and 75 s with Java's defaults, 56 CPU-seconds and 49 s with them.
They change how fast the JVM compiles and starts, not what Spark does; production keeps
Java's defaults (a query runs for months: C2's code pays there). A JVM whose class path
differs from the archive's (a test's own ``SPARK_CONF_DIR``) ignores it in silence.
``SPARK_CHKPT_TEST_JVM=default`` leaves the JVMs as Java starts them, ``no-archive``
gives them the first two options only.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

log = logging.getLogger(__name__)

FAST_START = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")
# A JVM that cannot map the archive says so on its stdout unless told not to.
QUIET_ARCHIVE = ("-Xlog:cds=off", "-Xlog:cds+dynamic=off")

# What the recording session does: start with the project's jars, run a plan, make a
# DataFrame, read and stream through a Python data source (the JVM side of every format of
# the project), write and read a Delta table, then exit the JVM and wait for it: the
# archive is written at the JVM's exit, which pyspark's own shutdown does not wait for.
_RECORD = """
import tempfile
from pyspark.sql.datasource import (
    DataSource, DataSourceReader, DataSourceStreamReader, DataSourceStreamWriter,
    InputPartition, WriterCommitMessage,
)
from spark_chkpt.session import build_session

class Tiny(DataSource):
    @classmethod
    def name(cls):
        return "cds_tiny"
    def schema(self):
        return "id int, v string"
    def reader(self, schema):
        return Reader()
    def streamReader(self, schema):
        return Stream()
    def streamWriter(self, schema, overwrite):
        return Writer()

class Reader(DataSourceReader):
    def read(self, partition):
        yield (1, "a")

class Stream(DataSourceStreamReader):
    def initialOffset(self):
        return {"o": 0}
    def latestOffset(self):
        return {"o": 2}
    def partitions(self, start, end):
        return [InputPartition(0)]
    def read(self, partition):
        yield (1, "a")

class Writer(DataSourceStreamWriter):
    def write(self, rows):
        for _ in rows:
            pass
        return WriterCommitMessage()
    def commit(self, messages, batchId):
        pass

spark = build_session(app_name="spark-chkpt-cds", master="local[2]", connectors=True,
                      conf={"spark.ui.enabled": "false"})
spark.dataSource.register(Tiny)
spark.range(1000).selectExpr("sum(id)").collect()
spark.createDataFrame([(1, "a")], "a int, b string").collect()
spark.read.format("cds_tiny").load().collect()
work = tempfile.mkdtemp()
query = (spark.readStream.format("cds_tiny").load().writeStream.format("cds_tiny")
         .option("checkpointLocation", work + "/chk").trigger(availableNow=True).start())
query.awaitTermination(120)
spark.range(10).write.format("delta").save(work + "/t")
spark.read.format("delta").load(work + "/t").count()
gateway = spark.sparkContext._gateway
jvm = getattr(gateway, "proc", None)
spark.stop()
try:
    gateway.jvm.java.lang.System.exit(0)
except Exception:
    pass  # the JVM went away mid-call, as asked
if jvm is not None:
    jvm.wait(timeout=120)
"""


def _spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def archive_path(cache: Path, *, java: str = "java") -> Path:
    """Where the archive of this interpreter's pyspark and this Java lives under
    ``cache``: one per pyspark install (each Spark line's venv has its own) and Java."""
    import pyspark

    found = shutil.which(java) or java
    java_id = f"{Path(found).resolve()}:{Path(found).resolve().stat().st_mtime_ns}"
    key = f"{_spark_home()}|{pyspark.__version__}|{java_id}|{_RECORD}"  # a new recipe: anew
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    return cache / f"spark-{pyspark.__version__}-{digest}.jsa"


def ensure_archive(cache: Path, *, timeout_s: float = 300.0) -> Path | None:
    """The archive for this pyspark and Java, recorded first if missing (about 30 s, once;
    a lock keeps concurrent runs from recording it twice). ``None``, with a warning,
    when recording failed: the JVMs then start without it."""
    cache = cache.resolve()
    cache.mkdir(parents=True, exist_ok=True)
    path = archive_path(cache)
    if path.exists():
        return path
    with (cache / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if path.exists():
            return path
        partial = path.with_suffix(".partial")
        partial.unlink(missing_ok=True)
        env = {k: v for k, v in os.environ.items() if k != "SPARK_SUBMIT_OPTS"}
        env["SPARK_SUBMIT_OPTS"] = " ".join(
            (*FAST_START, *QUIET_ARCHIVE, f"-XX:ArchiveClassesAtExit={partial}")
        )
        try:
            done = subprocess.run(
                [sys.executable, "-c", _RECORD],
                env=env,
                capture_output=True,
                text=True,
                timeout=timeout_s,
            )
        except subprocess.TimeoutExpired:
            log.warning("recording Spark's class archive took over %.0f s: not used", timeout_s)
            return None
        if done.returncode != 0 or not partial.exists():
            log.warning(
                "recording Spark's class archive failed (exit %s): not used\n%s",
                done.returncode,
                done.stderr[-2000:],
            )
            partial.unlink(missing_ok=True)
            return None
        partial.rename(path)
        return path


def submit_opts(cache: Path, *, environ: Mapping[str, str] = os.environ) -> str | None:
    """``SPARK_SUBMIT_OPTS`` for the suite's Spark JVMs (the options of the module
    docstring, then the caller's own, which win), or ``None`` with
    ``SPARK_CHKPT_TEST_JVM=default``; ``SPARK_CHKPT_TEST_JVM=no-archive`` records no
    archive (a run of a few JVM starts, each Spark line's pass, would spend more on
    recording it than it saves)."""
    chosen = environ.get("SPARK_CHKPT_TEST_JVM", "")
    if chosen == "default":
        return None
    options = list(FAST_START)
    archive = None if chosen == "no-archive" else ensure_archive(cache)
    if archive is not None:
        options += [*QUIET_ARCHIVE, f"-XX:SharedArchiveFile={archive}"]
    own = environ.get("SPARK_SUBMIT_OPTS")
    return " ".join([*options, *([own] if own else [])])


def main(argv: list[str] | None = None) -> int:
    """``python -m spark_chkpt.testing.jvm CACHE``: record the archive under ``CACHE`` now
    (``make test`` does, beside building the other Spark lines' venvs), so that the
    suite's first process does not wait for it."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m spark_chkpt.testing.jvm CACHE", file=sys.stderr)
        return 2
    if os.environ.get("SPARK_CHKPT_TEST_JVM", "") in ("default", "no-archive"):
        return 0
    archive = ensure_archive(Path(args[0]))
    print(f"[cds] {archive or 'not recorded: the JVMs start without it'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
