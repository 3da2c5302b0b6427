"""One ACL account as the broker checks it (J ``PlainAccessResource`` built by ``buildPlainAccessResource``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from broker.acl.errors import AclError
from broker.acl.permission import parse_perm, split_resource
from broker.acl.remote_address import AddressStrategy, address_strategy

RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
MIN_KEY_LENGTH = 6  # keys must be LONGER than this (J AclConstants.ACCESS_KEY_MIN_LENGTH)

#: The keys of one account in a plain_acl.yml file, in upstream's order.
ACCOUNT_KEYS = (
    "accessKey",
    "secretKey",
    "whiteRemoteAddress",
    "admin",
    "defaultTopicPerm",
    "defaultGroupPerm",
    "topicPerms",
    "groupPerms",
)


def retry_topic(group: str | None) -> str | None:
    return None if group is None else RETRY_GROUP_TOPIC_PREFIX + group


def is_retry_topic(topic: str | None) -> bool:
    return topic is not None and topic.startswith(RETRY_GROUP_TOPIC_PREFIX)


def printable_resource(resource: str, is_group: bool) -> str:
    return f"group:{resource[len(RETRY_GROUP_TOPIC_PREFIX) :]}" if is_group else f"topic:{resource}"


def _text(value: Any) -> str | None:
    """YAML scalars as fastjson converts them to the String fields of PlainAccessConfig."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() == "true" if value is not None else False


def _list(value: Any) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value if v is not None]
    return [str(value)]


def check_keys(access_key: str | None, secret_key: str | None) -> None:
    """J ``checkPlainAccessConfig``."""
    if (
        access_key is None
        or secret_key is None
        or len(access_key) <= MIN_KEY_LENGTH
        or len(secret_key) <= MIN_KEY_LENGTH
    ):
        raise AclError(
            f"The accessKey={_null(access_key)} and secretKey={_null(secret_key)} cannot be null and "
            "length should longer than 6"
        )


def _null(value: str | None) -> str:
    return "null" if value is None else value


@dataclass(frozen=True, slots=True)
class PlainAccount:
    access_key: str
    secret_key: str
    white_remote_address: str | None
    admin: bool
    default_topic_perm: int
    default_group_perm: int
    #: topic (or retry topic of a group) → permission bits; groups first, then topics, as upstream fills it
    resource_perms: Mapping[str, int] = field(default_factory=dict)
    address: AddressStrategy = field(default_factory=lambda: address_strategy(None))

    def __repr__(self) -> str:  # never print a secret in a log line
        return f"PlainAccount(access_key={self.access_key!r}, admin={self.admin})"

    @classmethod
    def from_config(cls, data: Mapping[str, Any]) -> PlainAccount:
        """Build and check one ``accounts`` entry of a plain_acl.yml file."""
        if not isinstance(data, Mapping):
            raise AclError(f"an account must be a mapping, not {type(data).__name__}")
        access_key, secret_key = _text(data.get("accessKey")), _text(data.get("secretKey"))
        check_keys(access_key, secret_key)
        perms: dict[str, int] = {}
        for is_topic, key in ((False, "groupPerms"), (True, "topicPerms")):
            for entry in _list(data.get(key)) or ():
                items = split_resource(entry)
                if len(items) != 2:
                    kind = "topic" if is_topic else "group"
                    raise AclError(f"Parse resource permission failed for {kind}:{entry}")
                name = items[0].strip()
                perms[name if is_topic else RETRY_GROUP_TOPIC_PREFIX + name] = parse_perm(items[1].strip())
        white = _text(data.get("whiteRemoteAddress"))
        return cls(
            access_key=access_key,
            secret_key=secret_key,  # type: ignore[arg-type]
            white_remote_address=white,
            admin=_bool(data.get("admin")),
            default_topic_perm=parse_perm(_text(data.get("defaultTopicPerm"))),
            default_group_perm=parse_perm(_text(data.get("defaultGroupPerm"))),
            resource_perms=perms,
            address=address_strategy(white),
        )


def account_config_json(data: Mapping[str, Any]) -> dict[str, Any]:
    """An account as GET_BROKER_CLUSTER_ACL_CONFIG lists it (J ``PlainAccessConfig`` through fastjson: keys
    sorted, nulls left out, ``admin`` always present)."""
    out: dict[str, Any] = {
        "accessKey": _text(data.get("accessKey")),
        "admin": _bool(data.get("admin")),
        "defaultGroupPerm": _text(data.get("defaultGroupPerm")),
        "defaultTopicPerm": _text(data.get("defaultTopicPerm")),
        "groupPerms": _list(data.get("groupPerms")),
        "secretKey": _text(data.get("secretKey")),
        "topicPerms": _list(data.get("topicPerms")),
        "whiteRemoteAddress": _text(data.get("whiteRemoteAddress")),
    }
    return {k: v for k, v in out.items() if v is not None}
