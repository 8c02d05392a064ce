"""``chkpt-jsonl`` as spark-chkpt's tools ask it: the object the entry point
``spark_chkpt.sinks`` names (:data:`JSONL`), found by the name its snapshot records carry.

A rewind to snapshot N (:class:`JsonLinesRewind`) records a new generation of the app id
in the folder (fencing a writer still running on the old checkpoint) and drops the
commits after N; a fork writes another folder. The sink records no snapshots a
``recover`` or ``lineage`` could read, and is no Delta table to ``diff`` or ``migrate``:
its :attr:`~JsonLinesKind.tools` are empty, and those commands refuse it by name.
"""

from __future__ import annotations

from dataclasses import dataclass

from chkpt_jsonl.committer import SINK
from chkpt_jsonl.folder import JsonLinesFolder
from pyspark.sql.datasource import DataSource

from spark_chkpt.errors import SavepointError
from spark_chkpt.snapshot.record import SnapshotRecord
from spark_chkpt.snapshot.rewind import RewindPoint, RewindRequest, check_fork_target
from spark_chkpt.snapshot.tools import Tool


@dataclass(frozen=True)
class JsonLinesRewound:
    """What the rewind did: the commits after N it dropped."""

    folder: str
    dropped: tuple[int, ...]

    def lines(self, *, generation: int, resumes_at: int) -> list[str]:
        if not self.dropped:
            return [f"folder {self.folder} already ends at that snapshot: left as it is"]
        batches = ", ".join(map(str, self.dropped))
        return [f"folder {self.folder}: commits {batches} dropped at generation {generation}"]


@dataclass(frozen=True)
class JsonLinesRewind:
    """The folder's rewind to ``point``: plan (checks), then apply."""

    point: RewindPoint
    folder: JsonLinesFolder

    def plan(self) -> int:
        batch = self.point.batch_id
        doc = self.folder.commit_of(batch)
        recorded = self.point.record.sink_state.get("files") if self.point.record else None
        if (
            doc is None
            or doc.get("app_id") != self.point.app_id
            or (recorded is not None and doc.get("files") != recorded)
        ):
            raise SavepointError(
                f"{self.folder.path} holds no commit of batch {batch} of query "
                f"{self.point.app_id} with the files snapshot {batch} recorded: it is not "
                "the folder the savepoint's query wrote"
            )
        return (self.folder.generation(self.point.app_id) or 0) + 1

    def apply(self, *, generation: int, checkpoint_location: str) -> JsonLinesRewound:
        self.folder.set_generation(self.point.app_id, generation)  # fence first
        dropped = self.folder.drop_after(self.point.batch_id)
        return JsonLinesRewound(folder=str(self.folder.path), dropped=tuple(dropped))


class JsonLinesKind:
    """The ``chkpt-jsonl`` sink's kind."""

    name = SINK
    has_barriers = False
    target_option = "path"
    progress_hint = ""
    tools: frozenset[Tool] = frozenset()

    def rewind(self, *, point: RewindPoint, request: RewindRequest) -> JsonLinesRewind:
        path = request.sink_options.get("path") or point.target
        if path is None:
            raise SavepointError(
                f"savepoint {point.savepoint_id} does not name its folder: give "
                "--sink-option path=<the folder>"
            )
        return JsonLinesRewind(point=point, folder=JsonLinesFolder(path))

    def check_fork(self, *, point: RewindPoint, request: RewindRequest) -> None:
        options = request.sink_options
        path = options.get("path") or options.get("table")  # --sink-option path, or --table
        check_fork_target(given=path, written=point.target, flag="--sink-option path")

    def describe(
        self, *, target: str | None, app_id: str, batch_id: int, version: int | None
    ) -> str:
        return f"commit {batch_id} of {app_id} in {target}"

    def barrier_topics(self, target: str | None) -> tuple[str, ...]:
        return ()

    def progress(
        self, *, record: SnapshotRecord, bootstrap_servers: str | None
    ) -> dict[str, dict[str, int]] | None:
        return None

    def holds(self, *, target: str) -> bool:
        return JsonLinesFolder(target).holds_commits()

    def data_source(self) -> type[DataSource]:
        from chkpt_jsonl.datasource import JsonLinesDataSource

        return JsonLinesDataSource


JSONL = JsonLinesKind()
