"""``savepoint check`` (issue 28 part 3): one savepoint of the seeds' page-view counts
(complete mode into chkpt-delta), compared with real changed versions of the job
(``tests/user_scripts/page_view_versions.py``): an added filter and a renamed output
column restore; a count computed as a sum of ones (the state's value changes), an
integer key, and the aggregation removed do not. The verdicts are Spark's: a restore
checked against a job refuses what Spark would refuse, before writing anything; the
state of a removed operator is left out with ``--allow-non-restored-state`` (Spark
refuses a checkpoint holding state of an operator the query no longer has, as that
test shows), and the command line plans a user's script from a folder outside the repo.
A shadow fork of a version that stops counting one app, run beside production, differs
from it in exactly that app's count (``spark-chkpt diff``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from spark_chkpt.errors import SavepointError
from spark_chkpt.savepoint.check import CheckStatus, check_savepoint
from spark_chkpt.savepoint.manifest import Savepoint, create_savepoint
from spark_chkpt.savepoint.plan import load_job
from spark_chkpt.savepoint.restore import restore_savepoint
from spark_chkpt.testing.generator import produce_page_views
from tests.helpers import user_env

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
VERSIONS = ROOT / "tests" / "user_scripts" / "page_view_versions.py"
EVENTS = 300


@pytest.fixture(scope="module")
def counted(  # type: ignore[no-untyped-def]
    spark, bootstrap_servers: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Savepoint, dict[str, str]]]:
    """The page-view counts run over a topic, and a savepoint of their last snapshot;
    ``PV_*`` (the versions' settings) name that query while the module runs."""
    from spark_chkpt.kafka.client.topics import create_topic

    topic = f"check-counts-{time.time_ns() % 10**9}"
    create_topic(bootstrap_servers=bootstrap_servers, name=topic, partitions=2)
    produce_page_views(bootstrap_servers=bootstrap_servers, topic=topic, first=0, count=EVENTS)
    work = tmp_path_factory.mktemp("check")
    env = {
        "PV_SERVERS": bootstrap_servers,
        "PV_TOPIC": topic,
        "PV_TABLE": str(work / "counts"),
        "PV_CHECKPOINT": str(work / "chk"),
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        plan_writer = _versions().build_original(spark)
        query = plan_writer.trigger(availableNow=True).start()
        query.awaitTermination(240)
        assert query.exception() is None, query.exception()
        point = create_savepoint(checkpoint_location=env["PV_CHECKPOINT"], savepoint_dir=str(work))
        yield point, env
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _versions() -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("page_view_versions", VERSIONS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _plan(spark: Any, version: str) -> Any:
    return load_job(job=f"{VERSIONS}:build_{version}", session=lambda: spark)


def test_changed_jobs_get_the_verdicts_spark_would_give(
    spark: Any, counted: tuple[Savepoint, dict[str, str]]
) -> None:
    point, env = counted
    topic = env["PV_TOPIC"]
    expected = {
        "original": (CheckStatus.RESTORABLE, "operator 0 (stateStoreSave): restored"),
        "filtered": (CheckStatus.RESTORABLE, "operator 0 (stateStoreSave): restored"),
        # The output column's name is not in the state (the count's buffer is `count`).
        "aliased": (CheckStatus.RESTORABLE, "operator 0 (stateStoreSave): restored"),
        "renamed": (
            CheckStatus.INCOMPATIBLE,
            "operator 0 (stateStoreSave): incompatible: value schema changed (field "
            "count: bigint not null → sum: bigint (nullable))",
        ),
        "key_int": (
            CheckStatus.INCOMPATIBLE,
            "operator 0 (stateStoreSave): incompatible: key schema changed (field app: "
            "string → int)",
        ),
        "stateless": (
            CheckStatus.DROPS_STATE,
            "operator 0 (stateStoreSave): dropped (needs --allow-non-restored-state)",
        ),
    }
    for version, (status, line) in expected.items():
        report = check_savepoint(savepoint=point, plan=_plan(spark, version))
        lines = report.lines()
        assert (report.status, [x for x in lines if x.startswith("operator")]) == (
            status,
            [line],
        ), version
        assert f"source      0: chkpt-kafka topics {topic} (savepoint: {topic} partitions 0,1)" in (
            "\n".join(lines)
        )
        assert any(
            x.startswith(f"sink        chkpt-delta {env['PV_TABLE']} (the savepoint's")
            for x in lines
        ), lines
        mode = "append (savepoint: complete)" if version == "stateless" else "complete (as the"
        assert any(x.startswith(f"output mode {mode}") for x in lines), lines
        assert lines[-1].startswith(f"result      {int(status)}: "), lines


def test_restore_refuses_an_incompatible_job_and_leaves_out_dropped_state(
    spark: Any, counted: tuple[Savepoint, dict[str, str]], tmp_path: Path, monkeypatch: Any
) -> None:
    point, env = counted
    fork = tmp_path / "fork"
    with pytest.raises(SavepointError, match=r"key schema changed \(field app: string → int\)"):
        restore_savepoint(
            savepoint=point.location,
            checkpoint_location=str(fork),
            mode="fork",
            job=_plan(spark, "key_int"),
        )
    assert not fork.exists()  # nothing written
    stateless = _plan(spark, "stateless")
    with pytest.raises(SavepointError, match="--allow-non-restored-state"):
        restore_savepoint(
            savepoint=point.location, checkpoint_location=str(fork), mode="fork", job=stateless
        )
    assert not fork.exists()
    result = restore_savepoint(
        savepoint=point.location,
        checkpoint_location=str(fork),
        mode="fork",
        job=stateless,
        allow_non_restored_state=True,
    )
    assert result.dropped_operators == (0,)
    assert not (fork / "state").exists()
    assert json.loads((fork / "chkpt" / "restore.json").read_text())["dropped_operators"] == [0]

    # The stateless version runs on it from the savepoint's offsets: only the new views.
    produce_page_views(
        bootstrap_servers=env["PV_SERVERS"], topic=env["PV_TOPIC"], first=EVENTS, count=40
    )
    monkeypatch.setenv("PV_CHECKPOINT", str(fork))
    monkeypatch.setenv("PV_TABLE", str(tmp_path / "views"))
    query = _versions().build_stateless(spark).trigger(availableNow=True).start()
    query.awaitTermination(240)
    assert query.exception() is None, query.exception()
    assert DeltaTable(str(tmp_path / "views")).to_pyarrow_table().num_rows == 40

    # With the state kept (a restore that did not check the job), Spark refuses it.
    kept = tmp_path / "kept"
    restore_savepoint(savepoint=point.location, checkpoint_location=str(kept), mode="fork")
    monkeypatch.setenv("PV_CHECKPOINT", str(kept))
    monkeypatch.setenv("PV_TABLE", str(tmp_path / "views-kept"))
    query = _versions().build_stateless(spark).trigger(availableNow=True).start()
    with pytest.raises(Exception, match="STREAMING_STATEFUL_OPERATOR_NOT_MATCH"):
        query.awaitTermination(240)


def test_the_command_from_another_folder(
    counted: tuple[Savepoint, dict[str, str]], tmp_path: Path
) -> None:
    point, env = counted
    folder = tmp_path / "my-project"
    folder.mkdir()
    shutil.copy(VERSIONS, folder / "versions.py")
    command = str(Path(sys.executable).parent / "spark-chkpt")
    # The user's script as they run it (python versions.py --version key_int): its
    # start() only plans.
    done = subprocess.run(
        [
            command,
            "savepoint",
            "check",
            point.location,
            "versions.py",
            "--",
            "--version",
            "key_int",
        ],
        cwd=folder,
        env=user_env(**env),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2, done.stdout + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert "job         versions.py" in lines
    assert [x for x in lines if x.startswith("operator")] == [
        "operator 0 (stateStoreSave): incompatible: key schema changed (field app: string → int)"
    ]
    assert lines[-1] == "result      2: the savepoint cannot be restored into this job"


def test_a_shadow_fork_of_a_new_version_and_its_diff_with_production(
    spark: Any,
    counted: tuple[Savepoint, dict[str, str]],
    tmp_path: Path,
    monkeypatch: Any,
    capsys: Any,
) -> None:
    from spark_chkpt.cli import main
    from spark_chkpt.diff.tables import diff_tables
    from spark_chkpt.fs import qualify

    point, env = counted
    production, shadow = env["PV_TABLE"], str(tmp_path / "shadow")
    shadow_chk = tmp_path / "shadow-chk"
    monkeypatch.setenv("PV_CHECKPOINT", str(shadow_chk))
    monkeypatch.setenv("PV_TABLE", shadow)
    filtered = _plan(spark, "filtered")  # a compatible new version: app5 no longer counts
    with pytest.raises(SavepointError, match=r"--shadow: the table .* is production's table"):
        restore_savepoint(
            savepoint=point.location,
            checkpoint_location=str(shadow_chk),
            mode="fork",
            shadow=True,
            table=production,
        )
    with pytest.raises(SavepointError, match="is production's checkpoint"):
        restore_savepoint(
            savepoint=point.location,
            checkpoint_location=env["PV_CHECKPOINT"],
            mode="fork",
            shadow=True,
            job=filtered,
        )
    assert not shadow_chk.exists()
    restored = restore_savepoint(
        savepoint=point.location,
        checkpoint_location=str(shadow_chk),
        mode="fork",
        shadow=True,
        job=filtered,
    )
    marker = json.loads((shadow_chk / "chkpt" / "restore.json").read_text())
    assert restored.shadow and marker["shadow"] is True
    assert marker["production"]["checkpoint"] == qualify(env["PV_CHECKPOINT"])

    # New views; production and the shadow both catch up with them.
    produce_page_views(
        bootstrap_servers=env["PV_SERVERS"], topic=env["PV_TOPIC"], first=EVENTS + 40, count=200
    )
    for checkpoint, table, version in (
        (env["PV_CHECKPOINT"], production, "original"),
        (str(shadow_chk), shadow, "filtered"),
    ):
        monkeypatch.setenv("PV_CHECKPOINT", checkpoint)
        monkeypatch.setenv("PV_TABLE", table)
        query = getattr(_versions(), f"build_{version}")(spark)
        query = query.trigger(availableNow=True).start()
        query.awaitTermination(240)
        assert query.exception() is None, query.exception()

    found = diff_tables(table_a=production, table_b=shadow, key=["app"])
    assert (found.pair.version_a, found.pair.version_b) == (
        DeltaTable(production).version(),
        DeltaTable(shadow).version(),
    )
    counts = {r["app"]: r["count"] for r in DeltaTable(production).to_pyarrow_table().to_pylist()}
    version = point.manifest.sink.table_version if point.manifest.sink else None
    before = DeltaTable(production, version=version).to_pyarrow_table().to_pylist()
    app5_at_savepoint = next(r["count"] for r in before if r["app"] == "app5")
    assert counts["app5"] > app5_at_savepoint  # app5 had new views
    # Exactly app5 differs: the shadow kept its count at the savepoint.
    assert [(c.key, c.a, c.b) for c in found.changed] == [
        ({"app": "app5"}, {"count": counts["app5"]}, {"count": app5_at_savepoint})
    ]
    assert (found.only_a, found.only_b, found.same) == ([], [], len(counts) - 1)

    assert main(["diff", production, shadow, "--key", "app"]) == 1
    out = capsys.readouterr().out
    assert "only in A: 0, only in B: 0, changed: 1, same: 4" in out
    assert f"~ app=app5: count: {counts['app5']} → {app5_at_savepoint}" in out
