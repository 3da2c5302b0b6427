"""Properties, stored-record decoding, batch bodies, UNIQ_KEY and route parsing."""

from __future__ import annotations

import socket
import struct
import zlib

import pytest

from mqclient.errors import NameServerUnreachableError, TopicRouteError
from mqclient.message import (
    MAGIC_MESSAGE,
    Message,
    MessageDecodeError,
    UniqKeyGenerator,
    decode_messages,
    decode_properties,
    encode_batch,
    encode_properties,
)
from mqclient.route import parse_route, split_namesrv


def record(
    body: bytes,
    *,
    topic: str = "T",
    props: str = "UNIQ_KEY\x01ABC\x02KEYS\x01k1",
    queue_id: int = 3,
    queue_offset: int = 9,
    phy: int = 1234,
    sys_flag: int = 0,
) -> bytes:
    t = topic.encode()
    p = props.encode()
    total = 91 + len(body) + len(t) + len(p)
    out = struct.pack(
        ">iiiiiqqiq",
        total,
        MAGIC_MESSAGE,
        zlib.crc32(body) & 0x7FFFFFFF,
        queue_id,
        0,
        queue_offset,
        phy,
        sys_flag,
        1_700_000_000_000,
    )
    out += socket.inet_aton("10.0.0.9") + struct.pack(">i", 5555)
    out += struct.pack(">q", 1_700_000_000_123)
    out += socket.inet_aton("127.0.0.1") + struct.pack(">i", 10911)
    out += struct.pack(">iqi", 2, 0, len(body)) + body + bytes([len(t)]) + t + struct.pack(">h", len(p)) + p
    assert len(out) == total
    return out


def test_properties_roundtrip_and_j_parsing_rules():
    assert encode_properties({"a": "1", "b": "2"}) == "a\x011\x02b\x012"
    # C/N/G leave a trailing separator; J ignores pieces without a name
    assert decode_properties("a\x011\x02b\x012\x02") == {"a": "1", "b": "2"}
    assert decode_properties("\x01x\x02c\x01\x01d") == {"c": "\x01d"}


def test_decode_two_records_and_compressed_body():
    raw = b"payload" * 100
    body = record(b"hello") + record(zlib.compress(raw), sys_flag=1, queue_offset=10, phy=2000)
    a, b = decode_messages(body)
    assert (a.topic, a.queue_id, a.queue_offset, a.commit_log_offset) == ("T", 3, 9, 1234)
    assert a.body == b"hello" and a.msg_id == "ABC" and a.properties["KEYS"] == "k1"
    assert a.born_host == "10.0.0.9:5555" and a.store_host == "127.0.0.1:10911" and a.reconsume_times == 2
    assert a.store_timestamp == 1_700_000_000_123
    assert b.body == raw and b.queue_offset == 10
    assert a.offset_msg_id == (socket.inet_aton("127.0.0.1") + struct.pack(">iq", 10911, 1234)).hex().upper()


@pytest.mark.parametrize(
    "mutate, match",
    [
        (lambda b: b[:50], "truncated|does not fit"),
        (lambda b: b[:4] + b"\x00\x00\x00\x00" + b[8:], "bad magic"),
        (lambda b: struct.pack(">i", 9999) + b[4:], "does not fit"),
    ],
)
def test_bad_bodies_raise_clear_errors(mutate, match):
    with pytest.raises(MessageDecodeError, match=match):
        decode_messages(mutate(record(b"hello")))


def test_batch_body_layout():
    body = encode_batch([Message("T", b"ab", properties={"x": "1"}), Message("T", b"c", flag=3)], ["K1", "K2"])
    total, magic, crc, flag, blen = struct.unpack_from(">iiiii", body, 0)
    assert (magic, crc, flag, blen) == (0, 0, 0, 2)
    props_len = struct.unpack_from(">h", body, 20 + 2)[0]
    props = decode_properties(body[24 : 24 + props_len].decode())
    assert props == {"x": "1", "UNIQ_KEY": "K1"} and total == 20 + 2 + 2 + props_len
    second = body[total:]
    assert struct.unpack_from(">iiiii", second, 0)[3:] == (3, 1)


def test_uniq_keys_are_32_hex_and_unique():
    now = [1_700_000_000_000]
    gen = UniqKeyGenerator(now_ms=lambda: now[0], pid=1234, ip=socket.inet_aton("10.1.2.3"))
    keys = {gen.next() for _ in range(5000)}
    assert len(keys) == 5000
    k = next(iter(keys))
    assert len(k) == 32 and k == k.upper() and k.startswith("0A010203" + "04D2")
    now[0] += 40 * 24 * 3600 * 1000  # a new month resets the time part without breaking the format
    assert len(gen.next()) == 32


def test_route_parsing_standard_and_fastjson():
    std = (
        b'{"brokerDatas":[{"brokerAddrs":{"0":"1.2.3.4:10911","1":"1.2.3.5:10911"},"brokerName":"a",'
        b'"cluster":"C"}],"queueDatas":[{"brokerName":"a","perm":6,"readQueueNums":4,"writeQueueNums":2}]}'
    )
    fast = std.replace(b'"0":', b"0:").replace(b'"1":', b"1:")
    for body in (std, fast):
        r = parse_route("T", body)
        assert r.master_addr("a") == "1.2.3.4:10911"
        assert [q.queue_id for q in r.write_queues()] == [0, 1]
        assert [q.queue_id for q in r.read_queues()] == [0, 1, 2, 3]
    readonly = std.replace(b'"perm":6', b'"perm":4')
    assert parse_route("T", readonly).write_queues() == []
    with pytest.raises(TopicRouteError, match="not JSON"):
        parse_route("T", b"{nope")
    with pytest.raises(TopicRouteError, match="malformed"):
        parse_route("T", b'{"queueDatas":[{"perm":6}]}')


def test_name_server_addresses_checked():
    assert split_namesrv("a:1; b:2") == ["a:1", "b:2"]
    for bad in ("", "nohost", "h:port"):
        with pytest.raises(NameServerUnreachableError):
            split_namesrv(bad)
