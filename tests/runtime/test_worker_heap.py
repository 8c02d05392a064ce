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


KAFKA_WORKER = r"""
import json, sys
from pyspark import cloudpickle
cls = cloudpickle.loads(bytes.fromhex(sys.argv[1]))  # as a worker gets the registered class
import spark_chkpt.connectors.kafka_source, spark_chkpt.connectors.kafka_sink
import spark_chkpt.kafka.sink.assembler
print(json.dumps({
    "name": cls.name(),
    "delta": sorted(m for m in sys.modules if m.startswith(("spark_chkpt.delta", "deltalake"))),
}))
"""


def test_a_kafka_worker_does_not_import_the_delta_sink() -> None:
    """A Python worker that unpickles the registered ``chkpt-kafka`` class and runs its
    read and write tasks loads none of the Delta sink's modules (they cost every new
    worker about 90 ms); the package still names both formats."""
    from pyspark import cloudpickle

    from spark_chkpt.connectors import DATA_SOURCES, DeltaDataSource, KafkaDataSource

    assert [source.name() for source in DATA_SOURCES] == ["chkpt-kafka", "chkpt-delta"]
    assert DeltaDataSource.name() == "chkpt-delta"
    registered = KafkaDataSource.for_session(task_slots=2)
    done = subprocess.run(
        [sys.executable, "-c", KAFKA_WORKER, cloudpickle.dumps(registered).hex()],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out == {"name": "chkpt-kafka", "delta": []}
