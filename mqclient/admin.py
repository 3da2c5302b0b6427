"""``AdminClient``: mqclient's one admin client, over ``remoting.client.RemotingClient``.

It sends the admin requests upstream's ``mqadmin`` sends (``mqclient/mqadmin/`` is the CLI beside it)
and the few conveniences our tools and bench need (``ping_namesrv``, ``brokers``, ``create_topic_everywhere``,
``consumer_offset``) and mini-rocketmq's FAULT_INJECT (5001).

Each method is one request (the code is in its docstring) and returns plain data: the answers are
parsed here — including fastjson's non-standard bodies whose map keys are MessageQueue objects
(protocol.md §4.1, §4.5) and raw stored messages (§5.2) — so the CLI only renders.
"""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Self

from mqclient.errors import MQClientError, NameServerUnreachableError
from mqclient.fastjson import parse_fastjson
from mqclient.fault import fault_inject_request
from mqclient.message import MessageExt, create_offset_msg_id  # noqa: F401 (re-exported for tools)
from mqclient.message import decode_messages as _decode_records
from mqclient.route import DEFAULT_TOPIC, MessageQueue, RouteCache, TopicRoute, split_namesrv
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.errors import RemotingError
from remoting.headers import (
    CreateAccessConfigRequestHeader,
    CreateTopicRequestHeader,
    DeleteAccessConfigRequestHeader,
    DeleteTopicRequestHeader,
    GetConsumerConnectionListRequestHeader,
    GetConsumeStatsRequestHeader,
    GetMaxOffsetRequestHeader,
    GetProducerConnectionListRequestHeader,
    GetTopicStatsInfoRequestHeader,
    QueryConsumerOffsetRequestHeader,
    QueryMessageRequestHeader,
    ResetOffsetRequestHeader,
    SearchOffsetRequestHeader,
    UpdateConsumerOffsetRequestHeader,
    UpdateGlobalWhiteAddrsConfigRequestHeader,
    ViewMessageRequestHeader,
    encode_header,
)
from remoting.signature import SessionCredentials

ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"  # name server KV namespace of ordered topics' queue layout
MASTER_ID = "0"
LONG_MAX = (1 << 63) - 1


class AdminError(MQClientError):
    """A request failed: refused by the server (``code``/``remark``) or not delivered (``code`` None)."""

    def __init__(
        self, message: str, *, code: int | None = None, remark: str | None = None, addr: str | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.remark = remark
        self.addr = addr


# ------------------------------------------------------------------------------------------------
# stored messages (protocol.md §5.2)


# One record decoder on the client side: mqclient's (magic and size checks, IPv6 hosts).
StoredMessage = MessageExt


def decode_messages(body: bytes | memoryview | None) -> list[StoredMessage]:
    """Split a QUERY_MESSAGE / VIEW_MESSAGE_BY_ID body into messages (bodies as stored); ValueError on a torn record."""
    return _decode_records(body or b"", decompress=False)


def message_json(msg: StoredMessage) -> dict[str, Any]:
    return {
        "msgId": msg.msg_id,
        "offsetMsgId": msg.offset_msg_id,
        "topic": msg.topic,
        "queueId": msg.queue_id,
        "queueOffset": msg.queue_offset,
        "commitLogOffset": msg.commit_log_offset,
        "sysFlag": msg.sys_flag,
        "flag": msg.flag,
        "bornTimestamp": msg.born_timestamp,
        "bornHost": msg.born_host,
        "storeTimestamp": msg.store_timestamp,
        "storeHost": msg.store_host,
        "reconsumeTimes": msg.reconsume_times,
        "properties": msg.properties,
        "bodySize": len(msg.body),
    }


def decode_offset_msg_id(msg_id: str) -> tuple[str, int]:
    """(store address "ip:port", commit-log offset) of an offset message id; ValueError otherwise."""
    text = msg_id.strip()
    if len(text) != 32:
        raise ValueError(f"{msg_id!r} is not an offset message id (32 hex characters for IPv4)")
    try:
        raw = bytes.fromhex(text)
    except ValueError:
        raise ValueError(f"{msg_id!r} is not hexadecimal") from None
    port, offset = struct.unpack(">iq", raw[4:])
    return f"{'.'.join(str(b) for b in raw[:4])}:{port}", offset


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    cluster: str
    broker_name: str
    master: str | None


def _explain(exc: BaseException) -> str:
    """Say what a failed connection means for someone typing --namesrv."""
    cause = exc.__cause__
    if isinstance(cause, ConnectionRefusedError):
        return "connection refused (nothing listens there: is the name server running, is the port right?)"
    if isinstance(cause, OSError) and cause.errno is not None:
        return f"{cause.strerror or cause} (errno {cause.errno})"
    if "timed out" in str(exc):
        return f"no answer ({exc}): a firewall, a wrong host, or a server that is not a RocketMQ name server"
    return str(exc)


# ------------------------------------------------------------------------------------------------
# the client


def _mq_map(data: Any, field_name: str) -> dict[MessageQueue, Any]:
    table = (data or {}).get(field_name) or {}
    return {MessageQueue.from_key(k): v for k, v in table.items()}


class AdminClient:
    """Admin requests to one name server set and any broker; every failure is an ``AdminError``."""

    def __init__(
        self,
        namesrv: str | Sequence[str],
        *,
        timeout_s: float = 5.0,
        client: RemotingClient | None = None,
        credentials: SessionCredentials | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        addrs = namesrv.split(";") if isinstance(namesrv, str) else list(namesrv)
        self.namesrv = [a.strip() for a in addrs if a.strip()]
        self.timeout_s = timeout_s
        self.clock = clock
        self.client = client or RemotingClient(connect_timeout_s=min(timeout_s, 3.0), credentials=credentials)
        self._own_client = client is None
        self.routes = RouteCache(self.client, self.namesrv, timeout_s=timeout_s, ttl_s=0.0, clock=clock)

    async def close(self) -> None:
        if self._own_client:
            await self.client.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- plumbing ---------------------------------------------------------------------------
    async def invoke(
        self,
        addr: str,
        code: int,
        ext: dict[str, str] | None = None,
        body: bytes | None = None,
        *,
        ok: Sequence[int] = (ResponseCode.SUCCESS,),
        timeout_s: float | None = None,
    ) -> RemotingCommand:
        request = RemotingCommand.request(code, ext or {}, body)
        try:
            resp = await self.client.invoke(addr, request, timeout_s or self.timeout_s)
        except RemotingError as exc:
            raise AdminError(f"{addr}: {exc}", addr=addr) from exc
        if resp.code not in ok:
            name = _name(RequestCode, code)
            raise AdminError(
                f"{addr} answered {name} with code {resp.code} ({_name(ResponseCode, resp.code)}): "
                f"{(resp.remark or '').strip()}",
                code=resp.code,
                remark=resp.remark,
                addr=addr,
            )
        return resp

    async def invoke_namesrv(
        self, code: int, ext: dict[str, str] | None = None, ok: Sequence[int] = (ResponseCode.SUCCESS,)
    ) -> RemotingCommand:
        """Ask the name servers in turn; the first answer wins (J picks one too)."""
        if not self.namesrv:
            raise AdminError("no name server address: pass -n host:port or set NAMESRV_ADDR")
        errors: list[AdminError] = []
        for addr in self.namesrv:
            try:
                return await self.invoke(addr, code, ext, ok=ok)
            except AdminError as exc:
                if exc.code is not None:
                    raise
                errors.append(exc)
        raise AdminError("; ".join(str(e) for e in errors))

    # -- name server --------------------------------------------------------------------------
    async def ping_namesrv(self) -> None:
        """Raise ``NameServerUnreachableError`` with the reason unless a name server answers 105."""
        errors = []
        for addr in split_namesrv(self.namesrv):
            try:
                resp = await self.client.invoke(
                    addr,
                    RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": DEFAULT_TOPIC}),
                    self.timeout_s,
                )
            except RemotingError as exc:
                errors.append(f"{addr}: {_explain(exc)}")
                continue
            if resp.code in (ResponseCode.SUCCESS, ResponseCode.TOPIC_NOT_EXIST):
                return
            errors.append(f"{addr}: answered code {resp.code} ({resp.remark or ''}) to a route request")
        raise NameServerUnreachableError("name server unreachable — " + "; ".join(errors))

    async def brokers(self) -> list[BrokerInfo]:
        """Brokers known to the name server (106), falling back to TBW102's route."""
        try:
            table = (await self.cluster_info())["brokerAddrTable"]
        except AdminError:
            table = {}
        out = []
        for name, bd in sorted(table.items()):
            addrs = {str(k): v for k, v in (bd.get("brokerAddrs") or {}).items()}
            out.append(BrokerInfo(cluster=bd.get("cluster", ""), broker_name=name, master=addrs.get(MASTER_ID)))
        if out:
            return out
        route = await self.routes.query(DEFAULT_TOPIC)
        if route is None:
            raise MQClientError("the name server knows no broker (no cluster info, no TBW102 route)")
        return [BrokerInfo(b.cluster, b.broker_name, b.master) for b in route.brokers]

    async def route(self, topic: str) -> TopicRoute | None:
        """The topic's parsed route (105), None when the name server has none."""
        return await self.routes.query(topic)

    async def cluster_info(self) -> dict[str, Any]:
        """106 GET_BROKER_CLUSTER_INFO → ``{"brokerAddrTable": {...}, "clusterAddrTable": {...}}``."""
        resp = await self.invoke_namesrv(RequestCode.GET_BROKER_CLUSTER_INFO)
        data = parse_fastjson(resp.body) or {}
        data.setdefault("brokerAddrTable", {})
        data.setdefault("clusterAddrTable", {})
        return data

    async def topic_list(self) -> list[str]:
        """206 GET_ALL_TOPIC_LIST_FROM_NAMESERVER."""
        resp = await self.invoke_namesrv(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
        return list((parse_fastjson(resp.body) or {}).get("topicList") or [])

    async def topic_route(self, topic: str) -> dict[str, Any]:
        """105 GET_ROUTEINFO_BY_TOPIC (TOPIC_NOT_EXIST → AdminError code 17)."""
        resp = await self.invoke_namesrv(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
        return parse_fastjson(resp.body) or {}

    async def delete_topic_in_namesrv(self, topic: str, cluster: str | None = None) -> None:
        """216 DELETE_TOPIC_IN_NAMESRV, on every name server."""
        ext = {"topic": topic}
        if cluster:
            ext["clusterName"] = cluster
        for addr in self.namesrv:
            await self.invoke(addr, RequestCode.DELETE_TOPIC_IN_NAMESRV, ext)

    async def put_kv_config(self, namespace: str, key: str, value: str) -> None:
        """100 PUT_KV_CONFIG, on every name server."""
        for addr in self.namesrv:
            await self.invoke(addr, RequestCode.PUT_KV_CONFIG, {"namespace": namespace, "key": key, "value": value})

    async def masters(self, cluster: str | None = None) -> dict[str, str]:
        """broker name → master address (all clusters when ``cluster`` is None); AdminError if unknown."""
        info = await self.cluster_info()
        clusters = info["clusterAddrTable"]
        if cluster is not None and cluster not in clusters:
            known = ", ".join(sorted(clusters)) or "none"
            raise AdminError(f"cluster {cluster!r} is not known to the name server (known: {known})")
        names = set(clusters[cluster]) if cluster is not None else set(info["brokerAddrTable"])
        out = {}
        for name in sorted(names):
            addrs = {str(k): v for k, v in ((info["brokerAddrTable"].get(name) or {}).get("brokerAddrs") or {}).items()}
            if MASTER_ID in addrs:
                out[name] = addrs[MASTER_ID]
        return out

    async def route_masters(self, topic: str) -> dict[str, str]:
        """broker name → address (master, else any) of the brokers serving ``topic`` (J selectBrokerAddr)."""
        route = await self.topic_route(topic)
        out = {}
        for bd in route.get("brokerDatas") or []:
            addrs = {str(k): v for k, v in (bd.get("brokerAddrs") or {}).items()}
            addr = addrs.get(MASTER_ID) or next(iter(addrs.values()), None)
            if addr:
                out[str(bd.get("brokerName"))] = addr
        return out

    # -- brokers -----------------------------------------------------------------------------
    async def runtime_info(self, addr: str) -> dict[str, str]:
        """28 GET_BROKER_RUNTIME_INFO → KVTable."""
        resp = await self.invoke(addr, RequestCode.GET_BROKER_RUNTIME_INFO)
        return {str(k): str(v) for k, v in ((parse_fastjson(resp.body) or {}).get("table") or {}).items()}

    async def broker_config(self, addr: str) -> dict[str, str]:
        """26 GET_BROKER_CONFIG → the properties text, parsed."""
        resp = await self.invoke(addr, RequestCode.GET_BROKER_CONFIG)
        out = {}
        for line in bytes(resp.body or b"").decode("utf-8", "replace").splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                key, _, value = line.partition("=")
                out[key.strip()] = value.strip()
        return out

    async def update_broker_config(self, addr: str, properties: dict[str, str]) -> None:
        """25 UPDATE_BROKER_CONFIG with ``key=value`` lines in the body."""
        body = "".join(f"{k}={v}\n" for k, v in properties.items()).encode()
        await self.invoke(addr, RequestCode.UPDATE_BROKER_CONFIG, body=body)

    async def create_topic(
        self,
        addr: str,
        topic: str,
        queues: int | None = None,
        *,
        read_queues: int = 8,
        write_queues: int = 8,
        perm: int = 6,
        order: bool = False,
        topic_sys_flag: int = 0,
        attributes: str | None = None,
    ) -> None:
        """17 UPDATE_AND_CREATE_TOPIC (``queues`` sets both counts); ``attributes`` as 5.x writes them
        (``+message.type=FIFO``)."""
        if queues is not None:
            read_queues = write_queues = queues
        hdr = CreateTopicRequestHeader(
            topic=topic,
            default_topic=DEFAULT_TOPIC,
            read_queue_nums=read_queues,
            write_queue_nums=write_queues,
            perm=perm,
            topic_filter_type="SINGLE_TAG",
            order=order,
            topic_sys_flag=topic_sys_flag,
            attributes=attributes,
        )
        await self.invoke(addr, RequestCode.UPDATE_AND_CREATE_TOPIC, encode_header(hdr))

    async def create_topic_everywhere(self, topic: str, queues: int, *, wait_s: float = 10.0) -> TopicRoute:
        """Create ``topic`` on every master and wait until the name server serves its route."""
        masters = [b.master for b in await self.brokers() if b.master]
        if not masters:
            raise MQClientError("no master broker is registered with the name server")
        for addr in masters:
            await self.create_topic(addr, topic, queues)
        deadline = self.clock() + wait_s
        while True:
            route = await self.routes.query(topic)
            if route is not None and len(route.write_queues()) >= queues * len(masters):
                return route
            if self.clock() >= deadline:
                raise MQClientError(
                    f"topic {topic} was created but the name server did not serve its route within {wait_s}s"
                )
            await asyncio.sleep(0.1)

    async def delete_topic_in_broker(self, addr: str, topic: str) -> None:
        """215 DELETE_TOPIC_IN_BROKER."""
        await self.invoke(addr, RequestCode.DELETE_TOPIC_IN_BROKER, encode_header(DeleteTopicRequestHeader(topic)))

    async def topic_stats(self, addr: str, topic: str) -> dict[MessageQueue, dict[str, int]]:
        """202 GET_TOPIC_STATS_INFO → {mq: {minOffset, maxOffset, lastUpdateTimestamp}}."""
        resp = await self.invoke(
            addr, RequestCode.GET_TOPIC_STATS_INFO, encode_header(GetTopicStatsInfoRequestHeader(topic))
        )
        return _mq_map(parse_fastjson(resp.body), "offsetTable")

    async def consume_stats(self, addr: str, group: str, topic: str | None = None) -> tuple[float, dict]:
        """208 GET_CONSUME_STATS → (consumeTps, {mq: {brokerOffset, consumerOffset, lastTimestamp}})."""
        resp = await self.invoke(
            addr,
            RequestCode.GET_CONSUME_STATS,
            encode_header(GetConsumeStatsRequestHeader(consumer_group=group, topic=topic)),
        )
        data = parse_fastjson(resp.body) or {}
        return float(data.get("consumeTps") or 0.0), _mq_map(data, "offsetTable")

    async def consumer_connection(self, addr: str, group: str) -> dict[str, Any]:
        """203 GET_CONSUMER_CONNECTION_LIST → ConsumerConnection."""
        resp = await self.invoke(
            addr, RequestCode.GET_CONSUMER_CONNECTION_LIST, encode_header(GetConsumerConnectionListRequestHeader(group))
        )
        return parse_fastjson(resp.body) or {}

    async def producer_connection(self, addr: str, group: str) -> dict[str, Any]:
        """204 GET_PRODUCER_CONNECTION_LIST → ProducerConnection."""
        resp = await self.invoke(
            addr, RequestCode.GET_PRODUCER_CONNECTION_LIST, encode_header(GetProducerConnectionListRequestHeader(group))
        )
        return parse_fastjson(resp.body) or {}

    async def topic_consume_by_who(self, addr: str, topic: str) -> list[str]:
        """300 QUERY_TOPIC_CONSUME_BY_WHO → group names."""
        resp = await self.invoke(addr, RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": topic})
        return sorted((parse_fastjson(resp.body) or {}).get("groupList") or [])

    async def view_stats(self, addr: str, stats_name: str, stats_key: str) -> dict[str, Any]:
        """315 VIEW_BROKER_STATS_DATA → BrokerStatsData (statsMinute/Hour/Day: sum, tps, avgpt)."""
        resp = await self.invoke(
            addr, RequestCode.VIEW_BROKER_STATS_DATA, {"statsName": stats_name, "statsKey": stats_key}
        )
        return parse_fastjson(resp.body) or {}

    async def view_message(self, addr: str, offset: int) -> StoredMessage:
        """33 VIEW_MESSAGE_BY_ID."""
        resp = await self.invoke(addr, RequestCode.VIEW_MESSAGE_BY_ID, encode_header(ViewMessageRequestHeader(offset)))
        msgs = decode_messages(resp.body)
        if not msgs:
            raise AdminError(f"{addr} answered VIEW_MESSAGE_BY_ID without a message", addr=addr)
        return msgs[0]

    async def query_message(
        self,
        addr: str,
        topic: str,
        key: str,
        *,
        max_num: int = 64,
        begin_ms: int = 0,
        end_ms: int = LONG_MAX,
        unique_key: bool = False,
    ) -> list[StoredMessage]:
        """12 QUERY_MESSAGE (by KEYS, or by UNIQ_KEY with ``_UNIQUE_KEY_QUERY``); [] on QUERY_NOT_FOUND."""
        ext = encode_header(
            QueryMessageRequestHeader(
                topic=topic, key=key, max_num=max_num, begin_timestamp=begin_ms, end_timestamp=end_ms
            )
        )
        if unique_key:
            ext["_UNIQUE_KEY_QUERY"] = "true"
        resp = await self.invoke(
            addr, RequestCode.QUERY_MESSAGE, ext, ok=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND)
        )
        return decode_messages(resp.body) if resp.code == ResponseCode.SUCCESS else []

    async def reset_offset(
        self, addr: str, topic: str, group: str, timestamp: int, force: bool = True
    ) -> dict[MessageQueue, int]:
        """222 INVOKE_BROKER_TO_RESET_OFFSET (the broker tells the group's clients: 220) → {mq: offset}."""
        ext = encode_header(ResetOffsetRequestHeader(topic=topic, group=group, timestamp=timestamp, is_force=force))
        resp = await self.invoke(addr, RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, ext)
        return {mq: int(v) for mq, v in _mq_map(parse_fastjson(resp.body), "offsetTable").items()}

    async def search_offset(self, addr: str, topic: str, queue_id: int, timestamp: int) -> int:
        """29 SEARCH_OFFSET_BY_TIMESTAMP."""
        ext = encode_header(SearchOffsetRequestHeader(topic=topic, queue_id=queue_id, timestamp=timestamp))
        resp = await self.invoke(addr, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, ext)
        return int(resp.ext_fields.get("offset", "0"))

    async def max_offset(self, addr: str, topic: str, queue_id: int) -> int:
        """30 GET_MAX_OFFSET."""
        ext = encode_header(GetMaxOffsetRequestHeader(topic=topic, queue_id=queue_id))
        resp = await self.invoke(addr, RequestCode.GET_MAX_OFFSET, ext)
        return int(resp.ext_fields.get("offset", "0"))

    async def consumer_offset(self, addr: str, group: str, topic: str, queue_id: int) -> int | None:
        """14 QUERY_CONSUMER_OFFSET: the group's committed offset of a queue; None when the broker has none."""
        ext = encode_header(QueryConsumerOffsetRequestHeader(consumer_group=group, topic=topic, queue_id=queue_id))
        resp = await self.invoke(
            addr, RequestCode.QUERY_CONSUMER_OFFSET, ext, ok=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND)
        )
        if resp.code == ResponseCode.QUERY_NOT_FOUND:
            return None
        return int(resp.ext_fields.get("offset", "-1"))

    async def consumed_to_end(self, group: str, topic: str) -> bool:
        """Whether ``group`` has committed every read queue of ``topic`` up to its max offset (a drain's end;
        False while the route is unknown)."""
        route = await self.route(topic)
        if route is None:
            return False
        for q in route.read_queues():
            addr = route.master_addr(q.broker_name)
            if addr is None:
                continue
            end = await self.max_offset(addr, topic, q.queue_id)
            committed = await self.consumer_offset(addr, group, topic, q.queue_id)
            if end > 0 and (committed is None or committed < end):
                return False
        return True

    async def update_consumer_offset(self, addr: str, group: str, topic: str, queue_id: int, offset: int) -> None:
        """15 UPDATE_CONSUMER_OFFSET."""
        ext = encode_header(
            UpdateConsumerOffsetRequestHeader(
                consumer_group=group, topic=topic, queue_id=queue_id, commit_offset=offset
            )
        )
        await self.invoke(addr, RequestCode.UPDATE_CONSUMER_OFFSET, ext)

    async def fault_inject(
        self, addr: str, kind: str, *, duration_ms: int = 0, target: str | None = None, value: str | None = None
    ) -> RemotingCommand:
        """5001 FAULT_INJECT (mini-rocketmq's own; the broker needs faultInjectionEnable=true): the answer
        (code 0 = armed); a refusal raises ``AdminError`` with the broker's code and remark."""
        request = fault_inject_request(kind, target=target, duration_ms=duration_ms, value=value)
        return await self.invoke(addr, request.code, request.ext_fields)

    # -- ACL 1.0 (an admin account's credentials with aclEnable=true) -------------------------------
    async def update_acl_config(self, addr: str, hdr: CreateAccessConfigRequestHeader) -> None:
        await self.invoke(addr, RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, encode_header(hdr))

    async def delete_acl_config(self, addr: str, access_key: str) -> None:
        hdr = DeleteAccessConfigRequestHeader(access_key)
        await self.invoke(addr, RequestCode.DELETE_ACL_CONFIG, encode_header(hdr))

    async def update_global_white_addrs(self, addr: str, addresses: str, acl_file: str | None = None) -> None:
        hdr = UpdateGlobalWhiteAddrsConfigRequestHeader(global_white_addrs=addresses, acl_file_full_path=acl_file)
        await self.invoke(addr, RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG, encode_header(hdr))

    async def acl_config_version(self, addr: str) -> dict[str, str]:
        """GET_BROKER_CLUSTER_ACL_INFO's header: version, allAclFileVersion, brokerName, brokerAddr, clusterName."""
        resp = await self.invoke(addr, RequestCode.GET_BROKER_CLUSTER_ACL_INFO)
        return dict(resp.ext_fields)

    async def acl_config(self, addr: str) -> dict[str, Any]:
        """GET_BROKER_CLUSTER_ACL_CONFIG's body: globalWhiteAddrs and plainAccessConfigs."""
        resp = await self.invoke(addr, RequestCode.GET_BROKER_CLUSTER_ACL_CONFIG)
        return parse_fastjson(resp.body) or {}

    async def gather(self, calls: dict[str, Any]) -> dict[str, Any]:
        """Run ``{label: coroutine}`` concurrently; each value is the result or the AdminError raised."""
        labels = list(calls)
        results = await asyncio.gather(*calls.values(), return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException) and not isinstance(r, AdminError):
                raise r
        return dict(zip(labels, results))


def _name(enum: Any, code: int) -> str:
    try:
        return enum(code).name
    except ValueError:
        return str(code)
