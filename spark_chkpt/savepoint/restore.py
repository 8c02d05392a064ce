"""Restoring a savepoint into a new checkpoint location: rewind or fork.

:func:`restore_savepoint` writes a checkpoint from which the query resumes at batch
N + 1 with the savepoint's offsets and state. ``rewind``: the same query id, and the
sink rolled back to snapshot N by the rewind its sink kind gives
(:mod:`spark_chkpt.sinks`; planned at step 2, applied at step 5). ``fork``: a new query
id beside the original, into its own table or topic. It relies on the manifest
(:mod:`spark_chkpt.savepoint.manifest`), ``savepoint check`` for the job to be started,
:func:`spark_chkpt.snapshot.checkpoint.write_checkpoint` for Spark's files and the
epoch. The protocol, step by step (``# Step N`` in the body), and why it is safe to run
again: docs/concepts/savepoints.md (spark_chkpt/savepoint/restore.py).
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from spark_chkpt.fs import Location, qualify, resolve
from spark_chkpt.savepoint.check import restorable_operators
from spark_chkpt.savepoint.manifest import (
    Savepoint,
    SavepointError,
    load_savepoint,
    verify_files,
)
from spark_chkpt.savepoint.plan import JobPlan
from spark_chkpt.savepoint.rewind import (
    rewind_point,
    savepoint_kind,
    sink_options_of,
    sink_rewind,
)
from spark_chkpt.savepoint.shadow import check_shadow
from spark_chkpt.snapshot.checkpoint import checkpoint_in_use, write_checkpoint
from spark_chkpt.snapshot.rewind import RewindRequest, Rewound, SinkRewind
from spark_chkpt.snapshot.store import STORE_DIR

log = logging.getLogger(__name__)

RestoreMode = Literal["rewind", "fork"]
RESTORE_FILE = "chkpt/restore.json"
_SPARK_LOGS = ("metadata", "offsets/", "commits/", f"{STORE_DIR}/")


@dataclass(frozen=True)
class RestoreResult:
    """What a restore did: the new checkpoint, its query id, where it resumes, and for a
    rewind what the sink's rewind did (``rewound``: the sink's own object, a table's
    versions before and after, a topic's revoked snapshots, a plugin's own)."""

    checkpoint_location: str
    mode: RestoreMode
    savepoint: str
    query_id: str
    resumes_at: int
    generation: int = 0  # the new checkpoint's generation (snapshot/epoch.py)
    dropped_operators: tuple[int, ...] = ()  # state not restored (allow_non_restored_state)
    shadow: bool = False  # a shadow fork (restore_savepoint's shadow)
    rewound: Rewound | None = None  # a rewind's: what the sink's rewind did

    def lines(self) -> list[str]:
        """The report of the restore, as ``savepoint restore`` prints it."""
        head = (
            f"checkpoint {self.checkpoint_location} written ({self.mode}): query "
            f"{self.query_id} resumes at batch {self.resumes_at}, generation "
            f"{self.generation} (writers of older generations are fenced)"
        )
        done = self.rewound
        tail = (
            []
            if done is None
            else done.lines(generation=self.generation, resumes_at=self.resumes_at)
        )
        return [head, *tail]


def restore_savepoint(
    *,
    savepoint: str,
    checkpoint_location: str,
    mode: RestoreMode,
    table: str | None = None,
    storage_options: Mapping[str, str] | None = None,
    discard_other_writers: Sequence[str] = (),
    dead_letter_table: str | None = None,
    job: JobPlan | None = None,
    allow_non_restored_state: bool = False,
    shadow: bool = False,
    kafka_bootstrap_servers: str | None = None,
    control_topic: str | None = None,
    sink_options: Mapping[str, str] | None = None,
    check_only: bool = False,
    source_rewrite: Callable[[Any], Any] | None = None,
) -> RestoreResult:
    """Write a checkpoint at ``checkpoint_location`` (empty, or an unfinished restore of
    the same savepoint) from the savepoint at ``savepoint``; see the module docstring.
    ``discard_other_writers`` names the other writers (app ids, or ``no-app-id``) whose
    commits after N a rewind may undo (in the table and its dead-letter table).
    ``dead_letter_table``: the sink's dead-letter table, needed only for a savepoint of
    an earlier release whose table does not name it (a rewind rolls it back; a fork
    checks that its new one differs). ``kafka_bootstrap_servers`` (and ``control_topic``
    if the sink set ``controlTopic``): a rewind of a query writing ``chkpt-kafka``.
    ``sink_options``: the sink kind's own inputs by name, handed to its kind (the four
    keywords before it are the built-in sinks' options ``table``, ``dead-letter-table``,
    ``bootstrap-servers``, ``control-topic``, given by name).
    ``check_only``: steps 1 to 3 only (every check), nothing written (a pipeline checks
    all its jobs before restoring any). ``source_rewrite``: applied to each source's
    offsets (Spark's offset log of N and N - 1, and the snapshot record's) as the fork
    writes them (a pipeline fork renames its intermediate topics).

    ``job``: the plan of the job to be started on the new checkpoint
    (:func:`spark_chkpt.savepoint.plan.load_job`); the restore then runs
    ``savepoint check`` first and refuses an incompatible job, or one that drops an
    operator's state unless ``allow_non_restored_state`` (that state is then left out of
    the new checkpoint: Spark refuses state of an operator the query no longer has).
    ``shadow``: a fork that runs beside production (:mod:`spark_chkpt.savepoint.shadow`):
    refused unless it provably writes nothing production owns."""
    if mode not in ("rewind", "fork"):
        raise SavepointError(f"restore mode {mode!r}: rewind or fork")
    # Step 1
    point = load_savepoint(location=savepoint)
    verify_files(point)
    manifest = point.manifest
    dropped: tuple[int, ...] = ()
    if job is not None:
        dropped = restorable_operators(
            savepoint=point, plan=job, allow_non_restored_state=allow_non_restored_state
        )
    production: dict[str, Any] | None = None
    if shadow:
        if mode != "fork":
            raise SavepointError("--shadow is a fork beside production: use it with --mode fork")
        production = check_shadow(
            savepoint=point, checkpoint_location=checkpoint_location, table=table, job=job
        )
    # Step 2
    request = RewindRequest(
        storage_options=storage_options,
        discard_other_writers=discard_other_writers,
        sink_options=sink_options_of(
            sink_options,
            table=table,
            dead_letter_table=dead_letter_table,
            kafka_bootstrap_servers=kafka_bootstrap_servers,
            control_topic=control_topic,
        ),
    )
    rewind: SinkRewind | None = None
    if mode == "rewind":
        rewind = sink_rewind(point, request=request)
        query_id, generation = manifest.query_id, rewind.plan()
    else:
        savepoint_kind(point).check_fork(point=rewind_point(point), request=request)
        query_id, generation = str(uuid.uuid4()), 1
    # Steps 3 and 4
    location = qualify(checkpoint_location)
    root = resolve(location)
    previous = _previous_of(root, location, point, mode)
    if previous is not None:
        query_id = str(previous["query_id"])
        generation = int(previous.get("generation", generation))
    result = RestoreResult(
        checkpoint_location=location,
        mode=mode,
        savepoint=point.location,
        query_id=query_id,
        resumes_at=manifest.batch_id + 1,
        generation=generation,
    )
    if check_only:
        return result
    if previous is None or not root.child("metadata").exists():
        _clear_partial(root)
        marker = _marker(point, mode, query_id, generation, dropped, shadow, production)
        root.child(*RESTORE_FILE.split("/")).write_atomic(json.dumps(marker, indent=2) + "\n")
        _write(point, location, query_id, mode, generation, dropped, source_rewrite)
    result = replace(result, dropped_operators=dropped, shadow=shadow)
    # Step 5
    if rewind is not None:
        rewound = rewind.apply(generation=generation, checkpoint_location=location)
        result = replace(result, rewound=rewound)
    log.info(
        "restored savepoint %s (%s) into %s: query %s resumes at batch %d",
        point.location,
        mode,
        location,
        query_id,
        result.resumes_at,
    )
    return result


def _previous_of(
    root: Location, location: str, point: Savepoint, mode: RestoreMode
) -> dict[str, Any] | None:
    """Step 3: the unfinished restore of the same savepoint the folder holds (None: an
    empty folder); refused when the folder holds another restore, a query that ran on
    it past N, or a checkpoint of its own."""
    manifest = point.manifest
    previous = _previous_restore(root)
    if previous is not None and (
        previous.get("savepoint_id") != manifest.savepoint_id or previous.get("mode") != mode
    ):
        raise SavepointError(
            f"{location} holds a restore of savepoint {previous.get('savepoint_id')} "
            f"({previous.get('mode')}): restore into an empty folder"
        )
    if previous is not None and root.child("metadata").exists():
        _refuse_moved_on(root, location, manifest.batch_id)
    if previous is None and checkpoint_in_use(root) is not None:
        raise SavepointError(
            f"{location} already holds a Spark checkpoint ({checkpoint_in_use(root)} "
            "exists): restore into an empty folder"
        )
    return previous


def _marker(
    point: Savepoint,
    mode: RestoreMode,
    query_id: str,
    generation: int,
    dropped: Sequence[int],
    shadow: bool,
    production: dict[str, Any] | None,
) -> dict[str, Any]:
    """``chkpt/restore.json``: what is being restored, written first."""
    manifest = point.manifest
    sink = manifest.sink
    return {
        "savepoint": point.location,
        "savepoint_id": manifest.savepoint_id,
        "mode": mode,
        "batch_id": manifest.batch_id,
        "from_query_id": manifest.query_id,
        "query_id": query_id,
        "sink": sink.kind if sink else None,
        "target": sink.target if sink else None,
        "restored_ms": int(time.time() * 1000),
        "dropped_operators": list(dropped),
        "shadow": shadow,
        "production": production,
        "generation": generation,
    }


def _refuse_moved_on(root: Location, location: str, batch: int) -> None:
    """A restore run again on a folder its query already ran from:
    rolling the table back under it would lose the batches it committed since."""
    later = [
        int(i.base_name)
        for i in root.child("offsets").list()
        if i.base_name.isdigit() and int(i.base_name) > batch
    ]
    if later:
        raise SavepointError(
            f"{location} already holds this restore, and the query ran on it to batch "
            f"{max(later)}: running the restore again would roll the table back to "
            f"snapshot {batch} under it and lose batches {batch + 1}..{max(later)}. To go "
            f"on, start the query on {location}. To go back to snapshot {batch} again, "
            "restore into an empty folder (a query still running on this one is then "
            "fenced). Nothing was changed."
        )


def _write(
    point: Savepoint,
    location: str,
    query_id: str,
    mode: RestoreMode,
    generation: int,
    dropped: Sequence[int] = (),
    source_rewrite: Callable[[Any], Any] | None = None,
) -> None:
    """Spark's files from the savepoint's checkpoint copy, the state before metadata
    (but the ``dropped`` operators')."""
    left_out = tuple(f"state/{op}/" for op in dropped)
    manifest = point.manifest
    source = resolve(point.checkpoint)
    batch = manifest.batch_id
    record = manifest.snapshot_record()
    if record is not None and mode == "fork":
        record = replace(
            record,
            app_id=query_id,
            table_version=None,
            target=None,
            dead_letter_target=None,
            dead_letter_version=None,
        )
    if record is not None and source_rewrite is not None:
        record = replace(record, source_offsets=[source_rewrite(s) for s in record.source_offsets])
    previous = f"offsets/{batch - 1}"
    has_previous = any(f.path == previous for f in manifest.files)

    def copy_rest(root: Location) -> None:
        for f in manifest.files:
            if not f.path.startswith(_SPARK_LOGS) and not f.path.startswith(left_out):
                source.child(f.path).copy_to(root.child(f.path))

    write_checkpoint(
        checkpoint_location=location,
        query_id=query_id,
        batch_id=batch,
        offsets=_rewrite(source.child("offsets", str(batch)).read_text(), source_rewrite),
        previous_offsets=(
            _rewrite(source.child(*previous.split("/")).read_text(), source_rewrite)
            if has_previous
            else None
        ),
        commit=source.child("commits", str(batch)).read_text(),
        record=record,
        before_metadata=copy_rest,
        generation=(generation, mode, point.location),
    )


def _rewrite(text: str, source_rewrite: Callable[[Any], Any] | None) -> str:
    """An offset log entry (version, metadata, one line per source) with each source's
    offsets passed through ``source_rewrite``."""
    if source_rewrite is None:
        return text
    lines = text.splitlines()
    sources = [
        line if line.strip() == "-" else json.dumps(source_rewrite(json.loads(line)))
        for line in lines[2:]
    ]
    return "\n".join([*lines[:2], *sources]) + ("\n" if text.endswith("\n") else "")


def _previous_restore(root: Location) -> dict[str, Any] | None:
    return root.child(*RESTORE_FILE.split("/")).read_json_object()


def _clear_partial(root: Location) -> None:
    """Files of an unfinished restore (no metadata yet) are written again."""
    for part in ("offsets", "commits", "state", STORE_DIR):
        root.child(*part.split("/")).delete_dir()


def explain_start_error(error: BaseException, *, checkpoint_location: str) -> str | None:
    """A sentence for Spark's error when a query restored from a savepoint fails to
    start on it (the state no longer fits the query), or None if it is not one."""
    text = str(error)
    markers = (
        "STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE",
        "STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE",
        "StateSchemaNotCompatible",
        "STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA",
        "STATE_STORE_INCORRECT_NUM_STATE_STORE_PARTITIONS",
        "numShufflePartitions",
    )
    if not any(m in text for m in markers):
        return None
    root = resolve(qualify(checkpoint_location))
    origin = _previous_restore(root) or {}
    first = next((line for line in text.splitlines() if line.strip()), text)
    where = (
        f"restored from savepoint {origin.get('savepoint_id')}"
        if origin
        else "a savepoint's checkpoint"
    )
    return (
        f"the query cannot use the state in {qualify(checkpoint_location)} "
        f"({where}): its stateful operators or their key/value schemas differ from the "
        f"ones that wrote the state. Spark says: {first}. A savepoint restores into the "
        "same stateful operators with the same schemas (and the same number of shuffle "
        "partitions); other changes to the query are fine."
    )
