"""Permission bits and the rules that compare what a request needs with what an account owns (J ``Permission``).

Admin-only codes: upstream 4.9.7 guards five (create/delete topic and subscription group, update broker
config). Upstream later added the ACL codes 50, 51 and 52 (apache/rocketmq#7930) because any signed account
could otherwise rewrite the ACL; we guard those from the start, plus 53 (global white list) and 54 (which
returns every secret key), and our own FAULT_INJECT, which can stall every queue.
"""

from __future__ import annotations

from collections.abc import Iterable

from broker.acl.errors import AclError
from remoting.codes import RequestCode

DENY = 1
ANY = 1 << 1
PUB = 1 << 2
SUB = 1 << 3

_BY_NAME = {"PUB": PUB, "SUB": SUB, "PUB|SUB": PUB | SUB, "SUB|PUB": PUB | SUB, "DENY": DENY}

#: 4.9.7's ``Permission.ADMIN_CODE``.
UPSTREAM_ADMIN_CODES = frozenset(
    {
        RequestCode.UPDATE_AND_CREATE_TOPIC,
        RequestCode.UPDATE_BROKER_CONFIG,
        RequestCode.DELETE_TOPIC_IN_BROKER,
        RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
        RequestCode.DELETE_SUBSCRIPTIONGROUP,
    }
)
ADMIN_CODES = frozenset(
    int(c)
    for c in UPSTREAM_ADMIN_CODES
    | {
        RequestCode.UPDATE_AND_CREATE_ACL_CONFIG,
        RequestCode.DELETE_ACL_CONFIG,
        RequestCode.GET_BROKER_CLUSTER_ACL_INFO,
        RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG,
        RequestCode.GET_BROKER_CLUSTER_ACL_CONFIG,
        RequestCode.FAULT_INJECT,
    }
)


def parse_perm(text: str | None) -> int:
    """``PUB``, ``SUB``, ``PUB|SUB`` or ``SUB|PUB``; anything else (and nothing) is DENY."""
    if text is None:
        return DENY
    return _BY_NAME.get(str(text).strip(), DENY)


def check_permission(needed: int, owned: int) -> bool:
    if owned & DENY:
        return False
    if needed & ANY:
        return bool(owned & PUB or owned & SUB)
    return bool(needed & owned)


def need_admin(code: int) -> bool:
    return code in ADMIN_CODES


def split_resource(entry: str) -> list[str]:
    """``"topicA=PUB"`` split as commons-lang ``StringUtils.split(s, "=")``: empty pieces dropped."""
    return [piece for piece in str(entry).split("=") if piece]


def check_resource_perms(resources: Iterable[str] | None) -> None:
    """Refuse ``topicPerms``/``groupPerms`` entries an admin request would write (J ``checkResourcePerms``)."""
    for resource in resources or ():
        items = split_resource(resource)
        if len(items) != 2:
            raise AclError(
                f"Parse Resource format error for {resource}.\n"
                "The expected resource format is 'Res=Perm'. For example: topicA=SUB"
            )
        perm = items[1].strip()
        if perm != "DENY" and parse_perm(perm) == DENY:
            raise AclError(
                f"Parse resource permission error for {resource}.\n"
                "The expected permissions are 'SUB' or 'PUB' or 'SUB|PUB' or 'PUB|SUB'."
            )
