"""Write fuzz frames to a broker and its name server over many raw connections; count what comes back.

Each connection has its own ``FrameMutator`` seeded ``"<seed>/<index>"``, so the frames a run sends are a
function of the seed alone (only their interleaving depends on timing). A connection writes a burst of
frames, then a sentinel request, and waits for the sentinel's answer: that bounds what is in flight and
tells a slow broker from a wedged one. A sentinel unanswered within ``sentinel_timeout_s`` on an open
connection is a hang. Frames the server should refuse at the framing level go on throwaway connections.

A connection that registered a client (a heartbeat among its frames) gets the broker's calls to that client
(GET_CONSUMER_RUNNING_INFO, CONSUME_MESSAGE_DIRECTLY...). It answers them as a real client would, except
every ``UNANSWERED_CALL_EVERY``-th, which it leaves unanswered so that the broker's wait for a silent client
is still fuzzed. Left all unanswered, the calls held every admin worker for their 10 s timeout and the
sentinels behind them waited that long: two thirds of a 16,000-frame campaign was spent waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from bench.fuzz_frames import ILLEGAL_NAMES, FrameMutator, FuzzFrame
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.frame import FrameDecoder

_SENTINEL_OPAQUE_BASE = 1 << 30
#: One broker-to-client call in this many goes unanswered (the broker's timeout path); the others are answered.
UNANSWERED_CALL_EVERY = 4


@dataclass
class FuzzStats:
    frames: int = 0
    bytes: int = 0
    by_family: Counter[str] = field(default_factory=Counter)
    responses: Counter[str] = field(default_factory=Counter)
    system_error_remarks: Counter[str] = field(default_factory=Counter)
    server_closes: int = 0
    throwaways: int = 0
    client_calls_answered: int = 0
    client_calls_unanswered: int = 0
    hangs: list[str] = field(default_factory=list)
    connect_errors: int = 0
    elapsed_s: float = 0.0

    def merge(self, other: FuzzStats) -> None:
        self.frames += other.frames
        self.bytes += other.bytes
        self.by_family.update(other.by_family)
        self.responses.update(other.responses)
        self.system_error_remarks.update(other.system_error_remarks)
        self.server_closes += other.server_closes
        self.throwaways += other.throwaways
        self.client_calls_answered += other.client_calls_answered
        self.client_calls_unanswered += other.client_calls_unanswered
        self.hangs += other.hangs
        self.connect_errors += other.connect_errors
        self.elapsed_s += other.elapsed_s

    def summary(self) -> str:
        rate = self.frames / self.elapsed_s if self.elapsed_s else 0.0
        lines = [
            f"frames sent: {self.frames} ({self.bytes / 1e6:.1f} MB) in {self.elapsed_s:.1f} s = {rate:,.0f}/s",
            f"  by family: {dict(sorted(self.by_family.items()))}",
            f"  responses by code: {dict(self.responses.most_common())}",
            f"  connections the server closed: {self.server_closes}; throwaway connections: {self.throwaways}; "
            f"connect errors: {self.connect_errors}; hangs: {len(self.hangs)}",
            f"  broker calls to a fuzzed client: {self.client_calls_answered} answered, "
            f"{self.client_calls_unanswered} left unanswered",
        ]
        if self.system_error_remarks:
            lines.append("  SYSTEM_ERROR remarks (top 12):")
            lines += [f"    {n:6d}  {remark}" for remark, n in self.system_error_remarks.most_common(12)]
        lines += [f"  HANG: {h}" for h in self.hangs[:10]]
        return "\n".join(lines)


class _Connection:
    """One raw connection: writes bytes, a reader task decodes and counts every answer."""

    def __init__(self, stats: FuzzStats) -> None:
        self.stats = stats
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.task: asyncio.Task[None] | None = None
        self.closed = asyncio.Event()
        self.waiting: dict[int, asyncio.Future[RemotingCommand]] = {}

    async def open(self, host: str, port: int) -> None:
        self.reader, self.writer = await asyncio.open_connection(host, port, limit=1 << 20)
        self.closed = asyncio.Event()
        self.task = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        assert self.reader is not None
        decoder = FrameDecoder()
        try:
            while chunk := await self.reader.read(1 << 16):
                for frame in decoder.feed(chunk):
                    cmd = RemotingCommand.decode(frame)
                    if not cmd.is_response:
                        self._client_call(cmd)
                        continue
                    self._count(cmd)
                    fut = self.waiting.pop(cmd.opaque, None)
                    if fut is not None and not fut.done():
                        fut.set_result(cmd)
        except (ConnectionError, OSError):
            pass
        finally:
            self.closed.set()
            for fut in self.waiting.values():
                if not fut.done():
                    fut.set_exception(ConnectionResetError("closed by the server"))
            self.waiting.clear()

    def _client_call(self, cmd: RemotingCommand) -> None:
        """A request from the broker to the client this connection registered: answered (alternately SUCCESS
        and SYSTEM_ERROR), but every UNANSWERED_CALL_EVERY-th left to the broker's timeout. Oneway ones
        (NOTIFY_CONSUMER_IDS_CHANGED) want no answer."""
        if cmd.is_oneway:
            return
        calls = self.stats.client_calls_answered + self.stats.client_calls_unanswered + 1
        if calls % UNANSWERED_CALL_EVERY == 0:
            self.stats.client_calls_unanswered += 1
            return
        self.stats.client_calls_answered += 1
        if calls % 2:
            self.write(cmd.response(ResponseCode.SUCCESS).to_bytes())
        else:
            self.write(cmd.response(ResponseCode.SYSTEM_ERROR, "the fuzz client declines").to_bytes())

    def _count(self, cmd: RemotingCommand) -> None:
        try:
            name = ResponseCode(cmd.code).name
        except ValueError:
            name = str(cmd.code)
        self.stats.responses[name] += 1
        if cmd.code == ResponseCode.SYSTEM_ERROR:
            self.stats.system_error_remarks[(cmd.remark or "")[:100]] += 1

    def write(self, data: bytes) -> None:
        assert self.writer is not None
        if self.writer.transport.is_closing():
            self.closed.set()  # the reader sees the close a moment later; writing now only makes asyncio warn
            return
        self.writer.write(data)

    async def invoke(self, request: RemotingCommand, timeout_s: float) -> RemotingCommand:
        fut: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
        self.waiting[request.opaque] = fut
        self.write(request.to_bytes())
        return await asyncio.wait_for(fut, timeout_s)

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.writer.wait_closed(), 2)
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(BaseException):
                await self.task


def sentinel(target: str, opaque: int) -> RemotingCommand:
    """A cheap, always-valid request: its answer shows the connection's frames before it were processed."""
    if target == "namesrv":
        return RemotingCommand.request(
            RequestCode.GET_KV_CONFIG, {"namespace": "fuzz", "key": "sentinel"}, opaque=opaque
        )
    return RemotingCommand.request(RequestCode.GET_MAX_OFFSET, {"topic": "FuzzT0", "queueId": "0"}, opaque=opaque)


async def _throwaway(host: str, port: int, frame: FuzzFrame, stats: FuzzStats, gate: asyncio.Semaphore) -> None:
    """A frame the server should refuse at the framing level: its own connection, closed soon after."""
    async with gate:
        stats.throwaways += 1
        try:
            reader, writer = await asyncio.open_connection(host, port)
        except OSError:
            stats.connect_errors += 1
            return
        try:
            writer.write(frame.data)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(reader.read(1 << 16), 0.2)
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), 1)


async def _worker(
    index: int,
    host: str,
    port: int,
    target: str,
    mutator: FrameMutator,
    count: int,
    burst: int,
    sentinel_timeout_s: float,
    stats: FuzzStats,
    gate: asyncio.Semaphore,
    progress: Callable[[int], None] | None,
) -> None:
    conn = _Connection(stats)
    await conn.open(host, port)
    pending: set[asyncio.Task[None]] = set()
    opaque = _SENTINEL_OPAQUE_BASE + index * 10_000_000
    sent = 0
    try:
        while sent < count:
            recent: list[int | None] = []
            for frame in mutator.frames(min(burst, count - sent)):
                sent += 1
                stats.frames += 1
                stats.bytes += len(frame.data)
                stats.by_family[frame.family] += 1
                if frame.closes:
                    task = asyncio.get_running_loop().create_task(_throwaway(host, port, frame, stats, gate))
                    pending.add(task)
                    task.add_done_callback(pending.discard)
                    continue
                if conn.closed.is_set():
                    stats.server_closes += 1
                    await conn.close()
                    await _reopen(conn, host, port, stats)
                recent.append(frame.code)
                conn.write(frame.data)
            if progress is not None:
                progress(len(recent))
            if conn.closed.is_set():
                continue
            opaque += 1
            try:
                await conn.invoke(sentinel(target, opaque), sentinel_timeout_s)
            except ConnectionResetError:
                continue  # a frame of the burst was undecodable: the server closed the connection (counted above)
            except TimeoutError:
                if conn.closed.is_set():
                    continue
                stats.hangs.append(
                    f"{target} connection {index}: no answer to a sentinel within "
                    f"{sentinel_timeout_s:.0f} s after frames with codes {recent}"
                )
                await conn.close()
                await _reopen(conn, host, port, stats)
    finally:
        await conn.close()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)


async def _reopen(conn: _Connection, host: str, port: int, stats: FuzzStats) -> None:
    for attempt in range(50):
        try:
            await conn.open(host, port)
            return
        except OSError:
            stats.connect_errors += 1
            await asyncio.sleep(0.1 * (attempt + 1))
    raise ConnectionError(f"cannot reconnect to {host}:{port}")


async def run_fuzz(
    host: str,
    broker_port: int,
    namesrv_port: int,
    *,
    seed: int | str,
    frames: int,
    connections: int = 8,
    namesrv_connections: int = 2,
    corpus: Mapping[str, Sequence[bytes]] | None = None,
    burst: int = 32,
    sentinel_timeout_s: float = 15.0,
    large_bodies: bool = False,
    illegal_names: Sequence[str] = ILLEGAL_NAMES,
    progress: Callable[[int], None] | None = None,
) -> FuzzStats:
    """Send ``frames`` frames over ``connections`` connections (the first ``namesrv_connections`` of them to
    the name server port) and return what happened. ``corpus`` maps "broker"/"namesrv" to recorded frames."""
    stats = FuzzStats()
    gate = asyncio.Semaphore(32)
    started = time.monotonic()
    workers = []
    for i in range(connections):
        target = "namesrv" if i < namesrv_connections else "broker"
        port = namesrv_port if target == "namesrv" else broker_port
        share = frames // connections + (1 if i < frames % connections else 0)
        mutator = FrameMutator(
            f"{seed}/{i}",
            (corpus or {}).get(target, ()),
            target=target,
            large_bodies=large_bodies,
            illegal_names=illegal_names,
        )
        workers.append(_worker(i, host, port, target, mutator, share, burst, sentinel_timeout_s, stats, gate, progress))
    await asyncio.gather(*workers)
    stats.elapsed_s = time.monotonic() - started
    return stats


async def probe(host: str, port: int, target: str, timeout_s: float = 10.0) -> RemotingCommand:
    """One well-formed request on a fresh connection; raises when there is no answer within ``timeout_s``."""
    conn = _Connection(FuzzStats())
    await asyncio.wait_for(conn.open(host, port), timeout_s)
    try:
        return await conn.invoke(sentinel(target, 7), timeout_s)
    finally:
        await conn.close()
