"""The plugin installed as ``pip install ./tests/plugin_sink`` would install it, without
touching the shared environment: its package's folder and a ``.dist-info`` written from
its ``pyproject.toml`` (the entry point group ``spark_chkpt.sinks``) on the path."""

from __future__ import annotations

import configparser
import os
from pathlib import Path

PLUGIN = Path(__file__).resolve().parent  # holds the package chkpt_jsonl/


def install(site: Path) -> list[str]:
    """Write the distribution's metadata under ``site``; the path entries that make the
    plugin importable and its entry points visible to ``importlib.metadata``."""
    toml = configparser.ConfigParser(interpolation=None)  # its few "key = \"value\"" lines
    toml.optionxform = str  # type: ignore[assignment,method-assign]
    toml.read_string((PLUGIN / "pyproject.toml").read_text())
    project = {k: v.strip('"') for k, v in toml["project"].items()}
    info = site / f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n"
    )
    lines = []
    for section in toml.sections():
        if section.startswith("project.entry-points."):
            lines.append(f"[{section.removeprefix('project.entry-points.').strip(chr(34))}]")
            lines += [f"{name} = {value.strip(chr(34))}" for name, value in toml[section].items()]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
    return [str(PLUGIN), str(site)]


def env_with(paths: list[str], env: dict[str, str]) -> dict[str, str]:
    """``env`` with ``paths`` first on ``PYTHONPATH`` (the job, its workers, the CLI)."""
    given = env.get("PYTHONPATH")
    return {**env, "PYTHONPATH": os.pathsep.join([*paths, *([given] if given else [])])}
