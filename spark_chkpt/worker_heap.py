"""Spark's Python workers: what the imports leave on the heap, frozen.

pyspark's daemon runs ``gc.collect()`` in a reused Python worker after every task
(``pyspark/daemon.py``). A worker that has imported pyarrow, pandas, the Kafka clients,
deltalake and this package holds about 100,000 objects the collector walks each time:
40-55 ms of CPU per task on this project's 2-core machine, most of a small batch's
Python work (docs/performance). :func:`freeze_imports`, called at the start of every read
and write task of the formats, moves what is alive into the permanent generation
(``gc.freeze()``) when the oldest generation holds more than :data:`FREEZE_ABOVE`
objects, so each later collection walks only what the tasks made since.

Why that test: the daemon has just collected (after the previous task), so what the
oldest generation holds is alive, and only imports (a task's first use of a client or a
library: tens of thousands of objects each) make it this large; a task's own survivors
(pooled consumers, caches) stay far below it and are collected as usual. So a worker
freezes a few times as its imports arrive, then never again.

What it trades: a frozen object is never examined by the cycle collector again, so a
reference cycle among frozen objects that later becomes garbage is not freed (refcounting
still frees everything else). What is frozen is modules and what they made, alive for the
worker's life. ``gc.unfreeze()`` in a task of the user's takes it back for that worker.
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
