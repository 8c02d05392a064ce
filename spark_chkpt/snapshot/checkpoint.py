"""Reading Spark's own checkpoint folder: the query id and each batch's planned offsets.

Spark writes ``<checkpointLocation>/metadata`` (``{"id": "<query id>"}``) when a query
first starts, and ``offsets/<N>`` before running batch N: a version line (``v1``), a
batch-metadata JSON line, then one line per source in the query's order (``-`` for a
source with no offset yet).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from spark_chkpt.errors import ChkptError
from spark_chkpt.fs import Location, resolve


@dataclass(frozen=True)
class BatchPlan:
    """What Spark planned for one batch: its id and each source's end offset."""

    batch_id: int
    sources: tuple[Any, ...]
    metadata: dict[str, Any]


class SparkCheckpoint:
    """Read-only view of a Structured Streaming checkpoint location."""

    def __init__(self, *, location: str) -> None:
        self.uri = location
        self.root: Location = resolve(location)

    def query_id(self) -> str:
        """Spark's query id: stable across restarts and moves of the checkpoint folder."""
        meta = self.root.child("metadata")
        try:
            return str(json.loads(meta.read_text())["id"])
        except FileNotFoundError as e:
            raise ChkptError(
                f"{meta} does not exist: is {self.uri} a Spark streaming checkpoint location?"
            ) from e
        except (ValueError, KeyError, TypeError) as e:
            raise ChkptError(f"{meta} is not Spark query metadata: {e}") from e

    def plan(self, batch_id: int) -> BatchPlan:
        path = self.root.child("offsets", str(batch_id))
        try:
            lines = path.read_text().splitlines()
        except FileNotFoundError as e:
            raise ChkptError(f"Spark has no plan for batch {batch_id}: {path} is missing") from e
        if len(lines) < 2 or not lines[0].startswith("v"):
            raise ChkptError(f"{path} is not a Spark offset log entry")
        try:
            metadata = json.loads(lines[1])
            sources = tuple(None if line.strip() == "-" else json.loads(line) for line in lines[2:])
        except ValueError as e:
            raise ChkptError(f"{path}: malformed offset line: {e}") from e
        return BatchPlan(batch_id=batch_id, sources=sources, metadata=metadata)

    def committed(self, batch_id: int) -> bool:
        """Whether Spark's commit log has batch ``batch_id``."""
        return self.root.child("commits", str(batch_id)).exists()
