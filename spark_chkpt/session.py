"""SparkSessions for the project's jobs, demo and tests.

Spark's Python workers start ``python3`` from PATH unless ``PYSPARK_PYTHON`` is set;
in a virtual environment that is the wrong interpreter ("Python worker failed to
connect back"), so every session built here pins the running interpreter.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def load_properties(path: str | os.PathLike[str]) -> dict[str, str]:
    """Read a ``spark-defaults.conf``-style file: ``key value`` or ``key=value`` lines."""
    props: dict[str, str] = {}
    for raw in Path(path).read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or " " in key.strip():
            key, _, value = line.partition(" ")
        props[key.strip()] = value.strip()
    return props


def pin_python() -> None:
    """Make Spark's Python workers use this interpreter unless the user chose one."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def build_session(
    *, app_name: str, master: str | None = None, conf: Mapping[str, str] | None = None
) -> SparkSession:
    """``getOrCreate`` a session with the project's formats registered.

    ``master`` defaults to what spark-submit set, else ``local[*]``.
    """
    pin_python()
    from pyspark.sql import SparkSession

    import spark_chkpt

    builder = SparkSession.builder.appName(app_name)
    # Under spark-submit the JVM is already up (PYSPARK_GATEWAY_PORT) with its master.
    launched_by_submit = "PYSPARK_GATEWAY_PORT" in os.environ
    if master or not (launched_by_submit or "spark.master" in (conf or {})):
        builder = builder.master(master or os.environ.get("SPARK_MASTER", "local[*]"))
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark_chkpt.register(spark)
    return spark
