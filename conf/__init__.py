"""The settings files, shipped in the wheel as ``spark_chkpt.conf``.

The jobs read ``conf/<name>`` from the working folder when it exists (a checkout of
the repo, or a copy the user edits), else the copy installed with the package, so a
job started from any folder gets the same defaults.
"""

from __future__ import annotations

from pathlib import Path

FOLDER = Path(__file__).resolve().parent


def settings_file(name: str) -> Path | None:
    """``./conf/<name>`` if it exists, else the installed copy, else None."""
    for candidate in (Path("conf") / name, FOLDER / name):
        if candidate.is_file():
            return candidate
    return None
