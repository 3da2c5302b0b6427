"""HeartbeatData as clients send it (protocol.md §4.3), normalised across the Java, C++, Go and Node clients.

C++ sends enums as ordinals and subVersion as a string; Go sends codeSet as strings and subVersion in
nanoseconds; all of that is folded into one typed shape here so the rest of the broker sees one form.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from broker.topic import check_group_name, is_topic_or_group_illegal
from store.message import tags_hash

SUB_ALL = "*"

CONSUME_TYPES = ("CONSUME_ACTIVELY", "CONSUME_PASSIVELY")
MESSAGE_MODELS = ("BROADCASTING", "CLUSTERING")
CONSUME_FROM = (
    "CONSUME_FROM_LAST_OFFSET",
    "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
    "CONSUME_FROM_MIN_OFFSET",
    "CONSUME_FROM_MAX_OFFSET",
    "CONSUME_FROM_FIRST_OFFSET",
    "CONSUME_FROM_TIMESTAMP",
)


class HeartbeatError(ValueError):
    pass


def _enum(value: Any, names: tuple[str, ...], default: str) -> str:
    if value is None:
        return default
    if isinstance(value, bool):
        raise HeartbeatError(f"unknown enum value {value!r}")
    if isinstance(value, int) or (isinstance(value, str) and value.isascii() and value.isdigit()):
        index = int(value) if len(str(value)) < 10 else -1
        if 0 <= index < len(names):
            return names[index]
        raise HeartbeatError(f"enum ordinal {value} out of range for {names[0].split('_')[0]}")
    if isinstance(value, str) and value in names:
        return value
    raise HeartbeatError(f"unknown enum value {str(value)[:100]!r}")


@dataclass(slots=True)
class SubscriptionData:
    topic: str
    sub_string: str = SUB_ALL
    tags_set: frozenset[str] = frozenset()
    code_set: frozenset[int] = frozenset()
    sub_version: int = 0
    expression_type: str = "TAG"
    class_filter_mode: bool = False

    @property
    def matches_all(self) -> bool:
        return self.expression_type == "TAG" and (not self.sub_string or self.sub_string.strip() == SUB_ALL)

    def to_json(self) -> dict[str, Any]:
        return {
            "classFilterMode": self.class_filter_mode,
            "codeSet": sorted(self.code_set),
            "expressionType": self.expression_type,
            "subString": self.sub_string,
            "subVersion": self.sub_version,
            "tagsSet": sorted(self.tags_set),
            "topic": self.topic,
        }


def build_subscription(
    topic: str, sub_string: str | None, expression_type: str | None = None, sub_version: int = 0
) -> SubscriptionData:
    """Upstream's FilterAPI.build: split tags on ``||``, hash each with Java's String.hashCode."""
    expr_type = (expression_type or "TAG").upper()
    sub = (sub_string or "").strip()
    if expr_type != "TAG":
        return SubscriptionData(topic, sub, sub_version=sub_version, expression_type=expr_type)
    if not sub or sub == SUB_ALL:
        return SubscriptionData(topic, SUB_ALL, sub_version=sub_version)
    tags = frozenset(t.strip() for t in sub.split("||") if t.strip())
    return SubscriptionData(
        topic, sub, tags_set=tags, code_set=frozenset(tags_hash(t) for t in tags), sub_version=sub_version
    )


@dataclass(slots=True)
class ConsumerData:
    group_name: str
    consume_type: str
    message_model: str
    consume_from_where: str
    subscriptions: list[SubscriptionData] = field(default_factory=list)
    unit_mode: bool = False


@dataclass(slots=True)
class HeartbeatData:
    client_id: str
    producer_groups: list[str]
    consumers: list[ConsumerData]


def _int(value: Any, default: int = 0) -> int:
    if value is None or value == "":
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise HeartbeatError(f"expected a number, got {type(value).__name__}")
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        raise HeartbeatError(f"expected a number, got {str(value)[:100]!r}") from None


def _str(value: Any, what: str) -> str | None:
    """A JSON string field (None when absent); HeartbeatError for any other type."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise HeartbeatError(f"{what} must be a string, got {type(value).__name__}")
    return value


def _list(value: Any, what: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise HeartbeatError(f"{what} must be a list, got {type(value).__name__}")
    return value


def _group(value: Any, what: str) -> str:
    group = _str(value, what)
    reason = check_group_name(group or "")
    if reason is not None:
        raise HeartbeatError(reason)
    return group  # type: ignore[return-value]


def parse_heartbeat(data: Any) -> HeartbeatData:
    """The typed heartbeat, or HeartbeatError naming the first field of the wrong type or a group name that
    could not become a retry topic folder."""
    if not isinstance(data, dict):
        raise HeartbeatError("heartbeat body must be a JSON object")
    client_id = data.get("clientID")
    if not client_id or not isinstance(client_id, str):
        raise HeartbeatError("heartbeat body has no clientID")
    producers = []
    for p in _list(data.get("producerDataSet"), "producerDataSet"):
        if isinstance(p, dict) and p.get("groupName"):
            producers.append(_group(p["groupName"], "producer groupName"))
    consumers: list[ConsumerData] = []
    for c in _list(data.get("consumerDataSet"), "consumerDataSet"):
        if not isinstance(c, dict) or not c.get("groupName"):
            raise HeartbeatError("consumer data without groupName")
        group = _group(c["groupName"], "consumer groupName")
        subs: list[SubscriptionData] = []
        for s in _list(c.get("subscriptionDataSet"), "subscriptionDataSet"):
            if not isinstance(s, dict) or not s.get("topic"):
                raise HeartbeatError("subscription data without topic")
            topic = _str(s["topic"], "subscription topic") or ""
            if is_topic_or_group_illegal(topic):
                raise HeartbeatError(f"the subscribed topic {topic[:200]!r} contains illegal characters")
            sub_version = _int(s.get("subVersion"))
            if sub_version > 10**15:  # the Go client sends nanoseconds
                sub_version //= 1_000_000
            sub = build_subscription(
                topic,
                _str(s.get("subString"), "subString"),
                _str(s.get("expressionType"), "expressionType"),
                sub_version,
            )
            # C++ sends atoi(tag) as codeSet: the broker's own hash of tagsSet is the only trustworthy code set.
            subs.append(sub)
        consumers.append(
            ConsumerData(
                group_name=group,
                consume_type=_enum(c.get("consumeType"), CONSUME_TYPES, "CONSUME_PASSIVELY"),
                message_model=_enum(c.get("messageModel"), MESSAGE_MODELS, "CLUSTERING"),
                consume_from_where=_enum(c.get("consumeFromWhere"), CONSUME_FROM, "CONSUME_FROM_LAST_OFFSET"),
                subscriptions=subs,
                unit_mode=c.get("unitMode") is True,
            )
        )
    return HeartbeatData(client_id=client_id, producer_groups=producers, consumers=consumers)
