"""What ``register()`` sets on a session
(spark_chkpt.runtime.session_defaults.REGISTER_DEFAULTS): only what the session has not
set, and nothing on Databricks."""

from __future__ import annotations

from typing import Any

import pytest

from spark_chkpt.runtime.session_defaults import (
    CHECKPOINT_FILE_MANAGER,
    REGISTER_DEFAULTS,
    apply_register_defaults,
)
from spark_chkpt.runtime.spark_version import spark_class


class FakeConf:
    def __init__(self, values: dict[str, str]) -> None:
        self.values = dict(values)

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    def set(self, key: str, value: str) -> None:
        self.values[key] = value


class FakeSession:
    def __init__(self, values: dict[str, str]) -> None:
        self.conf = FakeConf(values)


def test_unset_settings_are_set_and_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DATABRICKS_RUNTIME_VERSION", raising=False)
    spark = FakeSession({})
    applied = apply_register_defaults(spark)  # type: ignore[arg-type]
    # the class as the running Spark line names it (spark_version.spark_class)
    assert applied == {key: spark_class(value) for key, value in REGISTER_DEFAULTS.items()}
    assert spark.conf.values[CHECKPOINT_FILE_MANAGER].endswith(
        "FileSystemBasedCheckpointFileManager"
    )


def test_the_users_own_setting_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DATABRICKS_RUNTIME_VERSION", raising=False)
    mine = "org.apache.spark.internal.io.cloud.AbortableStreamBasedCheckpointFileManager"
    spark = FakeSession({CHECKPOINT_FILE_MANAGER: mine})
    assert apply_register_defaults(spark) == {}  # type: ignore[arg-type]
    assert spark.conf.values[CHECKPOINT_FILE_MANAGER] == mine


def test_nothing_is_set_on_databricks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABRICKS_RUNTIME_VERSION", "17.3")
    spark = FakeSession({})
    assert apply_register_defaults(spark) == {}  # type: ignore[arg-type]
    assert spark.conf.values == {}
