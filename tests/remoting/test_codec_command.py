"""RemotingCommand codec: round trips in both serializations, client quirks, bad input."""

from __future__ import annotations

import struct

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from remoting_helpers import raw_frame

from remoting.codes import LanguageCode, SerializeType
from remoting.command import FLAG_ONEWAY, FLAG_RESPONSE, RemotingCommand
from remoting.errors import RemotingCommandError

text = st.text(max_size=40)
ext_fields = st.dictionaries(st.text(min_size=1, max_size=20), text, max_size=8)
commands = st.builds(
    RemotingCommand,
    code=st.integers(-(2**15), 2**15 - 1),
    opaque=st.integers(-(2**31), 2**31 - 1),
    flag=st.integers(0, 3),
    remark=st.none() | text,
    ext_fields=ext_fields,
    body=st.none() | st.binary(min_size=1, max_size=300),
    language=st.sampled_from([lc.name for lc in LanguageCode]),
    version=st.integers(0, 2**15 - 1),
    serialize_type=st.sampled_from([SerializeType.JSON, SerializeType.ROCKETMQ]),
)


def frame_of(cmd: RemotingCommand) -> memoryview:
    data = cmd.to_bytes()
    (length,) = struct.unpack_from(">i", data)
    assert length == len(data) - 4
    return memoryview(data)[4:]


def decode_json(header: dict, body: bytes = b"") -> RemotingCommand:
    return RemotingCommand.decode(memoryview(raw_frame(orjson.dumps(header), body))[4:])


@settings(deadline=None)  # no per-example deadline: the CI machine is shared and noisy
@given(commands)
def test_round_trip_both_serializations(cmd: RemotingCommand) -> None:
    back = RemotingCommand.decode(frame_of(cmd))
    if cmd.serialize_type == SerializeType.ROCKETMQ and cmd.remark == "":
        cmd.remark = None  # J's binary format writes null and "" alike (length 0)
    assert back == cmd


@settings(deadline=None)  # no per-example deadline: the CI machine is shared and noisy
@given(commands)
def test_header_word_carries_type_in_high_byte(cmd: RemotingCommand) -> None:
    data = cmd.to_bytes()
    (word,) = struct.unpack_from(">I", data, 4)
    assert word >> 24 == cmd.serialize_type
    body_len = len(cmd.body) if cmd.body else 0
    assert (word & 0xFFFFFF) == len(data) - 8 - body_len


def test_json_header_fields_as_j_emits_them() -> None:
    cmd = RemotingCommand(code=10, opaque=7, flag=1, ext_fields={"queueId": "3"})
    header = bytes(cmd.encode()[0][8:])
    assert list(orjson.loads(header)) == [
        "code",
        "extFields",
        "flag",
        "language",
        "opaque",
        "serializeTypeCurrentRPC",
        "version",
    ]  # remark None → omitted
    assert orjson.loads(header)["serializeTypeCurrentRPC"] == "JSON"
    with_remark = RemotingCommand(code=1, remark="boom")
    assert orjson.loads(bytes(with_remark.encode()[0][8:]))["remark"] == "boom"


def test_encode_does_not_copy_the_body() -> None:
    body = memoryview(bytearray(b"x" * 100_000))
    parts = RemotingCommand(code=0, body=body).encode()
    assert len(parts) == 2 and parts[1] is body
    assert RemotingCommand(code=0).encode().__len__() == 1


def test_response_keeps_opaque_and_serialize_type() -> None:
    request = RemotingCommand.request(310, {"a": "g"}, opaque=42, serialize_type=SerializeType.ROCKETMQ)
    response = request.response(0, "ok", {"msgId": "X"})
    assert response.opaque == 42 and response.is_response and not response.is_oneway
    assert response.serialize_type == SerializeType.ROCKETMQ
    back = RemotingCommand.decode(frame_of(response))
    assert back.serialize_type == SerializeType.ROCKETMQ and back.ext_fields == {"msgId": "X"}
    assert RemotingCommand.request(15, oneway=True).flag == FLAG_ONEWAY


# ---- client quirks (protocol §1) --------------------------------------------------------------


def test_c_and_node_untyped_ext_fields_are_normalised_to_strings() -> None:
    # C sends numbers for queueId/sysFlag/...; N sends JS numbers and booleans; J would coerce.
    cmd = decode_json(
        {
            "code": 10,
            "opaque": 0,
            "flag": 0,
            "language": "CPP",
            "version": 63,
            "remark": "",
            "extFields": {
                "queueId": 3,
                "sysFlag": 0,
                "bornTimestamp": 1700000000123,
                "k": True,
                "unitMode": False,
                "batch": "1",
                "missing": None,
                "nested": {"a": [1, 2]},
                "ratio": 1.5,
                "topic": "T",
            },
        }
    )
    assert cmd.ext_fields == {
        "queueId": "3",
        "sysFlag": "0",
        "bornTimestamp": "1700000000123",
        "k": "true",
        "unitMode": "false",
        "batch": "1",
        "nested": '{"a":[1,2]}',
        "ratio": "1.5",
        "topic": "T",
    }
    assert all(type(v) is str for v in cmd.ext_fields.values())
    assert cmd.language == "CPP" and cmd.version == 63 and cmd.remark == ""


def test_outbound_ext_fields_are_always_strings() -> None:
    # A processor that forgot to stringify must not produce a frame G cannot decode.
    cmd = RemotingCommand(code=0, flag=FLAG_RESPONSE, ext_fields={"queueId": 3, "ok": True, "gone": None})  # type: ignore[dict-item]
    ext = orjson.loads(bytes(cmd.encode()[0][8:]))["extFields"]
    assert ext == {"queueId": "3", "ok": "true"}
    binary = RemotingCommand(code=0, ext_fields={"queueId": 3}, serialize_type=1)  # type: ignore[dict-item]
    assert RemotingCommand.decode(frame_of(binary)).ext_fields == {"queueId": "3"}


def test_header_length_is_masked_on_input() -> None:
    # C and N read the word unmasked; they only ever send type 0, so masking must not change it.
    header = orjson.dumps({"code": 34, "opaque": 1, "flag": 0})
    cmd = RemotingCommand.decode(memoryview(raw_frame(header, b"body"))[4:])
    assert cmd.code == 34 and cmd.body == b"body" and cmd.serialize_type == SerializeType.JSON
    binary = RemotingCommand(code=34, opaque=5, serialize_type=1).to_bytes()
    assert binary[8] == 0 and binary[4] == 1  # type in the high byte, length in the low 24 bits
    assert RemotingCommand.decode(memoryview(binary)[4:]).opaque == 5


def test_missing_optional_json_fields_take_j_defaults() -> None:
    cmd = decode_json({"code": 105})
    assert (cmd.opaque, cmd.flag, cmd.ext_fields, cmd.remark, cmd.body) == (0, 0, {}, None, None)
    assert decode_json({"code": 105, "extFields": None}).ext_fields == {}


def test_body_is_copied_out_of_the_frame() -> None:
    buf = bytearray(raw_frame(orjson.dumps({"code": 10}), b"payload"))
    cmd = RemotingCommand.decode(memoryview(buf)[4:])
    buf[-7:] = b"XXXXXXX"
    assert cmd.body == b"payload"


# ---- bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "frame, message",
    [
        (b"\x00\x00", "too short"),
        (struct.pack(">I", 100) + b"{}", "exceeds the frame"),
        (struct.pack(">I", (5 << 24) | 2) + b"{}", "unknown serialization type 5"),
        (struct.pack(">I", 5) + b"{code", "invalid JSON header"),
        (struct.pack(">I", 2) + b"[]", "not an object"),
        (struct.pack(">I", 3) + b"\xff\xfe\x00", "invalid JSON header"),
        (struct.pack(">I", (1 << 24) | 4) + b"\x00\x0a\x00\x00", "ROCKETMQ header truncated"),
    ],
)
def test_garbage_raises_clear_errors(frame: bytes, message: str) -> None:
    with pytest.raises(RemotingCommandError, match=message):
        RemotingCommand.decode(memoryview(frame))


@pytest.mark.parametrize(
    "header, message",
    [
        ({"code": 10, "opaque": 9, "extFields": ["a"]}, "'extFields' must be an object"),
        ({"code": 10, "opaque": 9, "extFields": "x"}, "'extFields' must be an object"),
        ({"code": "10", "opaque": 9}, "'code' must be an integer"),
        ({"code": 10, "opaque": 9, "remark": 5}, "'remark' must be a string"),
        ({"code": 10, "opaque": 9, "language": 1}, "'language' must be a string"),
        ({"code": 10, "opaque": 9, "version": "x"}, "'version' must be an integer"),
    ],
)
def test_ill_typed_fields_keep_the_opaque_so_the_request_can_be_answered(header: dict, message: str) -> None:
    with pytest.raises(RemotingCommandError, match=message) as info:
        decode_json(header)
    assert info.value.opaque == 9


def test_ill_typed_opaque_cannot_be_answered() -> None:
    with pytest.raises(RemotingCommandError) as info:
        decode_json({"code": 10, "opaque": "x"})
    assert info.value.opaque is None


@settings(deadline=None)  # no per-example deadline: the CI machine is shared and noisy
@given(st.binary(max_size=200))
def test_random_bytes_never_crash_the_decoder(data: bytes) -> None:
    try:
        cmd = RemotingCommand.decode(memoryview(data))
    except RemotingCommandError:
        return
    assert isinstance(cmd, RemotingCommand)


def test_binary_header_lengths_are_bounds_checked() -> None:
    good = RemotingCommand(code=10, opaque=3, remark="r", ext_fields={"k": "v"}, serialize_type=1).to_bytes()
    frame = bytearray(good[4:])
    # corrupt the extFields key length to point past the end
    hlen = struct.unpack_from(">I", frame)[0] & 0xFFFFFF
    ext_start = 4 + 13 + 4 + 1 + 4
    struct.pack_into(">h", frame, ext_start, 999)
    with pytest.raises(RemotingCommandError, match="key length 999 out of bounds") as info:
        RemotingCommand.decode(memoryview(frame))
    assert info.value.opaque == 3 and info.value.serialize_type == 1
    assert hlen == len(frame) - 4


def test_binary_header_utf8_keys_and_values_round_trip_and_bad_utf8_is_refused() -> None:
    ext = {"TAGS": "标签", "键": "value", "a": "é\x01ü", "plain": "ascii"}
    cmd = RemotingCommand(code=310, opaque=9, ext_fields=ext, serialize_type=1)
    assert RemotingCommand.decode(frame_of(cmd)).ext_fields == ext
    frame = bytearray(frame_of(RemotingCommand(code=310, opaque=9, ext_fields={"k": "vv"}, serialize_type=1)))
    frame[-2:] = b"\xff\xfe"  # the value's bytes, no longer UTF-8
    with pytest.raises(RemotingCommandError, match="invalid UTF-8") as info:
        RemotingCommand.decode(memoryview(frame))
    assert info.value.opaque == 9
