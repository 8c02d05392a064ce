"""check_control_topic_config: which control topic settings would drop index entries."""

from __future__ import annotations

import pytest

from spark_chkpt.errors import ControlTopicConfigError
from spark_chkpt.kafka.control.topic import CONTROL_TOPIC_CONFIG, check_control_topic_config

KEPT = {"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1"}


@pytest.mark.parametrize(
    ("config", "data_config"),
    [
        (KEPT, {}),
        (KEPT, {"retention.ms": "1000"}),
        ({**KEPT, "retention.ms": "86400000"}, {"retention.ms": "3600000"}),
        ({**KEPT, "retention.ms": "3600000"}, {"retention.ms": "3600000"}),
        ({**CONTROL_TOPIC_CONFIG}, {"retention.ms": "-1"}),
    ],
)
def test_settings_that_keep_every_entry_pass(
    config: dict[str, str], data_config: dict[str, str]
) -> None:
    check_control_topic_config(name="__chkpt.t", config=config, data_config=data_config)


@pytest.mark.parametrize(
    ("config", "data_config", "named"),
    [
        ({**KEPT, "cleanup.policy": "compact"}, {}, "cleanup.policy=compact"),
        ({**KEPT, "cleanup.policy": "compact,delete"}, {}, "cleanup.policy=compact,delete"),
        ({**KEPT, "retention.bytes": "1048576"}, {}, "retention.bytes=1048576"),
        ({**KEPT, "retention.ms": "60000"}, {"retention.ms": "-1"}, "retention.ms=60000"),
        ({**KEPT, "retention.ms": "60000"}, {"retention.ms": "120000"}, "at least 120000"),
    ],
)
def test_settings_that_drop_entries_are_refused_naming_topic_and_setting(
    config: dict[str, str], data_config: dict[str, str], named: str
) -> None:
    with pytest.raises(ControlTopicConfigError, match=r"'__chkpt\.t'") as error:
        check_control_topic_config(name="__chkpt.t", config=config, data_config=data_config)
    assert named in str(error.value)
    assert "kafka-configs --alter" in str(error.value)
