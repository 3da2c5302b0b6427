"""Topic vocabulary shared by the broker: TopicConfig, permissions, system topic names, name validation."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
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
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
SYSTEM_TOPIC_PREFIX = "rmq_sys_"
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
REPLY_TOPIC_POSTFIX = "REPLY_TOPIC"

TOPIC_MAX_LENGTH = 127
GROUP_MAX_LENGTH = 255  # upstream Validators.CHARACTER_MAX_LENGTH
# Upstream checks every character against a bitmap; ``fullmatch`` is the same rule (``$`` alone would
# also accept a trailing newline, and a topic or group name becomes a folder name).
_VALID_NAME = re.compile(r"[%|a-zA-Z0-9_-]+")

# Upstream TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET: the broker writes these itself, clients may not.
NOT_ALLOWED_SEND_TOPICS = frozenset(
    (
        SCHEDULE_TOPIC,
        TRANS_HALF_TOPIC,
        TRANS_OP_HALF_TOPIC,
        TRANS_CHECK_MAX_TIME_TOPIC,
        SELF_TEST_TOPIC,
        OFFSET_MOVED_EVENT,
    )
)


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


#: Upstream TopicValidator.SYSTEM_TOPIC_SET as it is before a broker starts (4.9.7).
SYSTEM_TOPICS = frozenset(
    (
        DEFAULT_TOPIC,
        SCHEDULE_TOPIC,
        BENCHMARK_TOPIC,
        TRANS_HALF_TOPIC,
        TRACE_TOPIC,
        TRANS_OP_HALF_TOPIC,
        TRANS_CHECK_MAX_TIME_TOPIC,
        SELF_TEST_TOPIC,
        OFFSET_MOVED_EVENT,
    )
)


def is_system_topic(topic: str) -> bool:
    """Upstream ``TopicValidator.isSystemTopic`` without a broker: the fixed set or the ``rmq_sys_`` prefix.

    A running broker also counts the topics it creates at start (cluster, broker name, reply, trace
    topics): ``TopicConfigManager.is_system_topic`` (upstream's ``addSystemTopic``).
    """
    return topic in SYSTEM_TOPICS or topic.startswith(SYSTEM_TOPIC_PREFIX)


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
    # 5.x topic attributes, e.g. {"message.type": "FIFO"} (NORMAL, FIFO, DELAY, TRANSACTION, MIXED)
    attributes: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "order": self.order,
            "perm": self.perm,
            "readQueueNums": self.read_queue_nums,
            "topicFilterType": self.topic_filter_type,
            "topicName": self.topic_name,
            "topicSysFlag": self.topic_sys_flag,
            "writeQueueNums": self.write_queue_nums,
        }
        if self.attributes:
            data["attributes"] = dict(self.attributes)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TopicConfig:
        return cls(
            topic_name=str(data["topicName"]),
            read_queue_nums=int(data.get("readQueueNums", 16)),
            write_queue_nums=int(data.get("writeQueueNums", 16)),
            perm=int(data.get("perm", 6)),
            topic_filter_type=str(data.get("topicFilterType", "SINGLE_TAG")),
            topic_sys_flag=int(data.get("topicSysFlag", 0)),
            order=bool(data.get("order", False)),
            attributes={str(k): str(v) for k, v in (data.get("attributes") or {}).items()},
        )


def parse_topic_attributes(text: str | None) -> dict[str, str]:
    """5.x's ``+key=value,+key2=value2`` (``-key`` removes, which for a new topic is nothing)."""
    out: dict[str, str] = {}
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            continue
        if item[0] == "-":
            continue
        key, sep, value = item.lstrip("+").partition("=")
        if not sep or not key:
            raise ValueError(f"topic attribute {item!r} is not +key=value")
        if key == MESSAGE_TYPE_ATTRIBUTE and value.upper() not in MESSAGE_TYPES:
            raise ValueError(f"message.type must be one of {', '.join(MESSAGE_TYPES)}, got {value!r}")
        out[key] = value.upper() if key == MESSAGE_TYPE_ATTRIBUTE else value
    return out


MESSAGE_TYPE_ATTRIBUTE = "message.type"
MESSAGE_TYPES = ("NORMAL", "FIFO", "DELAY", "TRANSACTION", "MIXED")
