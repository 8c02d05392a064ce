"""Fencing: the epoch of a sink's writer, and the refusal of a stale one.

More: docs/concepts/delta-internals.md (spark_chkpt/snapshot/epoch.py).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from typing import Literal

from spark_chkpt.errors import FencedError
from spark_chkpt.fs import Location, qualify, resolve

EPOCH_FILE = "chkpt/epoch.json"
GENERATION_SUFFIX = "#generation"
StartedBy = Literal["rewind", "fork", "recover", "migrate"]


@dataclass(frozen=True)
class Epoch:
    """A checkpoint's generation of its app id, and what started it."""

    generation: int = 0
    started_by: str | None = None  # rewind, fork, recover, migrate; None: a fresh checkpoint
    source: str | None = None  # the savepoint or table it was started from
    started_ms: int | None = None


def generation_app_id(app_id: str) -> str:
    """The txn app id under which a Delta table records ``app_id``'s generation."""
    return f"{app_id}{GENERATION_SUFFIX}"


def writer_of(txn_app_id: str) -> str:
    """The app id a txn app id belongs to (a generation's txn belongs to its app)."""
    return txn_app_id.removesuffix(GENERATION_SUFFIX)


def read_epoch(*, checkpoint_location: str) -> Epoch:
    """The checkpoint's epoch (generation 0 when it has none: a fresh checkpoint)."""
    doc = resolve(qualify(checkpoint_location)).child(*EPOCH_FILE.split("/")).read_json_object()
    if doc is None:
        return Epoch()
    return Epoch(
        generation=int(doc.get("generation", 0)),
        started_by=doc.get("started_by"),
        source=doc.get("source"),
        started_ms=doc.get("started_ms"),
    )


def write_epoch(root: Location, *, generation: int, started_by: StartedBy, source: str) -> Epoch:
    """Record a new generation in the checkpoint folder ``root``."""
    epoch = Epoch(
        generation=generation,
        started_by=started_by,
        source=source,
        started_ms=int(time.time() * 1000),
    )
    root.child(*EPOCH_FILE.split("/")).write_atomic(json.dumps(asdict(epoch), indent=2) + "\n")
    return epoch


def check_fence(
    *,
    writer: str,
    target: str | None,
    app_id: str,
    checkpoint: str,
    mine: Epoch,
    theirs: int | None,
) -> None:
    """Refuse a writer of generation ``mine`` on a sink at generation ``theirs``."""
    if theirs is None or theirs <= mine.generation:
        return
    started = f", started by {mine.started_by} of {mine.source}" if mine.started_by else ""
    raise FencedError(
        f"{writer} {target}: this writer of app id '{app_id}' is fenced. Its checkpoint "
        f"({checkpoint}) is generation {mine.generation}{started}, but the sink is at "
        f"generation {theirs}: a later savepoint restore (rewind) or recover of this query "
        "took the sink over, and a stale writer must not commit after it. Nothing of this "
        "batch was committed (no files, no barriers, no dead letters). Run the query on "
        "the checkpoint folder the restore or recover wrote, and stop this one."
    )
