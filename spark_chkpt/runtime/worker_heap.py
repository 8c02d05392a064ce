"""Spark's Python workers: what the imports leave on the heap, frozen.

pyspark's daemon runs ``gc.collect()`` in a reused Python worker after every task
(``pyspark/daemon.py``). A worker that has imported pyarrow, pandas, the Kafka clients,
deltalake and this package holds about 100,000 objects the collector walks each time:
40-55 ms of CPU per task on this project's 2-core machine, most of a small batch's
Python work (docs/performance). :func:`freeze_imports`, called at the start of every read
and write task of the formats, moves what is alive into the permanent generation
(``gc.freeze()``) when the oldest generation holds more than :data:`FREEZE_ABOVE`
objects, so each later collection walks only what the tasks made since.

More: docs/concepts/runtime.md (spark_chkpt/runtime/worker_heap.py).
"""

from __future__ import annotations

import gc

# Objects in the oldest generation above which a task's start freezes the heap: imports
# make tens of thousands, a task's own survivors a few thousand.
FREEZE_ABOVE = 20_000


def freeze_imports() -> bool:
    """Freeze the heap if the oldest generation holds more than :data:`FREEZE_ABOVE`
    objects; whether it did. Costs a walk of that generation, small once frozen."""
    if len(gc.get_objects(generation=2)) <= FREEZE_ABOVE:
        return False
    gc.freeze()
    return True
