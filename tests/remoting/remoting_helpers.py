"""Helpers shared by the remoting tests (imported by name: pytest puts this directory on sys.path)."""

from __future__ import annotations

import asyncio
import random
import struct
from collections.abc import Awaitable, Callable
from typing import Any

from remoting.command import RemotingCommand
from remoting.errors import HeaderError
from remoting.executor import RequestTask
from remoting.offline_channel import OfflineChannel


class FnProcessor:
    """A processor built from a coroutine function, with a switchable reject flag."""

    def __init__(self, fn: Callable[..., Awaitable[RemotingCommand | None]] | None = None) -> None:
        self.fn = fn
        self.reject = False
        self.calls: list[RemotingCommand] = []

    async def process_request(self, channel, request):
        self.calls.append(request)
        if self.fn is None:
            return request.response(0, None, dict(request.ext_fields), request.body)
        return await self.fn(channel, request)

    def reject_request(self) -> bool:
        return self.reject


async def read_frame(reader: asyncio.StreamReader, timeout: float = 5.0) -> RemotingCommand:
    head = await asyncio.wait_for(reader.readexactly(4), timeout)
    (length,) = struct.unpack(">i", head)
    frame = await asyncio.wait_for(reader.readexactly(length), timeout)
    return RemotingCommand.decode(memoryview(frame))


async def expect_silence(reader: asyncio.StreamReader, seconds: float = 0.3) -> None:
    """Assert that nothing arrives for a while (oneway requests are never answered)."""
    try:
        data = await asyncio.wait_for(reader.read(1), seconds)
    except TimeoutError:
        return
    raise AssertionError(f"expected no response, got {data!r}")


class FakeChannel(OfflineChannel):
    """What an executor needs of a connection: it records the answers (and counts the finished requests)."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[RemotingCommand] = []

    def send(self, cmd: RemotingCommand) -> None:
        self.sent.append(cmd)


def task(channel, opaque, processor=None, create_ms=0, oneway=False) -> RequestTask:
    """A request task for code 10, as the server's dispatch builds one."""
    return RequestTask(
        channel,
        RemotingCommand.request(10, opaque=opaque, oneway=oneway),
        create_ms,
        processor=processor or FnProcessor(),
    )


def raw_frame(
    header: bytes, body: bytes = b"", *, stype: int = 0, header_len: int | None = None, length: int | None = None
) -> bytes:
    hlen = len(header) if header_len is None else header_len
    total = 4 + len(header) + len(body) if length is None else length
    return struct.pack(">iI", total, (stype << 24) | hlen) + header + body


def fast_decode_agrees(ext: dict[str, str], rng: random.Random, fast: Any, general: Any) -> bool:
    """One differential case of a layout-values header decoder (``fast(keys, values)``) against the map decoder
    (``general(ext)``: the header, or raises HeaderError): the keys sometimes shuffled; when the fast decoder
    applies (not None) its header must equal the map's, field types included. True when it applied."""
    keys = list(ext)
    if rng.random() < 0.3:
        rng.shuffle(keys)
    ext = {k: ext[k] for k in keys}
    got = fast(tuple(ext), tuple(ext.values()))
    if got is None:
        return False
    try:
        expected = general(ext)
    except HeaderError:
        expected = "error"
    assert got == expected, ext
    assert [type(getattr(got, f)) for f in got.__match_args__] == [
        type(getattr(expected, f)) for f in got.__match_args__
    ]
    return True


#: a SEND_MESSAGE_V2 header's extFields as RocketMQ's benchmark Producer sends them (the one-letter V2 names)
JAVA_SEND_V2 = {
    "a": "benchmark_producer",
    "b": "BenchmarkTest",
    "c": "TBW102",
    "d": "4",
    "e": "3",
    "f": "0",
    "g": "1764021600123",
    "h": "0",
    "i": "UNIQ_KEY\x017F0000014E2A18B4AAC27D2F6B9E0000\x02WAIT\x01true\x02",
    "j": "0",
    "k": "false",
    "l": "16",
    "m": "false",
    "n": "broker-a",
}
