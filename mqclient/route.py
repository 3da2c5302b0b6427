"""Topic routes: GET_ROUTEINFO_BY_TOPIC (105) against the name servers, parsing and caching.

A route (protocol §4.2) lists brokers (``brokerAddrs`` keyed by broker id, "0" = master) and queue
counts per broker. Publishing uses write queues on masters; consuming uses read queues. J name
servers before 4.9.4 write fastjson's unquoted numeric keys, so the parser accepts them too.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from mqclient.errors import NameServerUnreachableError, TopicRouteError
from mqclient.fastjson import parse_fastjson
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.errors import RemotingError

DEFAULT_TOPIC = "TBW102"
PERM_WRITE = 0x2
PERM_READ = 0x4
MASTER_ID = "0"


@dataclass(frozen=True, slots=True, order=True)
class MessageQueue:
    topic: str
    broker_name: str
    queue_id: int

    @classmethod
    def from_key(cls, key: str) -> MessageQueue:
        """A MessageQueue written as a map key (fastjson: its JSON text, see ``mqclient.fastjson``)."""
        data = json.loads(key)
        return cls(str(data["topic"]), str(data["brokerName"]), int(data["queueId"]))

    def to_json(self) -> dict[str, object]:
        return {"topic": self.topic, "brokerName": self.broker_name, "queueId": self.queue_id}


@dataclass(frozen=True, slots=True)
class QueueData:
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int


@dataclass(frozen=True, slots=True)
class BrokerData:
    broker_name: str
    cluster: str
    addrs: dict[str, str]

    @property
    def master(self) -> str | None:
        return self.addrs.get(MASTER_ID)


@dataclass(frozen=True, slots=True)
class TopicRoute:
    topic: str
    brokers: tuple[BrokerData, ...]
    queues: tuple[QueueData, ...]
    fetched_at: float = 0.0

    def master_addr(self, broker_name: str) -> str | None:
        for b in self.brokers:
            if b.broker_name == broker_name:
                return b.master
        return None

    def masters(self) -> dict[str, str]:
        return {b.broker_name: b.master for b in self.brokers if b.master}

    def write_queues(self, topic: str | None = None, limit: int | None = None) -> list[MessageQueue]:
        """Publish queues on brokers with a master, in J's order (queue data order, then id)."""
        masters = self.masters()
        out = []
        for q in sorted(self.queues, key=lambda q: q.broker_name):
            if q.perm & PERM_WRITE and q.broker_name in masters:
                n = q.write_queue_nums if limit is None else min(limit, q.write_queue_nums)
                out += [MessageQueue(topic or self.topic, q.broker_name, i) for i in range(n)]
        return out

    def read_queues(self) -> list[MessageQueue]:
        return sorted(
            MessageQueue(self.topic, q.broker_name, i)
            for q in self.queues
            if q.perm & PERM_READ
            for i in range(q.read_queue_nums)
        )


def parse_route(topic: str, body: bytes | memoryview, fetched_at: float = 0.0) -> TopicRoute:
    """Parse a TopicRouteData body; raises TopicRouteError with the reason."""
    text = bytes(body).decode("utf-8")
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        try:
            data = parse_fastjson(text)  # unquoted numeric brokerAddrs keys (name servers before 4.9.4)
        except ValueError as exc:
            raise TopicRouteError(f"route of {topic} is not JSON: {exc}") from None
    try:
        brokers = tuple(
            BrokerData(
                broker_name=b["brokerName"],
                cluster=b.get("cluster", ""),
                addrs={str(k): str(v) for k, v in (b.get("brokerAddrs") or {}).items()},
            )
            for b in data.get("brokerDatas") or []
        )
        queues = tuple(
            QueueData(
                broker_name=q["brokerName"],
                read_queue_nums=int(q["readQueueNums"]),
                write_queue_nums=int(q["writeQueueNums"]),
                perm=int(q["perm"]),
            )
            for q in data.get("queueDatas") or []
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise TopicRouteError(f"route of {topic} is malformed: {exc!r}") from None
    return TopicRoute(topic=topic, brokers=brokers, queues=queues, fetched_at=fetched_at)


def split_namesrv(namesrv: str | Sequence[str]) -> list[str]:
    addrs = namesrv.split(";") if isinstance(namesrv, str) else list(namesrv)
    addrs = [a.strip() for a in addrs if a.strip()]
    if not addrs:
        raise NameServerUnreachableError("no name server address given")
    for a in addrs:
        host, sep, port = a.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise NameServerUnreachableError(f"bad name server address {a!r}, expected HOST:PORT")
    return addrs


@dataclass
class RouteCache:
    """Fetches and caches routes from the name servers (J refreshes every 30 s)."""

    client: RemotingClient
    namesrv: list[str]
    timeout_s: float = 3.0
    ttl_s: float = 30.0
    clock: Callable[[], float] = time.monotonic
    routes: dict[str, TopicRoute] = field(default_factory=dict)
    _next_ns: int = 0

    async def query(self, topic: str) -> TopicRoute | None:
        """One 105 request, trying each name server once; None when the topic has no route (17)."""
        errors: list[str] = []
        for i in range(len(self.namesrv)):
            addr = self.namesrv[(self._next_ns + i) % len(self.namesrv)]
            req = RemotingCommand.request(
                RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic, "acceptStandardJsonOnly": "true"}
            )
            try:
                resp = await self.client.invoke(addr, req, self.timeout_s)
            except RemotingError as exc:
                errors.append(f"{addr}: {exc}")
                continue
            except (TimeoutError, OSError) as exc:  # defensive: transport-level surprises
                errors.append(f"{addr}: {exc!r}")
                continue
            self._next_ns = (self._next_ns + i) % len(self.namesrv)
            if resp.code == ResponseCode.TOPIC_NOT_EXIST:
                return None
            if resp.code != ResponseCode.SUCCESS or not resp.body:
                raise TopicRouteError(
                    f"name server {addr} answered code {resp.code} for the route of {topic}: {resp.remark or ''}"
                )
            route = parse_route(topic, resp.body, self.clock())
            self.routes[topic] = route
            return route
        raise NameServerUnreachableError("no name server answered: " + "; ".join(errors))

    async def get(self, topic: str, *, allow_default: bool = False) -> TopicRoute:
        """The cached route of ``topic`` (refreshed after ``ttl_s``); with ``allow_default`` a topic
        without a route is published through TBW102's route, as J/C/G producers do."""
        cached = self.routes.get(topic)
        if cached is not None and self.clock() - cached.fetched_at < self.ttl_s:
            return cached
        try:
            route = await self.query(topic)
        except (NameServerUnreachableError, TopicRouteError):
            if cached is not None:  # keep publishing on the last known route, like J
                return cached
            raise
        if route is None and allow_default:
            default = await self.query(DEFAULT_TOPIC)
            if default is not None:
                route = TopicRoute(
                    topic=topic,
                    brokers=default.brokers,
                    queues=tuple(
                        QueueData(q.broker_name, min(4, q.read_queue_nums), min(4, q.write_queue_nums), q.perm)
                        for q in default.queues
                    ),
                    fetched_at=self.clock(),
                )
                # J keeps such a route only until the real one shows up: refresh on the next send burst.
                self.routes[topic] = TopicRoute(
                    route.topic, route.brokers, route.queues, self.clock() - self.ttl_s + 1.0
                )
        if route is None:
            raise TopicRouteError(f"no route for topic {topic} on name server(s) {';'.join(self.namesrv)}")
        if not route.brokers:
            raise TopicRouteError(f"the route of {topic} lists no broker")
        return route
