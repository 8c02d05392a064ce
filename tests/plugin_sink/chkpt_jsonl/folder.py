"""The sink's folder: staged files, the commit of each batch, the writers' generations.

``data/<batch>-<task>-<uuid>.jsonl``: one task attempt's rows, invisible until a commit
names it. ``_commits/<N>.json``: batch N's commit (its files, the app id, the
generation, the snapshot record), created once, atomically (written aside, then linked:
a second creation fails). ``_generations/<app>.json``: the newest generation of each
app id, which fences the writers of older ones.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

COMMITS = "_commits"
DATA = "data"
GENERATIONS = "_generations"


class JsonLinesFolder:
    """One ``chkpt-jsonl`` folder (a local path)."""

    def __init__(self, path: str) -> None:
        self.path = Path(path.removeprefix("file://"))

    def stage(self, *, batch_id: int, task: int, rows: Iterable[Mapping[str, Any]]) -> str:
        """Phase 1: write ``rows`` to a new file; its name (not visible yet)."""
        data = self.path / DATA
        data.mkdir(parents=True, exist_ok=True)
        name = f"{batch_id}-{task}-{uuid.uuid4().hex}.jsonl"
        aside = data / f".{name}.tmp"
        with aside.open("w") as out:
            for row in rows:
                out.write(json.dumps(dict(row), sort_keys=True) + "\n")
        os.replace(aside, data / name)
        return name

    def discard(self, names: Sequence[str]) -> None:
        """Delete staged files no commit names (an aborted or duplicate attempt's)."""
        for name in names:
            (self.path / DATA / name).unlink(missing_ok=True)

    def commit_of(self, batch_id: int) -> dict[str, Any] | None:
        """Batch ``batch_id``'s commit, or None."""
        try:
            doc: dict[str, Any] = json.loads(self._commit_path(batch_id).read_text())
        except FileNotFoundError:
            return None
        return doc

    def commit(self, *, batch_id: int, doc: Mapping[str, Any]) -> bool:
        """Phase 2's one atomic step: create batch ``batch_id``'s commit; False if one
        exists already (another attempt's)."""
        target = self._commit_path(batch_id)
        target.parent.mkdir(parents=True, exist_ok=True)
        aside = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
        aside.write_text(json.dumps(dict(doc), sort_keys=True))
        try:
            os.link(aside, target)
        except FileExistsError:
            return False
        finally:
            aside.unlink()
        return True

    def holds_commits(self) -> bool:
        """The folder is one this sink writes (it has a commits folder)."""
        return (self.path / COMMITS).is_dir()

    def batches(self) -> list[int]:
        """The committed batches, in order."""
        found = (self.path / COMMITS).glob("*.json")
        return sorted(int(p.stem) for p in found if p.stem.isdigit())

    def rows(self) -> list[dict[str, Any]]:
        """Every committed row, batch by batch: what a reader of the folder sees."""
        rows: list[dict[str, Any]] = []
        for batch in self.batches():
            for name in (self.commit_of(batch) or {}).get("files", []):
                with (self.path / DATA / name).open() as lines:
                    rows += [json.loads(line) for line in lines if line.strip()]
        return rows

    def drop_after(self, batch_id: int) -> list[int]:
        """A rewind's step: delete the commits after ``batch_id`` (newest first, so an
        interrupted rewind leaves a prefix) and their files; the batches dropped."""
        dropped = [b for b in self.batches() if b > batch_id]
        for batch in reversed(dropped):
            files = (self.commit_of(batch) or {}).get("files", [])
            self._commit_path(batch).unlink(missing_ok=True)
            self.discard(files)
        return dropped

    def generation(self, app_id: str) -> int | None:
        """The newest generation of ``app_id`` the folder records (None: none)."""
        try:
            return int(json.loads(self._generation_path(app_id).read_text())["generation"])
        except FileNotFoundError:
            return None

    def set_generation(self, app_id: str, generation: int) -> None:
        path = self._generation_path(app_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        aside = path.with_name(f".{path.name}.tmp")
        aside.write_text(json.dumps({"generation": generation}))
        os.replace(aside, path)

    def _commit_path(self, batch_id: int) -> Path:
        return self.path / COMMITS / f"{batch_id:020d}.json"

    def _generation_path(self, app_id: str) -> Path:
        return self.path / GENERATIONS / f"{app_id}.json"
