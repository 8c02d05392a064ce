"""``spark-chkpt migrate`` on the real thing: a user's job (``tests/user_scripts/
migrate_job.py``, run as a subprocess from a folder outside the repo, no PYSPARK_PYTHON)
starts on Spark's own ``kafka`` source and delta-spark's ``delta`` sink with input
arriving, is stopped (or killed with -9), moves to ``chkpt-kafka`` / ``chkpt-delta``
(``migrate --to chkpt``), runs on and is killed once inside a commit, moves back
(``migrate --to spark``, which settles the batch the kill left open) and finishes on
Spark's formats. Every id is in the table exactly once, read with delta-rs and
delta-spark; the stateful variant's counts equal the topic's."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from spark_chkpt.testing.processes import kill_tree
from tests.helpers import user_env

pytestmark = pytest.mark.integration

SCRIPT = Path(__file__).resolve().parents[1] / "user_scripts" / "migrate_job.py"
KEYS = 7


class Input:
    """Records ``0, 1, 2, ...`` (value = id, key = ``k<id % 7>``) produced in the
    background, five every 0.25 s, until :meth:`stop`."""

    def __init__(self, servers: str, topic: str) -> None:
        from kafka import KafkaProducer

        self.producer = KafkaProducer(bootstrap_servers=servers, linger_ms=5)
        self.topic = topic
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for _ in range(5):
                i = self.sent
                self.producer.send(
                    self.topic, value=str(i).encode(), key=f"k{i % KEYS}".encode(), partition=i % 2
                )
                self.sent += 1
            self.producer.flush()
            time.sleep(0.25)

    def __enter__(self) -> Input:
        self._thread.start()
        return self

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        self.producer.flush()
        self.producer.close()
        return self.sent

    def __exit__(self, *exc: object) -> None:
        if not self._stop.is_set():
            self.stop()


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """The user's project: a folder outside the repo with the job script."""
    project = tmp_path / "my-project"
    project.mkdir()
    shutil.copy(SCRIPT, project / "job.py")
    return project


def job(folder: Path, formats: str, *args: str, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "job.py", formats, str(folder / "work"), *args],
        cwd=folder,
        env=user_env(**env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a kill -9 takes its JVM down with it
    )


def finished(process: subprocess.Popen[str]) -> str:
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0, (out + err)[-4000:]
    return out


def kill_after(process: subprocess.Popen[str], commit: Path) -> None:
    """kill -9 the job (its process group: the driver and its JVM) once ``commit`` exists."""
    deadline = time.monotonic() + 240
    while not commit.exists():
        assert process.poll() is None, process.communicate()[1][-4000:]
        assert time.monotonic() < deadline, f"{commit} never appeared"
        time.sleep(0.1)
    kill_tree(process.pid)
    process.communicate(timeout=60)


def migrate(folder: Path, *args: str) -> str:
    """``spark-chkpt migrate`` as a user runs it; its output, standard error merged in
    order. With ``--job`` (its planning session a Spark one) nothing of Spark's log may
    follow the ``migrated:`` line (issue 51: log4j's warnings came after it)."""
    import os

    work = folder / "work"
    jars = os.environ.get("SPARK_CHKPT_JARS_DIR")
    done = subprocess.run(
        [
            str(Path(sys.executable).with_name("spark-chkpt")),
            "migrate",
            str(work / "chk"),
            "--table",
            str(work / "table"),
            "--watch",
            "1",
            *args,
        ],
        cwd=folder,
        env=user_env(**({"SPARK_CHKPT_JARS_DIR": jars} if jars else {})),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=300,
        start_new_session=True,
    )
    assert done.returncode == 0, done.stdout[-4000:]
    after = done.stdout.split("migrated:", 1)[1].splitlines()[1:]
    assert not [line for line in after if line.strip()], "\n".join(after[:10])
    return str(done.stdout)


def topic_key_counts(servers: str, topic: str) -> Counter[str]:
    """The reference: each key's records in the topic, read back from the broker."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=servers, enable_auto_commit=False)
    parts = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic)]
    consumer.assign(parts)
    consumer.seek_to_beginning(*parts)
    ends = consumer.end_offsets(parts)
    counts: Counter[str] = Counter()
    while any(consumer.position(tp) < ends[tp] for tp in parts):
        for records in consumer.poll(timeout_ms=1000).values():
            counts.update(r.key.decode() for r in records)
    consumer.close()
    return counts


def read_table(spark: Any, table: Path) -> tuple[list[dict[str, Any]], list[Any]]:
    """The table's rows as delta-rs and delta-spark read them."""
    rs = DeltaTable(str(table)).to_pyarrow_table().to_pylist()
    return rs, spark.read.format("delta").load(str(table)).collect()


@pytest.fixture
def arriving(bootstrap_servers: str, make_topic: Callable[..., str]) -> Iterator[Input]:
    with Input(bootstrap_servers, make_topic(partitions=2)) as records:
        yield records


def step(name: str, started: float) -> float:
    print(f"{name}: {time.monotonic() - started:.1f} s", flush=True)
    return time.monotonic()


def chain(
    folder: Path, servers: str, records: Input, *, stateful: bool, kill_native: bool
) -> tuple[str, str]:
    """Spark's formats (stopped, or killed -9), migrate --to chkpt, the chkpt formats
    killed inside batch B's commit, migrate --to spark, Spark's formats to the end."""
    work = folder / "work"
    t = time.monotonic()
    args = ["--servers", servers, "--topic", records.topic] + (["--stateful"] if stateful else [])
    native = job(folder, "spark", *args, "--seconds", "300" if kill_native else "10")
    if kill_native:
        kill_after(native, work / "chk" / "commits" / "2")
    else:
        assert finished(native).startswith("batches ")
    t = step("native", t)

    def to(side: str) -> list[str]:  # a stateful query names the job it moves to
        job_args = ["--job", "job.py", "--job-args", shlex.join([side, str(work), *args])]
        return ["--to", side] + (job_args if stateful else [])

    found = migrate(folder, *to("chkpt"))
    resumed = int(found.rsplit("runs batch ", 1)[1].split()[0])
    t = step("migrate --to chkpt", t)
    kill_at = resumed + 3
    chkpt = job(
        folder, "chkpt", *args, "--seconds", "300", SPARK_CHKPT_KILL_AT=f"after-snapshot@{kill_at}"
    )
    out, err = chkpt.communicate(timeout=300)
    assert chkpt.returncode != 0, (out + err)[-3000:]  # killed at the fail point
    assert (work / "chk" / "chkpt" / "snapshots" / f"{kill_at}.json").exists()
    assert not (work / "chk" / "commits" / str(kill_at)).exists()
    # chkpt-delta committed txn(<Spark's query id>, N), the app id delta-spark's sink used
    query_id = json.loads((work / "chk" / "metadata").read_text())["id"]
    assert DeltaTable(str(work / "table")).transaction_version(query_id) == kill_at
    t = step("chkpt killed", t)
    records.stop()
    back = migrate(folder, *to("spark"))
    assert f"batch {kill_at}: planned, not in Spark's commit log, but in the table" in back
    assert (work / "chk" / "commits" / str(kill_at)).exists()
    t = step("migrate --to spark", t)
    finished(job(folder, "spark", *args))
    step("native to the end", t)
    return found, back


def test_stateless_job_moves_to_chkpt_and_back_with_every_id_once(
    folder: Path, bootstrap_servers: str, arriving: Input, spark: Any
) -> None:
    found, back = chain(folder, bootstrap_servers, arriving, stateful=False, kill_native=False)
    assert "found:" in found and "wrote " in found and "chkpt/epoch.json" in found
    assert "a chkpt-delta writer still on this checkpoint is fenced" in back
    sent = arriving.sent
    rs, ds = read_table(spark, folder / "work" / "table")
    for rows in (rs, [r.asDict() for r in ds]):
        ids = Counter(int(r["id"]) for r in rows)
        assert sorted(ids) == list(range(sent)), (len(ids), sent)
        assert set(ids.values()) == {1}, [i for i, n in ids.items() if n > 1][:10]


def test_stateful_job_killed_moves_to_chkpt_and_back_with_counts_of_the_topic(
    folder: Path, bootstrap_servers: str, arriving: Input, spark: Any
) -> None:
    found, _ = chain(folder, bootstrap_servers, arriving, stateful=True, kill_native=True)
    assert "keyed state of operators" in found
    expected = topic_key_counts(bootstrap_servers, arriving.topic)
    assert sum(expected.values()) == arriving.sent
    rs, ds = read_table(spark, folder / "work" / "table")
    assert {r["k"]: r["count"] for r in rs} == dict(expected)
    assert {r["k"]: r["count"] for r in ds} == dict(expected)
