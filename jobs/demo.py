"""The demo: Kafka → Spark → Delta exactly once, through a kill -9 of the driver.

    make demo        # or: spark-chkpt demo, python -m spark_chkpt.jobs.demo [--events N]

1. starts the embedded broker and writes the seeds' example, per-app page-view events;
2. starts the Kafka → Delta job (``jobs/kafka_to_delta.py``) as its own driver process;
3. SIGKILLs that driver's whole process tree (Python, JVM, PySpark's workers) while a
   micro-batch is in flight;
4. writes more events, restarts the job, lets it drain the topic;
5. reads the Delta table back with ``deltalake`` and prints the verification.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path


def _say(message: str) -> None:
    print(f"[demo] {message}", flush=True)


def _job(
    *, workdir: Path, servers: str, topic: str, per_batch: int, log_name: str
) -> subprocess.Popen[bytes]:
    from spark_chkpt.testing.generator import PAGE_VIEW_SCHEMA_DDL

    command = [
        sys.executable,
        "-m",
        "spark_chkpt.jobs.kafka_to_delta",
        "--bootstrap-servers",
        servers,
        "--topic",
        topic,
        "--table",
        str(workdir / "page_views"),
        "--checkpoint",
        str(workdir / "checkpoint"),
        "--schema",
        PAGE_VIEW_SCHEMA_DDL,
        "--trigger",
        "availableNow",
        "--max-offsets-per-trigger",
        str(per_batch),
        "--master",
        "local[2]",
        "--set",
        "sink.partitionBy=app",
        "--set",
        "job.queryName=page_views",
        "--set",
        "sink.orphanRetention=0ms",
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARK_CHKPT_")}
    log = open(workdir / log_name, "wb")  # noqa: SIM115 - handed to the child process
    return subprocess.Popen(
        command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=workdir, start_new_session=True
    )


def _batch_in_flight(checkpoint: Path, *, after: int) -> int | None:
    """A batch Spark has planned (offsets/N) but not committed (commits/N), N > after."""
    offsets, commits = checkpoint / "offsets", checkpoint / "commits"
    if not offsets.exists():
        return None
    planned = [int(p.name) for p in offsets.iterdir() if p.name.isdigit()]
    for batch in sorted(planned, reverse=True):
        if batch > after and not (commits / str(batch)).exists():
            return batch
    return None


KILL_ATTEMPTS = 3
IN_FLIGHT_WAIT_S = 300.0


def _wait_for_batch_in_flight(
    job: subprocess.Popen[bytes], checkpoint: Path, table: Path, *, after: int
) -> int | None:
    """A batch past ``after`` planned and not committed while ``job`` runs (after giving it
    up to 5 s to stage some files), or None if the wait ran out or the job ended."""
    deadline = time.monotonic() + IN_FLIGHT_WAIT_S
    in_flight = None
    while time.monotonic() < deadline and job.poll() is None:
        in_flight = _batch_in_flight(checkpoint, after=after)
        if in_flight is not None:
            break
        time.sleep(0.02)
    staged_by = time.monotonic() + 5  # let the batch stage some files, then strike
    while in_flight is not None and time.monotonic() < staged_by and job.poll() is None:
        if any(table.rglob(f"part-b{in_flight:05d}-*.parquet")):
            break
        time.sleep(0.01)
    # The batch may have committed in the meantime: then it was not in flight at the kill.
    if in_flight is not None and (checkpoint / "commits" / str(in_flight)).exists():
        return None
    return in_flight


def _staged_not_visible(table: Path) -> int:
    from spark_chkpt.delta.staging import STAGED_NAME
    from spark_chkpt.delta.table.target import DeltaTarget

    target = DeltaTarget(uri=str(table))
    referenced = target.referenced(target.open())
    on_disk = {
        str(p.relative_to(table)) for p in table.rglob("*.parquet") if STAGED_NAME.match(p.name)
    }
    return len(on_disk - referenced)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="spark-chkpt demo",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--events", type=int, default=30_000)
    parser.add_argument(
        "--more-events", type=int, default=10_000, help="written while the job is down"
    )
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--per-batch", type=int, default=4_000, help="maxOffsetsPerTrigger")
    parser.add_argument("--workdir", default=None, help="default: a new temporary folder")
    args = parser.parse_args(argv)

    from deltalake import DeltaTable

    from spark_chkpt.kafka.client.topics import create_topic
    from spark_chkpt.kafka.source.offset_reader import OffsetReader
    from spark_chkpt.kafka.source.options import SourceConfig
    from spark_chkpt.metrics.reporter import store_records
    from spark_chkpt.offsets import to_json
    from spark_chkpt.testing.embedded_broker import EmbeddedBroker
    from spark_chkpt.testing.generator import produce_page_views
    from spark_chkpt.testing.processes import kill_tree

    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="spark-chkpt-demo-")).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    checkpoint, table = workdir / "checkpoint", workdir / "page_views"
    topic = "page-views"
    total = args.events + args.more_events
    with EmbeddedBroker() as broker:
        servers = broker.bootstrap_servers
        _say(f"embedded Kafka broker at {servers}; work folder {workdir}")
        create_topic(bootstrap_servers=servers, name=topic, partitions=args.partitions)
        produce_page_views(bootstrap_servers=servers, topic=topic, first=0, count=args.events)
        _say(f"wrote {args.events} page-view events to '{topic}' ({args.partitions} partitions)")

        _say(f"starting the Kafka -> Delta job ({args.per_batch} records per micro-batch)")
        in_flight: int | None = None
        for attempt in range(1, KILL_ATTEMPTS + 1):
            log_name = f"job-run1-{attempt}.log" if attempt > 1 else "job-run1.log"
            job = _job(
                workdir=workdir,
                servers=servers,
                topic=topic,
                per_batch=args.per_batch,
                log_name=log_name,
            )
            in_flight = _wait_for_batch_in_flight(job, checkpoint, table, after=1)
            if job.poll() is not None:
                _say(
                    f"the job ended before it could be killed (exit {job.returncode}); see "
                    f"{workdir / log_name}"
                )
                return 1
            kill_tree(job.pid)
            job.wait()
            if in_flight is not None:
                break
            # Never "batch None": say the kill point was missed, and try again.
            _say(
                f"SIGKILL the job's driver (exit {job.returncode}), but no batch was in flight "
                f"within {IN_FLIGHT_WAIT_S:.0f} s (attempt {attempt} of {KILL_ATTEMPTS}): "
                "the kill point was missed"
                + ("; restarting the job to try again" if attempt < KILL_ATTEMPTS else "")
            )
        if in_flight is None:
            _say(
                "no kill landed while a batch was in flight; the demo cannot show that "
                "recovery (a slow machine? see the job logs); it goes on and still checks "
                "exactly-once after the kills it made"
            )
        else:
            rows_then = DeltaTable(str(table)).to_pyarrow_table().num_rows if table.exists() else 0
            _say(
                "SIGKILL the job's whole process tree (Python, JVM, PySpark's workers) "
                f"while batch {in_flight} was in flight (exit {job.returncode})"
            )
            _say(
                f"  state left behind: Delta has {rows_then} rows; Spark planned batch "
                f"{in_flight} (offsets/{in_flight}) but never committed it; "
                f"{_staged_not_visible(table)} staged Parquet file(s) on disk, not in the log"
            )

        produce_page_views(
            bootstrap_servers=servers, topic=topic, first=args.events, count=args.more_events
        )
        _say(f"wrote {args.more_events} more events while the job was down")
        _say("restarting the job from its checkpoint")
        job = _job(
            workdir=workdir,
            servers=servers,
            topic=topic,
            per_batch=args.per_batch,
            log_name="job-run2.log",
        )
        if job.wait(timeout=600) != 0:
            _say(
                f"the restarted job failed (exit {job.returncode}); see {workdir / 'job-run2.log'}"
            )
            return 1

        config = SourceConfig.from_options({"kafka.bootstrap.servers": servers, "subscribe": topic})
        reader = OffsetReader(config=config, client_id="spark-chkpt-demo")
        end = to_json(reader.latest(reader.partitions()))
        reader.close()

    delta = DeltaTable(str(table))
    data = delta.to_pyarrow_table()
    ids = data.column("event_id").to_pylist()
    unique = len(set(ids))
    snapshots = store_records(checkpoint_location=str(checkpoint))
    last = snapshots[-1] if snapshots else None
    per_app = sorted(
        data.group_by("app").aggregate([("event_id", "count")]).to_pylist(), key=lambda r: r["app"]
    )
    print()
    _say("verification (Delta table read back with deltalake, no Spark):")
    print(f"  rows in the table           {len(ids)}")
    print(f"  unique event ids            {unique}")
    print(f"  events written to Kafka     {total}")
    print(f"  missing / duplicated ids    {total - unique} / {len(ids) - unique}")
    print(f"  Delta versions              0..{delta.version()}")
    print(f"  snapshot records kept       {[s.batch_id for s in snapshots]}")
    if last is not None:
        print(
            f"  offsets in last snapshot    {json.dumps(last.source_offsets[0])} "
            f"(batch {last.batch_id})"
        )
    print(f"  topic end offsets           {json.dumps(end)}")
    print(
        "  page views per app          "
        + ", ".join(f"{r['app']}={r['event_id_count']}" for r in per_app)
    )
    ok = len(ids) == unique == total and sorted(ids) == list(range(total))
    print(f"  exactly-once                {'yes' if ok else 'NO'}")
    print()
    _say(f"inspect it: spark-chkpt snapshots {checkpoint}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
