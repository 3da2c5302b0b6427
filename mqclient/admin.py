"""``Admin``: the few admin requests our tools need — cluster info (106), create topic (17),
broker runtime info (28), queue offsets (30) and mini-rocketmq's FAULT_INJECT (5001)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from mqclient.errors import MQBrokerError, MQClientError, NameServerUnreachableError
from mqclient.fastjson import parse_fastjson
from mqclient.fault import fault_inject_request
from mqclient.route import DEFAULT_TOPIC, RouteCache, TopicRoute, split_namesrv
from remoting.client import RemotingClient
from remoting.signature import SessionCredentials
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.errors import RemotingError
from remoting.headers import (CreateTopicRequestHeader, GetMaxOffsetRequestHeader,
                              QueryConsumerOffsetRequestHeader, encode_header)


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


def _lenient_json(body: bytes | memoryview | None) -> dict:
    data = parse_fastjson(body)
    return data if isinstance(data, dict) else {}


class Admin:
    def __init__(self, namesrv: str | Sequence[str], *, client: RemotingClient | None = None,
                 timeout_s: float = 3.0, clock: Callable[[], float] = time.monotonic,
                 credentials: SessionCredentials | None = None) -> None:
        self.client = client or RemotingClient(connect_timeout_s=timeout_s, credentials=credentials)
        self._own_client = client is None
        self.namesrv = split_namesrv(namesrv)
        self.timeout_s = timeout_s
        self.clock = clock
        self.routes = RouteCache(self.client, self.namesrv, timeout_s=timeout_s, ttl_s=0.0, clock=clock)

    async def close(self) -> None:
        if self._own_client:
            await self.client.close()

    async def __aenter__(self) -> Admin:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _invoke(self, addr: str, code: int, ext: dict[str, str] | None = None,
                      body: bytes | None = None) -> RemotingCommand:
        return await self.client.invoke(addr, RemotingCommand.request(code, ext or {}, body), self.timeout_s)

    # ---- name server ----------------------------------------------------------------------------
    async def ping_namesrv(self) -> None:
        """Raise ``NameServerUnreachableError`` with the reason unless a name server answers 105."""
        errors = []
        for addr in self.namesrv:
            try:
                resp = await self._invoke(addr, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": DEFAULT_TOPIC})
            except RemotingError as exc:
                errors.append(f"{addr}: {_explain(exc)}")
                continue
            if resp.code in (ResponseCode.SUCCESS, ResponseCode.TOPIC_NOT_EXIST):
                return
            errors.append(f"{addr}: answered code {resp.code} ({resp.remark or ''}) to a route request")
        raise NameServerUnreachableError("name server unreachable — " + "; ".join(errors))

    async def cluster_info(self) -> list[BrokerInfo]:
        """Brokers known to the name server (106), falling back to TBW102's route."""
        for addr in self.namesrv:
            try:
                resp = await self._invoke(addr, RequestCode.GET_BROKER_CLUSTER_INFO)
            except RemotingError:
                continue
            if resp.code != ResponseCode.SUCCESS:
                continue
            data = _lenient_json(resp.body)
            out = []
            for name, bd in sorted((data.get("brokerAddrTable") or {}).items()):
                addrs = {str(k): v for k, v in (bd.get("brokerAddrs") or {}).items()}
                out.append(BrokerInfo(cluster=bd.get("cluster", ""), broker_name=name, master=addrs.get("0")))
            if out:
                return out
        route = await self.routes.query(DEFAULT_TOPIC)
        if route is None:
            raise MQClientError("the name server knows no broker (no cluster info, no TBW102 route)")
        return [BrokerInfo(b.cluster, b.broker_name, b.master) for b in route.brokers]

    async def route(self, topic: str) -> TopicRoute | None:
        return await self.routes.query(topic)

    # ---- brokers --------------------------------------------------------------------------------
    async def create_topic(self, broker_addr: str, topic: str, queues: int, *, perm: int = 6,
                           order: bool = False) -> None:
        hdr = CreateTopicRequestHeader(topic=topic, default_topic=DEFAULT_TOPIC, read_queue_nums=queues,
                                       write_queue_nums=queues, perm=perm, topic_filter_type="SINGLE_TAG",
                                       order=order, topic_sys_flag=0)
        resp = await self._invoke(broker_addr, RequestCode.UPDATE_AND_CREATE_TOPIC, encode_header(hdr))
        if resp.code != ResponseCode.SUCCESS:
            raise MQBrokerError(resp.code, resp.remark, broker_addr)

    async def create_topic_everywhere(self, topic: str, queues: int, *, wait_s: float = 10.0) -> TopicRoute:
        """Create ``topic`` on every master and wait until the name server serves its route."""
        brokers = [b for b in await self.cluster_info() if b.master]
        if not brokers:
            raise MQClientError("no master broker is registered with the name server")
        for b in brokers:
            await self.create_topic(b.master, topic, queues)  # type: ignore[arg-type]
        deadline = self.clock() + wait_s
        while True:
            route = await self.routes.query(topic)
            if route is not None and len(route.write_queues()) >= queues * len(brokers):
                return route
            if self.clock() >= deadline:
                raise MQClientError(f"topic {topic} was created but the name server did not serve its route "
                                    f"within {wait_s}s")
            await asyncio.sleep(0.1)

    async def runtime_info(self, broker_addr: str) -> dict[str, str]:
        resp = await self._invoke(broker_addr, RequestCode.GET_BROKER_RUNTIME_INFO)
        if resp.code != ResponseCode.SUCCESS:
            raise MQBrokerError(resp.code, resp.remark, broker_addr)
        return {str(k): str(v) for k, v in (_lenient_json(resp.body).get("table") or {}).items()}

    async def max_offset(self, broker_addr: str, topic: str, queue_id: int) -> int:
        hdr = encode_header(GetMaxOffsetRequestHeader(topic=topic, queue_id=queue_id))
        resp = await self._invoke(broker_addr, RequestCode.GET_MAX_OFFSET, hdr)
        if resp.code != ResponseCode.SUCCESS:
            raise MQBrokerError(resp.code, resp.remark, broker_addr)
        return int(resp.ext_fields.get("offset", "0"))

    async def consumer_offset(self, broker_addr: str, group: str, topic: str, queue_id: int) -> int | None:
        """The group's committed offset of a queue (14); None when the broker has none (22)."""
        hdr = encode_header(QueryConsumerOffsetRequestHeader(consumer_group=group, topic=topic, queue_id=queue_id))
        resp = await self._invoke(broker_addr, RequestCode.QUERY_CONSUMER_OFFSET, hdr)
        if resp.code == ResponseCode.QUERY_NOT_FOUND:
            return None
        if resp.code != ResponseCode.SUCCESS:
            raise MQBrokerError(resp.code, resp.remark, broker_addr)
        return int(resp.ext_fields.get("offset", "-1"))

    async def fault_inject(self, broker_addr: str, kind: str, *, duration_ms: int = 0, value: str | None = None,
                           target: str | None = None) -> RemotingCommand:
        """Send FAULT_INJECT (5001); returns the raw answer (code 0 = armed)."""
        request = fault_inject_request(kind, target=target, duration_ms=duration_ms, value=value)
        return await self.client.invoke(broker_addr, request, self.timeout_s)
