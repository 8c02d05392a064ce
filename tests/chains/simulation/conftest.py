"""Hypothesis profiles of the protocol's simulation.

- ``ci`` (the default): at least 2,000 schedules in under 5 minutes on a 2-core machine,
  no example database (a fresh clone has none), no deadline (delta-rs commits vary).
- ``long``: 100,000 schedules of up to 20 steps, the nightly size:
  ``.venv/bin/python -m pytest tests/chains/simulation --hypothesis-profile=long`` (name the
  folder: the profiles are registered when this conftest loads).
- ``probe``: 100 schedules, to try a change or a hole quickly
  (``SPARK_CHKPT_SIM_ENABLE=<hole>``).

Hypothesis' pytest plugin loads ``--hypothesis-profile``; without it this conftest loads
``ci``.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings

SUPPRESSED = [HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large]

settings.register_profile(
    "ci",
    max_examples=2000,
    stateful_step_count=12,
    deadline=None,
    database=None,
    suppress_health_check=SUPPRESSED,
    print_blob=True,
)
settings.register_profile(
    "long",
    max_examples=100_000,
    stateful_step_count=20,
    deadline=None,
    database=None,
    suppress_health_check=SUPPRESSED,
    print_blob=True,
)

settings.register_profile("probe", parent=settings.get_profile("ci"), max_examples=100)


def pytest_configure(config: pytest.Config) -> None:
    if not config.getoption("hypothesis_profile", default=None):
        settings.load_profile("ci")
