"""The formats over Spark Connect, as Databricks serverless compute and standard-access-mode
clusters run them: a client session (``remote("sc://...")``) of the session's local
Connect server (``connect_server``), whose JVM and Python workers run the queries.

One chain, to keep CI time small: Kafka -> Delta, Kafka -> Kafka with barriers and a
``DeltaUpsert`` run together until a ``kill -9`` of the server's whole process tree,
then again on a restarted server with ``availableNow``, followed by an aligned read of
the barrier topic; each id once in both tables, the upsert's counts exact; the reporters
and ``spark-chkpt status`` on what the Connect queries wrote."""

from __future__ import annotations

import io
import json
import os
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import chkpt_cli, ok, produce

# Also run on the newest Spark line (make test, NEWEST_LINE_TESTS): Connect on 4.2 here,
# on 4.3 there.
pytestmark = [pytest.mark.fault, pytest.mark.newest_line]

RECORDS = 3000
APPS = 7
PER_TRIGGER = "300"
RUN_TIMEOUT_S = 300.0


@pytest.fixture(scope="module")
def remote_mode() -> Iterator[None]:
    """A Connect client switches pyspark's functions to Connect for the whole process
    (``SPARK_CONNECT_MODE_ENABLED``): set back after this module, for the classic tests."""
    saved = {k: os.environ.get(k) for k in ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE")}
    yield
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def _value(i: int) -> bytes:
    return b"id-%05d|app-%d" % (i, i % APPS)


def _wait(what: str, done: Callable[[], bool], *, timeout_s: float = RUN_TIMEOUT_S) -> None:
    ends = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > ends:
            raise AssertionError(f"waited {timeout_s:.0f}s for {what}")
        time.sleep(0.2)


def _finish(query: Any, what: str) -> None:
    """Wait (bounded) for an ``availableNow`` query to end; its error if it failed."""
    if not query.awaitTermination(RUN_TIMEOUT_S):
        query.stop()
        raise AssertionError(f"{what} did not end within {RUN_TIMEOUT_S:.0f}s")
    error = query.exception()
    assert error is None, f"{what} failed: {error}"


def _start(writer: Any) -> Any:
    """``writer.start()``, again if Spark's foreachBatch worker did not connect back:
    Spark waits a fixed 10 s for that new Python process, which a loaded machine can
    miss (nothing ran: the query did not start)."""
    for attempt in range(3):
        try:
            return writer.start()
        except Exception as e:
            if attempt == 2 or "failed to connect back" not in str(e):
                raise
    raise AssertionError("unreachable")


def _source(spark: Any, servers: str, topic: str) -> Any:
    return (
        spark.readStream.format("chkpt-kafka")
        .option("kafka.bootstrap.servers", servers)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", PER_TRIGGER)
        .load()
    )


def _start_all(
    spark: Any, servers: str, topic: str, mid: str, work: Path, *, once: bool
) -> dict[str, Any]:
    """The three queries of the chain, each on ``topic``: Kafka -> Delta, Kafka -> Kafka
    (barriers), counts per app upserted by ``DeltaUpsert``."""
    from spark_chkpt import DeltaUpsert

    def trigger(writer: Any) -> Any:
        return writer.trigger(availableNow=True) if once else writer

    # The foreachBatch query first: Spark Connect gives its new Python worker a fixed
    # 10 s to connect back, which the other queries' Python workers starting meanwhile
    # made it miss on the loaded 2-core machine.
    upsert = DeltaUpsert(
        path=str(work / "counts"), keys=["app"], checkpoint_location=str(work / "chk" / "counts")
    )
    counts = _start(
        trigger(
            _source(spark, servers, topic)
            .selectExpr("split(CAST(value AS STRING), '[|]')[1] AS app")
            .groupBy("app")
            .count()
            .writeStream.outputMode("update")
            .foreachBatch(upsert)
            .option("checkpointLocation", str(work / "chk" / "counts"))
        )
    )
    delta = trigger(
        _source(spark, servers, topic)
        .selectExpr("CAST(value AS STRING) AS v")
        .writeStream.format("chkpt-delta")
        .option("path", str(work / "events"))
        .option("checkpointLocation", str(work / "chk" / "events"))
    ).start()
    kafka = trigger(
        _source(spark, servers, topic)
        .selectExpr("value")
        .writeStream.format("chkpt-kafka")
        .option("kafka.bootstrap.servers", servers)
        .option("topic", mid)
        .option("checkpointLocation", str(work / "chk" / "mid"))
    ).start()
    return {"delta": delta, "kafka": kafka, "upsert": counts}


def _versions(path: Path) -> int:
    from deltalake import DeltaTable

    try:
        return int(DeltaTable(str(path)).version())
    except Exception:  # not created yet
        return -1


def _column(path: Path, name: str) -> list[Any]:
    from deltalake import DeltaTable

    return list(DeltaTable(str(path)).to_pyarrow_table().column(name).to_pylist())


def test_chains_over_spark_connect_through_a_kill_of_the_server(
    connect_server: Any,
    remote_mode: None,
    bootstrap_servers: str,
    make_topic: Callable[..., str],
    producer: Any,
    tmp_path: Path,
) -> None:
    import spark_chkpt
    from spark_chkpt.metrics import LagReporter, SnapshotReporter

    topic = make_topic(partitions=2)
    mid = make_topic(partitions=2, suffix="mid")
    produce(producer, topic, [_value(i) for i in range(RECORDS)], partitions=2)
    expected_ids = {_value(i).decode() for i in range(RECORDS)}

    # Run 1: the three queries on as records come, until the server's tree is killed
    # once the Delta sink committed a batch (the others are wherever they are).
    first = connect_server.session()
    assert "chkpt-delta" in spark_chkpt.register(first)
    _start_all(first, bootstrap_servers, topic, mid, tmp_path, once=False)
    _wait(
        "the Delta sink's first commits over Connect", lambda: _versions(tmp_path / "events") >= 1
    )
    connect_server.kill()  # closes the client of `first` too
    killed_at = _versions(tmp_path / "events")

    # Run 2: a restarted server, the same checkpoints, availableNow; the reporters listen.
    connect_server.start()
    spark = connect_server.session()
    spark_chkpt.register(spark)
    lines = io.StringIO()
    lag = LagReporter(stream=lines, bar=False)
    spark.streams.addListener(lag)
    snapshots = SnapshotReporter.attach(spark, print_lines=False)
    try:
        queries = _start_all(spark, bootstrap_servers, topic, mid, tmp_path, once=True)
        snapshots.track(queries["delta"], checkpoint_location=str(tmp_path / "chk" / "events"))
        for what, query in queries.items():
            _finish(query, what)
        aligned = (
            spark.readStream.format("chkpt-kafka")
            .option("kafka.bootstrap.servers", bootstrap_servers)
            .option("subscribe", mid)
            .option("startingOffsets", "earliest")
            .load()
            .selectExpr("CAST(value AS STRING) AS v")
            .writeStream.format("chkpt-delta")
            .option("path", str(tmp_path / "aligned"))
            .option("checkpointLocation", str(tmp_path / "chk" / "aligned"))
            .trigger(availableNow=True)
            .start()
        )
        _finish(aligned, "the aligned read of the barrier topic")

        # Each id once in the Delta table (killed at version killed_at) and through the
        # barrier topic; the upsert's counts exact.
        for table in ("events", "aligned"):
            ids = _column(tmp_path / table, "v")
            doubled = [v for v, n in Counter(ids).items() if n > 1]
            assert not doubled, f"{table}: {len(doubled)} ids twice (killed at {killed_at})"
            assert set(ids) == expected_ids, f"{table}: {len(expected_ids - set(ids))} lost"
        apps, totals = _column(tmp_path / "counts", "app"), _column(tmp_path / "counts", "count")
        counts = dict(zip(apps, totals, strict=True))
        assert counts == dict(Counter(_value(i).decode().split("|")[1] for i in range(RECORDS)))

        # The reporters, client-side listeners over Connect: the last batch's line.
        delta_id = str(queries["delta"].id)
        _wait(
            "the LagReporter's line of the Delta query's last batch",
            lambda: delta_id in lag.latest and sum(x.behind for x in lag.latest[delta_id]) == 0,
            timeout_s=60,
        )
        assert f"chkpt {delta_id} batch" in lines.getvalue()
        _wait(
            "the SnapshotReporter's records of the Delta query",
            lambda: bool(snapshots.records(queries["delta"])),
            timeout_s=60,
        )

        # chkpt-delta's table option, which only classic PySpark's writer resolves: refused
        # naming the way forward (at start(), or as the query's first error).
        refused = ""
        try:
            named = (
                _source(spark, bootstrap_servers, topic)
                .writeStream.format("chkpt-delta")
                .option("table", "default.events")
                .option("checkpointLocation", str(tmp_path / "chk" / "named"))
                .trigger(availableNow=True)
                .start()
            )
            named.awaitTermination(RUN_TIMEOUT_S)
            refused = str(named.exception())
        except Exception as e:
            refused = str(e)
        assert "on Spark Connect give option path instead" in refused, refused
    finally:
        spark.streams.removeListener(lag)
        spark.streams.removeListener(snapshots)
        spark.stop()

    # The CLI on what the Connect query wrote: committed to the end, no lag.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = chkpt_cli(
        elsewhere, "status", str(tmp_path / "chk" / "events"),
        "--bootstrap-servers", bootstrap_servers, "--json",
    )  # fmt: skip
    status = json.loads(ok(done))
    assert {p["lag"] for p in status["partitions"]} == {0}
