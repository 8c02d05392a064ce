"""The wheel as users install it: built with ``build`` (as ``make wheel`` does),
installed, not editable, into a fresh virtual environment (no system site-packages)
that already holds a pyspark of another supported Spark line (the oldest, as a
platform's runtime would), then its console scripts and a user's script run from a
folder outside the repo. This catches files that only exist in the checkout
(``conf/``, entry points, package data), and a wheel that replaces the platform's pyspark.

pip takes the dependencies from its cache when it is warm, so the install costs the
unpacking of pyspark more than any download (once: the wheel must not bring another)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import venv
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from spark_chkpt.runtime.spark_version import LINES
from spark_chkpt.testing.generator import produce_page_views
from tests.helpers import user_env

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
EVENTS = 500
PLATFORM_PYSPARK = LINES[0].pyspark  # the pyspark the environment has before the wheel
SCRIPTS = (
    "spark-chkpt",
    "spark-chkpt-kafka-to-delta",
    "spark-chkpt-page-views",
    "spark-chkpt-two-stage",
)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(out), str(ROOT)],
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
    )
    (built,) = out.glob("spark_chkpt-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh venv's bin folder with a platform's pyspark (``PLATFORM_PYSPARK``), then
    the wheel and its dependencies installed."""
    folder = tmp_path_factory.mktemp("wheel-venv")
    venv.create(folder, with_pip=True, symlinks=True, system_site_packages=False)
    bin_dir = folder / "bin"
    pip = [str(bin_dir / "python"), "-m", "pip", "install", "--quiet", "--no-input"]
    for requirement in (f"pyspark=={PLATFORM_PYSPARK}", str(wheel)):
        result = subprocess.run(
            [*pip, "--disable-pip-version-check", requirement],
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert result.returncode == 0, f"{requirement}: {result.stderr[-3000:]}"
    yield bin_dir
    shutil.rmtree(folder, ignore_errors=True)


def outside(tmp_path: Path, bin_dir: Path, **extra: str) -> tuple[Path, dict[str, str]]:
    """A folder outside the repo and the environment of a shell with the venv activated."""
    folder = tmp_path / "elsewhere"
    folder.mkdir(exist_ok=True)
    env = user_env(**extra)
    env.pop("PYTHONPATH", None)
    env["VIRTUAL_ENV"] = str(bin_dir.parent)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    return folder, env


def test_the_wheel_ships_the_settings_files_and_every_entry_point(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    for conf in ("kafka_to_delta.properties", "page_views.properties", "spark-defaults.conf"):
        assert f"spark_chkpt/conf/{conf}" in names
    (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    for script in SCRIPTS:
        assert f"{script} = " in text
    bundle = yaml.safe_load((ROOT / "databricks" / "databricks.yml").read_text())
    for job in bundle["resources"]["jobs"].values():
        for task in job["tasks"]:
            assert f"{task['python_wheel_task']['entry_point']} = " in text
    assert not any(n.startswith(("tests/", "docs/")) for n in names)


def test_the_wheel_keeps_the_environments_pyspark(installed: Path) -> None:
    """The wheel requires a range (pyspark>=4.0,<5): pip keeps the platform's pyspark
    instead of replacing it (``pyspark==4.2.0`` replaced it)."""
    version = subprocess.run(
        [str(installed / "python"), "-c", "import pyspark; print(pyspark.__version__)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert version == PLATFORM_PYSPARK


def test_console_scripts_answer_help_from_the_installed_package(
    installed: Path, tmp_path: Path
) -> None:
    folder, env = outside(tmp_path, installed)
    where = subprocess.run(
        [str(installed / "python"), "-c", "import spark_chkpt; print(spark_chkpt.__file__)"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert where.startswith(str(installed.parent)), f"imported from {where}, not the venv"
    for script in SCRIPTS:
        result = subprocess.run(
            [str(installed / script), "--help"],
            cwd=folder,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0, f"{script} --help: {result.stderr[-2000:]}"
        assert result.stdout.startswith("usage: "), result.stdout[:200]


def test_the_job_and_a_users_script_run_from_the_wheel(
    installed: Path,
    tmp_path: Path,
    bootstrap_servers: str,
    make_topic: Callable[..., str],
) -> None:
    """docs/examples/run_job.sh (the Kafka -> Delta job of the wheel, then its snapshot
    records), then the user script of test_user_script.py, both with the venv's PATH."""
    topic = make_topic(partitions=2)
    produce_page_views(bootstrap_servers=bootstrap_servers, topic=topic, first=0, count=EVENTS)
    work = tmp_path / "work"
    folder, env = outside(
        tmp_path, installed, BOOTSTRAP_SERVERS=bootstrap_servers, TOPIC=topic, WORK=str(work)
    )
    shutil.copy(ROOT / "docs" / "examples" / "run_job.sh", folder / "run_job.sh")
    job = subprocess.run(
        ["bash", "run_job.sh"], cwd=folder, env=env, capture_output=True, text=True, timeout=400
    )
    assert job.returncode == 0, job.stderr[-4000:]
    assert " committed " in job.stdout, job.stdout
    check = (
        # spark_chkpt first, as a user's script has it: its exit hook drains pyarrow's
        # pools, without which delta-rs reads abort at exit (spark_chkpt.runtime.teardown).
        "import json; import spark_chkpt; from deltalake import DeltaTable; "
        f"t = DeltaTable({str(work / 'tables' / 'page_views')!r}).to_pyarrow_table(); "
        "print(json.dumps([t.num_rows, len(set(t.column('event_id').to_pylist()))]))"
    )
    counted = subprocess.run(
        [str(installed / "python"), "-c", check],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(counted.stdout) == [EVENTS, EVENTS]

    shutil.copy(ROOT / "tests" / "user_scripts" / "usage_job.py", folder / "my_job.py")
    script = subprocess.run(
        [str(installed / "python"), "my_job.py", bootstrap_servers, topic, str(tmp_path / "s")],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert script.returncode == 0, script.stderr[-3000:]
    assert f"rows {EVENTS} ids {EVENTS}" in script.stdout
