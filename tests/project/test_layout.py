"""The tests are laid out like the code: ``tests/<package>/`` holds the tests of
``spark_chkpt/<package>/`` (or of the top-level ``jobs/``, ``bench/``), so a newcomer
changing a package finds its tests without grep. ``tests/chains/`` (whole-chain proofs)
and ``tests/project/`` (the repository's own checks) own no package, nor does a sink
plugin kept as a user keeps one (a folder whose ``pyproject.toml`` declares an entry
point of ``spark_chkpt.sinks``: :mod:`tests.project.plugins`)."""

from __future__ import annotations

from pathlib import Path

from tests.project.plugins import in_plugin, plugin_folders

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
# Folders of tests that mirror no package, with what they hold.
OWN_FOLDERS = {
    "chains": "the whole chain as a user runs it: kill -9 proofs, the demo, users' scripts",
    "chains/simulation": "the protocol simulation (hypothesis profiles in its conftest.py)",
    "project": "the repository as a whole: import rules, docs, wheel, Databricks bundle",
    "user_scripts": "scripts the tests start as a user would (no tests)",
}
# Source trees outside spark_chkpt/ whose tests sit at tests/<name>/.
OTHER_SOURCES = ("jobs", "bench")
# Engine packages tested from another package's folder, and where.
TESTED_ELSEWHERE = {
    "diff": "tests/savepoint/test_savepoint_check_rules.py (diff's pairing of two versions)",
}


def _test_folders() -> set[str]:
    return {
        path.parent.relative_to(TESTS).as_posix()
        for path in TESTS.rglob("test_*.py")
        if path.parent != TESTS
    }


def _source_package(folder: str) -> Path | None:
    """The source package ``tests/<folder>`` mirrors, or None."""
    for source in (ROOT / "spark_chkpt" / folder, ROOT / folder):
        if (source / "__init__.py").is_file():
            return source
    return None


def test_every_test_folder_mirrors_a_package() -> None:
    strays = sorted(
        folder
        for folder in _test_folders()
        if folder not in OWN_FOLDERS
        and not in_plugin(TESTS / folder)
        and _source_package(folder) is None
    )
    assert not strays, (
        f"tests/{{{', '.join(strays)}}} mirror no package of spark_chkpt/ "
        f"(or {', '.join(s + '/' for s in OTHER_SOURCES)}): move the files beside the "
        "package they test, or name the folder in OWN_FOLDERS"
    )


def test_a_sink_plugins_folder_is_known_by_its_pyproject() -> None:
    """The plugin of docs/how-to/write-a-sink.md, found with no name of it written here."""
    assert TESTS / "plugin_sink" in plugin_folders()
    assert in_plugin(TESTS / "plugin_sink" / "chkpt_jsonl")
    assert not in_plugin(TESTS / "chains")


def test_every_engine_package_has_its_tests_folder() -> None:
    engine = ROOT / "spark_chkpt"
    packages = {
        init.parent.relative_to(engine).as_posix()
        for init in engine.rglob("__init__.py")
        if init.parent != engine and "__pycache__" not in init.parts
    }
    folders = _test_folders()
    missing = sorted(
        package
        for package in packages
        if package not in TESTED_ELSEWHERE
        and not any(f == package or f.startswith(package + "/") for f in folders)
    )
    assert not missing, f"engine packages without tests/<package>/: {missing}"


def test_every_test_folder_is_a_package() -> None:
    """Without ``__init__.py`` two test files of one name in two folders collide."""
    loose = sorted(
        folder for folder in _test_folders() if not (TESTS / folder / "__init__.py").is_file()
    )
    assert not loose, f"test folders without __init__.py: {loose}"
