"""The second load driver: the Apache RocketMQ C++ client through the ``rocketmq`` wheel (0.4.4).

Same scenario, same outcome table, another client: what a broker does for C++ users. The wheel's
calls block, so each producer's send loop runs in a thread, and the consumers' callbacks (on the
C++ client's threads) hand their records to the event loop. Limits of the wheel: sync and oneway
sends only (its async send takes callbacks on foreign threads and no per-attempt budget), no
queue id in send results, bodies are C strings (the payload is ASCII so no NUL cuts it short),
and the C++ client owns retries (5 attempts), rebalance and offset commits (every 5 s) itself. A
consumer counts as caught up when its group's committed offsets reached every queue's end.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import random
import re
import string
import threading
import time
from typing import TYPE_CHECKING, Any

from bench.cpp_lifecycle import shutdown_client, start_client
from bench.outcomes import STATUS_FAILED, STATUS_ONEWAY

if TYPE_CHECKING:
    from bench.worker import ConsumerSpec, ProducerSpec, _Load

_TAG = re.compile(r"\[([A-Z_]+)\]")
_CPP_STATUS = {0: "SEND_OK", 1: "FLUSH_DISK_TIMEOUT", 2: "FLUSH_SLAVE_TIMEOUT", 3: "SLAVE_NOT_AVAILABLE"}


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def cpp_error_kind(exc: BaseException) -> str:
    """The C++ client's exception text carries the broker remark: find the busy tag in it."""
    m = _TAG.search(str(exc))
    if m:
        return m.group(1)
    text = str(exc).lower()
    if "timeout" in text or "timed out" in text:
        return "CLIENT_TIMEOUT"
    return type(exc).__name__


def _call_within(fn: Any, timeout_s: float) -> None:
    """Run a wheel call that may hang (shutdown) in a daemon thread; give up after ``timeout_s``."""
    t = threading.Thread(target=fn, daemon=True)
    t.start()
    t.join(timeout_s)


class _CppProducer:
    def __init__(self, load: _Load, spec: ProducerSpec) -> None:
        from rocketmq.client import Producer

        self.load, self.spec = load, spec
        c = load.scen.client
        self.producer = Producer(f"{load.spec.run_id}-cpp-producers", timeout=c.send_timeout_ms)
        self.producer.set_namesrv_addr(load.spec.namesrv)
        if load.spec.access_key:
            self.producer.set_session_credentials(load.spec.access_key, load.spec.secret_key or "", "")
        start_client(self.producer)  # never beside another client's start/shutdown: see bench.cpp_lifecycle
        rnd = random.Random(f"{load.spec.run_id}/{spec.id}")
        self.payload = "".join(rnd.choices(string.ascii_letters + string.digits, k=load.scen.message_size)).encode()
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=f"cpp-{spec.id}")

    async def close(self) -> None:
        await asyncio.get_running_loop().run_in_executor(None, _call_within, lambda: shutdown_client(self.producer), 20)
        self._pool.shutdown(wait=False)

    def _send_loop(self, loop: asyncio.AbstractEventLoop, t0: int, end: int) -> None:
        from rocketmq.client import Message

        load, scen = self.load, self.load.scen
        rate, limit = scen.rate_per_producer, scen.max_messages_per_producer
        warm_end = t0 + scen.warmup_s * 1000
        start = time.monotonic()
        seq = 0
        while now_ms() < end and (limit is None or seq < limit):
            if rate is not None:
                delay = start + seq / rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                    if now_ms() >= end:
                        break
            msg = Message(self.spec.topic)
            msg.set_body(self.payload)

            def record(*args: Any, **kw: Any) -> None:
                loop.call_soon_threadsafe(lambda: load.buf.add(*args, **kw))

            for k, v in load.message_properties(self.spec.id, seq, (now_ms() - t0) / 1000, record).items():
                msg.set_property(k, v)
            warmup = now_ms() < warm_end
            began_ms, began = now_ms(), time.perf_counter()
            row: dict[str, Any] = dict(
                topic=self.spec.topic,
                producer=self.spec.id,
                seq=seq,
                warmup=warmup,
                send_ms=began_ms,
                size=len(self.payload),
                attempts=1,
            )
            try:
                if scen.send_mode == "oneway":
                    self.producer.send_oneway(msg)
                    row.update(status=STATUS_ONEWAY)
                else:
                    res = self.producer.send_sync(msg)
                    row.update(
                        status=_CPP_STATUS.get(int(res.status), "SEND_OK"),
                        uniq_key=res.msg_id,
                        queue_offset=int(res.offset),
                    )
            except Exception as exc:  # the wheel raises its own exception types
                row.update(status=STATUS_FAILED, error_kind=cpp_error_kind(exc), remark=str(exc)[:500])
            row.update(ack_ms=now_ms(), latency_us=int((time.perf_counter() - began) * 1e6))
            loop.call_soon_threadsafe(self._record, row)
            seq += 1

    def _record(self, row: dict[str, Any]) -> None:
        stats = self.load.stats
        stats.sent += 1
        if row["status"] == STATUS_FAILED:
            stats.failed += 1
            stats.errors[row["error_kind"]] += 1
        elif row["status"] != STATUS_ONEWAY:
            stats.acked += 1
        self.load.buf.add("send", **row)

    async def run(self, t0: int, end: int) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._pool, self._send_loop, loop, t0, end)
        await asyncio.sleep(0)  # let the last call_soon_threadsafe records land


class _CppConsumer:
    def __init__(self, load: _Load, spec: ConsumerSpec) -> None:
        self.load, self.spec = load, spec
        self.id, self.group, self.topic = spec.id, spec.group, spec.topic
        self.consumer: Any = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.delay = load.scen.client.consume_delay_ms / 1000.0

    def _on_message(self, msg: Any) -> None:  # a C++ client thread
        if self.delay:
            time.sleep(self.delay)
        consumed_at = now_ms()
        props = {k: (msg.get_property(k) or b"").decode() for k in ("BENCH_RUN", "BENCH_PRODUCER", "BENCH_SEQ")}
        row = dict(
            topic=msg.topic,
            props=props,
            queue_id=msg.queue_id,
            queue_offset=msg.queue_offset,
            born_ms=msg.born_timestamp,
            store_ms=msg.store_timestamp,
            msg_id=msg.id,
            uniq=msg.id,
            size=len(msg.body),
            consume_ms=consumed_at,
        )
        assert self.loop is not None
        self.loop.call_soon_threadsafe(lambda: self.load.record_consume(self.id, self.group, **row))

    async def start(self) -> None:
        from rocketmq.client import PushConsumer

        self.loop = asyncio.get_running_loop()
        c = PushConsumer(self.group)
        # One instance name per consumer: two consumers of a group in one process would otherwise
        # share the C++ client factory and its client id, and the rebalance would split nothing.
        c.set_instance_name(f"{self.id}-{os.getpid()}-{self.load.spec.run_id}")
        c.set_namesrv_addr(self.load.spec.namesrv)
        if self.load.spec.access_key:
            c.set_session_credentials(self.load.spec.access_key, self.load.spec.secret_key or "", "")
        c.set_thread_count(max(1, self.load.scen.client.consume_threads))
        c.subscribe(self.topic, self._on_message)
        await self.loop.run_in_executor(None, start_client, c)
        self.consumer = c

    async def heartbeat(self) -> None:
        """The C++ client heartbeats on its own timers."""

    async def rebalance(self) -> None:
        """The C++ client rebalances on its own (every 10 s and when notified)."""

    async def caught_up(self) -> bool:
        from mqclient import AdminClient

        async with AdminClient(self.load.spec.namesrv, credentials=self.load.spec.credentials()) as admin:
            return await admin.consumed_to_end(self.group, self.topic)

    def cached_messages(self) -> int:
        return 0  # not visible through the wheel

    def cached_bytes(self) -> int:
        return 0

    async def close(self) -> None:
        if self.consumer is not None:
            await asyncio.get_running_loop().run_in_executor(
                None, _call_within, lambda: shutdown_client(self.consumer), 20
            )


class CppDriver:
    """Load with the C++ client (``--driver cpp``)."""

    name = "cpp"

    def __init__(self) -> None:
        try:
            import rocketmq.client  # noqa: F401
        except Exception as exc:  # ImportError, or the bundled .so failing to load
            raise RuntimeError(
                f"the cpp driver needs the 'rocketmq' wheel (pip install rocketmq==0.4.4): {exc}"
            ) from None

    def make_producer(self, load: _Load, spec: ProducerSpec) -> _CppProducer:
        return _CppProducer(load, spec)

    def make_consumer(self, load: _Load, spec: ConsumerSpec) -> _CppConsumer:
        return _CppConsumer(load, spec)
