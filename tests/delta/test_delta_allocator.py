"""delta-rs's allocator in the process that commits a query's batches for its life: told
to hand freed pages back, unless the user configured it (a new Python process each, as
the sink's runner imports the package before delta-rs)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

PROBE = "import os, spark_chkpt.delta.table, deltalake; print(os.environ.get('_RJEM_MALLOC_CONF'))"


def _conf_in_new_process(env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.fixture
def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "_RJEM_MALLOC_CONF"}


def test_delta_rs_gives_freed_pages_back_when_the_package_loads_it(
    clean_env: dict[str, str],
) -> None:
    assert _conf_in_new_process(clean_env) == "dirty_decay_ms:0,muzzy_decay_ms:0"


def test_a_users_own_allocator_setting_is_kept(clean_env: dict[str, str]) -> None:
    mine = "dirty_decay_ms:5000"
    assert _conf_in_new_process({**clean_env, "_RJEM_MALLOC_CONF": mine}) == mine
