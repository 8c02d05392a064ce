"""``spark-chkpt demo`` and ``spark-chkpt bench``: programs with their own options.

The wheel declares them as entry points of group ``spark_chkpt.programs`` (setup.cfg):
the demo lives in ``jobs/``, the benchmark in the checkout's root folder ``bench/``
(not in the wheel: ``spark-chkpt bench`` runs it from a checkout, like ``make bench``).
The engine imports neither.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path

PROGRAMS_GROUP = "spark_chkpt.programs"


def programs() -> dict[str, EntryPoint]:
    """Programs the wheel declares (setup.cfg, entry points of group
    ``spark_chkpt.programs``): the demo and the benchmark live in ``jobs/`` and ``bench/``,
    which the engine never imports; they take their own command-line options."""
    return {ep.name: ep for ep in entry_points(group=PROGRAMS_GROUP)}


def load(entry: EntryPoint) -> Callable[[Sequence[str]], int] | None:
    """The program's ``main``; the benchmark only from a checkout (the current folder
    holds ``bench/``), else None."""
    if entry.name == "bench":
        checkout = Path.cwd()
        if not (checkout / "bench" / "pipeline.py").is_file():
            return None
        if str(checkout) not in sys.path:
            sys.path.insert(0, str(checkout))
    program: Callable[[Sequence[str]], int] = entry.load()
    return program
