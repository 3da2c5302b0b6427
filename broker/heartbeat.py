"""HeartbeatData as clients send it (protocol.md §4.3), normalised across the Java, C++, Go and Node clients.

C++ sends enums as ordinals and subVersion as a string; Go sends codeSet as strings and subVersion in
nanoseconds; all of that is folded into one typed shape here so the rest of the broker sees one form.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from store.message import tags_hash

SUB_ALL = "*"

CONSUME_TYPES = ("CONSUME_ACTIVELY", "CONSUME_PASSIVELY")
MESSAGE_MODELS = ("BROADCASTING", "CLUSTERING")
CONSUME_FROM = ("CONSUME_FROM_LAST_OFFSET", "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
                "CONSUME_FROM_MIN_OFFSET", "CONSUME_FROM_MAX_OFFSET", "CONSUME_FROM_FIRST_OFFSET",
                "CONSUME_FROM_TIMESTAMP")


class HeartbeatError(ValueError):
    pass


def _enum(value: Any, names: tuple[str, ...], default: str) -> str:
    if value is None:
        return default
    if isinstance(value, int) or (isinstance(value, str) and value.isdigit()):
        index = int(value)
        if 0 <= index < len(names):
            return names[index]
        raise HeartbeatError(f"enum ordinal {value} out of range for {names[0].split('_')[0]}")
    if isinstance(value, str) and value in names:
        return value
    raise HeartbeatError(f"unknown enum value {value!r}")


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
        return {"classFilterMode": self.class_filter_mode, "codeSet": sorted(self.code_set),
                "expressionType": self.expression_type, "subString": self.sub_string,
                "subVersion": self.sub_version, "tagsSet": sorted(self.tags_set), "topic": self.topic}


def build_subscription(topic: str, sub_string: str | None, expression_type: str | None = None,
                       sub_version: int = 0) -> SubscriptionData:
    """Upstream's FilterAPI.build: split tags on ``||``, hash each with Java's String.hashCode."""
    expr_type = (expression_type or "TAG").upper()
    sub = (sub_string or "").strip()
    if expr_type != "TAG":
        return SubscriptionData(topic, sub, sub_version=sub_version, expression_type=expr_type)
    if not sub or sub == SUB_ALL:
        return SubscriptionData(topic, SUB_ALL, sub_version=sub_version)
    tags = frozenset(t.strip() for t in sub.split("||") if t.strip())
    return SubscriptionData(topic, sub, tags_set=tags, code_set=frozenset(tags_hash(t) for t in tags),
                            sub_version=sub_version)


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
    try:
        return int(value)
    except (TypeError, ValueError):
        raise HeartbeatError(f"expected a number, got {value!r}") from None


def parse_heartbeat(data: Any) -> HeartbeatData:
    if not isinstance(data, dict):
        raise HeartbeatError("heartbeat body must be a JSON object")
    client_id = data.get("clientID")
    if not client_id or not isinstance(client_id, str):
        raise HeartbeatError("heartbeat body has no clientID")
    producers = [str(p["groupName"]) for p in data.get("producerDataSet") or [] if isinstance(p, dict)
                 and p.get("groupName")]
    consumers: list[ConsumerData] = []
    for c in data.get("consumerDataSet") or []:
        if not isinstance(c, dict) or not c.get("groupName"):
            raise HeartbeatError("consumer data without groupName")
        subs: list[SubscriptionData] = []
        for s in c.get("subscriptionDataSet") or []:
            if not isinstance(s, dict) or not s.get("topic"):
                raise HeartbeatError("subscription data without topic")
            sub_version = _int(s.get("subVersion"))
            if sub_version > 10**15:  # the Go client sends nanoseconds
                sub_version //= 1_000_000
            sub = build_subscription(str(s["topic"]), s.get("subString"), s.get("expressionType"), sub_version)
            # C++ sends atoi(tag) as codeSet: the broker's own hash of tagsSet is the only trustworthy code set.
            subs.append(sub)
        consumers.append(ConsumerData(
            group_name=str(c["groupName"]),
            consume_type=_enum(c.get("consumeType"), CONSUME_TYPES, "CONSUME_PASSIVELY"),
            message_model=_enum(c.get("messageModel"), MESSAGE_MODELS, "CLUSTERING"),
            consume_from_where=_enum(c.get("consumeFromWhere"), CONSUME_FROM, "CONSUME_FROM_LAST_OFFSET"),
            subscriptions=subs, unit_mode=bool(c.get("unitMode", False))))
    return HeartbeatData(client_id=client_id, producer_groups=producers, consumers=consumers)
