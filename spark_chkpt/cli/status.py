"""``spark-chkpt status``: where a query stands, from its files (and the broker), never
starting Spark.

The generation (``chkpt/epoch.json``), the last snapshot (batch, time, outcome, the
Delta version it made or, for a ``chkpt-kafka`` sink with ``--bootstrap-servers``, the
barrier offsets of its ``complete`` entry in the control topic), the offsets of the last
committed batch (``commits/N`` and ``offsets/N``) against each partition's end on the
broker and the lag, and the savepoints of this checkpoint under ``--savepoint-dir``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import TYPE_CHECKING, Any

from spark_chkpt.cli.commands import add_brokers, add_json, command
from spark_chkpt.cli.paths import require_folder

if TYPE_CHECKING:
    from spark_chkpt.snapshot.checkpoint import SparkCheckpoint
    from spark_chkpt.snapshot.record import SnapshotRecord


def collect(
    checkpoint: str, *, bootstrap_servers: str | None = None, savepoint_dir: str | None = None
) -> dict[str, Any]:
    """The status of the query at ``checkpoint`` as a JSON-ready dict (see the module)."""
    from spark_chkpt.fs import qualify
    from spark_chkpt.metrics.reporter import store_records
    from spark_chkpt.restart.supervisor import read_restart_record
    from spark_chkpt.snapshot.checkpoint import SparkCheckpoint
    from spark_chkpt.snapshot.epoch import read_epoch
    from spark_chkpt.state.operators import committed_batches

    require_folder(checkpoint, what="checkpoint")
    location = qualify(checkpoint)
    spark_checkpoint = SparkCheckpoint(location=location)
    epoch = read_epoch(checkpoint_location=location)
    try:
        batches = committed_batches(checkpoint_location=location)
    except FileNotFoundError:
        batches = []
    records = store_records(checkpoint_location=location)
    last = records[-1] if records else None
    status: dict[str, Any] = {
        "checkpoint": location,
        "query_id": spark_checkpoint.query_id(),
        "generation": epoch.generation,
        "started_by": epoch.started_by,
        "started_from": epoch.source,
        "last_snapshot": None,
        "committed_batch": batches[-1] if batches else None,
        "partitions": [],
        "savepoints": None,
        # The restart strategy's failures and restarts so far (a supervised job's).
        "restarts": read_restart_record(checkpoint_location=location),
    }
    if last is not None:
        status["last_snapshot"] = _last_snapshot(last, bootstrap_servers)
    if batches:
        status["partitions"] = _partitions(spark_checkpoint, batches[-1], bootstrap_servers)
    if savepoint_dir is not None:
        status["savepoints"] = _savepoints(savepoint_dir, location)
    return status


def _last_snapshot(last: SnapshotRecord, bootstrap_servers: str | None) -> dict[str, Any]:
    """The newest snapshot record, and the barriers its sink wrote (from the broker)."""
    return {
        "batch": last.batch_id,
        "time": _utc(last.created_ms),
        "outcome": last.outcome,
        "sink": last.sink,
        "target": last.target,
        "table_version": last.table_version,
        "rows": last.rows,
        "barriers": _barriers(last, bootstrap_servers),
    }


def _partitions(
    spark_checkpoint: SparkCheckpoint, batch: int, bootstrap_servers: str | None
) -> list[dict[str, Any]]:
    """Each source partition's committed offset of ``batch``, and with the brokers its
    log end and the lag."""
    committed = _committed_offsets(spark_checkpoint, batch)
    ends = _ends(committed, bootstrap_servers) if bootstrap_servers else {}
    return [
        {
            "topic": tp.topic,
            "partition": tp.partition,
            "committed": offset,
            "end": ends.get(tp),
            "lag": None if ends.get(tp) is None else max(0, ends[tp] - offset),
        }
        for tp, offset in sorted(committed.items())
    ]


def _savepoints(savepoint_dir: str, location: str) -> list[dict[str, Any]]:
    """The savepoints of ``savepoint_dir`` taken of the query at ``location``."""
    from spark_chkpt.fs import qualify
    from spark_chkpt.savepoint.manifest import list_savepoints

    require_folder(savepoint_dir, what="savepoint folder")
    return [
        {"savepoint": p.location, "batch": p.manifest.batch_id, "reason": p.manifest.reason}
        for p in list_savepoints(savepoint_dir=savepoint_dir)
        if qualify(p.manifest.checkpoint) == location
    ]


def _utc(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ms / 1000))


def _committed_offsets(checkpoint: Any, batch: int) -> dict[Any, int]:
    """Where the last committed batch ended, per topic-partition (every Kafka source)."""
    from spark_chkpt.offsets import from_json

    offsets: dict[Any, int] = {}
    for source in checkpoint.plan(batch).sources:
        if isinstance(source, dict):
            offsets.update(from_json(source))
    return offsets


def _ends(committed: dict[Any, int], servers: str) -> dict[Any, int]:
    """Each partition's end on the broker (the source's own probe of log ends)."""
    from spark_chkpt.kafka.source.offset_reader import OffsetReader
    from spark_chkpt.kafka.source.options import SourceConfig

    topics = sorted({tp.topic for tp in committed})
    if not topics:
        return {}
    config = SourceConfig.from_options(
        {"kafka.bootstrap.servers": servers, "subscribe": ",".join(topics)}
    )
    reader = OffsetReader(config=config, client_id="spark-chkpt-status")
    try:
        found = set(reader.partitions())
        return reader.latest([tp for tp in committed if tp in found])
    finally:
        reader.close()


def _barriers(record: Any, servers: str | None) -> dict[str, dict[str, int]] | None:
    """A sink's barrier offsets of the snapshot, per topic and partition (None: a sink
    without barriers, or no broker to ask)."""
    from spark_chkpt.sinks import find_sink_kind

    kind = find_sink_kind(record.sink)
    return kind.progress(record=record, bootstrap_servers=servers) if kind else None


def run(args: argparse.Namespace) -> int:
    """where a query stands, from its files (never starts Spark): generation, last
    snapshot, committed offsets against each partition's end and the lag, savepoints"""
    watch = getattr(args, "watch", None)
    if watch is None:
        return _show(args)
    shown = 0
    try:
        while True:
            if sys.stdout.isatty():
                print("\033[H\033[2J", end="")  # clear the terminal, as watch(1) does
            _show(args)
            shown += 1
            if args.count is not None and shown >= args.count:
                return 0
            sys.stdout.flush()
            time.sleep(watch)
            if not sys.stdout.isatty():
                print()
    except KeyboardInterrupt:
        return 0


def _show(args: argparse.Namespace) -> int:
    from spark_chkpt.sinks import find_sink_kind

    status = collect(
        args.checkpoint,
        bootstrap_servers=args.bootstrap_servers,
        savepoint_dir=args.savepoint_dir,
    )
    if args.json:
        print(json.dumps(status, indent=2))
        return 0
    started = (
        f" ({status['started_by']} of {status['started_from']})" if status["started_by"] else ""
    )
    print(f"checkpoint   {status['checkpoint']}")
    print(f"query        {status['query_id']}, generation {status['generation']}{started}")
    snap = status["last_snapshot"]
    if snap is None:
        print("last snapshot  none recorded")
    else:
        if snap["table_version"] is not None:
            where = f"Delta version {snap['table_version']} of {snap['target']}"
        elif snap["barriers"] is not None:
            where = f"barriers at {json.dumps(snap['barriers'])}"
        else:
            where = f"{snap['sink']} {snap['target'] or ''}".strip()
            kind = find_sink_kind(snap["sink"])
            if kind is not None and kind.progress_hint:
                where += f" {kind.progress_hint}"
        print(
            f"last snapshot  {snap['batch']} at {snap['time']} ({snap['outcome']}, "
            f"{snap['rows']} rows): {where}"
        )
    print(f"committed    batch {status['committed_batch']}")
    if status["partitions"]:
        print(f"  {'topic-partition':<40} {'committed':>12} {'end':>12} {'lag':>10}")
        for p in status["partitions"]:
            end = "-" if p["end"] is None else str(p["end"])
            lag = "-" if p["lag"] is None else str(p["lag"])
            name = f"{p['topic']}-{p['partition']}"
            print(f"  {name:<40} {p['committed']:>12} {end:>12} {lag:>10}")
        if args.bootstrap_servers is None:
            print("  (--bootstrap-servers for each partition's end and the lag)")
    restarts = status["restarts"]
    if restarts is None:
        print("restarts     none recorded (not run under a restart strategy, or no failure)")
    else:
        print(
            f"restarts     {restarts.get('restarts')} after {restarts.get('failures')} "
            f"failure(s), strategy {restarts.get('strategy')}; last: "
            f"{restarts.get('verdict')}, {restarts.get('last_cause')}"
        )
    if status["savepoints"] is None:
        print("savepoints   (--savepoint-dir to list this checkpoint's)")
    else:
        print(f"savepoints   {len(status['savepoints'])}")
        for s in status["savepoints"]:
            print(f"  {s['savepoint']}  (snapshot {s['batch']}, {s['reason']})")
    return 0


def add_parser(sub: Any) -> None:
    status = command(sub, "status", run=run)
    status.add_argument("checkpoint", help="the query's checkpointLocation")
    add_brokers(
        status,
        help="the source's brokers: each partition's end and the lag (and a chkpt-kafka "
        "sink's barrier offsets)",
    )
    status.add_argument(
        "--savepoint-dir", default=None, help="the folder that keeps savepoints: list this query's"
    )
    add_json(status)
    status.add_argument(
        "--watch",
        type=float,
        metavar="SECONDS",
        help="show it again every SECONDS until Ctrl-C (the terminal cleared each time)",
    )
    status.add_argument("--count", type=int, help="with --watch: stop after this many refreshes")
