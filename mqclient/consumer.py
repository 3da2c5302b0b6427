"""``PushConsumer``: a clustering consumer built on pulls, shaped like J's DefaultMQPushConsumer.

Start: route (105) → HEART_BEAT (34) to every master → rebalance: GET_CONSUMER_LIST_BY_GROUP (38),
sorted queues split with J's "averagely" strategy, QUERY_CONSUMER_OFFSET (14; 22 = none stored →
first or last offset) → one long-polling PULL_MESSAGE (11) loop per owned queue with the suspend,
subscription and commit-offset bits (protocol §2.3). Pulled messages wait in a per-queue process
queue and are handed to ``consume_threads`` listener workers; pulling pauses while a queue holds
more than ``pull_threshold_for_queue`` messages or ``pull_threshold_size_for_queue_mb`` (J's flow
control, and why a slow consumer's memory is queues × threshold × body size). The committed offset
of a queue is the smallest message not yet consumed, sent with UPDATE_CONSUMER_OFFSET (15) every
``commit_interval_s`` and when a queue is handed over. NOTIFY_CONSUMER_IDS_CHANGED (40) triggers a
rebalance at once. Delivery is at-least-once: a listener error is logged and the message counted
as consumed (no send-back to a retry topic).
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import orjson
import structlog

from mqclient.errors import MQBrokerError, MQClientError
from mqclient.message import MessageDecodeError, MessageExt, decode_messages, new_client_id
from mqclient.route import MessageQueue, RouteCache, TopicRoute, split_namesrv
from remoting.channel import Channel
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.errors import RemotingError
from remoting.headers import (
    GetConsumerListByGroupRequestHeader,
    GetMaxOffsetRequestHeader,
    PullMessageRequestHeader,
    QueryConsumerOffsetRequestHeader,
    UnregisterClientRequestHeader,
    UpdateConsumerOffsetRequestHeader,
    encode_header,
)
from remoting.signature import SessionCredentials
from store.java_hash import java_string_hash

log = structlog.get_logger(__name__)

PULL_FLAG_COMMIT_OFFSET = 0x1
PULL_FLAG_SUSPEND = 0x2
PULL_FLAG_SUBSCRIPTION = 0x4

Listener = Callable[[MessageExt, MessageQueue], Awaitable[None] | None]


@dataclass(frozen=True, slots=True)
class ConsumerConfig:
    group: str
    sub_expression: str = "*"
    consume_from: str = "first"  # where a group without a stored offset starts: "first" or "last"
    pull_batch_size: int = 32
    pull_threshold_for_queue: int = 1000
    pull_threshold_size_for_queue_mb: int = 100
    consume_threads: int = 20
    suspend_timeout_ms: int = 15000
    pull_timeout_ms: int = 30000
    pull_delay_on_error_ms: int = 3000
    pull_delay_on_flow_control_ms: int = 50
    heartbeat_interval_s: float = 30.0
    rebalance_interval_s: float = 10.0
    commit_interval_s: float = 5.0
    rpc_timeout_s: float = 3.0
    client_id: str | None = None


def allocate_averagely(mqs: Sequence[MessageQueue], cids: Sequence[str], me: str) -> list[MessageQueue]:
    """J ``AllocateMessageQueueAveragely``: contiguous slices of the sorted queues, the first
    ``len(mqs) % len(cids)`` consumers taking one more."""
    if me not in cids or not mqs:
        return []
    index = list(cids).index(me)
    n, c = len(mqs), len(cids)
    mod = n % c
    if n <= c:
        size = 1
    elif mod > 0 and index < mod:
        size = n // c + 1
    else:
        size = n // c
    start = index * size if mod > 0 and index < mod else index * size + mod
    count = min(size, n - start)
    return [mqs[(start + i) % n] for i in range(max(0, count))]


@dataclass
class ProcessQueue:
    """Messages pulled from one queue and not yet consumed, in offset order."""

    msgs: dict[int, MessageExt] = field(default_factory=dict)
    cached_bytes: int = 0
    max_offset_seen: int = -1
    dropped: bool = False

    def put(self, msgs: Sequence[MessageExt]) -> None:
        for m in msgs:
            if m.queue_offset not in self.msgs:
                self.msgs[m.queue_offset] = m
                self.cached_bytes += len(m.body)
            self.max_offset_seen = max(self.max_offset_seen, m.queue_offset)

    def remove(self, msg: MessageExt) -> int:
        """Drop a consumed message; returns the offset safe to commit (the oldest unconsumed one)."""
        if self.msgs.pop(msg.queue_offset, None) is not None:
            self.cached_bytes -= len(msg.body)
        if self.msgs:
            # dicts keep insertion order and offsets arrive ascending: the first key is the smallest.
            return next(iter(self.msgs))
        return self.max_offset_seen + 1

    def __len__(self) -> int:
        return len(self.msgs)


class PushConsumer:
    def __init__(
        self,
        namesrv: str | Sequence[str],
        topic: str,
        config: ConsumerConfig,
        listener: Listener,
        *,
        client: RemotingClient | None = None,
        now_ms: Callable[[], int] | None = None,
        clock: Callable[[], float] = time.monotonic,
        credentials: SessionCredentials | None = None,
    ) -> None:
        self.topic = topic
        self.config = config
        self.listener = listener
        self.client = client or RemotingClient(credentials=credentials)
        self._own_client = client is None
        self.routes = RouteCache(self.client, split_namesrv(namesrv), timeout_s=config.rpc_timeout_s)
        self.now_ms = now_ms or (lambda: time.time_ns() // 1_000_000)
        self.clock = clock
        self.client_id = config.client_id or new_client_id()
        self.sub_version = self.now_ms()
        self.pqs: dict[MessageQueue, ProcessQueue] = {}
        self.offsets: dict[MessageQueue, int] = {}  # next offset to consume = what to commit
        self._committed: dict[MessageQueue, int] = {}
        self._pull_tasks: dict[MessageQueue, asyncio.Task[None]] = {}
        self._consume_q: asyncio.Queue[tuple[ProcessQueue, MessageQueue, MessageExt]] = asyncio.Queue()
        self._tasks: list[asyncio.Task[None]] = []
        self._rebalance_lock = asyncio.Lock()
        self._rebalance_now = asyncio.Event()
        self._started = False
        self._closed = False
        self._last_rebalance = 0.0
        self._listener_is_async = inspect.iscoroutinefunction(listener)
        self.consumed = 0
        self.listener_errors = 0
        self.flow_control_times = 0
        self.pull_errors = 0

    # ---- lifecycle ------------------------------------------------------------------------------
    async def start(self) -> None:
        self.client.set_request_handler(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, self._on_ids_changed)
        await self.routes.get(self.topic)
        await self.heartbeat()
        for _ in range(max(1, self.config.consume_threads)):
            self._tasks.append(asyncio.ensure_future(self._consume_worker()))
        self._started = True
        await self.rebalance()
        self._tasks.append(asyncio.ensure_future(self._background()))

    async def close(self, *, unregister: bool = True) -> None:
        if self._closed:
            return
        self._closed = True
        for mq in list(self._pull_tasks):
            self._stop_pull(mq)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, *self._pull_tasks.values(), return_exceptions=True)
        self._pull_tasks.clear()
        try:
            await self.commit_offsets()
            if unregister:
                await self._unregister()
        except (RemotingError, MQClientError) as exc:
            log.warning("consumer shutdown could not reach the broker", group=self.config.group, error=str(exc))
        if self._own_client:
            await self.client.close()

    async def __aenter__(self) -> PushConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _background(self) -> None:
        cfg = self.config
        last_hb = last_commit = self.clock()
        while True:
            # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancel that races the
            # event, and close() would then wait for this task forever.
            try:
                async with asyncio.timeout(min(cfg.rebalance_interval_s, 1.0)):
                    await self._rebalance_now.wait()
            except TimeoutError:
                pass
            try:
                now = self.clock()
                if now - last_hb >= cfg.heartbeat_interval_s:
                    last_hb = now
                    await self.heartbeat()
                if self._rebalance_now.is_set() or now - self._last_rebalance >= cfg.rebalance_interval_s:
                    self._rebalance_now.clear()
                    await self.rebalance()
                if now - last_commit >= cfg.commit_interval_s:
                    last_commit = now
                    await self.commit_offsets()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a periodic duty must never die: log and go on
                log.warning("consumer background duty failed", group=cfg.group, error=repr(exc))

    async def _on_ids_changed(self, channel: Channel, request: RemotingCommand) -> RemotingCommand | None:
        self._rebalance_now.set()
        return None

    # ---- broker requests ------------------------------------------------------------------------
    async def _route(self) -> TopicRoute:
        return await self.routes.get(self.topic)

    def heartbeat_body(self) -> bytes:
        sub = {
            "classFilterMode": False,
            "topic": self.topic,
            "subString": self.config.sub_expression,
            "tagsSet": [],
            "codeSet": [],
            "subVersion": self.sub_version,
            "expressionType": "TAG",
        }
        if self.config.sub_expression not in ("*", ""):
            tags = [t.strip() for t in self.config.sub_expression.split("||") if t.strip()]
            sub["tagsSet"] = tags
            sub["codeSet"] = [java_string_hash(t) for t in tags]
        data = {
            "clientID": self.client_id,
            "consumerDataSet": [
                {
                    "groupName": self.config.group,
                    "consumeType": "CONSUME_PASSIVELY",
                    "messageModel": "CLUSTERING",
                    "consumeFromWhere": (
                        "CONSUME_FROM_FIRST_OFFSET"
                        if self.config.consume_from == "first"
                        else "CONSUME_FROM_LAST_OFFSET"
                    ),
                    "unitMode": False,
                    "subscriptionDataSet": [sub],
                }
            ],
            "producerDataSet": [],
        }
        return orjson.dumps(data)

    async def heartbeat(self) -> None:
        route = await self._route()
        body = self.heartbeat_body()
        for addr in sorted(set(route.masters().values())):
            resp = await self.client.invoke(
                addr, RemotingCommand.request(RequestCode.HEART_BEAT, {}, body), self.config.rpc_timeout_s
            )
            if resp.code != ResponseCode.SUCCESS:
                raise MQBrokerError(resp.code, resp.remark, addr)

    async def consumer_ids(self) -> list[str]:
        route = await self._route()
        addr = sorted(route.masters().values())[0]
        hdr = encode_header(GetConsumerListByGroupRequestHeader(consumer_group=self.config.group))
        resp = await self.client.invoke(
            addr, RemotingCommand.request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, hdr), self.config.rpc_timeout_s
        )
        if resp.code != ResponseCode.SUCCESS:
            raise MQBrokerError(resp.code, resp.remark, addr)
        return sorted(orjson.loads(bytes(resp.body or b"{}")).get("consumerIdList") or [])

    async def _query_offset(self, mq: MessageQueue, addr: str) -> int:
        hdr = encode_header(
            QueryConsumerOffsetRequestHeader(consumer_group=self.config.group, topic=mq.topic, queue_id=mq.queue_id)
        )
        resp = await self.client.invoke(
            addr, RemotingCommand.request(RequestCode.QUERY_CONSUMER_OFFSET, hdr), self.config.rpc_timeout_s
        )
        if resp.code == ResponseCode.SUCCESS:
            offset = int(resp.ext_fields.get("offset", "-1"))
            if offset >= 0:
                return offset
        elif resp.code != ResponseCode.QUERY_NOT_FOUND:
            raise MQBrokerError(resp.code, resp.remark, addr)
        if self.config.consume_from == "first":
            return 0
        return await self.max_offset(mq, addr)

    async def max_offset(self, mq: MessageQueue, addr: str | None = None) -> int:
        if addr is None:
            addr = (await self._route()).master_addr(mq.broker_name)
            if addr is None:
                raise MQClientError(f"no master for {mq.broker_name}")
        hdr = encode_header(GetMaxOffsetRequestHeader(topic=mq.topic, queue_id=mq.queue_id))
        resp = await self.client.invoke(
            addr, RemotingCommand.request(RequestCode.GET_MAX_OFFSET, hdr), self.config.rpc_timeout_s
        )
        if resp.code != ResponseCode.SUCCESS:
            raise MQBrokerError(resp.code, resp.remark, addr)
        return int(resp.ext_fields.get("offset", "0"))

    async def commit_offsets(self) -> None:
        route = await self._route()
        for mq, offset in list(self.offsets.items()):
            if self._committed.get(mq) == offset:
                continue
            addr = route.master_addr(mq.broker_name)
            if addr is None:
                continue
            hdr = encode_header(
                UpdateConsumerOffsetRequestHeader(
                    consumer_group=self.config.group, topic=mq.topic, queue_id=mq.queue_id, commit_offset=offset
                )
            )
            resp = await self.client.invoke(
                addr, RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, hdr), self.config.rpc_timeout_s
            )
            if resp.code == ResponseCode.SUCCESS:
                self._committed[mq] = offset

    async def _unregister(self) -> None:
        route = await self._route()
        hdr = encode_header(UnregisterClientRequestHeader(client_id=self.client_id, consumer_group=self.config.group))
        for addr in sorted(set(route.masters().values())):
            await self.client.invoke(
                addr, RemotingCommand.request(RequestCode.UNREGISTER_CLIENT, hdr), self.config.rpc_timeout_s
            )

    # ---- rebalance --------------------------------------------------------------------------------
    async def rebalance(self) -> list[MessageQueue]:
        """Recompute this consumer's queues; returns them. Errors keep the current assignment (J)."""
        async with self._rebalance_lock:
            self._last_rebalance = self.clock()
            if self._closed:
                return []
            try:
                route = await self._route()
                cids = await self.consumer_ids()
            except (RemotingError, MQClientError) as exc:
                log.info("rebalance skipped", group=self.config.group, error=str(exc))
                return sorted(self.pqs)
            mine = set(allocate_averagely(route.read_queues(), cids, self.client_id))
            for mq in sorted(set(self.pqs) - mine):
                await self._release(mq)
            for mq in sorted(mine - set(self.pqs)):
                addr = route.master_addr(mq.broker_name)
                if addr is None:
                    continue
                try:
                    offset = await self._query_offset(mq, addr)
                except (RemotingError, MQClientError) as exc:
                    log.info("cannot start a queue yet", queue=mq.queue_id, error=str(exc))
                    continue
                pq = ProcessQueue()
                self.pqs[mq] = pq
                self.offsets[mq] = offset
                self._committed[mq] = offset
                self._pull_tasks[mq] = asyncio.ensure_future(self._pull_loop(mq, pq, offset))
            return sorted(self.pqs)

    def _stop_pull(self, mq: MessageQueue) -> None:
        pq = self.pqs.get(mq)
        if pq is not None:
            pq.dropped = True
        task = self._pull_tasks.get(mq)
        if task is not None:
            task.cancel()

    async def _release(self, mq: MessageQueue) -> None:
        """Hand a queue over: stop pulling, commit what was consumed, forget it."""
        self._stop_pull(mq)
        task = self._pull_tasks.pop(mq, None)
        if task is not None:
            await asyncio.gather(task, return_exceptions=True)
        try:
            await self.commit_offsets()
        except (RemotingError, MQClientError) as exc:
            log.info("offset commit on hand-over failed", queue=mq.queue_id, error=str(exc))
        self.pqs.pop(mq, None)
        self.offsets.pop(mq, None)
        self._committed.pop(mq, None)

    # ---- pulling and consuming ------------------------------------------------------------------
    async def _pull_loop(self, mq: MessageQueue, pq: ProcessQueue, offset: int) -> None:
        cfg = self.config
        size_limit = cfg.pull_threshold_size_for_queue_mb * 1024 * 1024
        next_offset = offset
        while not pq.dropped:
            if len(pq) > cfg.pull_threshold_for_queue or pq.cached_bytes > size_limit:
                self.flow_control_times += 1
                await asyncio.sleep(cfg.pull_delay_on_flow_control_ms / 1000)
                continue
            commit = self.offsets.get(mq, 0)
            sys_flag = PULL_FLAG_SUSPEND | PULL_FLAG_SUBSCRIPTION | (PULL_FLAG_COMMIT_OFFSET if commit > 0 else 0)
            hdr = PullMessageRequestHeader(
                consumer_group=cfg.group,
                topic=mq.topic,
                queue_id=mq.queue_id,
                queue_offset=next_offset,
                max_msg_nums=cfg.pull_batch_size,
                sys_flag=sys_flag,
                commit_offset=commit,
                suspend_timeout_millis=cfg.suspend_timeout_ms,
                sub_version=self.sub_version,
                subscription=cfg.sub_expression,
                expression_type="TAG",
            )
            try:
                route = await self._route()
                addr = route.master_addr(mq.broker_name)
                if addr is None:
                    raise MQClientError(f"no master for {mq.broker_name}")
                resp = await self.client.invoke(
                    addr,
                    RemotingCommand.request(RequestCode.PULL_MESSAGE, encode_header(hdr)),
                    cfg.pull_timeout_ms / 1000,
                )
            except (RemotingError, MQClientError) as exc:
                self.pull_errors += 1
                log.info("pull failed", queue=mq.queue_id, error=str(exc))
                await asyncio.sleep(cfg.pull_delay_on_error_ms / 1000)
                continue
            if pq.dropped:
                return
            code = resp.code
            try:
                nbo = int(resp.ext_fields.get("nextBeginOffset", next_offset))
            except ValueError:
                nbo = next_offset
            if code == ResponseCode.SUCCESS:
                try:
                    msgs = decode_messages(resp.body or b"")
                except MessageDecodeError as exc:
                    self.pull_errors += 1
                    log.warning("undecodable pull body", queue=mq.queue_id, offset=next_offset, error=str(exc))
                    await asyncio.sleep(cfg.pull_delay_on_error_ms / 1000)
                    continue
                msgs = [m for m in msgs if m.queue_offset >= next_offset]
                pq.put(msgs)
                for m in msgs:
                    self._consume_q.put_nowait((pq, mq, m))
                next_offset = nbo
            elif code in (ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_RETRY_IMMEDIATELY):
                next_offset = nbo
            elif code == ResponseCode.PULL_OFFSET_MOVED:
                log.info("pull offset moved", queue=mq.queue_id, offset=next_offset, next=nbo)
                next_offset = nbo
                if not pq.msgs:
                    self.offsets[mq] = nbo
            else:
                self.pull_errors += 1
                log.info("pull answered an error", queue=mq.queue_id, code=code, remark=resp.remark)
                await asyncio.sleep(cfg.pull_delay_on_error_ms / 1000)

    async def _consume_worker(self) -> None:
        while True:
            pq, mq, msg = await self._consume_q.get()
            if pq.dropped:  # J skips requests of a dropped process queue: the new owner re-reads them
                continue
            try:
                if self._listener_is_async:
                    await self.listener(msg, mq)  # type: ignore[misc]
                else:
                    result = self.listener(msg, mq)
                    if inspect.isawaitable(result):
                        await result
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.listener_errors += 1
                log.warning("listener failed", queue=mq.queue_id, offset=msg.queue_offset, error=repr(exc))
            self.consumed += 1
            offset = pq.remove(msg)
            if not pq.dropped:
                self.offsets[mq] = offset

    # ---- introspection --------------------------------------------------------------------------
    @property
    def cached_messages(self) -> int:
        return sum(len(pq) for pq in self.pqs.values())

    @property
    def cached_bytes(self) -> int:
        return sum(pq.cached_bytes for pq in self.pqs.values())

    @property
    def assigned(self) -> list[MessageQueue]:
        return sorted(self.pqs)

    async def caught_up(self) -> bool:
        """True when every owned queue has nothing cached and its offset reached the queue's end."""
        for mq, pq in list(self.pqs.items()):
            if len(pq):
                return False
            if self.offsets.get(mq, 0) < await self.max_offset(mq):
                return False
        return True
