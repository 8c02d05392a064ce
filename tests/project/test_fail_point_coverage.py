"""Every fail point of the engine is killed by at least one kill chain, and
docs/contributing.md's table says which: retiring or merging a chain cannot silently drop
a point.

A chain is a test module marked ``fault``; it kills a point where it names the point
(``"after-staging@1"``, ``f"{point}@0"`` over a tuple of names, ``FaultPoint.AFTER_STAGING``)
anywhere but as a stall or a failure (``stall_at=``, ``SPARK_CHKPT_STALL_AT``, ``fail_at=``,
``SPARK_CHKPT_FAIL_AT``). ``in-commit`` only fails (Spark then aborts the batch), so a
chain that fails it counts for it.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

from spark_chkpt.failpoints import KILLABLE, FaultPoint
from tests.project.plugins import in_plugin

ROOT = Path(__file__).resolve().parents[2]
TABLE_PAGE = ROOT / "docs" / "contributing.md"
STALL_NAMES = {"stall_at", "SPARK_CHKPT_STALL_AT"}
FAIL_NAMES = {"fail_at", "SPARK_CHKPT_FAIL_AT"}


def _is_fault_module(tree: ast.Module) -> bool:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets
        ):
            return "fault" in {n.attr for n in ast.walk(node.value) if isinstance(n, ast.Attribute)}
    return False


def _point_of(node: ast.AST) -> FaultPoint | None:
    """The fail point ``node`` names, as a string constant or a ``FaultPoint`` member."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return next((p for p in FaultPoint if re.fullmatch(rf"{p.value}(@.*)?", node.value)), None)
    if (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "FaultPoint"
        and node.attr in FaultPoint.__members__
    ):
        return FaultPoint[node.attr]
    return None


def _uses(tree: ast.Module) -> tuple[set[FaultPoint], set[FaultPoint]]:
    """The points a module kills, and those it fails (a stall counts for neither)."""
    context: dict[int, str] = {}  # id of a node under stall_at= / fail_at= -> which
    for node in ast.walk(tree):
        pairs: list[tuple[str, ast.AST]] = []
        if isinstance(node, ast.keyword) and node.arg:
            pairs.append((node.arg, node.value))
        elif isinstance(node, ast.Dict):
            pairs += [
                (k.value, v)
                for k, v in zip(node.keys, node.values, strict=True)
                if isinstance(k, ast.Constant) and isinstance(k.value, str)
            ]
        for name, value in pairs:
            kind = "stall" if name in STALL_NAMES else "fail" if name in FAIL_NAMES else None
            if kind:
                context.update((id(sub), kind) for sub in ast.walk(value))
    killed: set[FaultPoint] = set()
    failed: set[FaultPoint] = set()
    for node in ast.walk(tree):
        point = _point_of(node)
        if point is not None:
            kind = context.get(id(node), "kill")
            if kind == "kill":
                killed.add(point)
            elif kind == "fail":
                failed.add(point)
    return killed, failed


@functools.cache
def chains_by_point() -> dict[FaultPoint, list[str]]:
    found: dict[FaultPoint, list[str]] = {p: [] for p in FaultPoint}
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        if in_plugin(path):  # a sink plugin's chains prove its own sink
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        if not _is_fault_module(tree):
            continue
        killed, failed = _uses(tree)
        module = path.relative_to(ROOT).as_posix()
        for point in FaultPoint:
            if (point in killed and point in KILLABLE) or (
                point not in KILLABLE and point in failed | killed
            ):
                found[point].append(module)
    return found


def documented() -> dict[str, list[str]]:
    """The table under "Fail points and the chains that kill them"."""
    _, _, section = TABLE_PAGE.read_text().partition(
        "### Fail points and the chains that kill them"
    )
    rows: dict[str, list[str]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 2 and cells[0].startswith("`") and cells[0] != "`fail point`":
            rows[cells[0].strip("`")] = re.findall(r"`([^`]+)`", cells[1])
        elif rows and not line.startswith("|"):
            break
    return rows


def test_every_fail_point_is_killed_by_a_chain() -> None:
    missing = [p.value for p, modules in chains_by_point().items() if not modules]
    assert not missing, f"fail points no kill chain (a fault-marked module) kills: {missing}"


def test_the_contributing_page_names_the_chains_of_each_point() -> None:
    found = {p.value: sorted(modules) for p, modules in chains_by_point().items()}
    rows = "\n".join(
        f"| `{point}` | {', '.join(f'`{m}`' for m in names)} |" for point, names in found.items()
    )
    assert documented() == found, (
        "docs/contributing.md's fail point table differs from the chains; its rows now:\n" + rows
    )


def test_a_stalled_or_failed_point_is_not_counted_as_killed() -> None:
    source = """
import pytest
pytestmark = pytest.mark.fault
run(kill_at="after-staging@1")
run(stall_at="after-intent@1", env={"SPARK_CHKPT_FAIL_AT": "in-commit@2"})
run(env={"SPARK_CHKPT_STALL_AT": FaultPoint.AFTER_COMPLETE.value})
for point in ("between-barriers", FaultPoint.IN_ABORT):
    run(kill_at=f"{point}@0")
"""
    tree = ast.parse(source)
    assert _is_fault_module(tree)
    killed, failed = _uses(tree)
    assert killed == {
        FaultPoint.AFTER_STAGING,
        FaultPoint.BETWEEN_BARRIERS,
        FaultPoint.IN_ABORT,
    }
    assert failed == {FaultPoint.IN_COMMIT}
