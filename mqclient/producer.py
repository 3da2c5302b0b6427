"""``Producer``: sync / async / oneway / batch sends with the Java client's retry and timeout rules.

Sync sends (J ``sendDefaultImpl``): up to ``1 + retries`` attempts under one total budget
``send_timeout_ms``; each attempt gets what is left of the budget, capped by ``attempt_timeout_ms``.
Broker codes {1, 14, 16, 17, 204, 205}, timeouts and connection failures move on to the next queue
(another broker when there is one); any other error code fails at once (protocol §3).
Async sends follow J's async path: broker error answers are final, only transport failures and
timeouts are retried. Oneway sends are written once and never answered. Every failed attempt is
reported (``SendResult.attempt_errors`` / ``SendFailedError.attempts``) so a benchmark can count
busy answers that a retry hid.
"""

from __future__ import annotations

import itertools
import os
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import structlog

from mqclient.errors import AttemptError, MQClientError, NameServerUnreachableError, SendFailedError, TopicRouteError
from mqclient.message import (
    PROPERTY_UNIQ_KEY,
    SYSFLAG_COMPRESSED,
    Message,
    UniqKeyGenerator,
    encode_batch,
    encode_properties,
)
from mqclient.route import DEFAULT_TOPIC, MessageQueue, RouteCache, TopicRoute, split_namesrv
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.errors import RemotingConnectError, RemotingError, RemotingTimeoutError
from remoting.headers import SendMessageRequestHeaderV2, encode_header
from remoting.signature import SessionCredentials

log = structlog.get_logger(__name__)

# J DefaultMQProducer.retryResponseCodes (4.x default).
RETRY_CODES = frozenset(
    {
        ResponseCode.SYSTEM_ERROR,
        ResponseCode.SERVICE_NOT_AVAILABLE,
        ResponseCode.NO_PERMISSION,
        ResponseCode.TOPIC_NOT_EXIST,
        ResponseCode.NO_BUYER_ID,
        ResponseCode.NOT_IN_CURRENT_UNIT,
    }
)
STORED = {
    ResponseCode.SUCCESS: "SEND_OK",
    ResponseCode.FLUSH_DISK_TIMEOUT: "FLUSH_DISK_TIMEOUT",
    ResponseCode.SLAVE_NOT_AVAILABLE: "SLAVE_NOT_AVAILABLE",
    ResponseCode.FLUSH_SLAVE_TIMEOUT: "FLUSH_SLAVE_TIMEOUT",
}


def error_kind(code: int | None, remark: str | None) -> str:
    """``[TIMEOUT_CLEAN_QUEUE]broker busy…`` → ``TIMEOUT_CLEAN_QUEUE``; code 17 → ``TOPIC_NOT_EXIST``."""
    if remark and remark.startswith("["):
        end = remark.find("]")
        if end > 1:
            return remark[1:end]
    if code is None:
        return "UNKNOWN"
    try:
        return ResponseCode(code).name
    except ValueError:
        return f"CODE_{code}"


@dataclass(frozen=True, slots=True)
class ProducerConfig:
    group: str = "DEFAULT_PRODUCER"
    send_timeout_ms: int = 3000
    attempt_timeout_ms: int | None = None
    retries: int = 2  # retryTimesWhenSendFailed (sync) and retryTimesWhenSendAsyncFailed (async)
    retry_on_timeout: bool = True
    compress_over_bytes: int = 4096
    compress_level: int = 5
    default_topic_queue_nums: int = 4
    max_message_size: int = 4 * 1024 * 1024


@dataclass(slots=True)
class SendResult:
    status: str  # SEND_OK, FLUSH_DISK_TIMEOUT, SLAVE_NOT_AVAILABLE, FLUSH_SLAVE_TIMEOUT
    msg_id: str  # UNIQ_KEY (comma-joined for a batch)
    offset_msg_id: str  # the broker's offset id(s), comma-joined for a batch
    queue: MessageQueue
    queue_offset: int
    broker: str
    attempts: int
    attempt_errors: list[AttemptError] = field(default_factory=list)
    transaction_id: str | None = None


class Producer:
    def __init__(
        self,
        namesrv: str | Sequence[str],
        config: ProducerConfig | None = None,
        *,
        client: RemotingClient | None = None,
        now_ms: Callable[[], int] | None = None,
        clock: Callable[[], float] = time.monotonic,
        credentials: SessionCredentials | None = None,
    ) -> None:
        self.config = config or ProducerConfig()
        self.client = client or RemotingClient(credentials=credentials)
        self._own_client = client is None
        self.routes = RouteCache(self.client, split_namesrv(namesrv))
        self.now_ms = now_ms or (lambda: time.time_ns() // 1_000_000)
        self.clock = clock
        self.uniq = UniqKeyGenerator(now_ms=self.now_ms)
        self._queue_index = itertools.count(int.from_bytes(os.urandom(2), "big"))
        self._closed = False

    async def start(self) -> None:
        """Nothing to do up front: routes are fetched on the first send (like J)."""

    async def close(self) -> None:
        self._closed = True
        if self._own_client:
            await self.client.close()

    async def __aenter__(self) -> Producer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ---- queue selection ------------------------------------------------------------------------
    def select_queue(self, route: TopicRoute, topic: str, last_broker: str | None) -> MessageQueue:
        """J ``selectOneMessageQueue`` without latency fault tolerance: round robin, skipping the
        broker of the failed attempt when another one exists."""
        queues = route.write_queues(topic, None)
        if not queues:
            raise TopicRouteError(f"the route of {topic} has no writable queue on a master")
        if last_broker is not None:
            for _ in range(len(queues)):
                mq = queues[next(self._queue_index) % len(queues)]
                if mq.broker_name != last_broker:
                    return mq
        return queues[next(self._queue_index) % len(queues)]

    # ---- request building -----------------------------------------------------------------------
    def _request(
        self, msg: Message, mq: MessageQueue, *, batch_body: bytes | None = None, uniq: str | None = None
    ) -> RemotingCommand:
        sys_flag = 0
        if batch_body is not None:
            body = batch_body
            props = encode_properties(msg.all_properties())
            code = RequestCode.SEND_BATCH_MESSAGE
        else:
            body = msg.body
            if self.config.compress_over_bytes and len(body) >= self.config.compress_over_bytes:
                body = zlib.compress(body, self.config.compress_level)
                sys_flag |= SYSFLAG_COMPRESSED
            all_props = msg.all_properties()
            if uniq is not None:
                all_props[PROPERTY_UNIQ_KEY] = uniq
            props = encode_properties(all_props)
            code = RequestCode.SEND_MESSAGE_V2
        hdr = SendMessageRequestHeaderV2(
            a=self.config.group,
            b=mq.topic,
            c=DEFAULT_TOPIC,
            d=self.config.default_topic_queue_nums,
            e=mq.queue_id,
            f=sys_flag,
            g=self.now_ms(),
            h=msg.flag,
            i=props,
            j=0,
            k=False,
            m=batch_body is not None,
        )
        return RemotingCommand.request(code, encode_header(hdr), body)

    def _check(self, msg: Message) -> None:
        if not msg.topic or len(msg.topic.encode()) > 127:
            raise MQClientError(f"bad topic name {msg.topic!r}")
        if len(msg.body) == 0:
            raise MQClientError("the message body is empty")
        if len(msg.body) > self.config.max_message_size:
            raise MQClientError(
                f"the message body is {len(msg.body)} bytes, over the {self.config.max_message_size}-byte limit"
            )

    # ---- sends ----------------------------------------------------------------------------------
    async def send(self, msg: Message, *, queue: MessageQueue | None = None) -> SendResult:
        """Sync send: returns once stored (or raises ``SendFailedError`` / ``MQBrokerError``)."""
        self._check(msg)
        return await self._send_with_retries(
            msg, None, queue, broker_errors_retry=True, attempts=1 + self.config.retries
        )

    async def send_async(self, msg: Message, *, queue: MessageQueue | None = None) -> SendResult:
        """J async semantics: broker error answers are not retried; transport failures are."""
        self._check(msg)
        return await self._send_with_retries(
            msg, None, queue, broker_errors_retry=False, attempts=1 + self.config.retries
        )

    async def send_batch(self, messages: Sequence[Message], *, queue: MessageQueue | None = None) -> SendResult:
        """SEND_BATCH_MESSAGE (320): one topic, no delay; each message gets its own UNIQ_KEY."""
        if not messages:
            raise MQClientError("an empty batch")
        topics = {m.topic for m in messages}
        if len(topics) != 1:
            raise MQClientError(f"a batch must hold one topic, got {sorted(topics)}")
        for m in messages:
            self._check(m)
        keys = [self.uniq.next() for _ in messages]
        body = encode_batch(messages, keys)
        head = Message(topic=messages[0].topic, body=b"")
        result = await self._send_with_retries(
            head, body, queue, broker_errors_retry=True, attempts=1 + self.config.retries, uniq_keys=keys
        )
        return result

    async def send_oneway(self, msg: Message, *, queue: MessageQueue | None = None) -> MessageQueue:
        """Write the request once; the broker never answers (protocol §1). Returns the queue used."""
        self._check(msg)
        route = await self.routes.get(msg.topic, allow_default=True)
        mq = queue or self.select_queue(route, msg.topic, None)
        addr = route.master_addr(mq.broker_name)
        if addr is None:
            raise TopicRouteError(f"broker {mq.broker_name} of {msg.topic} has no master")
        req = self._request(msg, mq, uniq=self.uniq.next())
        req.flag |= 0x2
        await self.client.invoke_oneway(addr, req)
        return mq

    async def _send_with_retries(
        self,
        msg: Message,
        batch_body: bytes | None,
        queue: MessageQueue | None,
        *,
        broker_errors_retry: bool,
        attempts: int,
        uniq_keys: list[str] | None = None,
    ) -> SendResult:
        cfg = self.config
        start = self.clock()
        budget = cfg.send_timeout_ms / 1000.0
        uniq = None if batch_body is not None else self.uniq.next()
        errors: list[AttemptError] = []
        last_broker: str | None = None
        for attempt in range(1, attempts + 1):
            began_ms = self.now_ms()
            remaining = budget - (self.clock() - start)
            if remaining <= 0:
                # J: "sendDefaultImpl call timeout" (RemotingTooMuchRequestException), no more tries.
                errors.append(
                    AttemptError(
                        "TIMEOUT_BUDGET",
                        None,
                        f"send budget of {cfg.send_timeout_ms} ms spent",
                        None,
                        None,
                        began_ms,
                        began_ms,
                    )
                )
                break
            try:
                route = await self.routes.get(msg.topic, allow_default=True)
            except (NameServerUnreachableError, TopicRouteError) as exc:
                errors.append(AttemptError("NO_ROUTE", None, str(exc), None, None, began_ms, self.now_ms()))
                raise SendFailedError(f"send to {msg.topic} failed: {exc}", errors) from exc
            mq = queue or self.select_queue(route, msg.topic, last_broker)
            addr = route.master_addr(mq.broker_name)
            if addr is None:
                errors.append(
                    AttemptError(
                        "NO_ROUTE",
                        None,
                        f"no master for {mq.broker_name}",
                        mq.broker_name,
                        mq.queue_id,
                        began_ms,
                        self.now_ms(),
                    )
                )
                last_broker = mq.broker_name
                continue
            timeout = remaining if cfg.attempt_timeout_ms is None else min(remaining, cfg.attempt_timeout_ms / 1000)
            req = self._request(msg, mq, batch_body=batch_body, uniq=uniq)
            try:
                resp = await self.client.invoke(addr, req, timeout)
            except RemotingTimeoutError as exc:
                errors.append(
                    AttemptError("CLIENT_TIMEOUT", None, str(exc), addr, mq.queue_id, began_ms, self.now_ms())
                )
                last_broker = mq.broker_name
                if cfg.retry_on_timeout:
                    continue
                break
            except RemotingError as exc:  # connect / send failures
                kind = "CONNECT_ERROR" if isinstance(exc, RemotingConnectError) else "SEND_REQUEST_ERROR"
                errors.append(AttemptError(kind, None, str(exc), addr, mq.queue_id, began_ms, self.now_ms()))
                last_broker = mq.broker_name
                continue
            status = STORED.get(resp.code)  # type: ignore[call-overload]
            if status is not None:
                ext = resp.ext_fields
                try:
                    queue_id = int(ext.get("queueId", mq.queue_id))
                    offset = int(ext.get("queueOffset", -1))
                except ValueError:
                    queue_id, offset = mq.queue_id, -1
                msg_id = ",".join(uniq_keys) if uniq_keys else (uniq or "")
                return SendResult(
                    status=status,
                    msg_id=msg_id,
                    offset_msg_id=ext.get("msgId", ""),
                    queue=MessageQueue(mq.topic, mq.broker_name, queue_id),
                    queue_offset=offset,
                    broker=addr,
                    attempts=attempt,
                    attempt_errors=errors,
                    transaction_id=ext.get("transactionId"),
                )
            errors.append(
                AttemptError(
                    error_kind(resp.code, resp.remark),
                    resp.code,
                    resp.remark,
                    addr,
                    mq.queue_id,
                    began_ms,
                    self.now_ms(),
                )
            )
            last_broker = mq.broker_name
            if broker_errors_retry and resp.code in RETRY_CODES:
                continue
            break
        last = errors[-1] if errors else None
        what = f"{last.kind}: {last.remark}" if last else "no attempt made"
        raise SendFailedError(f"send to {msg.topic} failed after {len(errors)} attempt(s): {what}", errors)
