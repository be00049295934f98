"""Topic and consumer group names (RocketMQ Validators / TopicValidator): at most 127
characters for topics (the record stores the length in one signed byte), 255 for groups,
characters `[%|a-zA-Z0-9_-]`. Each check returns what is wrong, or None; the broker answers
TOPIC_ILLEGAL / GROUP_ILLEGAL with it, clients refuse the name before sending it."""

from __future__ import annotations

import re

from rmq.message_format import MAX_TOPIC_LENGTH

VALID_NAME = re.compile(r"^[%|a-zA-Z0-9_-]+$")
VALID_CHARACTERS = "[%|a-zA-Z0-9_-]"
MAX_GROUP_LENGTH = 255


def _name_problem(what: str, name: str, max_length: int) -> str | None:
    if not name:
        return f"{what} is empty"
    if len(name) > max_length:
        return f"{what} is {len(name)} characters long, the maximum is {max_length}"
    if not VALID_NAME.match(name):
        return f"{what} {name!r} may only contain letters, digits, '%', '|', '_' and '-'"
    return None


def topic_name_problem(topic: str) -> str | None:
    return _name_problem("topic name", topic, MAX_TOPIC_LENGTH)


def group_name_problem(group: str) -> str | None:
    return _name_problem("consumer group", group, MAX_GROUP_LENGTH)
