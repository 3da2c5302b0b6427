"""The 5.x driver (``mqbench --protocol grpc``): load through the broker's gRPC endpoint.

Same scenario, same outcome table, the other wire: producers call SendMessage (sync, or an async
window of ``client.max_in_flight`` calls; 5.x has no oneway and no batch send), consumers long-poll
ReceiveMessage, one call in flight per queue QueryAssignment hands out (as the 5.x push consumer does),
and acknowledge each batch with AckMessage while the next receive runs. It speaks
through the generated stubs of ``proxy/protocol`` on one grpc.aio channel per task, plaintext; a
consumer counts as caught up when its group's committed offsets (the POP commits) reached every
queue's end.
"""

from __future__ import annotations

import asyncio
import os
import random
import string
import time
import uuid
from typing import TYPE_CHECKING, Any

from bench.outcomes import STATUS_FAILED

if TYPE_CHECKING:
    from bench.worker import ConsumerSpec, ProducerSpec, _Load


ACKS_IN_FLIGHT = 8  # AckMessage calls one consumer has under way at once


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class _Endpoint:
    """One channel and stub per task, with the metadata every call carries."""

    def __init__(
        self, address: str, client_id: str, access_key: str | None = None, secret_key: str | None = None
    ) -> None:
        # gRPC's fork handlers would run in every child this process forks later (Spark's launcher, a broker
        # started with a preexec_fn) and can kill it before exec: off, unless gRPC was imported already
        # (broker.testing.process.child_preexec says how).
        os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
        import grpc

        from proxy.auth import signed_metadata
        from proxy.protocol.service_pb2_grpc import MessagingServiceStub

        self.channel = grpc.aio.insecure_channel(address)
        self.stub = MessagingServiceStub(self.channel)
        self.meta = (("x-mq-client-id", client_id), ("x-mq-language", "PYTHON"), ("x-mq-protocol", "v2"))
        if access_key:  # --ak/--sk against a broker with aclEnable=true, signed as the 5.x clients sign
            self.meta += signed_metadata(access_key, secret_key or "")


def _endpoint(load: _Load) -> _Endpoint:
    ep = getattr(load, "_grpc_endpoint", None)
    if ep is None:
        if not load.spec.grpc_endpoint:
            raise RuntimeError("the grpc driver needs the broker's gRPC endpoint (mqbench --grpc-endpoint HOST:PORT)")
        ep = _Endpoint(
            load.spec.grpc_endpoint,
            f"mqbench-{os.getpid()}-{load.spec.worker}-{uuid.uuid4().hex[:8]}",
            load.spec.access_key,
            load.spec.secret_key,
        )
        load._grpc_endpoint = ep  # type: ignore[attr-defined]
    return ep


class _GrpcProducer:
    def __init__(self, load: _Load, spec: ProducerSpec) -> None:
        self.load, self.spec = load, spec
        self.ep = _endpoint(load)
        rnd = random.Random(f"{load.spec.run_id}/{spec.id}")
        self.payload = "".join(rnd.choices(string.ascii_letters + string.digits, k=load.scen.message_size)).encode()

    async def close(self) -> None:
        await self.ep.channel.close()

    def _request(self, seq: int, t0: int, record: Any) -> Any:
        from proxy.protocol import definition_pb2 as pb
        from proxy.protocol import service_pb2 as spb

        msg = pb.Message(topic=pb.Resource(name=self.spec.topic), body=self.payload)
        msg.system_properties.message_id = f"{uuid.uuid4().hex.upper()}"
        msg.system_properties.message_type = pb.NORMAL
        msg.system_properties.body_encoding = pb.IDENTITY
        for k, v in self.load.message_properties(self.spec.id, seq, (now_ms() - t0) / 1000, record).items():
            msg.user_properties[k] = v
        return spb.SendMessageRequest(messages=[msg])

    async def _send_one(self, seq: int, t0: int, warm_end: int) -> None:
        from proxy.protocol import definition_pb2 as pb

        load = self.load
        c = load.scen.client
        request = self._request(seq, t0, load.buf.add)
        began_ms, began = now_ms(), time.perf_counter()
        row: dict[str, Any] = dict(
            topic=self.spec.topic,
            producer=self.spec.id,
            seq=seq,
            warmup=began_ms < warm_end,
            send_ms=began_ms,
            size=len(self.payload),
            attempts=1,
        )
        try:
            response = await self.ep.stub.SendMessage(request, metadata=self.ep.meta, timeout=c.send_timeout_ms / 1000)
            entry = response.entries[0] if response.entries else None
            if response.status.code == pb.OK and entry is not None:
                row.update(status="SEND_OK", uniq_key=entry.message_id, queue_offset=int(entry.offset))
            else:
                kind = pb.Code.Name(response.status.code) if response.status.code in pb.Code.values() else "UNKNOWN"
                row.update(status=STATUS_FAILED, error_kind=kind, remark=response.status.message[:500])
        except Exception as exc:  # grpc.aio.AioRpcError, timeouts
            code = getattr(exc, "code", None)
            kind = code().name if callable(code) else type(exc).__name__
            row.update(status=STATUS_FAILED, error_kind=kind, remark=str(exc)[:500])
        row.update(ack_ms=now_ms(), latency_us=int((time.perf_counter() - began) * 1e6))
        stats = load.stats
        stats.sent += 1
        if row["status"] == STATUS_FAILED:
            stats.failed += 1
            stats.errors[row["error_kind"]] += 1
        else:
            stats.acked += 1
        load.buf.add("send", **row)

    async def run(self, t0: int, end: int) -> None:
        scen = self.load.scen
        rate, limit = scen.rate_per_producer, scen.max_messages_per_producer
        warm_end = t0 + int(scen.warmup_s * 1000)
        window = max(1, scen.client.max_in_flight) if scen.send_mode == "async" else 1
        in_flight: set[asyncio.Task[None]] = set()
        start = time.monotonic()
        seq = 0
        while now_ms() < end and (limit is None or seq < limit):
            if rate is not None:
                delay = start + seq / rate - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                    if now_ms() >= end:
                        break
            if len(in_flight) >= window:
                _, in_flight = await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
            task = asyncio.ensure_future(self._send_one(seq, t0, warm_end))
            in_flight.add(task)
            seq += 1
        if in_flight:
            await asyncio.gather(*in_flight)


class _GrpcConsumer:
    def __init__(self, load: _Load, spec: ConsumerSpec) -> None:
        self.load, self.spec = load, spec
        self.id, self.group, self.topic = spec.id, spec.group, spec.topic
        self.ep = _endpoint(load)
        self._task: asyncio.Task[None] | None = None
        self.delay = load.scen.client.consume_delay_ms / 1000.0
        self._acks = asyncio.Semaphore(ACKS_IN_FLIGHT)
        self._pending: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        """One receive loop per assigned queue, as the 5.x push consumer keeps one receive per assignment."""
        from proxy.protocol import definition_pb2 as pb
        from proxy.protocol import service_pb2 as spb

        queue_ids = [-1]
        try:
            response = await self.ep.stub.QueryAssignment(
                spb.QueryAssignmentRequest(topic=pb.Resource(name=self.topic), group=pb.Resource(name=self.group)),
                metadata=self.ep.meta,
                timeout=10,
            )
            queue_ids = [a.message_queue.id for a in response.assignments] or queue_ids
        except Exception as exc:  # an older broker, a busy one: one loop over the whole broker
            code = getattr(exc, "code", None)
            self.load.stats.errors[f"ASSIGNMENT_{code().name if callable(code) else type(exc).__name__}"] += 1
        await asyncio.gather(*(self._loop(q) for q in queue_ids))

    async def heartbeat(self) -> None:
        from proxy.protocol import definition_pb2 as pb
        from proxy.protocol import service_pb2 as spb

        await self.ep.stub.Heartbeat(
            spb.HeartbeatRequest(group=pb.Resource(name=self.group), client_type=pb.SIMPLE_CONSUMER),
            metadata=self.ep.meta,
        )

    async def rebalance(self) -> None:
        """POP needs none: every consumer of the group pops from every queue."""

    async def _loop(self, queue_id: int) -> None:
        from google.protobuf.duration_pb2 import Duration

        from proxy.protocol import definition_pb2 as pb
        from proxy.protocol import service_pb2 as spb

        c = self.load.scen.client
        request = spb.ReceiveMessageRequest(
            group=pb.Resource(name=self.group),
            message_queue=pb.MessageQueue(topic=pb.Resource(name=self.topic), id=queue_id),
            filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
            batch_size=min(32, max(1, c.pull_batch_size)),
            invisible_duration=Duration(seconds=30),
            long_polling_timeout=Duration(seconds=1),
        )
        while True:
            try:
                handles = []
                async for response in self.ep.stub.ReceiveMessage(request, metadata=self.ep.meta, timeout=10):
                    if not response.HasField("message"):
                        continue
                    m = response.message
                    sp = m.system_properties
                    if self.delay:
                        await asyncio.sleep(self.delay)
                    self.load.record_consume(
                        self.id,
                        self.group,
                        topic=m.topic.name,
                        props=dict(m.user_properties),
                        queue_id=sp.queue_id,
                        queue_offset=sp.queue_offset,
                        born_ms=sp.born_timestamp.ToMilliseconds(),
                        store_ms=sp.store_timestamp.ToMilliseconds(),
                        msg_id=sp.message_id,
                        uniq=sp.message_id,
                        size=len(m.body),
                        consume_ms=now_ms(),
                    )
                    handles.append(spb.AckMessageEntry(message_id=sp.message_id, receipt_handle=sp.receipt_handle))
                if handles:
                    # acknowledged while the next receive runs (the push consumer acks from its consumption
                    # threads): waiting for it here would add a round trip to every batch
                    await self._acks.acquire()
                    ack = asyncio.ensure_future(self._ack(handles))
                    self._pending.add(ack)
                    ack.add_done_callback(self._pending.discard)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a busy or restarting broker: count it, go on
                code = getattr(exc, "code", None)
                self.load.stats.errors[f"RECEIVE_{code().name if callable(code) else type(exc).__name__}"] += 1
                await asyncio.sleep(0.2)

    async def _ack(self, handles: list[Any]) -> None:
        from proxy.protocol import definition_pb2 as pb
        from proxy.protocol import service_pb2 as spb

        try:
            await self.ep.stub.AckMessage(
                spb.AckMessageRequest(
                    group=pb.Resource(name=self.group), topic=pb.Resource(name=self.topic), entries=handles
                ),
                metadata=self.ep.meta,
                timeout=10,
            )
        except Exception as exc:  # the messages come back after their invisible time: counted, not fatal
            code = getattr(exc, "code", None)
            self.load.stats.errors[f"ACK_{code().name if callable(code) else type(exc).__name__}"] += 1
        finally:
            self._acks.release()

    async def caught_up(self) -> bool:
        from mqclient import AdminClient

        async with AdminClient(self.load.spec.namesrv, credentials=self.load.spec.credentials()) as admin:
            return await admin.consumed_to_end(self.group, self.topic)

    def cached_messages(self) -> int:
        return 0

    def cached_bytes(self) -> int:
        return 0

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)
        await self.ep.channel.close()


class GrpcDriver:
    """Load through the 5.x gRPC endpoint (``--protocol grpc``)."""

    name = "grpc"

    def make_producer(self, load: _Load, spec: ProducerSpec) -> _GrpcProducer:
        return _GrpcProducer(load, spec)

    def make_consumer(self, load: _Load, spec: ConsumerSpec) -> _GrpcConsumer:
        return _GrpcConsumer(load, spec)
