"""The imports ARCHITECTURE.md forbids, checked on the source (AST, lazy imports included)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Source folders and the import names setup.cfg gives them.
FOLDERS = {
    "spark_chkpt": "spark_chkpt",
    "connectors": "spark_chkpt.connectors",
    "jobs": "spark_chkpt.jobs",
    "bench": "bench",
    "conf": "spark_chkpt.conf",
}
BASE = {
    "spark_chkpt.errors",
    "spark_chkpt.fs",
    "spark_chkpt.deadline",
    "spark_chkpt.options",
    "spark_chkpt.offsets",
    "spark_chkpt.version",
    "spark_chkpt.runtime.jars",
    # A failure's first line (imports only errors): the connectors and the supervisor.
    "spark_chkpt.runtime.report",
    # Every task's first line: a Python worker's imports frozen (imports only gc).
    "spark_chkpt.runtime.worker_heap",
    # The one place that asks which Spark runs (imports only errors): the connectors, the
    # source's options, the JVM step.
    "spark_chkpt.runtime.spark_version",
    # The fail points' registry: engine code the tests and the environment switch on.
    "spark_chkpt.failpoints",
    # Whether a session is Spark Connect's (imports only errors and version): what must
    # not reach for a SparkContext there asks it.
    "spark_chkpt.runtime.connect",
}
# Each engine package and the project packages it may import (besides itself and the
# base); a module belongs to the longest package that holds it.
LAYERS = {
    "spark_chkpt.alignment": set(),
    # The test brokers' probes and the event generator build their clients through the
    # one Kafka client factory, with a secured broker's credentials; the Spark Connect
    # server takes the project's sessions' settings (jars, Delta, state store).
    "spark_chkpt.testing": {"spark_chkpt.kafka.client", "spark_chkpt.session"},
    "spark_chkpt.state": set(),
    "spark_chkpt.kafka.client": set(),
    "spark_chkpt.snapshot": {"spark_chkpt.state"},
    # A recover reads the table's records and starts a new generation in it.
    "spark_chkpt.recovery": {"spark_chkpt.snapshot", "spark_chkpt.delta", "spark_chkpt.sinks"},
    # The control topic: the barrier index sinks write and readers read (shared types).
    "spark_chkpt.kafka.control": {"spark_chkpt.alignment", "spark_chkpt.kafka.client"},
    "spark_chkpt.kafka.sink": {
        "spark_chkpt.alignment",
        "spark_chkpt.kafka.client",
        "spark_chkpt.kafka.control",
        "spark_chkpt.snapshot",
    },
    # The source cuts at the barriers the control topic indexes.
    "spark_chkpt.kafka.source": {
        "spark_chkpt.alignment",
        "spark_chkpt.kafka.client",
        "spark_chkpt.kafka.control",
    },
    "spark_chkpt.delta": {"spark_chkpt.snapshot"},  # the shared table, log, staging, replay
    # The writer protocol's features, pure: a table's metadata and a batch, no log, no delta-rs.
    "spark_chkpt.delta.features": set(),
    # The project's own log commits: a staged file's add action, the features' rules.
    "spark_chkpt.delta.log": {"spark_chkpt.delta.features", "spark_chkpt.delta.staging"},
    # The door to delta-rs, over the own log commits; snapshot records in commitInfo.
    "spark_chkpt.delta.table": {
        "spark_chkpt.delta.features",
        "spark_chkpt.delta.log",
        "spark_chkpt.delta.staging",
        "spark_chkpt.snapshot",
    },
    "spark_chkpt.delta.sink": {"spark_chkpt.delta", "spark_chkpt.snapshot"},
    "spark_chkpt.delta.upsert": {"spark_chkpt.delta", "spark_chkpt.snapshot"},
    # One object per sink kind, each from its sink's package: what the tools ask a sink.
    "spark_chkpt.sinks": {
        "spark_chkpt.delta.sink",
        "spark_chkpt.delta.upsert",
        "spark_chkpt.kafka.sink",
        "spark_chkpt.snapshot",
    },
    # A restore asks the sink's kind for its rewind (spark_chkpt.sinks; not the sinks'
    # packages, nor delta/: the rewind goes through them); a pipeline savepoint reads the
    # control topics and creates a fork's topics.
    "spark_chkpt.savepoint": {
        "spark_chkpt.sinks",
        "spark_chkpt.kafka.control",
        "spark_chkpt.snapshot",
        "spark_chkpt.state",
        "spark_chkpt.alignment",
        "spark_chkpt.kafka.client",
    },
    # Two tables paired by their snapshot records' offsets, read through delta/.
    "spark_chkpt.diff": {"spark_chkpt.delta", "spark_chkpt.recovery", "spark_chkpt.sinks"},
    # A migration reads Spark's logs and the table's txn, writes the chkpt side's files,
    # and keeps keyed state through savepoint check.
    "spark_chkpt.migrate": {
        "spark_chkpt.snapshot",
        "spark_chkpt.delta",
        "spark_chkpt.state",
        "spark_chkpt.savepoint",
        "spark_chkpt.sinks",
    },
    "spark_chkpt.metrics": {"spark_chkpt.snapshot"},
    # The supervisor counts failures and restarts into the metrics' RestartMetrics.
    "spark_chkpt.restart": {"spark_chkpt.metrics"},
    # Lineage reads the table's records and, like the source's planner, the control
    # topics the sinks write.
    "spark_chkpt.lineage": {
        "spark_chkpt.delta",
        "spark_chkpt.sinks",
        "spark_chkpt.snapshot",
        "spark_chkpt.alignment",
        "spark_chkpt.kafka.control",
    },
}
# Packages whose modules are shared by the sub-packages listed in LAYERS under them.
SHARED = {"spark_chkpt.delta": {"spark_chkpt.delta.sink", "spark_chkpt.delta.upsert"}}


def modules() -> dict[str, Path]:
    found = {}
    for folder, package in FOLDERS.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            name = ".".join((package, *parts))
            found[name.removesuffix(".__init__")] = path
    return found


def imports_of(path: Path, name: str) -> Iterator[str]:
    """Every module ``path`` imports, at module level or inside functions."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            yield module
            yield from (f"{module}.{alias.name}" for alias in node.names)


def under(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


GRAPH = {name: set(imports_of(path, name)) for name, path in modules().items()}
MODULES = set(GRAPH)


def project_imports(name: str) -> set[str]:
    return {m for m in GRAPH[name] if m in MODULES and m != name}


def test_the_scan_sees_the_layout() -> None:
    assert {"spark_chkpt.alignment.aligner", "spark_chkpt.connectors.kafka_source"} <= MODULES
    assert "spark_chkpt.alignment.barrier" in project_imports("spark_chkpt.alignment.cut")


@pytest.mark.parametrize("name", sorted(m for m in MODULES if under(m, "spark_chkpt.alignment")))
def test_alignment_imports_no_spark_kafka_or_delta(name: str) -> None:
    third_party = {m.split(".")[0] for m in GRAPH[name]}
    assert not third_party & {"pyspark", "kafka", "confluent_kafka", "deltalake", "pyarrow"}


@pytest.mark.parametrize(
    "name",
    sorted(m for m in MODULES if under(m, "spark_chkpt") and not under(m, "spark_chkpt.jobs")),
)
def test_only_delta_imports_deltalake(name: str) -> None:
    """delta-rs has one door: ``spark_chkpt.delta`` (the jobs, programs that read a
    table back for their user, and the benchmark aside)."""
    if under(name, "spark_chkpt.delta"):
        return
    assert "deltalake" not in {m.split(".")[0] for m in GRAPH[name]}, name


def _never_section() -> str:
    return (ROOT / "ARCHITECTURE.md").read_text().split("## Never", 1)[1]


def test_the_doors_to_delta_rs_are_the_ones_architecture_md_names() -> None:
    """ARCHITECTURE.md's "Never" names the engine modules that import ``deltalake``."""
    rule = next(b for b in _never_section().split("\n- ") if "imports `deltalake`" in b)
    named = {
        "spark_chkpt." + p.removesuffix(".py").replace("/", ".")
        for p in re.findall(r"`([a-z_/]+\.py)`", rule)
    }
    importing = {
        name
        for name in MODULES
        if under(name, "spark_chkpt")
        and not under(name, "spark_chkpt.jobs")
        and "deltalake" in {m.split(".")[0] for m in GRAPH[name]}
    }
    assert importing <= named, f"deltalake imported outside the named doors: {importing - named}"
    # history reads through target.py, whose DeltaTarget is made of the doors: neither is one
    readers = {"spark_chkpt.delta.table.history", "spark_chkpt.delta.table.target"}
    assert named - readers <= importing, f"named as doors, import no deltalake: {named - importing}"


def _retries_by_hand(path: Path) -> bool:
    """Whether a loop of the module at ``path`` both catches an error and sleeps: a call
    retried by hand."""
    for loop in ast.walk(ast.parse(path.read_text())):
        if not isinstance(loop, (ast.While, ast.For)):
            continue
        inside = list(ast.walk(loop))
        sleeps = any(
            isinstance(n, ast.Call)
            and (getattr(n.func, "attr", None) or getattr(n.func, "id", None)) == "sleep"
            for n in inside
        )
        if sleeps and any(isinstance(n, ast.Try) for n in inside):
            return True
    return False


def test_the_one_retry_loop_is_the_one_architecture_md_names() -> None:
    """ARCHITECTURE.md's "Never" names ``deadline.py``'s ``retry`` as the one retry loop
    and the modules whose loops that sleep and catch are no request retried."""
    rule = next(b for b in _never_section().split("\n- ") if "retries a call by hand" in b)
    named = {
        "spark_chkpt." + p.removesuffix(".py").replace("/", ".")
        for p in re.findall(r"`([a-z_/]+\.py)`", rule)
    }
    by_hand = {
        name
        for name, path in modules().items()
        if under(name, "spark_chkpt")
        and not under(name, "spark_chkpt.testing")
        and _retries_by_hand(path)
    }
    assert "spark_chkpt.deadline" in by_hand, "the scan no longer sees deadline.retry's loop"
    assert by_hand == named, (
        f"retry loops by hand: {by_hand - named}; named, none: {named - by_hand}"
    )


KAFKA_CLIENTS = {"KafkaConsumer", "KafkaProducer", "KafkaAdminClient", "KafkaClient"}
CONFLUENT_CLIENTS = {"Consumer", "Producer", "AdminClient"}


CLIENT_DOOR = "spark_chkpt.kafka.client.factory"


def test_the_door_to_the_kafka_clients_is_the_one_architecture_md_names() -> None:
    """ARCHITECTURE.md's "Never" names the one module that builds kafka-python and
    librdkafka clients: the module the test below lets build them."""
    rule = next(b for b in _never_section().split("\n- ") if "constructs a kafka-python" in b)
    named = {
        "spark_chkpt." + p.removesuffix(".py").replace("/", ".")
        for p in re.findall(r"`([a-z_/]+\.py)`", rule)
    }
    assert named == {CLIENT_DOOR}, named
    assert CLIENT_DOOR in MODULES


@pytest.mark.parametrize("name", sorted(MODULES))
def test_only_the_factory_builds_kafka_clients(name: str) -> None:
    """Every kafka-python and librdkafka client is built by ``kafka/client/factory.py``."""
    if name == CLIENT_DOOR or under(name, "bench"):
        return
    built = []
    for node in ast.walk(ast.parse(modules()[name].read_text())):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
        owner = (
            func.value.id
            if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
            else ""
        )
        if called in KAFKA_CLIENTS or (
            called in CONFLUENT_CLIENTS and (owner == "confluent_kafka" or owner == "")
        ):
            built.append(f"{called} (line {node.lineno})")
    assert not built, f"{name} builds Kafka clients itself: {built}"


@pytest.mark.parametrize("name", sorted(MODULES))
def test_engine_never_imports_jobs_bench_or_connectors(name: str) -> None:
    if not under(name, "spark_chkpt") or any(
        under(name, top) for top in ("spark_chkpt.jobs", "bench", "spark_chkpt.connectors")
    ):
        return
    forbidden = {"spark_chkpt.jobs", "bench"}
    if name != "spark_chkpt":  # register() is where the engine hands Spark the connectors
        forbidden.add("spark_chkpt.connectors")
    bad = {m for m in project_imports(name) if any(under(m, f) for f in forbidden)}
    assert not bad, f"{name} imports {sorted(bad)}"


def layer_of(name: str) -> str | None:
    """The most specific package of LAYERS that holds ``name``."""
    held = [layer for layer in LAYERS if under(name, layer)]
    return max(held, key=len) if held else None


@pytest.mark.parametrize("name", sorted(MODULES))
def test_layers(name: str) -> None:
    if name in BASE:
        assert not {m for m in project_imports(name) if m not in BASE}, name
        return
    layer = layer_of(name)
    if layer is None:
        return
    allowed = LAYERS[layer]
    bad = set()
    for m in project_imports(name):
        if m in BASE or under(m, layer) or any(under(m, a) for a in allowed):
            # a shared package's own modules, not the sub-packages above them
            if layer in SHARED and any(under(m, top) for top in SHARED[layer]):
                bad.add(m)
            continue
        bad.add(m)
    assert not bad, f"{name} ({layer}) imports {sorted(bad)}"


def test_engine_never_imports_testing() -> None:
    """``testing/`` holds only what tests and ``make demo`` start (the brokers, the S3
    server, the generator): no engine module imports it, the fail points included
    (``spark_chkpt/failpoints.py`` is engine code). The programs that start those
    servers (``spark-chkpt broker``, ``s3``; the jobs, the benchmark) may."""
    assert "spark_chkpt.failpoints" in project_imports("spark_chkpt.snapshot.coordinator")
    for name in MODULES:
        if not under(name, "spark_chkpt") or under(name, "spark_chkpt.testing"):
            continue
        if any(under(name, top) for top in ("spark_chkpt.cli", "spark_chkpt.jobs")):
            continue
        bad = {m for m in GRAPH[name] if under(m, "spark_chkpt.testing")}
        assert not bad, f"{name} imports {sorted(bad)}"


def test_no_import_cycles() -> None:
    graph = {name: project_imports(name) for name in MODULES}
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycle = [*path[path.index(nxt) :], nxt]
                raise AssertionError(" -> ".join(cycle))
            if nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])


def test_setup_cfg_lists_every_package() -> None:
    """A sub-package missing from setup.cfg imports in a checkout (``pip install -e``) but
    is not in the wheel (``pip install .``)."""
    import configparser

    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    listed = set(cfg["options"]["packages"].split())
    packages = {
        name
        for name, path in modules().items()
        if path.name == "__init__.py" and under(name, "spark_chkpt")
    }
    assert packages == listed
    assert not any(under(p, "bench") for p in listed)  # run from a checkout, not shipped


MAX_LINES = 400  # the guide: a module past it says why under "Long modules"
SPLIT_LINES = 500  # past it, a module is split by role: no row keeps it
MAX_DOC_LINES = 20


def _long_modules() -> dict[str, str]:
    """ARCHITECTURE.md's table of long modules: path -> why it is one module."""
    text = (ROOT / "ARCHITECTURE.md").read_text()
    section = text.split("## Long modules", 1)[1].split("\n## ", 1)[0]
    rows = [
        [c.strip() for c in line.strip().strip("|").split("|")] for line in section.splitlines()
    ]
    return {r[0].strip("`"): r[1] for r in rows if len(r) >= 2 and r[0].startswith("`")}


@pytest.mark.parametrize("name", sorted(MODULES))
def test_module_size(name: str) -> None:
    """A module grows past 400 lines only with its row in ARCHITECTURE.md's table of
    long modules, saying why."""
    path = modules()[name]
    lines = len(path.read_text().splitlines())
    if lines <= MAX_LINES:
        return
    why = _long_modules().get(str(path.relative_to(ROOT)), "")
    assert why, (
        f"{path.relative_to(ROOT)}: {lines} lines, no row under ARCHITECTURE.md's Long modules"
    )


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_module_past_the_split_line(name: str) -> None:
    """Past 500 lines a module is due a split by role, with or without a row."""
    path = modules()[name]
    if under(name, "bench"):
        return
    lines = len(path.read_text().splitlines())
    assert lines <= SPLIT_LINES, f"{path.relative_to(ROOT)}: {lines} lines, past {SPLIT_LINES}"


def test_long_modules_table_names_files_of_the_tree() -> None:
    assert all((ROOT / path).is_file() for path in _long_modules()), sorted(_long_modules())


def test_long_modules_table_names_only_long_modules() -> None:
    """A row stays only while its module is past the guide: the table says what is long."""
    short = {
        path: lines
        for path in _long_modules()
        if (lines := len((ROOT / path).read_text().splitlines())) <= MAX_LINES
    }
    assert not short, f"rows under ARCHITECTURE.md's Long modules for short modules: {short}"


@pytest.mark.parametrize("name", sorted(MODULES))
def test_module_docstring_is_short(name: str) -> None:
    """A module docstring says what the module is for and what it relies on; the protocol
    goes to a page of docs/concepts/, which the docstring links in one line."""
    path = modules()[name]
    doc = ast.get_docstring(ast.parse(path.read_text()), clean=False) or ""
    lines = len(doc.strip("\n").splitlines())
    assert lines <= MAX_DOC_LINES, f"{path.relative_to(ROOT)}: a docstring of {lines} lines"


ISSUE_REFERENCE = re.compile(r"\b(issue|hole) [0-9]+|\bOver 400 lines", re.IGNORECASE)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_issue_numbers_in_code(name: str) -> None:
    """A reader of the code cannot follow "issue 35" or "hole 1 of issue 24": say what
    the code guards instead."""
    path = modules()[name]
    found = [
        f"{path.relative_to(ROOT)}:{i}: {line.strip()}"
        for i, line in enumerate(path.read_text().splitlines(), 1)
        if ISSUE_REFERENCE.search(line)
    ]
    assert not found, found


def _exception_classes(tree: ast.Module, known: set[str]) -> list[str]:
    """Classes of ``tree`` that derive from an exception (by their bases' names)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            bases = {
                b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases
            }
            if any(b in known or b.endswith(("Error", "Exception")) for b in bases):
                found.append(node.name)
    return found


BUILTIN_EXCEPTIONS = {"Exception", "BaseException", "ValueError", "TypeError", "RuntimeError"}


def test_every_exception_lives_in_errors() -> None:
    """One list of errors: each exception class is defined in ``errors.py`` and named
    ``...Error``; no other module of the engine, connectors or jobs defines one."""
    errors = ast.parse((ROOT / "spark_chkpt" / "errors.py").read_text())
    defined = _exception_classes(errors, BUILTIN_EXCEPTIONS | {"ChkptError"})
    assert "ChkptError" in {n.name for n in ast.walk(errors) if isinstance(n, ast.ClassDef)}
    assert all(name.endswith("Error") for name in defined), defined
    known = BUILTIN_EXCEPTIONS | set(defined) | {"ChkptError"}
    elsewhere = {
        name: found
        for name, path in modules().items()
        if name != "spark_chkpt.errors" and not under(name, "bench")
        for found in [_exception_classes(ast.parse(path.read_text()), known)]
        if found
    }
    assert not elsewhere, f"exception classes outside errors.py: {elsewhere}"


def _module_table() -> dict[str, set[str]]:
    """ARCHITECTURE.md's module table: folder -> the modules its row names."""
    text = (ROOT / "ARCHITECTURE.md").read_text()
    section = text.split("## Modules", 1)[1].split("\n## ", 1)[0]
    table: dict[str, set[str]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0].startswith("`"):
            continue
        folder = cells[0].strip("`").rstrip("/")
        table[folder] = {m.strip().strip("`") for m in cells[1].split(",") if m.strip()}
    return table


def test_architecture_md_module_table_matches_the_tree() -> None:
    """Every folder of Python modules has its row, naming exactly its modules."""
    tree: dict[str, set[str]] = {}
    for folder in FOLDERS:
        for path in (ROOT / folder).rglob("*.py"):
            key = str(path.parent.relative_to(ROOT))
            tree.setdefault(key, set())
            if path.stem != "__init__":
                tree[key].add(path.stem)
    assert _module_table() == tree


def _sides() -> dict[str, set[str]]:
    """ARCHITECTURE.md's table of sides: a side (``executor``, ``committer``,
    ``assembler``) -> the import names of the modules its row names."""
    text = (ROOT / "ARCHITECTURE.md").read_text()
    section = text.split("## Executor and driver", 1)[1].split("\n## ", 1)[0]
    sides: dict[str, set[str]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or not cells[0].startswith("`"):
            continue
        names = set()
        for cell in cells[1].split(","):
            folder, _, rest = cell.strip().strip("`").partition("/")
            names.add(".".join([FOLDERS[folder], *rest.split("/")]))
        sides[cells[0].strip("`")] = names
    return sides


def test_architecture_md_sides_name_modules_of_the_tree() -> None:
    sides = _sides()
    assert {"executor", "committer", "assembler"} <= set(sides)
    for side, names in sides.items():
        assert names <= MODULES, f"{side}: no such module {sorted(names - MODULES)}"


def imported_through(name: str) -> dict[str, list[str]]:
    """Every project module ``name`` imports, directly or through others, with the
    chain of imports that reaches it."""
    chains = {name: [name]}
    todo = [name]
    while todo:
        current = todo.pop()
        for nxt in sorted(project_imports(current)):
            if nxt not in chains:
                chains[nxt] = [*chains[current], nxt]
                todo.append(nxt)
    del chains[name]
    return chains


@pytest.mark.parametrize("name", sorted(_sides().get("executor", ())))
def test_no_executor_module_imports_a_committer(name: str) -> None:
    """Phase 1 runs in Spark's tasks, phase 2 on the driver: a module of the executor
    side never imports a committer, directly or through another module (the sink's
    assembler, which knows both, is the one place a writer and its committer meet)."""
    committers = _sides()["committer"]
    chains = imported_through(name)
    bad = [" -> ".join(chains[m]) for m in sorted(committers & set(chains))]
    assert not bad, f"{name} imports a committer: {'; '.join(bad)}"


def test_architecture_md_points_inside_the_repo() -> None:
    assert "../" not in (ROOT / "ARCHITECTURE.md").read_text()
