"""The default load driver: the scenario's producers and consumers on our asyncio client, ``mqclient``.

``_AsyncioProducer`` sends at the scenario's rate in its send mode (sync, async, oneway, batch) and records every
send and every failed attempt; ``_AsyncioConsumer`` is a push consumer recording every message it consumes.
``bench.worker`` owns the phases both go through; ``driver_cpp`` and ``driver_grpc`` are the other drivers.
"""

from __future__ import annotations

import asyncio
import os
import random
import socket
import time
from typing import TYPE_CHECKING, Any

from bench.outcomes import STATUS_FAILED, STATUS_ONEWAY
from bench.worker import now_ms

if TYPE_CHECKING:
    from bench.worker import ConsumerSpec, ProducerSpec, _Load


class _AsyncioProducer:
    """One producer of the scenario, driven by our asyncio client."""

    def __init__(self, load: _Load, spec: ProducerSpec) -> None:
        from mqclient import Producer, ProducerConfig

        self.load, self.spec = load, spec
        c = load.scen.client
        self.producer = Producer(
            load.spec.namesrv,
            ProducerConfig(
                group=f"{load.spec.run_id}-producers",
                send_timeout_ms=c.send_timeout_ms,
                attempt_timeout_ms=c.attempt_timeout_ms,
                retries=c.retries,
                retry_on_timeout=c.retry_on_timeout,
                compress_over_bytes=c.compress_over_bytes,
            ),
            credentials=load.spec.credentials(),
        )
        rnd = random.Random(hash((load.spec.run_id, spec.id)))
        self.payload = rnd.randbytes(load.scen.message_size)

    async def close(self) -> None:
        await self.producer.close()

    def _record_ok(
        self,
        seq: int,
        warmup: bool,
        began_ms: int,
        began: float,
        res: Any,
        *,
        queue_offset: int,
        msg_id: str,
        uniq: str,
    ) -> None:
        self.load.stats.acked += 1
        lat = int((time.perf_counter() - began) * 1e6)
        self.load.buf.add(
            "send",
            topic=self.spec.topic,
            producer=self.spec.id,
            seq=seq,
            warmup=warmup,
            queue_id=res.queue.queue_id,
            broker=res.broker,
            send_ms=began_ms,
            ack_ms=now_ms(),
            latency_us=lat,
            status=res.status,
            msg_id=msg_id,
            uniq_key=uniq,
            queue_offset=queue_offset,
            attempts=res.attempts,
            size=len(self.payload),
        )

    def _record_attempts(self, seq: int, errors: list[Any]) -> None:
        for e in errors:
            self.load.stats.errors[e.kind] += 1
            self.load.buf.add(
                "attempt",
                topic=self.spec.topic,
                producer=self.spec.id,
                seq=seq,
                queue_id=e.queue_id,
                broker=e.broker,
                send_ms=e.started_ms,
                ack_ms=e.ended_ms,
                error_kind=e.kind,
                error_code=e.code,
                remark=e.remark,
            )

    def _record_failed(self, seq: int, warmup: bool, began_ms: int, began: float, exc: BaseException) -> None:
        from mqclient import SendFailedError

        self.load.stats.failed += 1
        attempts = getattr(exc, "attempts", None) if isinstance(exc, SendFailedError) else None
        if attempts:
            last = attempts[-1]
            self._record_attempts(seq, attempts[:-1])
            kind, code, remark, queue_id, broker = last.kind, last.code, last.remark, last.queue_id, last.broker
        else:
            kind, code, remark, queue_id, broker = type(exc).__name__, None, str(exc), None, None
        self.load.stats.errors[kind] += 1
        self.load.buf.add(
            "send",
            topic=self.spec.topic,
            producer=self.spec.id,
            seq=seq,
            warmup=warmup,
            queue_id=queue_id,
            broker=broker,
            send_ms=began_ms,
            ack_ms=now_ms(),
            latency_us=int((time.perf_counter() - began) * 1e6),
            status=STATUS_FAILED,
            error_kind=kind,
            error_code=code,
            remark=remark,
            attempts=len([a for a in attempts or [] if a.kind != "TIMEOUT_BUDGET"]) or 1,
            size=len(self.payload),
        )

    async def run(self, t0: int, end: int) -> None:
        from mqclient import Message

        load, scen = self.load, self.load.scen
        rate = scen.rate_per_producer
        limit = scen.max_messages_per_producer
        mode = scen.send_mode
        inflight = asyncio.Semaphore(scen.client.max_in_flight)
        tasks: set[asyncio.Task[None]] = set()
        warm_end = t0 + scen.warmup_s * 1000
        start_mono = time.monotonic()
        batch: list[tuple[int, bool, Any]] = []
        seq = 0

        async def one(seq: int, warmup: bool, msg: Any) -> None:
            began_ms, began = now_ms(), time.perf_counter()
            try:
                if mode == "oneway":
                    mq = await self.producer.send_oneway(msg)
                    load.buf.add(
                        "send",
                        topic=self.spec.topic,
                        producer=self.spec.id,
                        seq=seq,
                        warmup=warmup,
                        queue_id=mq.queue_id,
                        send_ms=began_ms,
                        ack_ms=now_ms(),
                        latency_us=int((time.perf_counter() - began) * 1e6),
                        status=STATUS_ONEWAY,
                        attempts=1,
                        size=len(self.payload),
                    )
                    return
                res = await (self.producer.send(msg) if mode == "sync" else self.producer.send_async(msg))
            except Exception as exc:
                self._record_failed(seq, warmup, began_ms, began, exc)
                return
            self._record_attempts(seq, res.attempt_errors)
            self._record_ok(
                seq,
                warmup,
                began_ms,
                began,
                res,
                queue_offset=res.queue_offset,
                msg_id=res.offset_msg_id,
                uniq=res.msg_id,
            )

        async def send_batch(items: list[tuple[int, bool, Any]]) -> None:
            began_ms, began = now_ms(), time.perf_counter()
            try:
                res = await self.producer.send_batch([m for _, _, m in items])
            except Exception as exc:
                for s, w, _ in items:
                    self._record_failed(s, w, began_ms, began, exc)
                return
            ids = res.offset_msg_id.split(",")
            uniqs = res.msg_id.split(",")
            self._record_attempts(items[0][0], res.attempt_errors)
            for i, (s, w, _) in enumerate(items):
                self._record_ok(
                    s,
                    w,
                    began_ms,
                    began,
                    res,
                    queue_offset=res.queue_offset + i,
                    msg_id=ids[i] if i < len(ids) else "",
                    uniq=uniqs[i] if i < len(uniqs) else "",
                )

        async def guarded(coro: Any) -> None:
            try:
                await coro
            finally:
                inflight.release()

        while True:
            now = now_ms()
            if now >= end or (limit is not None and seq >= limit):
                break
            if rate is not None:
                due = start_mono + seq / rate
                delay = due - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                    if now_ms() >= end:
                        break
            props = load.message_properties(self.spec.id, seq, (now_ms() - t0) / 1000)
            msg = Message(topic=self.spec.topic, body=self.payload, properties=props)
            warmup = now_ms() < warm_end
            load.stats.sent += 1
            if mode == "sync":
                await one(seq, warmup, msg)
            elif mode == "batch":
                batch.append((seq, warmup, msg))
                if len(batch) >= scen.client.batch_size:
                    items, batch = batch, []
                    await send_batch(items)
            else:
                await inflight.acquire()
                task = asyncio.ensure_future(guarded(one(seq, warmup, msg)))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            seq += 1
        if batch:
            await send_batch(batch)
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)


class _AsyncioConsumer:
    def __init__(self, load: _Load, spec: ConsumerSpec) -> None:
        from mqclient import ConsumerConfig, PushConsumer

        self.load, self.spec = load, spec
        self.id, self.group, self.topic = spec.id, spec.group, spec.topic
        c = load.scen.client
        delay = c.consume_delay_ms / 1000.0
        self.consumer = PushConsumer(
            load.spec.namesrv,
            spec.topic,
            ConsumerConfig(
                group=spec.group,
                pull_batch_size=c.pull_batch_size,
                pull_threshold_for_queue=c.pull_threshold_for_queue,
                pull_threshold_size_for_queue_mb=c.pull_threshold_size_for_queue_mb,
                consume_threads=c.consume_threads,
                suspend_timeout_ms=c.suspend_timeout_ms,
                pull_timeout_ms=c.pull_timeout_ms,
                heartbeat_interval_s=c.heartbeat_interval_s,
                rebalance_interval_s=c.rebalance_interval_s,
                commit_interval_s=c.commit_interval_s,
                pull_delay_on_error_ms=min(3000, c.pull_timeout_ms),
                client_id=f"{socket.gethostname()}@{os.getpid()}#{spec.id}#{load.spec.run_id}",
            ),
            self.on_message,
            credentials=load.spec.credentials(),
        )
        self.delay = delay

    async def on_message(self, msg: Any, mq: Any) -> None:
        if self.delay:
            await asyncio.sleep(self.delay)
        self.load.record_consume(
            self.id,
            self.group,
            topic=msg.topic,
            props=msg.properties,
            queue_id=msg.queue_id,
            queue_offset=msg.queue_offset,
            born_ms=msg.born_timestamp,
            store_ms=msg.store_timestamp,
            msg_id=msg.offset_msg_id,
            uniq=msg.properties.get("UNIQ_KEY"),
            size=len(msg.body),
        )

    async def start(self) -> None:
        await self.consumer.start()

    async def heartbeat(self) -> None:
        await self.consumer.heartbeat()

    async def rebalance(self) -> None:
        await self.consumer.rebalance()

    async def caught_up(self) -> bool:
        return await self.consumer.caught_up()

    def cached_messages(self) -> int:
        return self.consumer.cached_messages

    def cached_bytes(self) -> int:
        return self.consumer.cached_bytes

    async def close(self) -> None:
        await self.consumer.close()


class AsyncioDriver:
    """Load with ``mqclient`` (the default driver)."""

    name = "asyncio"

    def make_producer(self, load: _Load, spec: ProducerSpec) -> _AsyncioProducer:
        return _AsyncioProducer(load, spec)

    def make_consumer(self, load: _Load, spec: ConsumerSpec) -> _AsyncioConsumer:
        return _AsyncioConsumer(load, spec)
