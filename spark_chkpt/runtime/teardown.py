"""A clean interpreter exit after pyarrow was used with Python-backed files.

More: docs/concepts/runtime.md (spark_chkpt/runtime/teardown.py).
"""

from __future__ import annotations

import atexit
import ctypes
import glob
import logging
import os
import sys
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

_IO_POOL = "_ZN5arrow2io8internal15GetIOThreadPoolEv"
_CPU_POOL = "_ZN5arrow8internal16GetCpuThreadPoolEv"
_NUM_TASKS = "_ZN5arrow8internal10ThreadPool11GetNumTasksEv"
_installed = False


def install() -> None:
    """Register :func:`drain_arrow_pools` to run at interpreter exit (once)."""
    global _installed
    if not _installed:
        atexit.register(drain_arrow_pools)
        _installed = True


def drain_arrow_pools(*, timeout_s: float = 30.0) -> bool:
    """Wait until pyarrow's thread pools are idle; True when they are (or pyarrow is unused).

    Polls with ``time.sleep``, which releases the GIL so pool threads can finish the
    Python decrefs they are waiting for. A task still running after ``timeout_s`` is
    logged and left.
    """
    if "pyarrow" not in sys.modules:
        return True
    counters = _task_counters()
    if not counters:
        return True
    deadline = time.monotonic() + timeout_s
    idle_checks = 0
    while idle_checks < 2:  # twice in a row: a task of one pool may queue one in the other
        busy = sum(count() for count in counters)
        idle_checks = idle_checks + 1 if busy == 0 else 0
        if time.monotonic() > deadline:
            log.warning("pyarrow still had %d task(s) running at exit after %ss", busy, timeout_s)
            return False
        time.sleep(0.001)
    return True


def _task_counters() -> list[Callable[[], int]]:
    """Callables returning the task count of pyarrow's I/O and CPU pools, or []."""
    try:
        import pyarrow

        libs = [
            path
            for folder in pyarrow.get_library_dirs()
            for path in glob.glob(os.path.join(folder, "libarrow.so.*"))
            + glob.glob(os.path.join(folder, "libarrow.*.dylib"))
        ]
        if not libs:
            return []
        lib = ctypes.CDLL(sorted(libs, key=len)[0])
        counters: list[Callable[[], int]] = []
        for getter_name in (_IO_POOL, _CPU_POOL):
            getter = getattr(lib, getter_name)
            getter.restype = ctypes.c_void_p
            pool = getter()
            num_tasks = getattr(lib, _NUM_TASKS)
            num_tasks.argtypes = [ctypes.c_void_p]
            num_tasks.restype = ctypes.c_int
            counters.append(lambda f=num_tasks, p=pool: int(f(p)))  # type: ignore[misc]
        return counters
    except (AttributeError, OSError, ImportError) as e:
        log.debug("pyarrow's thread pools cannot be inspected here: %s", e)
        return []
