"""Topic vocabulary shared by the broker: TopicConfig, permissions, system topic names, name validation."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

PERM_PRIORITY = 0x8
PERM_READ = 0x4
PERM_WRITE = 0x2
PERM_INHERIT = 0x1

DEFAULT_TOPIC = "TBW102"
SELF_TEST_TOPIC = "SELF_TEST_TOPIC"
BENCHMARK_TOPIC = "BenchmarkTest"
OFFSET_MOVED_EVENT = "OFFSET_MOVED_EVENT"
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRANS_CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
REPLY_TOPIC_POSTFIX = "REPLY_TOPIC"

TOPIC_MAX_LENGTH = 127
GROUP_MAX_LENGTH = 255  # upstream Validators.CHARACTER_MAX_LENGTH
# Upstream checks every character against a bitmap; ``fullmatch`` is the same rule (``$`` alone would
# also accept a trailing newline, and a topic or group name becomes a folder name).
_VALID_NAME = re.compile(r"[%|a-zA-Z0-9_-]+")

# Upstream TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET: the broker writes these itself, clients may not.
NOT_ALLOWED_SEND_TOPICS = frozenset((SCHEDULE_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC,
                                     TRANS_CHECK_MAX_TIME_TOPIC, SELF_TEST_TOPIC, OFFSET_MOVED_EVENT))


def is_topic_or_group_illegal(name: str) -> bool:
    return _VALID_NAME.fullmatch(name) is None


def check_topic_name(topic: str) -> str | None:
    """Upstream 4.9.7 TopicValidator.validateTopic; returns the remark a name is refused with, or None."""
    if not topic or not topic.strip():
        return "The specified topic is blank."
    if is_topic_or_group_illegal(topic):
        return "The specified topic contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
    if len(topic) > TOPIC_MAX_LENGTH:
        return "The specified topic is longer than topic max length."
    return None


def check_group_name(group: str) -> str | None:
    """Upstream's group rules (client Validators.checkGroup, enforced by the broker since 5.x before a group
    is auto-created): the remark a name is refused with, or None. The length goes first so that a huge
    name is never echoed back."""
    if not group or not group.strip():
        return "the specified group is blank"
    if len(group) > GROUP_MAX_LENGTH:
        return f"the specified group is longer than group max length {GROUP_MAX_LENGTH}."
    if is_topic_or_group_illegal(group):
        return f"the specified group[{group}] contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
    return None


def is_not_allowed_send_topic(topic: str) -> bool:
    return topic in NOT_ALLOWED_SEND_TOPICS


def retry_topic(group: str) -> str:
    return RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    return DLQ_GROUP_TOPIC_PREFIX + group


def is_system_topic(topic: str) -> bool:
    return topic in (SCHEDULE_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC,
                     SELF_TEST_TOPIC, OFFSET_MOVED_EVENT, DEFAULT_TOPIC) or topic.startswith("rmq_sys_")


def is_writeable(perm: int) -> bool:
    return bool(perm & PERM_WRITE)


def is_readable(perm: int) -> bool:
    return bool(perm & PERM_READ)


@dataclass(slots=True)
class TopicConfig:
    topic_name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = PERM_READ | PERM_WRITE
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"order": self.order, "perm": self.perm, "readQueueNums": self.read_queue_nums,
                "topicFilterType": self.topic_filter_type, "topicName": self.topic_name,
                "topicSysFlag": self.topic_sys_flag, "writeQueueNums": self.write_queue_nums}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TopicConfig:
        return cls(topic_name=str(data["topicName"]), read_queue_nums=int(data.get("readQueueNums", 16)),
                   write_queue_nums=int(data.get("writeQueueNums", 16)), perm=int(data.get("perm", 6)),
                   topic_filter_type=str(data.get("topicFilterType", "SINGLE_TAG")),
                   topic_sys_flag=int(data.get("topicSysFlag", 0)), order=bool(data.get("order", False)))
