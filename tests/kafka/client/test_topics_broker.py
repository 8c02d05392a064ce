"""The broker's side of a created topic's replication: on the test broker (one node,
``default.replication.factor`` 1) the default request creates the topic at the broker's
factor, a factor given is sent as given (two replicas: refused, naming the option), and
a control topic's ``min.insync.replicas`` is its own when the sink sets one."""

from __future__ import annotations

import pytest

from spark_chkpt.errors import ConfigError
from spark_chkpt.kafka.client.topics import create_topic, replication_factors, topic_configs
from spark_chkpt.kafka.control.topic import ensure_control_topic

pytestmark = pytest.mark.integration


def test_the_control_topic_takes_the_brokers_factor_and_the_users_settings(
    bootstrap_servers: str, topic_name: str
) -> None:
    create_topic(bootstrap_servers=bootstrap_servers, name=topic_name)
    control = f"__chkpt.{topic_name}"
    ensure_control_topic(bootstrap_servers=bootstrap_servers, name=control, min_insync_replicas=2)
    factors = replication_factors(
        bootstrap_servers=bootstrap_servers, names=[control, topic_name, f"{topic_name}-none"]
    )
    assert factors == {control: 1, topic_name: 1}  # the broker's default; a missing one left out
    configs = topic_configs(
        bootstrap_servers=bootstrap_servers, names=[control], keys=["min.insync.replicas"]
    )
    assert configs == {control: {"min.insync.replicas": "2"}}


def test_a_replication_factor_the_brokers_cannot_place_names_the_option(
    bootstrap_servers: str, topic_name: str
) -> None:
    control = f"__chkpt.{topic_name}"
    with pytest.raises(ConfigError, match=r"'controlTopic.replication.factor' = '2'.*refused"):
        ensure_control_topic(
            bootstrap_servers=bootstrap_servers, name=control, replication_factor=2
        )
    assert replication_factors(bootstrap_servers=bootstrap_servers, names=[control]) == {}
