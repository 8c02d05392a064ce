"""``spark-chkpt``: the project's command line.

spark-chkpt broker [--kafka] [--port N] [--topic NAME[:PARTITIONS] ...]  run a broker
spark-chkpt snapshots CHECKPOINT [--json]                       list a query's snapshots
spark-chkpt state CHECKPOINT [--batch N] [--operator K] [--json] print a snapshot's keyed state
spark-chkpt savepoint create CHECKPOINT --dir DIR               savepoint the newest snapshot
spark-chkpt savepoint stop CHECKPOINT --dir DIR                 stop a running job with one
spark-chkpt savepoint list DIR | show SAVEPOINT [--state]       print manifests (and state)
spark-chkpt savepoint restore SAVEPOINT --checkpoint NEW --mode rewind|fork
spark-chkpt demo [...]                                          run the demo pipeline
spark-chkpt bench [...]                                         run the benchmark
"""

# Longer than 400 lines: one small function per command (parsing, then printing what a
# library call returns); the work itself is in the modules each one imports.

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from importlib.metadata import EntryPoint, entry_points
from typing import Any


def _broker(args: argparse.Namespace) -> int:
    from spark_chkpt.kafka.topics import create_topic
    from spark_chkpt.local.broker import EmbeddedBroker
    from spark_chkpt.testing.kafka_broker import EmbeddedKafka

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    if args.data_dir and not args.kafka:
        print("spark-chkpt broker: --data-dir needs --kafka (Tansu keeps topics in memory)")
        return 2
    broker: EmbeddedKafka | EmbeddedBroker = (
        EmbeddedKafka(host=args.host, port=args.port, data_dir=args.data_dir)
        if args.kafka
        else EmbeddedBroker(host=args.host, port=args.port)
    )
    kind = (
        f"Apache Kafka (KRaft), data in {broker.data_dir}"
        if isinstance(broker, EmbeddedKafka)
        else "Kafka-protocol broker Tansu (in memory)"
    )
    with broker:
        for spec in args.topic:
            name, _, parts = spec.partition(":")
            create_topic(
                bootstrap_servers=broker.bootstrap_servers,
                name=name,
                partitions=int(parts or 1),
                exist_ok=True,
            )
        print(broker.bootstrap_servers, flush=True)
        print(
            f"# embedded {kind}; log: {broker.log_path}; Ctrl-C stops it",
            file=sys.stderr,
            flush=True,
        )
        stop.wait()
    return 0


PROGRAMS_GROUP = "spark_chkpt.programs"


def programs() -> dict[str, EntryPoint]:
    """Programs the wheel declares (setup.cfg, entry points of group
    ``spark_chkpt.programs``): the demo and the benchmark live in ``jobs/`` and ``bench/``,
    which the engine never imports; they take their own command-line options."""
    return {ep.name: ep for ep in entry_points(group=PROGRAMS_GROUP)}


def _snapshots(args: argparse.Namespace) -> int:
    import json

    from spark_chkpt.snapshot.metrics import as_table, store_records, summarize

    records = store_records(checkpoint_location=args.checkpoint)
    if args.json:
        print(
            json.dumps(
                {
                    "summary": summarize(records),
                    "snapshots": [json.loads(r.to_json()) for r in records],
                },
                indent=2,
            )
        )
        return 0
    if not records:
        print(f"no snapshot records under {args.checkpoint}/chkpt/snapshots")
        return 1
    table = as_table(records)
    stateful = any(row["state_operators"] for row in table)
    state_header = f" {'operators':>9} {'keys':>10} {'state bytes':>12}" if stateful else ""
    print(
        f"{'batch':>6} {'outcome':<10} {'rows':>10} {'files':>6} {'commit ms':>10} "
        f"{'version':>8} {'dead':>6}{state_header}"
    )
    for row in table:
        state = (
            f" {row['state_operators']:>9} {_or_dash(row['keys']):>10} {row['state_bytes']:>12}"
            if stateful
            else ""
        )
        print(
            f"{row['batch']:>6} {row['outcome']:<10} {row['rows']:>10} {row['files']:>6} "
            f"{row['commit_ms']:>10.1f} {row['version']!s:>8} {row['dead_letters']:>6}{state}"
        )
    summary = summarize(records)
    print(
        f"commit latency p50 {summary['commit_ms_p50']:.1f} ms, p99 "
        f"{summary['commit_ms_p99']:.1f} ms; last offsets {json.dumps(summary['last_offsets'])}"
    )
    return 0


def _or_dash(value: object) -> str:
    return "-" if value is None else str(value)


def _state(args: argparse.Namespace) -> int:
    import json

    from spark_chkpt.fs import qualify
    from spark_chkpt.snapshot.state import check_retained

    location = qualify(args.checkpoint)
    # The batch is checked before a JVM starts: a wrong one fails in a second.
    batch = check_retained(checkpoint_location=location, batch_id=args.batch)
    from spark_chkpt.snapshot.state_reader import read_state

    spark = _reader_session("spark-chkpt-state")
    try:
        snap = read_state(
            spark,
            checkpoint_location=location,
            batch_id=batch,
            operator_id=args.operator,
            store_name=args.store_name,
            limit=args.limit,
        )
    finally:
        spark.stop()
    if args.json:
        print(
            json.dumps(
                {
                    "checkpoint": snap.checkpoint_location,
                    "batch": snap.batch_id,
                    "operator": snap.operator_id,
                    "operator_name": snap.operator_name,
                    "store": snap.store_name,
                    "state_version": snap.version,
                    "keys": snap.keys,
                    "key_columns": snap.key_columns,
                    "value_columns": snap.value_columns,
                    "rows": snap.rows,
                },
                indent=2,
                default=str,
            )
        )
        return 0
    shown = "" if len(snap.rows) == snap.keys else f", {len(snap.rows)} shown"
    print(
        f"# snapshot {snap.batch_id} of {snap.checkpoint_location}: operator "
        f"{snap.operator_id} ({snap.operator_name or '?'}), store {snap.store_name}, "
        f"state version {snap.version}, {snap.keys} keys{shown}"
    )
    columns = snap.key_columns + snap.value_columns
    cells = [[_or_dash(row.get(c)) for c in columns] for row in snap.rows]
    widths = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(columns)]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip())
    for r in cells:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())
    return 0


def _reader_session(name: str) -> Any:
    """A small local session for reading state (no UI, one shuffle partition)."""
    from spark_chkpt.session import build_session

    spark = build_session(
        app_name=name,
        master="local[1]",
        conf={
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.shuffle.partitions": "1",
        },
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _recover(args: argparse.Namespace) -> int:
    import json

    from spark_chkpt.snapshot.recovery import recover_checkpoint

    snapshot = recover_checkpoint(
        table_uri=args.table, checkpoint_location=args.checkpoint, app_id=args.app_id
    )
    print(
        f"checkpoint {args.checkpoint} written: query {snapshot.app_id} resumes at batch "
        f"{snapshot.batch_id + 1}, after Delta version {snapshot.table_version}, from "
        f"{json.dumps(snapshot.record.source_offsets)}"
    )
    return 0


def _savepoint_create(args: argparse.Namespace) -> int:
    from spark_chkpt.snapshot.savepoint import create_savepoint

    point = create_savepoint(
        checkpoint_location=args.checkpoint,
        savepoint_dir=args.dir,
        batch_id=args.batch,
        table=args.table,
    )
    print(point.location)
    return 0


def _savepoint_stop(args: argparse.Namespace) -> int:
    from spark_chkpt.snapshot.savepoint_stop import request_stop

    point = request_stop(
        checkpoint_location=args.checkpoint, savepoint_dir=args.dir, timeout_s=args.timeout
    )
    print(point.location)
    return 0


def _savepoint_list(args: argparse.Namespace) -> int:
    import json

    from spark_chkpt.snapshot.savepoint import describe, list_savepoints

    rows = [describe(p.manifest) for p in list_savepoints(savepoint_dir=args.dir)]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print(f"no complete savepoint under {args.dir}")
        return 1
    header = (
        f"{'savepoint':<44} {'batch':>6} {'sink':<12} {'version':>7} {'ops':>3} {'keys':>8} "
        f"{'files':>5} {'bytes':>10} {'reason':<6} created (UTC)"
    )
    print(header)
    for r in rows:
        print(
            f"{r['savepoint']:<44} {r['batch']:>6} {_or_dash(r['sink']):<12} "
            f"{_or_dash(r['table_version']):>7} {r['operators']:>3} {_or_dash(r['keys']):>8} "
            f"{r['files']:>5} {r['bytes']:>10} {r['reason']:<6} {r['created']}"
        )
    return 0


def _savepoint_show(args: argparse.Namespace) -> int:
    import json

    from spark_chkpt.snapshot.savepoint import load_savepoint, verify_files

    point = load_savepoint(location=args.savepoint)
    verify_files(point)
    m = point.manifest
    states = _savepoint_states(point.checkpoint, m.operators, args.limit) if args.state else []
    if args.json:
        doc = json.loads(m.to_json())
        if args.state:
            doc["state"] = [
                {"operator": s.operator_id, "keys": s.keys, "rows": s.rows} for s in states
            ]
        print(json.dumps(doc, indent=2, default=str))
        return 0
    sink = m.sink
    print(f"savepoint   {point.location} ({m.reason}, {len(m.files)} files, {m.total_bytes} bytes)")
    print(f"snapshot    {m.batch_id} of query {m.query_id} ({m.query_name or 'unnamed'})")
    print(f"taken from  {m.checkpoint}")
    print(f"offsets     {json.dumps(m.source_offsets)}")
    if sink is not None:
        where = (
            f"barrier {m.batch_id} of app {sink.app_id}"
            if sink.kind == "chkpt-kafka"
            else f"Delta version {_or_dash(sink.table_version)}, txn {sink.app_id}={m.batch_id}"
        )
        print(f"sink        {sink.kind} {_or_dash(sink.target)} ({sink.mode}): {where}")
    print(f"state       {m.provider or '-'}, version {_or_dash(m.state_version)}")
    for op in m.operators:
        print(
            f"  operator {op.operator_id} ({op.name or '?'}): {op.partitions} partitions, "
            f"stores {', '.join(op.stores)}, keys {_or_dash(op.keys)}, {op.files} files, "
            f"{op.bytes} bytes"
        )
    print("versions    " + ", ".join(f"{k} {v}" for k, v in sorted(m.versions.items())))
    for snap in states:
        print(f"# operator {snap.operator_id}: {snap.keys} keys")
        for row in snap.rows:
            print("  " + "  ".join(f"{k}={v}" for k, v in row.items()))
    return 0


def _savepoint_states(checkpoint: str, operators: Sequence[Any], limit: int | None) -> list[Any]:
    """The keyed state of each operator, read from the savepoint's own copy (a valid
    checkpoint: reading it also proves the copied state files load)."""
    from spark_chkpt.snapshot.state_reader import read_state

    if not operators:
        return []
    spark = _reader_session("spark-chkpt-savepoint-show")
    try:
        return [
            read_state(
                spark,
                checkpoint_location=checkpoint,
                operator_id=op.operator_id,
                limit=limit,
            )
            for op in operators
        ]
    finally:
        spark.stop()


def _savepoint_restore(args: argparse.Namespace) -> int:
    from spark_chkpt.snapshot.savepoint_restore import restore_savepoint

    result = restore_savepoint(
        savepoint=args.savepoint,
        checkpoint_location=args.checkpoint,
        mode=args.mode,
        table=args.table,
    )
    print(
        f"checkpoint {result.checkpoint_location} written ({result.mode}): query "
        f"{result.query_id} resumes at batch {result.resumes_at}"
    )
    if result.restore_version is not None:
        print(
            f"table {result.table} rolled back from version {result.rolled_back_from} in "
            f"version {result.restore_version}"
            + (
                f" ({result.others_rolled_back} commit(s) without app id undone)"
                if result.others_rolled_back
                else ""
            )
        )
    elif result.table is not None:
        print(f"table {result.table} already ends at that snapshot: left as it is")
    return 0


def _savepoint_parsers(sub: Any) -> None:
    sp = sub.add_parser(
        "savepoint",
        help="savepoints: create, stop with one, list, show, restore (rewind or fork)",
    ).add_subparsers(dest="action", required=True)
    create = sp.add_parser("create", help="savepoint a query's newest completed snapshot")
    create.add_argument("checkpoint", help="the query's checkpointLocation")
    create.add_argument("--dir", required=True, help="the folder that keeps savepoints")
    create.add_argument("--batch", type=int, default=None, help="snapshot N (default: newest)")
    create.add_argument("--table", default=None, help="the sink's table, if records lack it")
    create.set_defaults(run=_savepoint_create)
    stop = sp.add_parser(
        "stop", help="stop a running job with a savepoint of its last snapshot (Flink's stop)"
    )
    stop.add_argument("checkpoint", help="the running query's checkpointLocation")
    stop.add_argument("--dir", required=True, help="the folder that keeps savepoints")
    stop.add_argument("--timeout", type=float, default=600.0, help="seconds to wait (600)")
    stop.set_defaults(run=_savepoint_stop)
    listing = sp.add_parser("list", help="the complete savepoints in a folder, oldest first")
    listing.add_argument("dir", help="the folder that keeps savepoints")
    listing.add_argument("--json", action="store_true", help="print JSON")
    listing.set_defaults(run=_savepoint_list)
    show = sp.add_parser("show", help="a savepoint's manifest (and its keyed state)")
    show.add_argument("savepoint", help="the savepoint's folder")
    show.add_argument("--state", action="store_true", help="print the keyed state (starts Spark)")
    show.add_argument("--limit", type=int, default=None, help="print at most L keys")
    show.add_argument("--json", action="store_true", help="print JSON")
    show.set_defaults(run=_savepoint_show)
    restore = sp.add_parser(
        "restore",
        help="write a new checkpoint from a savepoint: rewind (same query, table "
        "rolled back) or fork (new query id, new table)",
    )
    restore.add_argument("savepoint", help="the savepoint's folder")
    restore.add_argument("--checkpoint", required=True, help="an empty folder to write")
    restore.add_argument("--mode", required=True, choices=("rewind", "fork"))
    restore.add_argument(
        "--table",
        default=None,
        help="rewind: the table (default: the manifest's); fork: the new table, checked to differ",
    )
    restore.set_defaults(run=_savepoint_restore)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="spark-chkpt",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", required=True)
    broker = sub.add_parser(
        "broker", help="run the embedded broker in the foreground and print its bootstrap address"
    )
    broker.add_argument("--host", default="127.0.0.1")
    broker.add_argument("--port", type=int, default=None, help="default: a free port")
    broker.add_argument(
        "--kafka",
        action="store_true",
        help="run the real Apache Kafka broker (jars from `make setup`) instead of Tansu",
    )
    broker.add_argument(
        "--data-dir", default=None, help="with --kafka: keep the storage here (default: a temp dir)"
    )
    broker.add_argument(
        "--topic",
        action="append",
        default=[],
        help="create NAME[:PARTITIONS] once the broker is up (repeatable)",
    )
    broker.set_defaults(run=_broker)
    helps = {
        "demo": "run the demo pipeline on an embedded broker (--help lists its options)",
        "bench": "benchmark the pipeline against the raw client (--help lists its options)",
    }
    found = programs()
    for name in sorted(found):  # dispatched before parsing: see below
        sub.add_parser(name, help=helps.get(name, f"run the {name} program"))
    snaps = sub.add_parser("snapshots", help="list the snapshot records of a query")
    snaps.add_argument("checkpoint", help="the query's checkpointLocation")
    snaps.add_argument("--json", action="store_true", help="print JSON with a summary")
    snaps.set_defaults(run=_snapshots)
    state = sub.add_parser(
        "state",
        help="print the keyed state of a snapshot (Spark's statestore reader), one line per key",
    )
    state.add_argument("checkpoint", help="the query's checkpointLocation")
    state.add_argument(
        "--batch", type=int, default=None, help="snapshot N (default: the newest committed)"
    )
    state.add_argument("--operator", type=int, default=0, help="stateful operator id (0)")
    state.add_argument(
        "--store-name", default="default", help="state store (stream-stream joins have several)"
    )
    state.add_argument("--limit", type=int, default=None, help="print at most L keys")
    state.add_argument("--json", action="store_true", help="print JSON")
    state.set_defaults(run=_state)
    recover = sub.add_parser(
        "recover",
        help="the checkpoint folder is lost: write a new one from the Delta table's last "
        "snapshot, so the query resumes exactly where the table ends (stateless queries)",
    )
    recover.add_argument("--table", required=True, help="the chkpt-delta table's path")
    recover.add_argument("--checkpoint", required=True, help="an empty folder to write")
    recover.add_argument(
        "--app-id", default=None, help="the query id to recover, if the table holds several"
    )
    recover.set_defaults(run=_recover)
    _savepoint_parsers(sub)
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments and arguments[0] in found:  # its options belong to the program's parser
        logging.basicConfig(level=logging.WARNING)
        program: Callable[[Sequence[str]], int] = found[arguments[0]].load()
        return int(program(arguments[1:]))
    args = parser.parse_args(arguments)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    from spark_chkpt.errors import ChkptError

    try:
        return int(args.run(args))
    except ChkptError as e:
        print(f"spark-chkpt {args.command}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
