"""``decode_send_message_v2_values`` (SEND_MESSAGE_V2's header from a learned layout's values) returns the header
``decode_send_message_v2`` returns for the same extFields, or None where that one raises or where it does not
apply; thousands of variants from a fixed seed, most of them odd."""

from __future__ import annotations

import random
import struct

from remoting_helpers import JAVA_SEND_V2, fast_decode_agrees

from remoting import command as cmdmod
from remoting.command import RemotingCommand
from remoting.headers import decode_send_message_v2
from remoting.send_header import decode_send_message_v2_values

_JAVA = JAVA_SEND_V2
_NUMBERS = ["0", "7", "", "-1", "+5", "007", "2147483647", "2147483648", "9223372036854775807", "9223372036854775808"]
_NUMBERS += ["1" * 30, "0" * 25 + "1", "12a", " 1", "１"]
_BOOLS = ["true", "TRUE", "True", "false", "1", "", "yes"]


def test_values_give_the_map_decoder_s_header_or_none() -> None:
    rng = random.Random(15)
    fast = 0
    for _ in range(4000):
        ext = dict(_JAVA)
        for key in rng.sample(sorted(ext), rng.randrange(4)):
            roll = rng.random()
            if roll < 0.2:
                del ext[key]
            elif key in "defghjl":
                ext[key] = rng.choice(_NUMBERS)
            elif key in "km":
                ext[key] = rng.choice(_BOOLS)
            elif roll < 0.3:
                ext["zz"] = "x"  # a key no V2 header has
            else:
                ext[key] = rng.choice(["", "x", "Topic", "a\x01b"])
        fast += fast_decode_agrees(ext, rng, decode_send_message_v2_values, decode_send_message_v2)
    assert fast > 1000, fast


def test_a_layout_decoded_send_request_carries_its_values_and_they_decode_to_its_header() -> None:
    """The benchmark Producer's request: from its third one of a length on, the command has the layout's values
    and the send header comes from them, equal to the map's."""
    cmdmod._LAYOUTS.clear()
    cmdmod._LAYOUT_MISSES.clear()
    ext = b"".join(
        struct.pack(">H", len(k)) + k.encode() + struct.pack(">i", len(v)) + v.encode() for k, v in _JAVA.items()
    )
    header = struct.pack(">hbhii", 310, 0, 409, 7, 0) + struct.pack(">i", 0) + struct.pack(">i", len(ext)) + ext
    frame = struct.pack(">I", (1 << 24) | len(header)) + header
    first, _, second = (RemotingCommand.decode(frame) for _ in range(3))  # learned at the second, used from the third
    assert first.ext_layout is None and second.ext_layout is not None
    hdr = decode_send_message_v2_values(second.ext_layout.keys, second.ext_values)
    assert hdr is not None and hdr == decode_send_message_v2(second.ext_fields)
    assert (hdr.topic, hdr.queue_id, hdr.born_timestamp, hdr.max_reconsume_times) == (
        "BenchmarkTest",
        3,
        1764021600123,
        16,
    )
    assert second == first  # the layout's fields take no part in a command's equality


def test_common_texts_and_the_others_decode_alike() -> None:
    """The common values (small ints' canonical texts, "true"/"false") are read by table and any other text of a
    field by the general decoder: each number field and boolean in turn given texts on both sides of that line,
    decoded from the values (not None) where the map decoder takes them."""
    keys = tuple(_JAVA)
    for key in "defhjlkm":
        texts = ["0", "255", "256", "007", "2147483647", "2147483648", "-1", ""] if key not in "km" else _BOOLS
        for text in texts:
            ext = dict(_JAVA, **{key: text})
            try:
                want = decode_send_message_v2(ext)
            except Exception:  # noqa: BLE001 - the map decoder refuses it: the values decoder must not decode it
                want = None
            got = decode_send_message_v2_values(keys, tuple(ext.values()))
            assert got is None or got == want, (key, text)  # (None: the caller decodes the map)
            if text in ("0", "255", "256", "007", "2147483647", "true", "false", "TRUE", "True"):
                assert got is not None and got == want, (key, text)
