"""``spark-chkpt state``: a snapshot's keyed state (Spark's statestore reader)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from spark_chkpt.cli.commands import add_json, command

if TYPE_CHECKING:
    from spark_chkpt.state.reader import StateSnapshot


def run(args: argparse.Namespace) -> int:
    """print the keyed state of a snapshot (Spark's statestore reader), one line per key"""
    import json

    from spark_chkpt.cli.paths import require_folder
    from spark_chkpt.fs import qualify
    from spark_chkpt.state.operators import check_retained

    require_folder(args.checkpoint, what="checkpoint")
    location = qualify(args.checkpoint)
    # The batch and the state files are checked before a JVM starts: a wrong one, or a
    # stateless query, fails in a second (Spark's reader took minutes to say so).
    batch = check_retained(checkpoint_location=location, batch_id=args.batch)
    _require_operator(location, args.operator)
    from spark_chkpt.state.reader import read_state

    spark = reader_session("spark-chkpt-state")
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
        print(json.dumps(_as_json(snap), indent=2, default=str))
    else:
        _print_table(snap)
    return 0


def _as_json(snap: StateSnapshot) -> dict[str, Any]:
    """A snapshot's state (:func:`spark_chkpt.state.reader.read_state`) as ``--json``
    prints it."""
    return {
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
    }


def _print_table(snap: StateSnapshot) -> None:
    """A snapshot's state as a heading and one aligned line per key."""
    shown = "" if len(snap.rows) == snap.keys else f", {len(snap.rows)} shown"
    print(
        f"# snapshot {snap.batch_id} of {snap.checkpoint_location}: operator "
        f"{snap.operator_id} ({snap.operator_name or '?'}), store {snap.store_name}, "
        f"state version {snap.version}, {snap.keys} keys{shown}"
    )
    columns = snap.key_columns + snap.value_columns
    cells = [[or_dash(row.get(c)) for c in columns] for row in snap.rows]
    widths = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(columns)]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip())
    for r in cells:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())


def _require_operator(location: str, operator: int) -> None:
    from spark_chkpt.errors import NoKeyedStateError
    from spark_chkpt.state.operators import operator_ids

    operators = operator_ids(checkpoint_location=location)
    if not operators:
        raise NoKeyedStateError(
            f"{location} holds no keyed state (no state/<operator> folder): the query is "
            "stateless, or has not committed a stateful batch"
        )
    if operator not in operators:
        raise NoKeyedStateError(
            f"{location} has no stateful operator {operator}; its operators: "
            + ", ".join(str(o) for o in operators)
            + " (--operator)"
        )


def or_dash(value: object) -> str:
    return "-" if value is None else str(value)


def reader_session(name: str) -> Any:
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


def add_parser(sub: Any) -> None:
    state = command(sub, "state", run=run)
    state.add_argument("checkpoint", help="the query's checkpointLocation")
    state.add_argument(
        "--batch", type=int, default=None, help="snapshot N (default: the newest committed)"
    )
    state.add_argument("--operator", type=int, default=0, help="stateful operator id (0)")
    state.add_argument(
        "--store-name", default="default", help="state store (stream-stream joins have several)"
    )
    state.add_argument("--limit", type=int, default=None, help="print at most L keys")
    add_json(state)
