"""What the command groups' modules share: a command's parser with its run function,
the arguments several commands take (the brokers with a secured cluster's settings,
``--json``), and a test server run in the foreground until Ctrl-C."""

from __future__ import annotations

import argparse
import inspect
import signal
import sys
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from spark_chkpt.cli.kafka_config import add_argument as add_kafka_config

Run = Callable[[argparse.Namespace], int]


def command(
    sub: Any, name: str, *, run: Run, description: str | None = None
) -> argparse.ArgumentParser:
    """The parser of command ``name`` under ``sub`` (argparse's subparsers), which runs
    ``run(args)``; its one-line help is ``run``'s docstring (``description``: its
    ``--help`` text, if more than that)."""
    help = " ".join(inspect.cleandoc(run.__doc__ or "").split())
    parser: argparse.ArgumentParser = sub.add_parser(name, help=help, description=description)
    parser.set_defaults(run=run)
    return parser


def add_brokers(parser: argparse.ArgumentParser, *, help: str) -> None:
    """``--kafka-config FILE`` and ``--bootstrap-servers`` (``help``: what the command
    asks the brokers)."""
    add_kafka_config(parser)
    parser.add_argument("--bootstrap-servers", default=None, help=help)


def add_job(parser: argparse.ArgumentParser, *, help: str) -> None:
    """``--job`` (``help``: what the command checks it against) and ``--job-args``, a
    script job's command line."""
    parser.add_argument("--job", default=None, help=help)
    parser.add_argument(
        "--job-args", default="", metavar="'ARGS'", help="a script job's command line, quoted"
    )


def add_json(parser: argparse.ArgumentParser, *, help: str = "print JSON") -> None:
    parser.add_argument("--json", action="store_true", help=help)


def add_listen(parser: argparse.ArgumentParser) -> None:
    """Where a test server listens: ``--host`` and ``--port``."""
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=None, help="default: a free port")


def serve(server: AbstractContextManager[Any], *, ready: Callable[[], tuple[str, str]]) -> int:
    """Run ``server`` in the foreground until SIGINT or SIGTERM. Once it is up,
    ``ready()`` gives the line printed on stdout (its address, for scripts) and the note
    printed on stderr (what it is, its log); exit status 0."""
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    with server:
        address, note = ready()
        print(address, flush=True)
        print(note, file=sys.stderr, flush=True)
        stop.wait()
    return 0
