import pytest

from rmq.broker_server.errors import BrokerError
from rmq.broker_server.processors.names import check_group_name, check_topic_name, check_user_topic_name
from rmq.v1 import rmq_pb2


@pytest.mark.parametrize("topic", ["TopicTest", "a", "with-dash_and_underscore", "%pct|bar", "x" * 127])
def test_legal_topic_names(topic: str) -> None:
    check_user_topic_name(topic)


@pytest.mark.parametrize(
    ("topic", "reason"),
    [
        ("", "empty"),
        ("x" * 128, "128 characters long, the maximum is 127"),
        ("has space", "may only contain"),
        ("dot.ted", "may only contain"),
        ("ünïcode", "may only contain"),
        ("SCHEDULE_TOPIC_XXXX", "reserved"),
        ("%RETRY%group", "reserved"),
        ("%DLQ%group", "reserved"),
        ("rmq_sys_trace", "reserved"),
    ],
)
def test_illegal_topic_names(topic: str, reason: str) -> None:
    with pytest.raises(BrokerError, match=reason) as error:
        check_user_topic_name(topic)
    assert error.value.code == rmq_pb2.TOPIC_ILLEGAL


def test_reserved_names_are_still_topic_names() -> None:
    check_topic_name("%RETRY%group")


@pytest.mark.parametrize("group", ["", "g" * 256, "bad group", "bad/group"])
def test_illegal_groups(group: str) -> None:
    with pytest.raises(BrokerError) as error:
        check_group_name(group)
    assert error.value.code == rmq_pb2.GROUP_ILLEGAL
