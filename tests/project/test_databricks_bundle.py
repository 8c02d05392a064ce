"""The Databricks Asset Bundle (``databricks/databricks.yml``) against the code: each job
loads into the ``databricks-bundles`` job model, each ``python_wheel_task`` names a
console script of the wheel and the package, its parameters parse with that program's
own argparse parser, and every ``--set KEY=VALUE`` names a setting the job knows. No
workspace is called."""

from __future__ import annotations

import argparse
import configparser
import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from databricks.bundles.jobs import Job

from spark_chkpt.session import load_properties

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = ROOT / "databricks" / "databricks.yml"


def console_scripts() -> dict[str, str]:
    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg")
    lines = setup["options.entry_points"]["console_scripts"].strip().splitlines()
    return dict(tuple(part.strip() for part in line.split("=", 1)) for line in lines)  # type: ignore[misc]


def bundle_jobs() -> dict[str, Job]:
    doc = yaml.safe_load(BUNDLE.read_text())
    return {name: Job.from_dict(job) for name, job in doc["resources"]["jobs"].items()}


def wheel_tasks() -> list[tuple[str, Any]]:
    return [
        (f"{name}/{task.task_key}", task.python_wheel_task)
        for name, job in bundle_jobs().items()
        for task in job.tasks
        if task.python_wheel_task is not None
    ]


class _Captured(Exception):
    def __init__(self, parser: argparse.ArgumentParser) -> None:
        self.parser = parser


def parser_of(main: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> argparse.ArgumentParser:
    """The parser ``main(argv)`` builds, taken at its ``parse_args`` call (nothing runs)."""

    def capture(self: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> Any:
        raise _Captured(self)

    with monkeypatch.context() as patch:
        patch.setattr(argparse.ArgumentParser, "parse_args", capture)
        try:
            main([])
        except _Captured as captured:
            return captured.parser
    raise AssertionError(f"{main} built no parser")


def test_the_bundle_has_a_wheel_task_per_job() -> None:
    jobs = bundle_jobs()
    assert set(jobs) == {"kafka_to_delta", "page_views", "two_stage"}
    entry_points = {task.entry_point for _, task in wheel_tasks()}
    assert entry_points == {
        "spark-chkpt-kafka-to-delta",
        "spark-chkpt-page-views",
        "spark-chkpt-two-stage",
    }
    doc = yaml.safe_load(BUNDLE.read_text())
    assert doc["artifacts"]["spark_chkpt"]["type"] == "whl"


@pytest.mark.parametrize("key, task", wheel_tasks(), ids=lambda v: v if isinstance(v, str) else "")
def test_each_task_runs_a_console_script_with_parameters_its_parser_takes(
    key: str, task: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    scripts = console_scripts()
    assert task.package_name == "spark_chkpt", key  # the distribution spark-chkpt, normalized
    assert task.entry_point in scripts, f"{key}: {task.entry_point} is not a console script"
    module, _, function = scripts[task.entry_point].partition(":")
    main = getattr(importlib.import_module(module), function)
    parser = parser_of(main, monkeypatch)
    parameters = [str(p) for p in task.parameters]
    try:
        args = parser.parse_args(parameters)
    except SystemExit as e:
        raise AssertionError(f"{key}: {task.entry_point} refuses {parameters}") from e
    sets = getattr(args, "set", None) or []
    if sets:
        conf = task.entry_point.removeprefix("spark-chkpt-").replace("-", "_")
        known = set(load_properties(ROOT / "conf" / f"{conf}.properties"))
        known |= set(getattr(importlib.import_module(module), "DEFAULTS", {}))
        for item in sets:
            name, sep, _ = item.partition("=")
            assert sep, f"{key}: --set {item!r} is not KEY=VALUE"
            assert name in known, f"{key}: --set {name} is no setting of conf/{conf}.properties"


def test_a_parameter_the_program_lacks_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above can fail: a flag no parser has is refused."""
    main = importlib.import_module("spark_chkpt.jobs.two_stage").main
    parser = parser_of(main, monkeypatch)
    with pytest.raises(SystemExit):
        parser.parse_args(["--stage=a", "--bootstrap-servers=x", "--checkpoint=c", "--no-such"])
