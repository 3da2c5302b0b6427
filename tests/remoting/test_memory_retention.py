"""Issue 13 item 5: what a closed connection leaves behind. With the garbage collector off (the bytes at stake were
freed only by a collection before), the server keeps neither a worker's last request nor a connection's partial
frame nor its last received chunk once the peer has gone."""

from __future__ import annotations

import asyncio
import gc
import struct
import tracemalloc

import pytest

from remoting.client import RemotingClient
from remoting.command import RemotingCommand
from remoting.executor import RequestExecutor

MiB = 1024 * 1024


@pytest.fixture
def no_gc():
    gc.collect()
    gc.disable()
    tracemalloc.start()
    try:
        yield
    finally:
        tracemalloc.stop()
        gc.enable()


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0.02)


async def test_an_idle_worker_keeps_no_request(make_server, no_gc):
    executor = RequestExecutor("t", 2, 100)
    server = await make_server(default=(_Answering(), executor))
    await settle()
    before = tracemalloc.get_traced_memory()[0]
    for _ in range(4):
        client = RemotingClient()
        resp = await client.invoke(
            f"127.0.0.1:{server.port}", RemotingCommand.request(77, {"remark": "r" * MiB}, b"b" * (2 * MiB)), 10
        )
        assert resp.code == 0
        await client.close()
    await settle()
    held = tracemalloc.get_traced_memory()[0] - before
    assert held < 2 * MiB, f"{held / MiB:.1f} MiB still held after the connections closed"


class _Answering:
    """Answers every request with an empty SUCCESS and keeps nothing (FnProcessor records its calls)."""

    async def process_request(self, channel, request):
        return request.response(0, None)

    def reject_request(self) -> bool:
        return False


async def test_a_partial_frame_dies_with_its_connection(make_server, no_gc):
    executor = RequestExecutor("t", 1, 100)
    server = await make_server(default=(_Answering(), executor))
    await settle()
    before = tracemalloc.get_traced_memory()[0]
    for _ in range(4):
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(struct.pack(">i", 15 * MiB) + b"p" * (3 * MiB))  # 3 of the 15 MiB announced
        await writer.drain()
        await settle()
        writer.close()
        await writer.wait_closed()
    await settle()
    held = tracemalloc.get_traced_memory()[0] - before
    assert held < 2 * MiB, f"{held / MiB:.1f} MiB of partial frames still held after the connections closed"
