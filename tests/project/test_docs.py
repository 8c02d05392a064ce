"""The code a reader copies from the docs is the code the tests run.

Python and shell blocks of the pages (``docs/**/*.md``) must be snippet includes of
``docs/examples/`` (which ``tests/project/test_docs_examples.py`` runs) or one of
the few commands listed below with the test that runs them; the README, which GitHub
shows without the include step, must hold verbatim sections of those files."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
EXAMPLES = DOCS / "examples"
SNIPPET_BASES = (EXAMPLES, ROOT / "conf", ROOT / "databricks", ROOT)  # mkdocs.yml base_path
COPYABLE = {"python", "bash", "sh", "shell"}
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
INCLUDE = re.compile(r'^--8<-- "([^":]+)(?::([\w-]+))?"$')

# Commands that are not example files, and what runs them.
RUN_ELSEWHERE = {
    "make wheel": "tests/project/test_wheel.py (python -m build, as the target)",
    "pip install dist/spark_chkpt-*.whl": "tests/project/test_wheel.py",
    "BOOTSTRAP_SERVERS=127.0.0.1:9092 TOPIC=page-views WORK=/tmp/chkpt python kafka_to_delta.py": (
        "tests/project/test_docs_examples.py (the same script, the same variables)"
    ),
}


def blocks(path: Path) -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in FENCE.finditer(path.read_text())]


def pages() -> list[Path]:
    return sorted(p for p in DOCS.rglob("*.md"))


def make_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text()
    return set(re.findall(r"^([a-z][\w-]*):", text, re.MULTILINE))


def section(path: Path, name: str) -> str:
    text = path.read_text()
    start, end = (rf"^[ \t]*# --8<-- \[{edge}:{re.escape(name)}\]" for edge in ("start", "end"))
    match = re.search(rf"{start}\n(.*?){end}", text, re.MULTILINE | re.DOTALL)
    assert match, f"{path.name} has no section {name!r}"
    return match.group(1)


def included_file(name: str) -> Path:
    for base in SNIPPET_BASES:
        if (base / name).is_file():
            return base / name
    raise AssertionError(f"snippet {name!r} is in none of {[str(b) for b in SNIPPET_BASES]}")


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(DOCS)))
def test_copyable_blocks_of_a_page_are_examples_the_tests_run(page: Path) -> None:
    targets = make_targets()
    for lang, body in blocks(page):
        lines = [line for line in body.splitlines() if line.strip()]
        for line in lines:
            include = INCLUDE.match(line.strip())
            if include:
                path = included_file(include.group(1))
                if include.group(2):
                    section(path, include.group(2))
                continue
            if lang not in COPYABLE:
                continue
            command = line.split("#", 1)[0].strip()
            if not command:
                continue
            if command.startswith("make "):
                assert command.split()[1] in targets, f"{page.name}: {command}: no such target"
                continue
            assert command in RUN_ELSEWHERE, (
                f"{page.relative_to(ROOT)}: a {lang} line no test runs: {line!r}. Put it in "
                "docs/examples/ and include it with --8<--."
            )


def test_every_example_is_included_somewhere_and_every_section_exists() -> None:
    text = "\n".join(p.read_text() for p in pages())
    for example in sorted(EXAMPLES.iterdir()):
        assert f'"{example.name}' in text, f"docs/examples/{example.name} is on no page"


def test_readme_python_blocks_are_sections_of_the_examples() -> None:
    examples = [p.read_text() for p in EXAMPLES.glob("*.py")]
    found = [body for lang, body in blocks(ROOT / "README.md") if lang == "python"]
    assert len(found) >= 3
    for body in found:
        code = textwrap.dedent(body)
        assert any(code in example for example in examples), (
            f"README block is not in docs/examples/ word for word:\n{code}"
        )


def test_readme_commands_are_make_targets() -> None:
    targets = make_targets()
    for lang, body in blocks(ROOT / "README.md"):
        if lang in COPYABLE - {"python"}:
            for line in body.splitlines():
                command = line.split("#", 1)[0].strip()
                if command:
                    assert command.startswith("make "), line
                    assert command.split()[1] in targets, line


def test_readme_stays_short() -> None:
    assert len((ROOT / "README.md").read_text().splitlines()) <= 200


def test_the_command_line_page_holds_every_commands_help_as_the_parsers_print_it() -> None:
    """docs/reference/cli.md is read on GitHub too, where no hook runs: the generated
    reference is committed, and must be what the parsers print now (regenerate with
    ``python docs/hooks.py --write-cli``)."""
    import sys

    sys.path.insert(0, str(DOCS))
    try:
        import hooks
    finally:
        sys.path.remove(str(DOCS))
    page = (DOCS / "reference" / "cli.md").read_text()
    assert "### `spark-chkpt lineage`" in page and "### `spark-chkpt status`" in page
    assert page == hooks.cli_page(), "run: python docs/hooks.py --write-cli"
