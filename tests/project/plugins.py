"""Sink plugins kept under ``tests/`` as a user keeps one: a folder holding a
``pyproject.toml`` that declares an entry point in the group ``spark_chkpt.sinks``
(docs/how-to/write-a-sink.md). The repository's checks recognise such a folder by that
file, so that adding one needs no edit outside it: it mirrors no package of
``spark_chkpt/``, and its chains prove its own sink, not the engine's fail points."""

from __future__ import annotations

import functools
import re
from pathlib import Path

from spark_chkpt.sinks import ENTRY_POINT_GROUP

TESTS = Path(__file__).resolve().parents[1]
_DECLARES = re.compile(
    rf'^\[project\.entry-points\.(?:"{re.escape(ENTRY_POINT_GROUP)}"|{re.escape(ENTRY_POINT_GROUP)})\]',
    re.MULTILINE,
)


@functools.cache
def plugin_folders() -> tuple[Path, ...]:
    """Every folder under ``tests/`` that is a sink plugin's package."""
    found = TESTS.rglob("pyproject.toml")
    return tuple(sorted(toml.parent for toml in found if _DECLARES.search(toml.read_text())))


def in_plugin(path: Path) -> bool:
    """``path`` (a file or folder under ``tests/``) is inside a sink plugin's folder."""
    return any(path == folder or folder in path.parents for folder in plugin_folders())
