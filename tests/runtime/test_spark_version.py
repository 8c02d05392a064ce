"""What the running Spark line gets (spark_chkpt.runtime.spark_version): run in ``.venv``
and, by ``make test``'s second pass, in each other Spark line's venv."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

from spark_chkpt.errors import ConfigError
from spark_chkpt.runtime import jars
from spark_chkpt.runtime.spark_version import (
    arrow_schema,
    has_admission_control,
    require_admission_control,
    running,
    running_line,
)


def test_the_running_pyspark_is_a_supported_line() -> None:
    line = running_line()
    assert running() == line.pyspark, "the venv's pyspark is not the one LINES names"


def test_arrow_schema_is_the_same_on_every_line() -> None:
    schema = StructType(
        [
            StructField("id", LongType(), False),
            StructField("v", StringType()),
            StructField("at", TimestampType()),
        ]
    )
    assert arrow_schema(schema) == pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            pa.field("v", pa.string()),
            pa.field("at", pa.timestamp("us", tz="UTC")),
        ]
    )


def test_the_spark_connectors_are_the_running_lines() -> None:
    line = running_line()
    assert jars.set_folder("spark-connectors").name == f"spark-connectors-{line.line}"
    assert jars.artifacts("spark-connectors") == [
        f"org.apache.spark:spark-sql-kafka-0-10_2.13:{line.kafka_connector}",
        f"io.delta:{line.delta_spark}:4.4.0",
    ]


def test_min_offsets_per_trigger_is_refused_only_without_admission_control() -> None:
    if has_admission_control():
        require_admission_control("minOffsetsPerTrigger", 10)
        return
    with pytest.raises(ConfigError, match=rf"minOffsetsPerTrigger.*Spark {running()}"):
        require_admission_control("minOffsetsPerTrigger", 10)


def test_the_checkpoint_file_manager_register_sets_is_a_class_of_the_running_spark() -> None:
    """Spark 4.0 names it without ``.checkpointing`` (4.1 moved it): every query of a
    4.0 session failed at start() in ResolveWriteToStream with the 4.2 name."""
    import zipfile
    from pathlib import Path

    import pyspark

    from spark_chkpt.runtime.session_defaults import CHECKPOINT_FILE_MANAGER, REGISTER_DEFAULTS
    from spark_chkpt.runtime.spark_version import spark_class

    name = spark_class(REGISTER_DEFAULTS[CHECKPOINT_FILE_MANAGER]).replace(".", "/") + ".class"
    (jar,) = (Path(pyspark.__file__).parent / "jars").glob("spark-sql_2.13-*.jar")
    assert name in zipfile.ZipFile(jar).namelist()
