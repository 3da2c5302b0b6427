"""The pull-trace proxy's pieces: frames are cut whole, a route answer points the consumer at the proxy (its
length fixed), and a pull body's messages are counted by their size fields."""

from __future__ import annotations

import struct

from bench.pull_trace import count_messages, frames, rewrite_route
from remoting.codes import ResponseCode
from remoting.command import RemotingCommand


def test_frames_cuts_complete_frames_and_keeps_the_rest() -> None:
    one = RemotingCommand.request(11, {"queueId": "1"}).to_bytes()
    two = RemotingCommand.request(34, {}, b"body").to_bytes()
    buf = bytearray(one + two + two[:5])
    assert frames(buf) == [one, two]
    assert bytes(buf) == two[:5]


def test_route_answer_is_rewritten_to_the_proxy_address() -> None:
    body = b'{"brokerDatas":[{"brokerAddrs":{"0":"127.0.0.1:10911"}}]}'
    frame = RemotingCommand.request(105, {}).response(ResponseCode.SUCCESS, body=body).to_bytes()
    out = rewrite_route(frame, b'"127.0.0.1:10911"', b'"127.0.0.1:4567"')
    decoded = RemotingCommand.decode(memoryview(out)[4:])
    assert bytes(decoded.body) == body.replace(b"10911", b"4567")
    assert struct.unpack_from(">i", out)[0] == len(out) - 4
    # the proxy quotes the address: another broker whose port is a prefix of this one's is untouched
    assert rewrite_route(frame, b'"127.0.0.1:1091"', b'"127.0.0.1:2"') == frame


def test_count_messages_walks_the_size_fields() -> None:
    records = b"".join(struct.pack(">i", n) + b"x" * (n - 4) for n in (40, 100, 8))
    assert count_messages(records) == 3
    assert count_messages(b"") == 0 and count_messages(None) == 0
