"""Record layout, properties codec, tags hash and offset message ids (protocol §5)."""

from __future__ import annotations

import struct
import zlib

import pytest

from store.message import (
    BLANK_MAGIC_CODE,
    MESSAGE_MAGIC_CODE,
    MessageExtBrokerInner,
    RecordError,
    create_offset_msg_id,
    decode_offset_msg_id,
    decode_properties,
    decode_record,
    encode_properties,
    encode_record,
    java_string_hash,
    patch_record,
    tags_hash,
)


def _msg(**kw) -> MessageExtBrokerInner:
    base = {
        "topic": "TopicTest",
        "body": b"Hello RocketMQ",
        "queue_id": 3,
        "properties": {"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "AC11000100002A9F0000000000000000"},
        "flag": 7,
        "sys_flag": 0,
        "born_timestamp": 1_700_000_000_123,
        "born_host": ("192.168.1.9", 53211),
        "store_host": ("10.1.2.3", 10911),
        "reconsume_times": 2,
        "prepared_transaction_offset": 99,
    }
    base.update(kw)
    return MessageExtBrokerInner.create(base.pop("topic"), base.pop("body"), **base)


def test_magic_codes_are_upstreams():
    assert MESSAGE_MAGIC_CODE & 0xFFFFFFFF == 0xDAA320A7
    assert BLANK_MAGIC_CODE & 0xFFFFFFFF == 0xCBD43194


def test_record_layout_field_by_field():
    msg = _msg()
    buf = encode_record(msg)
    props = msg.properties_string.encode()
    assert len(buf) == 91 + len(msg.body) + len(b"TopicTest") + len(props)
    patch_record(buf, 0, 41, 123456, 1_700_000_000_999)
    (total, magic, crc, qid, flag, qoff, phy, sysflag, born_ts) = struct.unpack_from(">iiiiiqqiq", buf, 0)
    assert total == len(buf)
    assert magic == MESSAGE_MAGIC_CODE
    assert crc == zlib.crc32(b"Hello RocketMQ") & 0x7FFFFFFF
    assert (qid, flag, qoff, phy, sysflag, born_ts) == (3, 7, 41, 123456, 0, 1_700_000_000_123)
    assert buf[48:52] == bytes([192, 168, 1, 9]) and struct.unpack_from(">i", buf, 52)[0] == 53211
    assert struct.unpack_from(">q", buf, 56)[0] == 1_700_000_000_999
    assert buf[64:68] == bytes([10, 1, 2, 3]) and struct.unpack_from(">i", buf, 68)[0] == 10911
    assert struct.unpack_from(">iqi", buf, 72) == (2, 99, len(b"Hello RocketMQ"))
    pos = 88 + 14
    assert buf[88:pos] == b"Hello RocketMQ"
    assert buf[pos] == len(b"TopicTest")
    assert buf[pos + 1 : pos + 10] == b"TopicTest"
    assert struct.unpack_from(">h", buf, pos + 10)[0] == len(props)
    assert bytes(buf[pos + 12 :]) == props


def test_decode_round_trip_and_crc_check():
    msg = _msg()
    buf = encode_record(msg)
    patch_record(buf, 0, 5, 777, 1234)
    ext = decode_record(bytes(buf), check_crc=True)
    assert ext.topic == "TopicTest" and ext.body == b"Hello RocketMQ"
    assert ext.queue_offset == 5 and ext.commit_log_offset == 777 and ext.store_timestamp == 1234
    assert ext.born_host == ("192.168.1.9", 53211) and ext.store_host == ("10.1.2.3", 10911)
    assert ext.properties == msg.properties
    assert ext.msg_id == create_offset_msg_id("10.1.2.3", 10911, 777)
    corrupt = bytearray(buf)
    corrupt[90] ^= 0xFF
    with pytest.raises(RecordError, match="CRC"):
        decode_record(corrupt, check_crc=True)
    with pytest.raises(RecordError, match="magic"):
        decode_record(bytes(8) + bytes(buf[8:]))
    with pytest.raises(RecordError):
        decode_record(bytes(buf[:50]))


def test_ipv6_born_host_is_stored_as_ipv4():
    buf = encode_record(_msg(born_host=("::ffff:10.9.8.7", 1)))
    assert buf[48:52] == bytes([10, 9, 8, 7])
    buf = encode_record(_msg(born_host=("::1", 1)))
    assert buf[48:52] == bytes([127, 0, 0, 1])
    assert struct.unpack_from(">i", buf, 36)[0] & 0x30 == 0


def test_record_limits():
    with pytest.raises(RecordError, match="MESSAGE_ILLEGAL"):
        encode_record(_msg(topic="t" * 128))
    big = {"P": "v" * 33000}
    with pytest.raises(RecordError, match="PROPERTIES_SIZE_EXCEEDED"):
        encode_record(_msg(properties=big))


def test_properties_j_semantics():
    assert encode_properties({"a": "1", "b": "2"}) == "a\x011\x02b\x012"
    assert encode_properties({"a": None, "b": "2"}) == "b\x012"  # type: ignore[dict-item]
    # trailing separator (C, N, G), empty pieces, pieces without a name or a value, first \x01 splits
    raw = "a\x011\x02\x02\x01x\x02b\x01\x02c\x01v\x01w\x02zz\x02"
    assert decode_properties(raw) == {"a": "1", "c": "v\x01w"}
    assert decode_properties("") == {}
    assert decode_properties(None) == {}


@pytest.mark.parametrize(
    "text,expected",
    [
        ("TagA", 2598919),
        ("TagB", 2598920),
        ("", 0),
        ("中文", 0x4E2D * 31 + 0x6587),
        ("polygenelubricants", -(2**31)),
        ("😀", 0xD83D * 31 + 0xDE00),  # UTF-16 surrogates, as Java
        ("Aa", 2112),
        ("BB", 2112),
    ],
)
def test_java_string_hash(text, expected):
    assert java_string_hash(text) == expected


def test_tags_hash_zero_without_tags():
    assert tags_hash(None) == 0 and tags_hash("") == 0
    assert tags_hash("TagA||TagB") == java_string_hash("TagA||TagB")


def test_offset_msg_id_round_trip():
    mid = create_offset_msg_id("10.1.2.3", 10911, 0x1122334455)
    assert mid == "0A010203" + "00002A9F" + "0000001122334455"
    assert decode_offset_msg_id(mid) == ("10.1.2.3", 10911, 0x1122334455)
    assert decode_offset_msg_id(mid.lower())[2] == 0x1122334455
    for bad in ("", "XYZ", "0A01020300002A9F000000112233445G", None):
        with pytest.raises(ValueError):
            decode_offset_msg_id(bad)  # type: ignore[arg-type]


def test_to_inner_keeps_properties_consistent():
    ext = decode_record(bytes(encode_record(_msg())))
    inner = ext.to_inner()
    assert inner.properties_string == encode_properties(ext.properties)
    assert inner.tags_code == tags_hash("TagA")


def test_joined_offset_msg_ids_match_one_id_per_record():
    from store.message import create_offset_msg_id, join_offset_msg_ids, offset_msg_id_prefix

    prefix = offset_msg_id_prefix("10.1.2.3", 10911)
    phys = [0, 1, 4258, 2**40 + 17, 2**62]
    assert join_offset_msg_ids(prefix, phys) == ",".join(create_offset_msg_id("10.1.2.3", 10911, p) for p in phys)
    assert join_offset_msg_ids(prefix, [77]) == create_offset_msg_id("10.1.2.3", 10911, 77)
