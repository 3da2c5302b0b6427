"""The load worker one Spark task runs: producers and consumers on one asyncio loop, every outcome recorded.

A task gets a ``TaskSpec`` (its producers and consumers, the scenario, the name server). All tasks
of a run are gang-scheduled (Spark barrier mode) and step through the same phases together,
synchronised with ``all_gather``:

1. start consumers (route, heartbeat, first rebalance); 2. heartbeat again and rebalance once every
consumer is registered, so queues are split once and for all before load; 3. agree on a start time;
4. produce for warm-up + duration (worker 0 also fires the scenario's broker faults); 5. when every
producer everywhere is done, drain until each consumer caught up with its queues or the drain
deadline passes; 6. close everything together (so no consumer's departure re-balances queues
under one still draining).

Progress (counts, errors) goes to the driver as UDP datagrams once a second, best effort. The
producers and consumers come from the scenario's driver: ``bench.driver_asyncio`` (default), ``driver_cpp``,
``driver_grpc``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import structlog

from bench.broker_proc import rss_bytes
from bench.outcomes import OutcomeBuffer
from bench.scenario import Scenario, parse_scenario

PROP_RUN = "BENCH_RUN"
PROP_PRODUCER = "BENCH_PRODUCER"
PROP_SEQ = "BENCH_SEQ"


class Barrier(Protocol):
    def all_gather(self, message: str) -> list[str]: ...


class LocalBarrier:
    """``all_gather`` for N threads of one process (tests and in-process runs without Spark)."""

    def __init__(self, parties: int) -> None:
        self.parties = parties
        self._lock = threading.Condition()
        self._round = 0
        self._items: dict[int, list[str]] = {}
        self._done: dict[int, list[str]] = {}

    def all_gather(self, message: str) -> list[str]:
        with self._lock:
            rnd = self._round
            items = self._items.setdefault(rnd, [])
            items.append(message)
            if len(items) == self.parties:
                self._done[rnd] = list(items)
                self._round += 1
                self._lock.notify_all()
            else:
                while rnd not in self._done:
                    if not self._lock.wait(600):
                        raise TimeoutError("barrier: a party never arrived")
            return self._done[rnd]


class SparkBarrier:
    def __init__(self) -> None:
        from pyspark import BarrierTaskContext

        self._ctx = BarrierTaskContext.get()

    def all_gather(self, message: str) -> list[str]:
        return list(self._ctx.allGather(message))


@dataclass(frozen=True)
class ProducerSpec:
    id: str
    topic: str


@dataclass(frozen=True)
class ConsumerSpec:
    id: str
    topic: str
    group: str


@dataclass
class TaskSpec:
    run_id: str
    worker: int
    namesrv: str
    scenario: dict[str, Any]
    producers: list[ProducerSpec] = field(default_factory=list)
    consumers: list[ConsumerSpec] = field(default_factory=list)
    topics: list[str] = field(default_factory=list)
    progress_addr: str | None = None
    run_faults: bool = False
    access_key: str | None = None  # ACL credentials every client of the task signs with (--ak/--sk)
    secret_key: str | None = None
    grpc_endpoint: str = ""  # the broker's 5.x endpoint, for the grpc driver

    def credentials(self) -> Any:
        """``remoting.signature.SessionCredentials`` when the run has credentials, else None."""
        from remoting.signature import SessionCredentials

        return SessionCredentials(self.access_key, self.secret_key or "") if self.access_key else None

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> TaskSpec:
        d = json.loads(text)
        d["producers"] = [ProducerSpec(**p) for p in d["producers"]]
        d["consumers"] = [ConsumerSpec(**c) for c in d["consumers"]]
        return cls(**d)

    def load_scenario(self) -> Scenario:
        data = dict(self.scenario)
        source = data.pop("source", "<task>")
        return parse_scenario(data, source)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class _CurrentStderr:
    """Writes to whatever ``sys.stderr`` is at the time (a captured stream may be closed later)."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def quiet_logs() -> None:
    """Client logs would drown the run's own output: warnings and up only, to stderr."""
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
        logger_factory=structlog.PrintLoggerFactory(file=_CurrentStderr()),
    )  # type: ignore[arg-type]


@dataclass
class Stats:
    """What the progress line shows; one per task."""

    sent: int = 0
    acked: int = 0
    failed: int = 0
    consumed: int = 0
    errors: Counter[str] = field(default_factory=Counter)


class ProgressReporter:
    """Best-effort UDP datagrams to the driver's collector; never blocks the load."""

    def __init__(self, addr: str | None, worker: int) -> None:
        self.worker = worker
        self._sock: socket.socket | None = None
        self._addr: tuple[str, int] | None = None
        if addr:
            host, _, port = addr.rpartition(":")
            self._addr = (host, int(port))
            self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            self._sock.setblocking(False)

    def report(self, stats: Stats, phase: str) -> None:
        if self._sock is None or self._addr is None:
            return
        msg = {
            "w": self.worker,
            "t": now_ms(),
            "phase": phase,
            "sent": stats.sent,
            "acked": stats.acked,
            "failed": stats.failed,
            "consumed": stats.consumed,
            "errors": dict(stats.errors),
        }
        try:
            self._sock.sendto(json.dumps(msg).encode(), self._addr)
        except OSError:
            pass

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()


class _Load:
    """State of one task's run."""

    def __init__(self, spec: TaskSpec, barrier: Barrier, driver: Any) -> None:
        self.spec = spec
        self.scen = spec.load_scenario()
        self.barrier = barrier
        self.driver = driver
        self.buf = OutcomeBuffer(worker=spec.worker)
        self.stats = Stats()
        self.progress = ProgressReporter(spec.progress_addr, spec.worker)
        self.phase = "starting"
        self.t0 = 0
        self.load_end = 0
        self.fault_counts: dict[str, Counter[int]] = {}  # per producer: how often each message fault fired

    async def gather_all(self, message: str) -> list[str]:
        # allGather blocks its thread; the loop keeps consuming meanwhile.
        return await asyncio.get_running_loop().run_in_executor(None, self.barrier.all_gather, message)

    async def report_loop(self) -> None:
        while True:
            self.progress.report(self.stats, self.phase)
            await asyncio.sleep(0.25)  # often: the driver's totals are a cut across workers (bench.progress)

    async def sample_loop(self, consumers: list[Any]) -> None:
        pid = os.getpid()
        while True:
            t = now_ms()
            rss = rss_bytes(pid)
            if not consumers:
                self.buf.add("sample", consume_ms=t, rss_bytes=rss)
            for c in consumers:
                self.buf.add(
                    "sample",
                    consume_ms=t,
                    consumer=c.id,
                    group=c.group,
                    topic=c.topic,
                    cache_msgs=c.cached_messages(),
                    cache_bytes=c.cached_bytes(),
                    rss_bytes=rss,
                )
            await asyncio.sleep(1.0)

    async def run(self) -> OutcomeBuffer:
        spec, scen = self.spec, self.scen
        consumers = [self.driver.make_consumer(self, c) for c in spec.consumers]
        producers = [self.driver.make_producer(self, p) for p in spec.producers]
        background: list[asyncio.Task[Any]] = [asyncio.ensure_future(self.report_loop())]
        try:
            await asyncio.gather(*(c.start() for c in consumers))
            await self.gather_all("started")
            await asyncio.gather(*(c.heartbeat() for c in consumers))
            await self.gather_all("registered")
            await asyncio.gather(*(c.rebalance() for c in consumers))
            clocks = await self.gather_all(str(now_ms()))
            self.t0 = max(int(x) for x in clocks) + 200
            self.load_end = self.t0 + int((scen.warmup_s + scen.duration_s) * 1000)
            self.buf.add("start", send_ms=self.t0, ack_ms=self.load_end)
            await asyncio.sleep(max(0.0, (self.t0 - now_ms()) / 1000))
            background.append(asyncio.ensure_future(self.sample_loop(consumers)))
            self.phase = "load"
            jobs = [asyncio.ensure_future(p.run(self.t0, self.load_end)) for p in producers]
            if spec.run_faults and scen.faults:
                jobs.append(asyncio.ensure_future(self.fault_loop()))
            await asyncio.gather(*jobs)
            self.phase = "drain"
            await self.gather_all("produced")
            await self.drain(consumers)
            self.phase = "closing"
            await self.gather_all("drained")
        finally:
            for task in background:
                task.cancel()
            await asyncio.gather(*background, return_exceptions=True)
            await asyncio.gather(*(c.close() for c in consumers), return_exceptions=True)
            await asyncio.gather(*(p.close() for p in producers), return_exceptions=True)
            self.phase = "done"
            self.progress.report(self.stats, self.phase)
            self.progress.close()
        return self.buf

    async def drain(self, consumers: list[Any]) -> None:
        """Wait until each consumer caught up with its queues (or the drain deadline); one row each."""
        scen = self.scen
        # A consumer is drained once it is caught up twice, ``settle`` apart: a stalled broker
        # may still store attempts the producers already gave up on (those late copies are
        # exactly the duplicates and "failed but delivered" messages the score must see).
        fault_tail = max(
            [(f.at_s * 1000 + f.duration_ms) / 1000 - scen.warmup_s - scen.duration_s for f in scen.faults] + [0.0]
        )
        settle = 1.0 + max([mf.value / 1000 for mf in scen.message_faults] + [fault_tail])
        deadline = time.monotonic() + scen.drain_timeout_s
        pending = list(consumers)
        first_seen: dict[int, float] = {}
        while pending and time.monotonic() < deadline:
            still = []
            for c in pending:
                try:
                    done = await c.caught_up()
                except Exception:  # a transient broker error: ask again
                    done = False
                key = id(c)
                if not done:
                    first_seen.pop(key, None)
                    still.append(c)
                elif key not in first_seen:
                    first_seen[key] = time.monotonic()
                    still.append(c)
                elif time.monotonic() - first_seen[key] < settle:
                    still.append(c)
                else:
                    self.buf.add(
                        "drain", consumer=c.id, group=c.group, topic=c.topic, status="complete", consume_ms=now_ms()
                    )
            pending = still
            if pending:
                await asyncio.sleep(0.25)
        for c in pending:
            self.buf.add("drain", consumer=c.id, group=c.group, topic=c.topic, status="timeout", consume_ms=now_ms())

    async def fault_loop(self) -> None:
        from mqclient import AdminClient, AdminError

        async with AdminClient(self.spec.namesrv, credentials=self.spec.credentials()) as admin:
            brokers = [b.master for b in await admin.brokers() if b.master]
            for fault in sorted(self.scen.faults, key=lambda f: f.at_s):
                await asyncio.sleep(max(0.0, (self.t0 + fault.at_s * 1000 - now_ms()) / 1000))
                for addr in brokers:
                    sent = now_ms()
                    try:
                        resp = await admin.fault_inject(
                            addr,
                            fault.kind,
                            duration_ms=fault.duration_ms,
                            value=fault.value or None,
                            target=fault.target,
                        )
                        status, remark = "OK", resp.remark
                    except AdminError as exc:  # refused (a code) or not delivered (no code)
                        status = f"CODE_{exc.code}" if exc.code is not None else "ERROR"
                        remark = exc.remark if exc.code is not None else repr(exc)
                    except Exception as exc:  # recorded, not fatal: the run goes on without the fault
                        status, remark = "ERROR", repr(exc)
                    self.buf.add(
                        "fault",
                        send_ms=sent,
                        ack_ms=now_ms(),
                        error_kind=fault.kind,
                        status=status,
                        remark=remark,
                        broker=addr,
                    )

    # ---- helpers shared by drivers ----------------------------------------------------------------
    def message_properties(
        self, producer_id: str, seq: int, elapsed_s: float, record: Callable[..., None] | None = None
    ) -> dict[str, str]:
        """The bench properties of one message, plus any message fault due; ``record`` adds the
        fault's outcome row (a thread-safe hand-off for drivers that send from other threads)."""
        props = {PROP_RUN: self.spec.run_id, PROP_PRODUCER: producer_id, PROP_SEQ: str(seq)}
        for i, mf in enumerate(self.scen.message_faults):
            if elapsed_s < mf.from_s or (mf.until_s is not None and elapsed_s >= mf.until_s):
                continue
            if mf.every and seq % mf.every != 0:
                continue
            counts = self.fault_counts.setdefault(producer_id, Counter())
            if mf.max_per_producer is not None and counts[i] >= mf.max_per_producer:
                continue
            counts[i] += 1
            props[mf.property] = str(mf.value)
            # on the plots next to the broker faults: when which message asked for trouble
            add = record or self.buf.add
            add(
                "fault",
                send_ms=now_ms(),
                ack_ms=now_ms(),
                error_kind=mf.property,
                status="MESSAGE",
                remark=f"{producer_id} seq {seq}: {mf.property}={mf.value}",
                producer=producer_id,
                seq=seq,
            )
        return props

    def record_consume(
        self,
        consumer_id: str,
        group: str,
        *,
        topic: str,
        props: dict[str, str],
        queue_id: int,
        queue_offset: int,
        born_ms: int,
        store_ms: int,
        msg_id: str,
        uniq: str | None,
        size: int,
        consume_ms: int | None = None,
    ) -> None:
        if props.get(PROP_RUN) != self.spec.run_id:
            self.stats.errors["FOREIGN_MESSAGE"] += 1
            return
        try:
            seq = int(props.get(PROP_SEQ, ""))
        except ValueError:
            self.stats.errors["FOREIGN_MESSAGE"] += 1
            return
        producer = props.get(PROP_PRODUCER)
        if seq in self.scen.debug.drop_consumed_seqs:
            return  # planted loss: the accounting must report it
        self.stats.consumed += 1
        self.buf.add(
            "consume",
            topic=topic,
            producer=producer,
            seq=seq,
            queue_id=queue_id,
            queue_offset=queue_offset,
            send_ms=born_ms,
            store_ms=store_ms,
            consume_ms=now_ms() if consume_ms is None else consume_ms,
            consumer=consumer_id,
            group=group,
            msg_id=msg_id,
            uniq_key=uniq,
            size=size,
            warmup=born_ms < self.t0 + self.scen.warmup_s * 1000,
        )


def get_driver(name: str) -> Any:
    if name == "asyncio":
        from bench.driver_asyncio import AsyncioDriver

        return AsyncioDriver()
    if name == "cpp":
        from bench.driver_cpp import CppDriver

        return CppDriver()
    if name == "grpc":
        from bench.driver_grpc import GrpcDriver

        return GrpcDriver()
    raise ValueError(f"unknown driver {name!r}; expected asyncio, cpp or grpc")


def run_task(
    spec: TaskSpec,
    barrier: Barrier,
    *,
    driver: str | None = None,
    loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None,
) -> OutcomeBuffer:
    """Run one task's load to completion on a fresh event loop; returns its outcome rows."""
    from remoting.loop import new_event_loop

    scen = spec.load_scenario()
    drv = get_driver(driver or scen.driver)
    loop = (loop_factory or new_event_loop)()
    try:
        return loop.run_until_complete(_Load(spec, barrier, drv).run())
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
