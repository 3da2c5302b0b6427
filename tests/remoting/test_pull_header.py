"""``decode_pull_message_values`` (PULL_MESSAGE's header from a learned layout's values) returns the header
``decode_header(PullMessageRequestHeader, ...)`` returns for the same extFields, or None where that one raises or
where the fast decode does not apply; thousands of variants from a fixed seed, most of them odd."""

from __future__ import annotations

import random
import struct

from remoting_helpers import fast_decode_agrees

from remoting import command as cmdmod
from remoting.command import RemotingCommand
from remoting.headers import PullMessageRequestHeader, decode_header
from remoting.pull_header import decode_pull_message_values

# A Java push consumer's pull (no subscription: it comes from the heartbeat), in a HashMap's order
_JAVA = {
    "queueOffset": "1048576",
    "subVersion": "1764021600123",
    "maxMsgNums": "32",
    "sysFlag": "3",
    "queueId": "3",
    "suspendTimeoutMillis": "15000",
    "commitOffset": "1048570",
    "topic": "BenchmarkTest",
    "expressionType": "TAG",
    "consumerGroup": "benchmark_consumer_42",
}
_NUMBER_KEYS = {"queueOffset", "subVersion", "maxMsgNums", "sysFlag", "queueId", "suspendTimeoutMillis", "commitOffset"}
_NUMBERS = ["0", "7", "", "-1", "+5", "007", "2147483647", "2147483648", "9223372036854775807", "9223372036854775808"]
_NUMBERS += ["1" * 30, "0" * 25 + "1", "12a", " 1", "１", "-0"]


def test_values_give_the_map_decoder_s_header_or_none() -> None:
    rng = random.Random(15)
    fast = 0
    for _ in range(4000):
        ext = dict(_JAVA)
        if rng.random() < 0.3:
            ext["subscription"] = rng.choice(["*", "TagA || TagB", "", "a > 5"])
        for key in rng.sample(sorted(ext), rng.randrange(4)):
            roll = rng.random()
            if roll < 0.2:
                del ext[key]
            elif key in _NUMBER_KEYS:
                ext[key] = rng.choice(_NUMBERS)
            elif roll < 0.4:
                ext[rng.choice(["AccessKey", "Signature", "zz"])] = "x"  # keys the header does not read
            else:
                ext[key] = rng.choice(["", "x", "Topic", "a\x01b"])
        fast += fast_decode_agrees(
            ext, rng, decode_pull_message_values, lambda ext: decode_header(PullMessageRequestHeader, ext)
        )
    assert fast > 1000, fast


def test_the_java_consumer_s_pull_decodes_fast() -> None:
    hdr = decode_pull_message_values(tuple(_JAVA), tuple(_JAVA.values()))
    assert hdr == decode_header(PullMessageRequestHeader, _JAVA)
    assert (hdr.queue_id, hdr.queue_offset, hdr.sub_version, hdr.subscription) == (3, 1048576, 1764021600123, None)


def _frame(ext: dict[str, str]) -> bytes:
    body = b"".join(
        struct.pack(">H", len(k)) + k.encode() + struct.pack(">i", len(v)) + v.encode() for k, v in ext.items()
    )
    header = struct.pack(">hbhii", 11, 0, 409, 7, 0) + struct.pack(">i", 0) + struct.pack(">i", len(body)) + body
    return struct.pack(">I", (1 << 24) | len(header)) + header


def test_a_caught_up_consumer_s_pulls_are_read_by_a_layout_while_their_offsets_keep_their_length() -> None:
    """Pull after pull of one queue, the offsets growing: from the third pull of a length on, the command has the
    layout's values (a new layout is learned when an offset gains a digit) and the header from them equals the
    map's."""
    cmdmod._LAYOUTS.clear()
    cmdmod._LAYOUT_MISSES.clear()
    hits = 0
    offsets = range(9_990, 10_100)
    for offset in offsets:
        ext = dict(_JAVA, queueOffset=str(offset), commitOffset=str(offset))
        request = RemotingCommand.decode(_frame(ext))
        if request.ext_layout is not None:
            hits += 1
            hdr = decode_pull_message_values(request.ext_layout.keys, request.ext_values)
            assert hdr is not None and hdr == decode_header(PullMessageRequestHeader, request.ext_fields)
            assert hdr.queue_offset == offset
    assert hits == len(offsets) - 4  # two misses to learn the 4-digit layout, two for the 5-digit one
