"""What every commit the project makes to a Delta table carries, and how it fails: its
properties (``txn(appId)``, the generation, the snapshot record in commitInfo), the add
actions of staged files, the table's ``metaData`` action, and a lost race named as
``CommitConflictError`` (:func:`committing`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from spark_chkpt.delta.staging import StagedFile
from spark_chkpt.errors import (
    ChkptError,
    CommitConflictError,
    CommitError,
    CommitFailureReason,
)
from spark_chkpt.snapshot.epoch import generation_app_id

if TYPE_CHECKING:
    pass

log = logging.getLogger(__name__)


def add_actions(files: Sequence[StagedFile]) -> list[Any]:
    """delta-rs ``AddAction`` s of staged ``files`` (each a data change)."""
    from deltalake.transaction import AddAction

    return [
        AddAction(
            path=f.path,
            size=f.size,
            partition_values=f.partition_values,
            modification_time=f.modification_time,
            data_change=True,
            stats=f.stats,
        )
        for f in files
    ]


def commit_properties(
    *,
    metadata: Mapping[str, Any],
    app_id: str,
    version: int | None = None,
    generation: int | None = None,
) -> Any:
    """delta-rs ``CommitProperties`` of every commit the project makes: ``metadata`` in
    commitInfo, ``txn(app_id, version)`` if ``version`` is given, and the generation
    ``txn(<app_id>#generation, generation)`` if ``generation`` is
    (:mod:`spark_chkpt.snapshot.epoch`)."""
    from deltalake import CommitProperties, Transaction

    now = int(time.time() * 1000)
    txns = []
    if version is not None:
        txns.append(Transaction(app_id=app_id, version=version, last_updated=now))
    if generation is not None:
        txns.append(
            Transaction(app_id=generation_app_id(app_id), version=generation, last_updated=now)
        )
    return CommitProperties(custom_metadata=dict(metadata), app_transactions=txns)


def metadata_action(table: Any) -> dict[str, Any]:
    """The fields of the ``metaData`` action of a delta-rs ``DeltaTable`` at its loaded
    version, but its ``schemaString``."""
    m = table.metadata()
    return {
        "id": m.id,
        "name": m.name,
        "description": m.description,
        "format": {"provider": "parquet", "options": {}},
        "partitionColumns": list(m.partition_columns),
        "configuration": {k: v for k, v in (m.configuration or {}).items() if v is not None},
        "createdTime": m.created_time,
    }


def is_conflict(error: Exception) -> bool:
    """Whether a failed delta-rs commit lost a race with another commit (worth retrying
    on a freshly opened table)."""
    text = str(error).lower()
    if "unsupported table features" in text:  # delta-rs's protocol check: never a race
        return False
    return type(error).__name__ == "CommitFailedError" or any(
        word in text for word in ("conflict", "concurrent", "already exists")
    )


@contextmanager
def committing(what: str) -> Iterator[None]:
    """Around one delta-rs commit: a lost race becomes :class:`CommitConflictError` (the
    coordinator retries it), any other failure :class:`CommitError` naming ``what``
    (the project's own errors pass as they are)."""
    try:
        yield
    except ChkptError:
        raise
    except Exception as e:
        if is_conflict(e):
            raise CommitConflictError(f"{what}: {e}") from e
        raise CommitError(f"{what}: {e}", reason=CommitFailureReason.SINK_COMMIT_FAILED) from e
