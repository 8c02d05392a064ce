"""``spark-chkpt``: the project's command line.

spark-chkpt broker [--port N] [--topic NAME[:PARTITIONS] ...]   run the embedded broker
spark-chkpt status CHECKPOINT [--bootstrap-servers S] [--json]  where a query stands
spark-chkpt s3 [--port N] [--bucket NAME ...]                   run the S3 test server
spark-chkpt snapshots CHECKPOINT [--json]                       list a query's snapshots
spark-chkpt state CHECKPOINT [--batch N] [--operator K] [--json] print a snapshot's keyed state
spark-chkpt recover --table TABLE --checkpoint NEW             rebuild a lost checkpoint
spark-chkpt migrate CHECKPOINT --to chkpt|spark [--table T] [--dry-run]  change formats
spark-chkpt savepoint create CHECKPOINT --dir DIR               savepoint the newest snapshot
spark-chkpt savepoint stop CHECKPOINT --dir DIR                 stop a running job with one
spark-chkpt savepoint list DIR | show SAVEPOINT [--state]       print manifests (and state)
spark-chkpt savepoint check SAVEPOINT JOB [-- ARGS]            will it restore into a new job?
spark-chkpt savepoint restore SAVEPOINT --checkpoint NEW --mode rewind|fork [--shadow]
spark-chkpt diff TABLE_A TABLE_B [--key COLS] [--json]          two tables at equal offsets
spark-chkpt lineage TABLE --version V [--bootstrap-servers S] [--json]  a version's lineage
spark-chkpt demo [...]                                          run the demo pipeline
spark-chkpt bench [...]                                         run the benchmark
"""

# One module per command group (``cli/<group>.py``: ``run`` and ``add_parser``); the
# work itself is in the modules each one imports.

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from spark_chkpt.cli import (
    broker,
    diff,
    kafka_config,
    lineage,
    migrate,
    programs,
    recover,
    s3,
    savepoint,
    snapshots,
    state,
    status,
)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="spark-chkpt",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", required=True)
    broker.add_parser(sub)
    s3.add_parser(sub)
    helps = {
        "demo": "run the demo pipeline on an embedded broker (--help lists its options)",
        "bench": "benchmark the pipeline against the raw client (--help lists its options)",
    }
    found = programs.programs()
    for name in sorted(found):  # dispatched before parsing: see below
        sub.add_parser(name, help=helps.get(name, f"run the {name} program"))
    status.add_parser(sub)
    snapshots.add_parser(sub)
    state.add_parser(sub)
    recover.add_parser(sub)
    migrate.add_parser(sub)
    savepoint.add_parser(sub)
    diff.add_parser(sub)
    lineage.add_parser(sub)
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments and arguments[0] in found:  # its options belong to the program's parser
        logging.basicConfig(level=logging.WARNING)
        program = programs.load(found[arguments[0]])
        if program is None:
            print(
                f"spark-chkpt {arguments[0]}: not in the wheel; run it from a checkout of "
                "spark-chkpt (make bench, or python -m bench)",
                file=sys.stderr,
            )
            return 2
        return int(program(arguments[1:]))
    args = parser.parse_args(arguments)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    from spark_chkpt.errors import ChkptError

    try:
        kafka_config.apply(args)
        return int(args.run(args))
    except ChkptError as e:
        prefix = f"spark-chkpt {args.command}: "  # a message that names it already keeps its own
        message = str(e)
        print(message if message.startswith(prefix) else prefix + message, file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
