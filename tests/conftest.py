"""Shared fixtures: the broker (the real Kafka broker, embedded; Tansu with
SPARK_CHKPT_TEST_BROKER=tansu; or KAFKA_BOOTSTRAP_SERVERS), one SparkSession (with
Spark's Kafka connector and delta-spark: ``make setup`` fetched them), and a
uniquely named topic per test.

And the kind of each test, as markers (the tests sit beside the package they test, so
the folder no longer says what a test costs): a module declares ``integration`` (the
broker or Spark) or ``fault`` (a kill chain) in its ``pytestmark``; every other test is
marked ``unit`` here, and a test using the broker's or the SparkSession's fixture is
marked ``broker`` / ``spark``. A ``unit`` test that uses either fixture is a collection
error naming its module. ``make unit`` runs ``-m unit``.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Callable, Iterator

import pytest

# A test's kind -> the fixtures that need a broker or a JVM; the kinds a module declares.
RESOURCE_MARKERS = {
    "bootstrap_servers": "broker",
    "kafka_cluster": "broker",
    "spark": "spark",
    "connect_server": "spark",
}
DECLARED_KINDS = ("integration", "fault")
# xdist (--dist loadfile --no-loadscope-reorder) hands files out in collection order: the
# few long kill chains first, then the Spark and broker tests, then the unit tests, so no
# worker is left alone with a long chain at the end.
RUN_ORDER = {"fault": 0, "integration": 1}
# Modules xdist hands out test by test instead of whole (loadfile): tests that share no
# module-scoped fixture and each run processes of their own, so that a module of several
# long tests does not hold one worker while the other sits idle.
SPLIT_BY_TEST = (
    "tests/chains/test_spark_lines.py",  # the other Spark lines' kill chains
    "tests/alignment/test_alignment.py",  # the second pass's longest module (96 s)
)


def pytest_configure(config: pytest.Config) -> None:
    """Every Spark JVM of the run starts with the suite's JVM options (C1 only, the
    serial collector, a class-data sharing archive of Spark's classes: about 40% less
    CPU per start, spark_chkpt.testing.jvm), set once by the process that starts the
    xdist workers, which inherit it, as do the jobs and scripts the tests start.
    ``-m unit`` starts no JVM and records no archive."""
    if hasattr(config, "workerinput") or config.getoption("markexpr", "") == "unit":
        return
    from pathlib import Path

    from spark_chkpt.testing.jvm import submit_opts

    options = submit_opts(Path(__file__).resolve().parents[1] / ".cache" / "cds")
    if options:
        os.environ["SPARK_SUBMIT_OPTS"] = options


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """``--dist loadfile``, with each test of :data:`SPLIT_BY_TEST` a unit of its own."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SplitScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return nodeid if module in SPLIT_BY_TEST else module

    return SplitScheduling(config, log)  # type: ignore[arg-type]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test with its kind (before ``-m`` selects) and order the files by kind."""
    misdeclared: set[str] = set()
    for item in items:
        declared = {mark.name for mark in item.iter_markers()}
        used = {mark for fixture, mark in RESOURCE_MARKERS.items() if fixture in item.fixturenames}
        for mark in sorted(used):
            item.add_marker(mark)
        if not declared.intersection(DECLARED_KINDS):
            if used:
                misdeclared.add(item.nodeid.split("::")[0])
            item.add_marker("unit")
    if misdeclared:
        raise pytest.UsageError(
            "spark-chkpt: tests using the broker or Spark without pytestmark = "
            f"pytest.mark.integration (or fault): {', '.join(sorted(misdeclared))}"
        )

    def kind(item: pytest.Item) -> int:
        if item.get_closest_marker("long"):
            return 0  # a unit test of minutes at the run's end would leave a worker idle
        return min((RUN_ORDER.get(mark.name, 2) for mark in item.iter_markers()), default=2)

    items.sort(key=kind)


@pytest.fixture(scope="session")
def bootstrap_servers() -> Iterator[str]:
    """The session's broker: KAFKA_BOOTSTRAP_SERVERS if set, else an embedded one, the
    real Apache Kafka broker unless SPARK_CHKPT_TEST_BROKER=tansu (tests.helpers)."""
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if external:
        yield external
        return
    from tests.helpers import embedded_broker

    with embedded_broker() as broker:
        yield broker.bootstrap_servers


@pytest.fixture(scope="session")
def kafka_cluster() -> Iterator[object]:
    """A three-node Apache Kafka cluster (KRaft, each node broker and controller) on
    production settings (replication factor 3, ``min.insync.replicas=2``), for the session
    and xdist worker: started by the first test that asks for it, never by the others
    (spark_chkpt.testing.kafka_cluster). Its tests kill and restart nodes: each brings its
    nodes back before it ends."""
    from spark_chkpt.testing.kafka_cluster import KafkaCluster

    with KafkaCluster() as cluster:
        yield cluster


@pytest.fixture(scope="session")
def spark():  # type: ignore[no-untyped-def]
    from spark_chkpt.session import build_session

    session = build_session(
        app_name="spark-chkpt-tests",
        master="local[2]",
        connectors=True,
        conf={
            "spark.sql.shuffle.partitions": "2",
            "spark.ui.enabled": "false",
            "spark.sql.session.timeZone": "UTC",
            "spark.python.worker.reuse": "true",
            # delta-spark replays a table's log in 50 tasks by default; two slots here
            "spark.databricks.delta.snapshotPartitions": "2",
        },
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def connect_server() -> Iterator[object]:
    """A local Spark Connect server for the session (spark_chkpt.testing.connect_server):
    the project's jars, this interpreter for its Python workers. A test that kills it
    starts it again (``start()``) before it ends."""
    from spark_chkpt.testing.connect_server import ConnectServer

    with ConnectServer() as server:
        yield server


@pytest.fixture(scope="session")
def s3_server() -> Iterator[object]:
    """An S3-compatible server on loopback for the session: moto's, in a child process,
    enforcing conditional writes (spark_chkpt.testing.s3_server)."""
    from spark_chkpt.testing.s3_server import S3Server

    with S3Server() as server:
        yield server


@pytest.fixture
def s3_bucket(s3_server: object, request: pytest.FixtureRequest) -> str:
    """A new bucket on :func:`s3_server` named after the test."""
    base = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40]
    name = f"{base}-{uuid.uuid4().hex[:6]}".strip("-")
    s3_server.create_bucket(name)  # type: ignore[attr-defined]
    return name


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    base = re.sub(r"[^A-Za-z0-9]+", "-", request.node.name).strip("-")[:60]
    return f"{base}-{uuid.uuid4().hex[:6]}"


@pytest.fixture
def make_topic(bootstrap_servers: str, topic_name: str) -> Callable[..., str]:
    """Create a topic named after the test: ``make_topic(partitions=3)``."""
    from spark_chkpt.kafka.client.topics import create_topic

    counter = iter(range(1000))

    def make(*, partitions: int = 1, suffix: str | None = None) -> str:
        n = next(counter)
        name = topic_name if n == 0 and suffix is None else f"{topic_name}-{suffix or n}"
        create_topic(bootstrap_servers=bootstrap_servers, name=name, partitions=partitions)
        return name

    return make


@pytest.fixture
def producer(bootstrap_servers: str) -> Iterator[object]:
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=bootstrap_servers, linger_ms=5)
    yield p
    p.close()


# The run's time by module and kind: every test's setup, call and teardown summed on the
# controller (xdist's workers report there), written to SPARK_CHKPT_TEST_TIMES (JSON, when
# set: `make test` sets it) and summed up at the end of the run: where CI's minutes go.
_TIMES: dict[str, dict[str, object]] = {}
# The machine's CPU ticks (busy, all) when the run started: how much of the cores a pass
# used (written with the times; a pass whose cores sat idle can take more workers).
_CPU_AT_START: list[tuple[int, int]] = []


def _cpu_ticks() -> tuple[int, int]:
    """The machine's (busy, total) CPU ticks since boot, from ``/proc/stat``; (0, 0)
    where there is none."""
    try:
        with open("/proc/stat") as stat:
            fields = [int(f) for f in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return (0, 0)
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields) - idle, sum(fields))


def pytest_sessionstart(session: pytest.Session) -> None:
    if not hasattr(session.config, "workerinput"):
        _CPU_AT_START.append(_cpu_ticks())


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    entry = _TIMES.setdefault(report.nodeid, {"seconds": 0.0, "outcome": "passed"})
    entry["seconds"] = float(entry["seconds"]) + report.duration  # type: ignore[arg-type]
    entry["kind"] = next(
        (k for k in ("fault", "integration", "unit") if k in report.keywords), "unit"
    )
    if report.failed:
        entry["outcome"] = "failed"
    elif report.skipped and report.when == "setup":
        entry["outcome"] = "skipped"


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # type: ignore[no-untyped-def]
    if not _TIMES or hasattr(config, "workerinput"):
        return
    import json
    import time

    by_module: dict[str, list[float]] = {}
    by_kind: dict[str, list[float]] = {}
    for nodeid, entry in _TIMES.items():
        seconds = float(entry["seconds"])  # type: ignore[arg-type]
        for key, table in ((nodeid.split("::")[0], by_module), (str(entry["kind"]), by_kind)):
            row = table.setdefault(key, [0.0, 0])
            row[0] += seconds
            row[1] += 1
    total = sum(row[0] for row in by_module.values())
    write = terminalreporter.write_line
    write(f"test time by kind (seconds summed over the workers; {total:,.0f} s in all):")
    for kind, (seconds, count) in sorted(by_kind.items(), key=lambda kv: -kv[1][0]):
        write(f"  {kind:<12} {seconds:8,.0f} s {count:6} tests")
    busy = _cpu_busy()
    if busy is not None:
        write(f"the machine's {os.cpu_count()} cores were {100 * busy:.0f}% busy during the run")
    write("test time by module, the 30 longest:")
    for module, (seconds, count) in sorted(by_module.items(), key=lambda kv: -kv[1][0])[:30]:
        write(f"  {seconds:8,.0f} s {count:5} tests  {module}")
    target = os.environ.get("SPARK_CHKPT_TEST_TIMES")
    if target:
        os.makedirs(os.path.dirname(os.path.abspath(target)), exist_ok=True)
        with open(target, "w") as out:
            json.dump(
                {
                    "finished": time.time(),
                    "exit": int(exitstatus),
                    "cpu_busy": _cpu_busy(),
                    "cores": os.cpu_count(),
                    "tests": _TIMES,
                },
                out,
            )


def _cpu_busy() -> float | None:
    """The share of the machine's CPU time that was busy since the run started."""
    if not _CPU_AT_START:
        return None
    (busy_now, total_now), (busy_then, total_then) = _cpu_ticks(), _CPU_AT_START[0]
    busy, total = busy_now - busy_then, total_now - total_then
    return round(busy / total, 3) if total else None
