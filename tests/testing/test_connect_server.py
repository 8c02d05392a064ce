"""The local Spark Connect server's command (``make connect-server``): the project's jars,
Delta's session settings and the workers' Python, without starting it."""

from __future__ import annotations

import sys

import pytest

from spark_chkpt.testing.connect_server import SERVER_CLASS, main


def test_the_printed_command_has_the_jars_delta_and_the_workers_python(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--print-command", "--port", "15010"]) == 0
    command = capsys.readouterr().out
    assert command.startswith(f"PYSPARK_PYTHON={sys.executable} ")
    for part in (
        f"--class {SERVER_CLASS}",
        "spark.connect.grpc.binding.port=15010",
        "delta-spark",
        "spark-sql-kafka-0-10",
        "spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension",
        f"spark.pyspark.python={sys.executable}",
    ):
        assert part in command, part
    assert command.rstrip().endswith("spark-internal")
