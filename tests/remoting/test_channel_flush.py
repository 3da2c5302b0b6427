"""When a channel's answers reach the socket: small ones at the loop turn's end in one write, a large one at once.

A drain's pull answers (~38 KB each) must leave as each is made, so the consumer works on one while the loop answers
the read's next pull (see ``remoting.channel.FLUSH_EARLY_BYTES``); a run of small answers must still share one write.
"""

from __future__ import annotations

import asyncio

import pytest

from bench.null_transport import NullTransport
from remoting.channel import FLUSH_EARLY_BYTES, Channel
from remoting.command import RemotingCommand


class _Protocol:
    """What a ``Channel`` binds of its protocol."""

    def request_started(self) -> None: ...

    def request_finished(self) -> None: ...

    def requests_started(self, n: int) -> None: ...

    def requests_finished(self, n: int) -> None: ...


def _answer(opaque: int, body_size: int) -> RemotingCommand:
    return RemotingCommand(0, opaque, 1, None, {}, bytes(body_size))  # flag 1: a response


def _opaques(chunk: bytes) -> list[int]:
    out = []
    pos = 0
    while pos < len(chunk):
        end = pos + 4 + int.from_bytes(chunk[pos : pos + 4], "big")
        out.append(RemotingCommand.decode_at(chunk, pos + 4, end).opaque)
        pos = end
    return out


def _channel() -> tuple[Channel, NullTransport]:
    transport = NullTransport(keep=True)
    return Channel(transport, _Protocol(), 1), transport  # type: ignore[arg-type]


@pytest.mark.asyncio
async def test_small_answers_share_one_write_at_the_turns_end() -> None:
    channel, transport = _channel()
    for opaque in range(3):
        channel.send(_answer(opaque, 100))
    assert transport.chunks == []  # nothing written on the reader's stack
    await asyncio.sleep(0)
    assert [_opaques(c) for c in transport.chunks] == [[0, 1, 2]]


@pytest.mark.asyncio
async def test_a_drain_size_answer_leaves_at_once_with_what_was_queued_before_it() -> None:
    assert FLUSH_EARLY_BYTES <= 32 * 1024  # a pull of 32 x 1 KiB messages
    channel, transport = _channel()
    channel.send(_answer(1, 100))
    channel.send(_answer(2, 32 * 1024))
    assert [_opaques(c) for c in transport.chunks] == [[1, 2]]  # written before the loop turns
    channel.send(_answer(3, 32 * 1024))
    assert [_opaques(c) for c in transport.chunks] == [[1, 2], [3]]
    channel.send(_answer(4, 100))
    await asyncio.sleep(0)
    assert [_opaques(c) for c in transport.chunks] == [[1, 2], [3], [4]]
