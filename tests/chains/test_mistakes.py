"""Mistakes named at once (issue 39), in a user's script run the way users run it: a
subprocess from a folder outside the repo, no ``PYSPARK_PYTHON`` in its environment
(``tests/user_scripts/mistakes_job.py``, Kafka → Delta with Trigger.AvailableNow).

Before: a topic name with a typo ran to the end with no error and left an empty table;
``maxOffsetPerTrigger`` was a warning and the job ran with no limit."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from spark_chkpt.testing.generator import produce_page_views
from tests.helpers import user_env

pytestmark = pytest.mark.integration

SCRIPT = Path(__file__).resolve().parents[1] / "user_scripts" / "mistakes_job.py"


def run_job(tmp_path: Path, *options: str) -> tuple[int, str, str, Path]:
    folder = tmp_path / "my-project"
    folder.mkdir()
    shutil.copy(SCRIPT, folder / "my_job.py")
    work = tmp_path / "work"
    result = subprocess.run(
        [sys.executable, "my_job.py", str(work), *options],
        cwd=folder,
        env=user_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    return result.returncode, result.stdout, result.stderr, work


def test_a_misspelled_topic_is_refused_at_start_naming_the_topics_that_exist(
    tmp_path: Path, bootstrap_servers: str, make_topic: Callable[..., str]
) -> None:
    topic = make_topic(partitions=1)
    produce_page_views(bootstrap_servers=bootstrap_servers, topic=topic, first=0, count=10)
    typo = topic[:-1] + ("x" if topic[-1] != "x" else "y")
    code, out, err, work = run_job(
        tmp_path, f"kafka.bootstrap.servers={bootstrap_servers}", f"subscribe={typo}"
    )
    assert code != 0, out
    assert "MissingTopicError" in err, err[-3000:]
    assert f"topic '{typo}' does not exist on {bootstrap_servers}; topics there: {topic}" in err
    assert "rows" not in out
    # The first line of the failure is the project's message, before Spark's dump of it.
    said = f"spark-chkpt: MissingTopicError: option 'subscribe' = '{typo}': topic '{typo}'"
    first = next(i for i, line in enumerate(err.splitlines()) if "Error" in line)
    assert err.splitlines()[first].startswith(said), err[-3000:]
    # Refused in the source's first planning: no batch planned, no table written.
    assert not (work / "chk" / "offsets" / "0").exists()
    assert not (work / "events" / "_delta_log").exists()


def test_a_misspelled_option_is_refused_naming_the_known_one(
    tmp_path: Path, bootstrap_servers: str, make_topic: Callable[..., str]
) -> None:
    topic = make_topic(partitions=1)
    code, out, err, work = run_job(
        tmp_path,
        f"kafka.bootstrap.servers={bootstrap_servers}",
        f"subscribe={topic}",
        "maxOffsetPerTrigger=10",
    )
    assert code != 0, out
    assert "UnknownOptionError" in err, err[-3000:]
    assert "'maxoffsetpertrigger' (did you mean maxOffsetsPerTrigger?)" in err
    first = next(line for line in err.splitlines() if "Error" in line)
    assert first.startswith("spark-chkpt: UnknownOptionError: chkpt-kafka: unknown option"), err
    assert not work.exists()  # refused at load(), before the query started
