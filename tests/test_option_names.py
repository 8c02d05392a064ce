"""Mistakes in option names and topics, named at once (issue 39).

A name close to a known option is refused naming both; a name far from every option is
one warning; the "exactly one of subscribe..." error lists what it saw; a topic that does
not exist is refused at the start, naming the topics that do.
"""

from __future__ import annotations

import logging

import pytest

from spark_chkpt.delta.sink.options import DeltaSinkConfig
from spark_chkpt.errors import ConfigError, MissingTopicError, UnknownOptionError
from spark_chkpt.kafka.sink.options import KafkaSinkConfig
from spark_chkpt.kafka.source.offset_reader import require_topics
from spark_chkpt.kafka.source.options import SourceConfig

SOURCE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "events"}


def source(**extra: str) -> SourceConfig:
    return SourceConfig.from_options({**SOURCE, **extra}, streaming=True)


def test_a_name_close_to_a_source_option_is_refused_naming_both() -> None:
    with pytest.raises(UnknownOptionError) as caught:
        source(maxOffsetPerTrigger="100")
    message = str(caught.value)
    assert "'maxOffsetPerTrigger' (did you mean maxOffsetsPerTrigger?)" in message
    assert message.startswith("chkpt-kafka: unknown option")
    assert isinstance(caught.value, ConfigError)  # callers catching ConfigError still do


def test_spark_lower_cased_names_are_shown_as_handed_and_said_so() -> None:
    # What a Python data source really gets from Spark: every name lower-cased.
    options = {k.lower(): v for k, v in {**SOURCE, "maxOffsetPerTrigger": "100"}.items()}
    with pytest.raises(UnknownOptionError, match="Spark hands option names lower-cased") as e:
        SourceConfig.from_options(options)
    assert e.value.suggestions == {"maxoffsetpertrigger": ["maxOffsetsPerTrigger"]}


def test_a_misspelled_subscribe_is_named_not_reported_as_no_subscription() -> None:
    with pytest.raises(UnknownOptionError, match=r"'subscibe' \(did you mean subscribe\?\)"):
        SourceConfig.from_options({"kafka.bootstrap.servers": "h:1", "subscibe": "events"})


def test_a_misspelled_kafka_prefix_is_named() -> None:
    with pytest.raises(UnknownOptionError, match=r"did you mean kafka\.bootstrap\.servers"):
        SourceConfig.from_options({"kakfa.bootstrap.servers": "h:1", "subscribe": "events"})


def test_names_far_from_every_option_are_one_warning_as_given(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING):
        cfg = source(someSetting="1", anotherThing="2")
    assert cfg.subscription.topics == ("events",)
    warnings = [r.getMessage() for r in caplog.records if "unknown option" in r.getMessage()]
    assert warnings == ["chkpt-kafka ignores unknown option(s): anotherThing, someSetting"]


def test_exactly_one_subscription_error_lists_the_options_given() -> None:
    with pytest.raises(ConfigError, match="exactly one of") as caught:
        SourceConfig.from_options({"kafka.bootstrap.servers": "h:1", "topic": "events"})
    assert "the options given: kafka.bootstrap.servers, topic" in str(caught.value)


@pytest.mark.parametrize(
    ("sink", "options", "typo", "meant"),
    [
        (
            DeltaSinkConfig,
            {"path": "/t", "checkpointLocaton": "/c"},
            "checkpointLocaton",
            "checkpointLocation",
        ),
        (
            DeltaSinkConfig,
            {"path": "/t", "checkpointLocation": "/c", "partitionedBy": "a"},
            "partitionedBy",
            "partitionBy",
        ),
        (
            KafkaSinkConfig,
            {"kafka.bootstrap.servers": "h:1", "checkpointLocation": "/c", "topics": "out"},
            "topics",
            "topic",
        ),
    ],
)
def test_sinks_refuse_a_name_close_to_one_of_theirs(
    sink: type[DeltaSinkConfig] | type[KafkaSinkConfig],
    options: dict[str, str],
    typo: str,
    meant: str,
) -> None:
    with pytest.raises(UnknownOptionError, match=rf"'{typo}' \(did you mean {meant}\?\)"):
        sink.from_options(options)


def test_a_topic_that_does_not_exist_is_refused_naming_the_topics_that_do() -> None:
    cfg = source(subscribe="evnets")
    with pytest.raises(MissingTopicError) as caught:
        require_topics(cfg, ["alpha", "events", "__chkpt.events", "zeta"])
    message = str(caught.value)
    assert "topic 'evnets' does not exist on 127.0.0.1:9092" in message
    assert "topics there: events, alpha, zeta." in message  # closest first, no internal
    assert "failOnMissingTopic=false" in message
    assert caught.value.missing == ["evnets"]


def test_an_assigned_topic_that_does_not_exist_is_refused_too() -> None:
    cfg = SourceConfig.from_options(
        {"kafka.bootstrap.servers": "h:1", "assign": '{"nope":[0]}'}, streaming=True
    )
    with pytest.raises(MissingTopicError, match="'nope' does not exist"):
        require_topics(cfg, ["events"])


def test_waiting_for_a_topic_or_a_pattern_is_not_refused() -> None:
    require_topics(source(subscribe="later", failOnMissingTopic="false"), ["events"])
    require_topics(source(subscribe="events"), ["events"])
    pattern = SourceConfig.from_options(
        {"kafka.bootstrap.servers": "h:1", "subscribePattern": "nothing.*"}, streaming=True
    )
    require_topics(pattern, ["events"])
