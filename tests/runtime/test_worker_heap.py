"""A Python worker's imports frozen out of pyspark's per-task ``gc.collect()``
(spark_chkpt.runtime.worker_heap): frozen once the imports arrive, not for a task's own objects."""

from __future__ import annotations

import json
import subprocess
import sys

SCRIPT = r"""
import gc, json
from spark_chkpt.runtime.worker_heap import FREEZE_ABOVE, freeze_imports
out = {}
gc.collect()
out["small_heap"] = freeze_imports()  # an interpreter with this module only
import pyarrow, pandas, kafka, deltalake  # a task's first use of its libraries
import spark_chkpt.connectors.kafka_source, spark_chkpt.connectors.delta
gc.collect()  # what pyspark's daemon does after each task
out["walked_before"] = len(gc.get_objects(generation=2))
out["after_imports"] = freeze_imports()
out["frozen"] = gc.get_freeze_count()
out["walked_after"] = len(gc.get_objects(generation=2))
survivors = [[i] for i in range(FREEZE_ABOVE // 4)]  # a task's own survivors
gc.collect()
out["task_survivors"] = freeze_imports()
out["again"] = freeze_imports()
print(json.dumps(out))
"""


def test_imports_are_frozen_and_a_tasks_survivors_are_not() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True, timeout=120
    )
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["small_heap"] is False
    assert out["after_imports"] is True
    assert out["frozen"] > 50_000
    assert out["task_survivors"] is False
    assert out["again"] is False
    # The point of it: a full collection walks only what is not frozen.
    assert out["walked_before"] > 50_000
    assert out["walked_after"] < 1_000, out
