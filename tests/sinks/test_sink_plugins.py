"""Sink plugins: kinds outside ``spark_chkpt/`` declared in the entry point group
``spark_chkpt.sinks`` (the plugin of ``tests/plugin_sink``, installed into a folder on
the path), their data sources for ``register()``, and the commands a kind refuses."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from spark_chkpt.errors import ChkptError, UnsupportedSinkError
from spark_chkpt.sinks import (
    ENTRY_POINT_GROUP,
    plugin_data_sources,
    registry,
    require_tool,
    sink_kind,
    sink_kinds,
)
from tests.plugin_sink.installed import install


@pytest.fixture
def fresh_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The registry as a new process has it: built-in kinds, plugins not yet loaded."""
    monkeypatch.setattr(registry, "_KINDS", {})
    monkeypatch.setattr(registry, "_PLUGINS", [])
    monkeypatch.setattr(registry, "_FAILED", {})
    monkeypatch.setattr(registry, "_plugins_loaded", False)
    yield


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_registry: None) -> None:
    for entry in install(tmp_path / "site"):
        monkeypatch.syspath_prepend(entry)


def test_a_plugin_kind_is_found_through_its_entry_point(installed: None) -> None:
    kind = sink_kind("chkpt-jsonl")
    assert type(kind).__module__ == "chkpt_jsonl.kind"
    assert set(sink_kinds()) == {"chkpt-delta", "delta-upsert", "chkpt-kafka", "chkpt-jsonl"}
    [source] = plugin_data_sources()  # the built-in formats come from connectors/
    assert source.name() == "chkpt-jsonl"


def test_without_the_plugin_its_kind_is_unknown(fresh_registry: None) -> None:
    assert "chkpt-jsonl" not in sink_kinds()
    assert plugin_data_sources() == []
    with pytest.raises(ChkptError, match="sink kind 'chkpt-jsonl' is not one this release"):
        sink_kind("chkpt-jsonl")


def test_a_broken_plugin_is_named_and_the_others_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_registry: None
) -> None:
    info = tmp_path / "broken_sink-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-sink\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\nbroken = no_such_mod:KIND\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert sink_kind("chkpt-delta").name == "chkpt-delta"
    with pytest.raises(ChkptError, match=r"plugin 'broken' failed to load .*no_such_mod"):
        sink_kind("broken")


@pytest.mark.parametrize("tool", ["recover", "diff", "lineage", "migrate"])
def test_a_command_a_kind_does_not_support_names_the_kind(installed: None, tool: str) -> None:
    with pytest.raises(UnsupportedSinkError) as refused:
        require_tool("chkpt-jsonl", tool=tool, command=tool)  # type: ignore[arg-type]
    assert str(refused.value).startswith(
        f"spark-chkpt {tool}: sink kind 'chkpt-jsonl' does not support {tool}"
    )


def test_the_built_in_kinds_keep_every_command_they_ran() -> None:
    for name in ("chkpt-delta", "delta-upsert", None, ""):
        for tool in ("recover", "diff", "lineage", "migrate"):
            require_tool(name or None, tool=tool, command=tool)  # type: ignore[arg-type]
    for tool in ("lineage", "migrate"):
        require_tool("chkpt-kafka", tool=tool, command=tool)  # type: ignore[arg-type]
    with pytest.raises(UnsupportedSinkError, match="'chkpt-kafka' does not support recover"):
        require_tool("chkpt-kafka", tool="recover", command="recover")


def test_looking_for_plugins_imports_no_built_in_sink() -> None:
    """``register()`` asks for the plugins' data sources in every job's cold start: with
    none installed, that imports no sink's modules (about 60 ms)."""
    import subprocess
    import sys

    probe = (
        "import sys; from spark_chkpt.sinks import plugin_data_sources; "
        "assert plugin_data_sources() == []; "
        "print(sorted(m for m in sys.modules if m.startswith(('spark_chkpt.delta', "
        "'spark_chkpt.kafka'))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]", done.stdout


def test_a_kind_that_lacks_a_question_is_refused_naming_it(fresh_registry: None) -> None:
    class Half:
        name = "half"
        has_barriers = False

    from spark_chkpt.sinks import register_sink_kind

    with pytest.raises(ChkptError, match="sink kind 'half' lacks target_option, progress_hint"):
        register_sink_kind(Half())  # type: ignore[arg-type]
    assert "half" not in sink_kinds()


def test_nothing_outside_the_plugins_folder_names_it() -> None:
    """The plugin changed no file of the engine, the connectors or the jobs."""
    root = Path(__file__).resolve().parents[2]
    for folder in ("spark_chkpt", "connectors", "jobs", "conf"):
        for path in (root / folder).rglob("*.py"):
            text = path.read_text()
            assert "chkpt_jsonl" not in text and "chkpt-jsonl" not in text, path


@pytest.fixture
def jsonl_folder(installed: None, tmp_path: Path) -> Path:
    """A ``chkpt-jsonl`` folder as its sink leaves it: batch 0 staged and committed."""
    from chkpt_jsonl.folder import JsonLinesFolder

    path = tmp_path / "out"
    folder = JsonLinesFolder(str(path))
    name = folder.stage(batch_id=0, task=0, rows=[{"id": 1}])
    assert folder.commit(batch_id=0, doc={"app_id": "app", "files": [name], "generation": 0})
    return path


@pytest.mark.parametrize(
    "command",
    [
        ["recover", "--table", "{folder}", "--checkpoint", "{tmp}/chk"],
        ["diff", "{folder}", "{folder}"],
        ["lineage", "{folder}", "--version", "0"],
    ],
    ids=["recover", "diff", "lineage"],
)
def test_a_command_on_a_plugins_folder_names_the_kind_and_the_command(
    jsonl_folder: Path,
    tmp_path: Path,
    command: list[str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Not "not a Delta table": the kinds are asked which one writes the folder."""
    from spark_chkpt.cli import main

    monkeypatch.delenv("KAFKA_BOOTSTRAP_SERVERS", raising=False)
    args = [a.format(folder=jsonl_folder, tmp=tmp_path) for a in command]
    assert main(args) != 0
    err = capsys.readouterr().err
    assert f"spark-chkpt {args[0]}: sink kind 'chkpt-jsonl' does not support {args[0]}" in err
    assert err.count(f"spark-chkpt {args[0]}:") == 1, err  # the command named once
    assert str(jsonl_folder) in err and "not a Delta table" not in err
    assert not (tmp_path / "chk").exists()


def test_a_folder_no_kind_holds_is_still_not_a_delta_table(installed: None, tmp_path: Path) -> None:
    from spark_chkpt.errors import RecoveryError
    from spark_chkpt.recovery.rebuild import recover_checkpoint
    from spark_chkpt.sinks import kind_holding

    (tmp_path / "plain").mkdir()
    assert kind_holding(str(tmp_path / "plain")) is None
    with pytest.raises(RecoveryError, match="not a Delta table"):
        recover_checkpoint(table_uri=str(tmp_path / "plain"), checkpoint_location=str(tmp_path))
