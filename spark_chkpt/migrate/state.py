"""Step 4 of a migration's plan: a stateful query's keyed state is taken over as it is
(Spark's state stores do not depend on the source's format) when the job it moves to has
the same stateful operators, and ``savepoint check`` decides that
(:func:`spark_chkpt.savepoint.check.check_savepoint`), as it does for a restore."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from typing import Any

from spark_chkpt.errors import MigrationError
from spark_chkpt.migrate.plan import NOTHING


def state_checker(*, table: str | None, job_plan: Any) -> Callable[[str, int], list[str]]:
    """Step 4 through ``savepoint check``: a savepoint of the committed batch into a
    temporary folder (the checkpoint is only read), compared with the job's plan."""

    def check(location: str, batch: int) -> list[str]:
        from spark_chkpt.savepoint.check import CheckStatus, check_savepoint
        from spark_chkpt.savepoint.manifest import create_savepoint

        with tempfile.TemporaryDirectory(prefix="chkpt-migrate-") as folder:
            point = create_savepoint(
                checkpoint_location=location, savepoint_dir=folder, batch_id=batch, table=table
            )
            report = check_savepoint(savepoint=point, plan=job_plan)
        lines = report.lines()
        if report.status != CheckStatus.RESTORABLE:
            raise MigrationError(
                "savepoint check: the job's operators do not match the state "
                f"({'; '.join(lines)}). {NOTHING}"
            )
        return lines

    return check
