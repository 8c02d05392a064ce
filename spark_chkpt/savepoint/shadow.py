"""A shadow fork: a new version of a job run beside production from a savepoint, into
its own table, to be compared with production by ``spark-chkpt diff`` (a blue/green
deployment of a streaming job).

More: docs/concepts/savepoints.md (spark_chkpt/savepoint/shadow.py).
"""

from __future__ import annotations

from typing import Any

from spark_chkpt.errors import SavepointError
from spark_chkpt.fs import qualify
from spark_chkpt.savepoint.manifest import Savepoint, SinkInfo
from spark_chkpt.savepoint.plan import JobPlan
from spark_chkpt.sinks import sink_kind


def check_shadow(
    *,
    savepoint: Savepoint,
    checkpoint_location: str,
    table: str | None,
    job: JobPlan | None,
) -> dict[str, Any]:
    """Refuse a shadow fork that could touch production (see the module docstring);
    return what production is, for the restore's marker."""
    manifest = savepoint.manifest
    sink = manifest.sink
    prod_checkpoint = manifest.checkpoint
    new = _norm(checkpoint_location)
    if new == _norm(prod_checkpoint) or new.startswith(_norm(prod_checkpoint) + "/"):
        raise SavepointError(
            f"--shadow: {checkpoint_location} is production's checkpoint ({prod_checkpoint}) "
            "or inside it: a shadow gets a folder of its own"
        )
    _check_table(sink, table=table, job=job)
    _check_target(sink, table=table, job=job)
    if job is not None:
        _check_job(job, new=new, checkpoint_location=checkpoint_location)
    return {
        "checkpoint": prod_checkpoint,
        "query_id": manifest.query_id,
        "sink": sink.kind if sink else None,
        "target": sink.target if sink else None,
    }


def _check_table(sink: SinkInfo | None, *, table: str | None, job: JobPlan | None) -> None:
    """The shadow's table (``--table``, the job's path) is none of production's tables,
    and the two name the same one."""
    own = {"table": table, "job's path": job.sink_options.get("path") if job else None}
    prod = {
        "table": sink.target if sink else None,
        "dead-letter table": sink.dead_letters if sink else None,
    }
    for what, value in own.items():
        for prod_what, prod_value in prod.items():
            if value and prod_value and _norm(value) == _norm(prod_value):
                raise SavepointError(
                    f"--shadow: the {what} {value} is production's {prod_what}: a shadow "
                    "writes a table of its own"
                )
    path = job.sink_options.get("path") if job is not None else None
    if table and path and _norm(table) != _norm(path):
        raise SavepointError(f"--shadow: --table {table} is not the table the job writes ({path})")


def _check_target(sink: SinkInfo | None, *, table: str | None, job: JobPlan | None) -> None:
    """A shadow of a query writing Kafka writes another topic (its control topic too); of
    a query writing a table, names its own so that it can be checked."""
    kind = sink_kind(sink.kind) if sink is not None else None
    if sink is not None and kind is not None and kind.has_barriers:
        topic = job.sink_options.get(kind.target_option) if job is not None else None
        if topic is None:
            raise SavepointError(
                f"--shadow: production writes Kafka ({sink.target}); give the shadow's job "
                "(--job) so that its topic can be checked to differ"
            )
        if set(kind.barrier_topics(topic)) & set(kind.barrier_topics(sink.target)):
            raise SavepointError(
                f"--shadow: the job writes topic {topic}, production's ({sink.target}): its "
                "records and its control topic would reach production's readers"
            )
    elif not table and (job is None or not job.sink_options.get("path")):
        raise SavepointError(
            "--shadow: name the shadow's own table (--table, or --job whose sink has a path) "
            "so that it can be checked to differ from production's"
        )


def _check_job(job: JobPlan, *, new: str, checkpoint_location: str) -> None:
    """The job starts on the shadow's checkpoint and commits no consumer group's offsets."""
    if job.checkpoint_location and _norm(job.checkpoint_location) != new:
        raise SavepointError(
            f"--shadow: the job's checkpointLocation is {job.checkpoint_location}, not the "
            f"shadow's {checkpoint_location}: start it on the restored checkpoint"
        )
    for i, source in enumerate(job.sources):
        group = source.options.get("kafka.group.id")
        if group:
            raise SavepointError(
                f"--shadow: source {i} of the job sets kafka.group.id={group}: the shadow "
                "would commit its offsets to a group production may use; leave it out"
            )


def _norm(uri: str) -> str:
    return qualify(uri).rstrip("/")
