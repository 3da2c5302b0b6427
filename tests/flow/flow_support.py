"""Plumbing for the flow-control tests: a broker subprocess with extra `--set`s and our own client's sends.

Every test here talks to the broker through its process boundary: the remoting port (our
`remoting.client.RemotingClient` or the C++ wheel) and its log. Sends are built by hand as
SEND_MESSAGE_V2 requests so a test controls exactly when each request reaches the broker's queue.
"""

from __future__ import annotations

import asyncio
import os
import struct
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "compat"))

from compat_support import BrokerProcess, stop_brokers  # noqa: F401 - re-exported for conftest

from broker.testing.process import set_args
from mqclient.fault import fault_inject_request
from remoting.client import RemotingClient
from remoting.codes import RequestCode
from remoting.command import RemotingCommand
from remoting.headers import (
    EndTransactionRequestHeader,
    PullMessageRequestHeader,
    QueryMessageRequestHeader,
    SendMessageRequestHeaderV2,
    encode_header,
)
from store.message import encode_properties
from tests.starvation import Starvation

#: The line the broker logs when its fast-failure sweeper makes its first sweep (1 s after boot, as upstream).
SWEEPER_STARTED = "fast failure sweeper started"
#: How long a booted broker may take to log it on a loaded machine.
SWEEPER_START_TIMEOUT_S = 20.0

OVERLOAD = "[OVERLOAD]system busy, start flow control for a while"
REJECTREQUEST = "[REJECTREQUEST]system busy, start flow control for a while"
PC_SYNCHRONIZED = "[PC_SYNCHRONIZED]broker busy, start flow control for a while"
PCBUSY_RE = (
    r"\[PCBUSY_CLEAN_QUEUE\]broker busy, start flow control for a while, "
    r"period in queue: (\d+)ms, size of queue: (\d+)"
)
TIMEOUT_RE = (
    r"\[TIMEOUT_CLEAN_QUEUE\]broker busy, start flow control for a while, "
    r"period in queue: (\d+)ms, size of queue: (\d+)"
)


def broker_starvation(broker: BrokerProcess, *, with_self: bool = False) -> Starvation:
    """``tests.starvation.Starvation`` of the broker subprocess (and, with ``with_self``, of this test process,
    whose loop times the client side)."""
    assert broker.pid is not None, "broker not running"
    return Starvation(broker.pid, *([os.getpid()] if with_self else []))


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


def start_broker(root: Path, name: str, *settings: str) -> BrokerProcess:
    """Boot `python -m broker.main` on free loopback ports with `--set` for each "key=value"."""
    broker = BrokerProcess(root / name / "store", log_path=root / f"{name}.log", extra_args=set_args(*settings))
    broker.log_at_start = broker.log_size()  # type: ignore[attr-defined] # this process's lines begin here
    broker.start()
    return broker


def wait_sweeper_started(broker: BrokerProcess) -> None:
    """Block until the broker's fast-failure sweeper has made its first sweep (it starts 1 s after boot and
    logs ``SWEEPER_STARTED`` then): polls the log, no fixed sleep. Remembered per broker process."""
    if getattr(broker, "sweeper_started_pid", None) == broker.pid:
        return
    deadline = time.monotonic() + SWEEPER_START_TIMEOUT_S
    while SWEEPER_STARTED not in broker.log_text(getattr(broker, "log_at_start", 0)):
        assert broker.running, f"broker exited before its sweeper started\n{broker.tail()}"
        assert time.monotonic() < deadline, f"no {SWEEPER_STARTED!r} in the broker log\n{broker.tail()}"
        time.sleep(0.02)
    broker.sweeper_started_pid = broker.pid  # type: ignore[attr-defined]


def send_request(
    topic: str, body: bytes = b"x", props: dict[str, str] | None = None, *, queue_id: int = 0, oneway: bool = False
) -> RemotingCommand:
    """A SEND_MESSAGE_V2 (310) for `topic` (auto-created from TBW102) with user properties `props`."""
    hdr = SendMessageRequestHeaderV2(
        a="PG_flow",
        b=topic,
        c="TBW102",
        d=4,
        e=queue_id,
        f=0,
        g=time.time_ns() // 1_000_000,
        h=0,
        i=encode_properties({"UNIQ_KEY": uuid.uuid4().hex.upper(), **(props or {})}),
    )
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, encode_header(hdr), body, oneway=oneway)


@dataclass
class Answer:
    """One request's outcome as the client saw it: response code/remark and loopback latency."""

    code: int | None
    remark: str | None
    sent_at: float
    latency_ms: float
    error: str | None = None  # transport failure (timeout), if any

    @property
    def text(self) -> str:
        return f"{self.code}:{self.remark}" if self.error is None else f"error:{self.error}"


async def timed_invoke(client: RemotingClient, addr: str, request: RemotingCommand, timeout_s: float = 10.0) -> Answer:
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    try:
        resp = await client.invoke(addr, request, timeout_s)
    except Exception as exc:  # noqa: BLE001 - a transport failure is an outcome the test asserts on
        return Answer(None, None, t0, (loop.time() - t0) * 1000, error=f"{type(exc).__name__}: {exc}")
    return Answer(resp.code, resp.remark, t0, (loop.time() - t0) * 1000)


async def runtime_info(client: RemotingClient, addr: str) -> dict[str, str]:
    resp = await client.invoke(addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO), 5.0)
    assert resp.code == 0, resp.remark
    return {str(k): str(v) for k, v in orjson.loads(bytes(resp.body))["table"].items()}


async def update_config(client: RemotingClient, addr: str, **items: str) -> None:
    body = "\n".join(f"{k}={v}" for k, v in items.items()).encode()
    resp = await client.invoke(addr, RemotingCommand.request(RequestCode.UPDATE_BROKER_CONFIG, {}, body), 5.0)
    assert resp.code == 0, resp.remark


async def warm_topic(client: RemotingClient, addr: str, topic: str) -> None:
    """One plain send, so the topic exists and the commit log file is mapped before timing anything."""
    a = await timed_invoke(client, addr, send_request(topic))
    assert a.code == 0, a.text


def pull_request(topic: str, *, oneway: bool = False) -> RemotingCommand:
    hdr = PullMessageRequestHeader(
        consumer_group="CG_flow",
        topic=topic,
        queue_id=0,
        queue_offset=0,
        max_msg_nums=32,
        sys_flag=0,
        commit_offset=0,
        suspend_timeout_millis=0,
        sub_version=0,
        subscription="*",
        expression_type="TAG",
    )
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, encode_header(hdr), oneway=oneway)


def heartbeat_request(client_id: str = "flow@test") -> RemotingCommand:
    body = orjson.dumps({"clientID": client_id, "producerDataSet": [{"groupName": "PG_flow"}], "consumerDataSet": []})
    return RemotingCommand.request(RequestCode.HEART_BEAT, {}, body)


def end_transaction_request() -> RemotingCommand:
    hdr = EndTransactionRequestHeader(
        producer_group="PG_flow",
        tran_state_table_offset=0,
        commit_log_offset=0,
        commit_or_rollback=12,
        msg_id="00" * 16,
    )
    return RemotingCommand.request(RequestCode.END_TRANSACTION, encode_header(hdr))


def query_request(topic: str) -> RemotingCommand:
    now = time.time_ns() // 1_000_000
    hdr = QueryMessageRequestHeader(topic=topic, key="k", max_num=1, begin_timestamp=0, end_timestamp=now)
    return RemotingCommand.request(RequestCode.QUERY_MESSAGE, encode_header(hdr))


class RawConnection:
    """A bare TCP connection speaking frames: shows every frame the broker writes back, answers to oneway
    requests included (``RemotingClient`` would drop those as unknown opaques)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.next_opaque = 1_000
        self.received: list[RemotingCommand] = []

    @classmethod
    async def open(cls, addr: str) -> RawConnection:
        host, _, port = addr.rpartition(":")
        return cls(*await asyncio.open_connection(host, int(port)))

    def send(self, request: RemotingCommand) -> int:
        self.next_opaque += 1
        request.opaque = self.next_opaque
        self.writer.writelines(request.encode())
        return request.opaque

    async def read_until(self, opaque: int, timeout_s: float = 10.0) -> RemotingCommand:
        """Read frames (keeping all of them) until the response to ``opaque`` arrives."""
        async with asyncio.timeout(timeout_s):
            while True:
                (length,) = struct.unpack(">i", await self.reader.readexactly(4))
                cmd = RemotingCommand.decode(memoryview(await self.reader.readexactly(length)))
                self.received.append(cmd)
                if cmd.is_response and cmd.opaque == opaque:
                    return cmd

    async def close(self) -> None:
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except OSError:
            pass


async def wait_append_locked(client: RemotingClient, addr: str, timeout_s: float = 5.0) -> None:
    """Wait until the broker reports its CommitLog append lock held (a send stalling in the append)."""
    async with asyncio.timeout(timeout_s):
        while (await runtime_info(client, addr))["pageCacheLockTimeMills"] == "0":
            await asyncio.sleep(0.002)


async def wait_queue_size(client: RemotingClient, addr: str, queue: str, size: int, timeout_s: float = 10.0) -> None:
    """Wait until the broker's `queue` request queue holds `size` requests (oneway sends give no answer to wait on)."""
    key = f"{queue}ThreadPoolQueueSize"
    async with asyncio.timeout(timeout_s):
        while (await runtime_info(client, addr))[key] != str(size):
            await asyncio.sleep(0.01)


async def settle(client: RemotingClient, addr: str) -> None:
    """End every fault and wait until no send is queued or running, so the next test starts clean."""
    assert (await fault(client, addr, "clear")).code == 0
    for _ in range(100):
        info = await runtime_info(client, addr)
        if info["sendThreadPoolQueueSize"] == "0" and info["pageCacheLockTimeMills"] == "0":
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"broker {addr} did not settle: {info}")


def blocking(helper, addr: str, *args, **kwargs):
    """Run one of the async helpers here (``helper(client, addr, ...)``) from a synchronous test (the real
    clients' tests), on a client of its own."""

    async def run():
        client = RemotingClient()
        try:
            return await helper(client, addr, *args, **kwargs)
        finally:
            await client.close()

    return asyncio.run(run())


async def fault(
    client: RemotingClient,
    addr: str,
    kind: str,
    duration_ms: int = 0,
    *,
    target: str | None = None,
    value: str | None = None,
) -> RemotingCommand:
    """Send FAULT_INJECT and return the raw answer."""
    return await client.invoke(
        addr, fault_inject_request(kind, target=target, duration_ms=duration_ms, value=value), 5.0
    )


def spawn(coro) -> asyncio.Task:
    return asyncio.get_running_loop().create_task(coro)
