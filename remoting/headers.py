"""Every request and response custom header (``extFields``) as a dataclass declared once, with wire names.

Field names are snake_case; the wire name is ``metadata["wire"]`` or the camelCase of the field
name. Fields without a default are required (J ``@CFNotNull``). Types follow J: ``int`` is a Java
``Integer`` (32-bit), ``Long`` a Java ``Long`` (64-bit), ``bool`` a ``Boolean`` (``"true"`` in any
case is true, anything else false — so C's ``"1"`` is false), ``str`` a ``String``.

``decode_header(cls, ext)`` / ``encode_header(h)`` work for all of them. The per-class field plan
and the decoder/encoder compiled from it are made once when the class is declared (``@header``)
and stored on the class.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, TypeVar

from remoting.errors import HeaderError

H = TypeVar("H")

Long = Annotated[int, "java.lang.Long"]
"""A Java ``Long`` field (64-bit); a plain ``int`` annotation is a Java ``Integer``."""

_INT_RANGE = (-(2**31), 2**31 - 1)
_LONG_RANGE = (-(2**63), 2**63 - 1)
_SIGNED_DIGITS = re.compile(r"[+-]?[0-9]+")

_KIND_STR = 0
_KIND_INT = 1
_KIND_LONG = 2
_KIND_BOOL = 3
_KIND_NAMES = {_KIND_INT: "an integer", _KIND_LONG: "a long"}

_PLAN_ATTR = "__header_plan__"
_DECODE_ATTR = "__header_decode__"
_ENCODE_ATTR = "__header_encode__"


def wire(name: str, **kwargs: Any) -> Any:
    """A field whose wire name is not the camelCase of its Python name."""
    return field(metadata={"wire": name}, **kwargs)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _kind_of(tp: Any) -> int:
    """Map a resolved annotation to a wire kind; Optional[...] unwraps to its inner type."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(inner) != 1:
            raise TypeError(f"unsupported header field type {tp!r}")
        return _kind_of(inner[0])
    if origin is Annotated:
        base, *extra = typing.get_args(tp)
        if base is int and "java.lang.Long" in extra:
            return _KIND_LONG
        return _kind_of(base)
    if tp is str:
        return _KIND_STR
    if tp is bool:
        return _KIND_BOOL
    if tp is int:
        return _KIND_INT
    raise TypeError(f"unsupported header field type {tp!r}")


@dataclass(frozen=True, slots=True)
class _FieldPlan:
    attr: str
    wire: str
    kind: int
    required: bool


def _build_plan(cls: type) -> tuple[_FieldPlan, ...]:
    hints = typing.get_type_hints(cls, include_extras=True)
    plan = []
    for f in dataclasses.fields(cls):
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if not required and f.default is dataclasses.MISSING:  # checked here: the decoder compiles later
            raise TypeError(f"{cls.__name__}.{f.name}: optional header fields need a plain default")
        plan.append(_FieldPlan(f.name, f.metadata.get("wire", _camel(f.name)), _kind_of(hints[f.name]), required))
    return tuple(plan)


def header(cls: type[H]) -> type[H]:
    """Declare a header: a slotted dataclass plus its decoder and encoder, compiled once, on first use (a
    broker uses a few dozen of the declared headers; compiling all of them cost a boot ~20 ms, issue 15)."""
    dc = dataclass(slots=True)(cls)
    plan = _build_plan(dc)
    setattr(dc, _PLAN_ATTR, plan)
    setattr(dc, _DECODE_ATTR, _first_use(dc, _DECODE_ATTR, _compile_decoder))
    setattr(dc, _ENCODE_ATTR, _first_use(dc, _ENCODE_ATTR, _compile_encoder))
    return dc


def _first_use(cls: type, attr: str, compile_fn: Any) -> Any:
    """A stand-in that compiles the real function, puts it on the class in its place, and calls it."""

    def compile_and_call(arg: Any) -> Any:
        fn = compile_fn(cls, getattr(cls, _PLAN_ATTR))
        setattr(cls, attr, fn)
        return fn(arg)

    return compile_and_call


def _missing(cls_name: str, wire_name: str) -> None:
    raise HeaderError(f"{cls_name}: the header field '{wire_name}' is missing")


def _as_str(value: Any) -> str:
    # RemotingCommand.decode already normalises extFields; this covers dicts built by hand.
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _parse_int(cls_name: str, wire_name: str, value: str, kind: int) -> int:
    # Java parseInt/parseLong: optional sign, ASCII digits, nothing else (no spaces, no '_').
    if not (value.isascii() and _SIGNED_DIGITS.fullmatch(value)):
        raise HeaderError(f"{cls_name}: the header field '{wire_name}' is not {_KIND_NAMES[kind]}: {value!r}")
    # Java accepts any number of leading zeros; strip them first (and bound the length) so a
    # hostile 5000-digit value is "out of range", not Python's int-string limit ValueError.
    magnitude = value.lstrip("+-").lstrip("0") or "0"
    lo, hi = _INT_RANGE if kind == _KIND_INT else _LONG_RANGE
    number = int(magnitude) if len(magnitude) <= 20 else hi + 1
    if value[0] == "-":
        number = -number
    if not lo <= number <= hi:
        raise HeaderError(
            f"{cls_name}: the header field '{wire_name}' is out of range for {_KIND_NAMES[kind]}: {value!r}"
        )
    return number


# Digit strings shorter than this cannot overflow the Java type, so int() alone is exact.
_SAFE_DIGITS = {_KIND_INT: 10, _KIND_LONG: 19}


def _compile_decoder(cls: type, plan: tuple[_FieldPlan, ...]) -> Any:
    """Straight-line code per class (like dataclasses' own __init__): decode is the hot path of
    every request, and a generic loop over the plan costs several times more."""
    name = cls.__name__
    ns: dict[str, Any] = {"_cls": cls, "_missing": _missing, "_as_str": _as_str, "_parse_int": _parse_int}
    lines = ["def decode(ext):", "    get = ext.get"]
    for i, fp in enumerate(plan):
        v = f"v{i}"
        lines.append(f"    {v} = get({fp.wire!r})")
        if fp.required:
            lines.append(f"    if {v} is None: _missing({name!r}, {fp.wire!r})")
            ind = "    "
        else:
            f = next(f for f in dataclasses.fields(cls) if f.name == fp.attr)
            if f.default is dataclasses.MISSING:
                raise TypeError(f"{name}.{fp.attr}: optional header fields need a plain default")
            ns[f"d{i}"] = f.default
            lines.append(f"    if {v} is None: {v} = d{i}")
            lines.append("    else:")
            ind = "        "
        lines.append(f"{ind}if type({v}) is not str: {v} = _as_str({v})")
        if fp.kind == _KIND_BOOL:
            lines.append(f"{ind}{v} = {v}.lower() == 'true'")
        elif fp.kind in (_KIND_INT, _KIND_LONG):
            lines.append(
                f"{ind}{v} = int({v}) if {v}.isdigit() and {v}.isascii() and len({v}) < "
                f"{_SAFE_DIGITS[fp.kind]} else _parse_int({name!r}, {fp.wire!r}, {v}, {fp.kind})"
            )
    lines.append(f"    return _cls({', '.join(f'v{i}' for i in range(len(plan)))})")
    exec("\n".join(lines), ns)  # noqa: S102 - generated from our own declarations only
    return ns["decode"]


def _compile_encoder(cls: type, plan: tuple[_FieldPlan, ...]) -> Any:
    ns: dict[str, Any] = {"_as_str": _as_str}
    lines = ["def encode(h):", "    out = {}"]
    for fp in plan:
        lines.append(f"    v = h.{fp.attr}")
        lines.append("    if v is not None:")
        if fp.kind == _KIND_BOOL:
            lines.append(f"        out[{fp.wire!r}] = 'true' if v is True else ('false' if v is False else _as_str(v))")
        elif fp.kind == _KIND_STR:
            lines.append(f"        out[{fp.wire!r}] = v if type(v) is str else _as_str(v)")
        else:
            lines.append(f"        out[{fp.wire!r}] = str(v) if type(v) is int else _as_str(v)")
    lines.append("    return out")
    exec("\n".join(lines), ns)  # noqa: S102 - generated from our own declarations only
    return ns["encode"]


def decode_header(cls: type[H], ext_fields: Mapping[str, str]) -> H:
    """Build ``cls`` from a request's extFields with J's parsing rules; HeaderError on bad input."""
    return getattr(cls, _DECODE_ATTR)(ext_fields)  # type: ignore[no-any-return]


def encode_header(hdr: Any) -> dict[str, str]:
    """The extFields of a header: strings only (C and G need that), None fields omitted."""
    return getattr(type(hdr), _ENCODE_ATTR)(hdr)  # type: ignore[no-any-return]


def header_wire_names(cls: type) -> tuple[str, ...]:
    """Wire names of a header class, in declaration order (tests, ACL signing)."""
    return tuple(fp.wire for fp in getattr(cls, _PLAN_ATTR))


# =====================================================================================
# NameServer (protocol §2.1)
# =====================================================================================


@header
class GetRouteInfoRequestHeader:  # 105
    topic: str
    accept_standard_json_only: bool | None = None


@header
class RegisterBrokerRequestHeader:  # 103
    broker_name: str
    broker_addr: str
    cluster_name: str
    ha_server_addr: str
    broker_id: Long
    compressed: bool = False
    body_crc32: int | None = None


@header
class RegisterBrokerResponseHeader:
    ha_server_addr: str | None = None
    master_addr: str | None = None


@header
class UnRegisterBrokerRequestHeader:  # 104
    broker_name: str
    broker_addr: str
    cluster_name: str
    broker_id: Long


@header
class GetKVConfigRequestHeader:  # 101
    namespace: str
    key: str


@header
class GetKVConfigResponseHeader:
    value: str | None = None


@header
class PutKVConfigRequestHeader:  # 100
    namespace: str
    key: str
    value: str


@header
class DeleteKVConfigRequestHeader:  # 102
    namespace: str
    key: str


@header
class DeleteTopicFromNamesrvRequestHeader:  # 216
    topic: str
    cluster_name: str | None = None


@header
class GetTopicsByClusterRequestHeader:  # 224
    cluster: str


# =====================================================================================
# Producer (protocol §2.2)
# =====================================================================================


@header
class SendMessageRequestHeader:  # 10
    producer_group: str
    topic: str
    default_topic: str
    default_topic_queue_nums: int
    queue_id: int
    sys_flag: int
    born_timestamp: Long
    flag: int
    properties: str | None = None
    reconsume_times: int | None = None
    unit_mode: bool = False
    batch: bool = False
    max_reconsume_times: int | None = None
    broker_name: str | None = wire("bname", default=None)

    @classmethod
    def from_v2(cls, v2: SendMessageRequestHeaderV2) -> SendMessageRequestHeader:
        return cls(
            producer_group=v2.a,
            topic=v2.b,
            default_topic=v2.c,
            default_topic_queue_nums=v2.d,
            queue_id=v2.e,
            sys_flag=v2.f,
            born_timestamp=v2.g,
            flag=v2.h,
            properties=v2.i,
            reconsume_times=v2.j,
            unit_mode=v2.k,
            batch=v2.m,
            max_reconsume_times=v2.l,
            broker_name=v2.n,
        )

    def to_v2(self) -> SendMessageRequestHeaderV2:
        return SendMessageRequestHeaderV2(
            a=self.producer_group,
            b=self.topic,
            c=self.default_topic,
            d=self.default_topic_queue_nums,
            e=self.queue_id,
            f=self.sys_flag,
            g=self.born_timestamp,
            h=self.flag,
            i=self.properties,
            j=self.reconsume_times,
            k=self.unit_mode,
            l=self.max_reconsume_times,
            m=self.batch,
            n=self.broker_name,
        )


@header
class SendMessageRequestHeaderV2:  # 310, 320 — J's short names, a..h required
    a: str  # producerGroup
    b: str  # topic
    c: str  # defaultTopic
    d: int  # defaultTopicQueueNums
    e: int  # queueId
    f: int  # sysFlag
    g: Long  # bornTimestamp
    h: int  # flag
    i: str | None = None  # properties
    j: int | None = None  # reconsumeTimes
    k: bool = False  # unitMode
    l: int | None = None  # noqa: E741 (maxReconsumeTimes: V2's one-letter wire name)
    m: bool = False  # batch
    n: str | None = None  # brokerName (4.9.5+)


@header
class SendMessageResponseHeader:
    msg_id: str
    queue_id: int
    queue_offset: Long
    transaction_id: str | None = None
    # J's send processor adds these two to every stored-message response (clients read them).
    msg_region: str | None = wire("MSG_REGION", default=None)
    trace_on: str | None = wire("TRACE_ON", default=None)


@header
class EndTransactionRequestHeader:  # 37
    producer_group: str
    tran_state_table_offset: Long
    commit_log_offset: Long
    commit_or_rollback: int  # 0 unknown, 8 commit, 12 rollback
    msg_id: str
    from_transaction_check: bool = False
    transaction_id: str | None = None


@header
class CheckTransactionStateRequestHeader:  # 39, broker → client
    tran_state_table_offset: Long
    commit_log_offset: Long
    msg_id: str | None = None
    transaction_id: str | None = None
    offset_msg_id: str | None = None


# =====================================================================================
# Consumer (protocol §2.3); HEART_BEAT (34) has no header, only a body.
# =====================================================================================


@header
class UnregisterClientRequestHeader:  # 35
    client_id: str = wire("clientID")
    producer_group: str | None = None
    consumer_group: str | None = None


@header
class GetConsumerListByGroupRequestHeader:  # 38
    consumer_group: str


@header
class QueryConsumerOffsetRequestHeader:  # 14
    consumer_group: str
    topic: str
    queue_id: int


@header
class QueryConsumerOffsetResponseHeader:
    offset: Long


@header
class UpdateConsumerOffsetRequestHeader:  # 15
    consumer_group: str
    topic: str
    queue_id: int
    commit_offset: Long


@header
class PullMessageRequestHeader:  # 11
    consumer_group: str
    topic: str
    queue_id: int
    queue_offset: Long
    max_msg_nums: int
    sys_flag: int
    commit_offset: Long
    suspend_timeout_millis: Long
    sub_version: Long
    subscription: str | None = None
    expression_type: str | None = None


@header
class PullMessageResponseHeader:
    suggest_which_broker_id: Long
    next_begin_offset: Long
    min_offset: Long
    max_offset: Long


@header
class GetMaxOffsetRequestHeader:  # 30
    topic: str
    queue_id: int


@header
class GetMaxOffsetResponseHeader:
    offset: Long


@header
class GetMinOffsetRequestHeader:  # 31
    topic: str
    queue_id: int


@header
class GetMinOffsetResponseHeader:
    offset: Long


@header
class SearchOffsetRequestHeader:  # 29
    topic: str
    queue_id: int
    timestamp: Long


@header
class SearchOffsetResponseHeader:
    offset: Long


@header
class GetEarliestMsgStoretimeRequestHeader:  # 32
    topic: str
    queue_id: int


@header
class GetEarliestMsgStoretimeResponseHeader:
    timestamp: Long


@header
class ConsumerSendMsgBackRequestHeader:  # 36
    offset: Long
    group: str
    delay_level: int
    origin_msg_id: str | None = None
    origin_topic: str | None = None
    unit_mode: bool = False
    max_reconsume_times: int | None = None


@header
class NotifyConsumerIdsChangedRequestHeader:  # 40, broker → client
    consumer_group: str


@header
class GetConsumerRunningInfoRequestHeader:  # 307, broker → client
    consumer_group: str
    client_id: str
    jstack_enable: bool = False


@header
class ResetOffsetRequestHeader:  # 220, broker → client (and 222 admin → broker)
    topic: str
    group: str
    timestamp: Long
    is_force: bool


# =====================================================================================
# Admin (protocol §2.4); 21, 28 and 25 have no header (25 carries properties in the body).
# =====================================================================================


@header
class CreateTopicRequestHeader:  # 17
    topic: str
    default_topic: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_filter_type: str
    order: bool
    topic_sys_flag: int | None = None
    attributes: str | None = None  # 5.x: "+message.type=FIFO,+key=value"


@header
class DeleteTopicRequestHeader:  # 215
    topic: str


@header
class GetTopicStatsInfoRequestHeader:  # 202
    topic: str


@header
class GetConsumeStatsRequestHeader:  # 208
    consumer_group: str
    topic: str | None = None


@header
class QueryMessageRequestHeader:  # 12
    topic: str
    key: str
    max_num: int
    begin_timestamp: Long
    end_timestamp: Long


@header
class QueryMessageResponseHeader:
    index_last_update_timestamp: Long
    index_last_update_phyoffset: Long


@header
class ViewMessageRequestHeader:  # 33
    offset: Long


@header
class GetConsumerConnectionListRequestHeader:  # 203
    consumer_group: str


@header
class GetProducerConnectionListRequestHeader:  # 204
    producer_group: str


@header
class GetBrokerConfigResponseHeader:  # 26
    version: str


@header
class DeleteSubscriptionGroupRequestHeader:  # 207
    group_name: str


@header
class FaultInjectRequestHeader:  # 5001 FAULT_INJECT (mini-rocketmq only)
    kind: str
    target: str | None = None
    duration_ms: Long | None = None
    value: str | None = None


@header
class CreateAccessConfigRequestHeader:  # 50 UPDATE_AND_CREATE_ACL_CONFIG
    access_key: str
    secret_key: str | None = None
    white_remote_address: str | None = None
    admin: bool = False
    default_topic_perm: str | None = None
    default_group_perm: str | None = None
    topic_perms: str | None = None  # comma separated "topic=PERM"
    group_perms: str | None = None


@header
class DeleteAccessConfigRequestHeader:  # 51 DELETE_ACL_CONFIG
    access_key: str


@header
class GetBrokerAclConfigResponseHeader:  # 52 GET_BROKER_CLUSTER_ACL_INFO
    version: str
    broker_name: str
    broker_addr: str
    cluster_name: str
    all_acl_file_version: str | None = None


@header
class UpdateGlobalWhiteAddrsConfigRequestHeader:  # 53 UPDATE_GLOBAL_WHITE_ADDRS_CONFIG
    global_white_addrs: str
    acl_file_full_path: str | None = None  # upstream marks it required but its own tools leave it out


ALL_HEADERS: tuple[type, ...] = tuple(
    obj for obj in list(globals().values()) if isinstance(obj, type) and hasattr(obj, _PLAN_ATTR)
)
"""Every header class declared here (tests iterate over it)."""
