"""ParkedRecordReader builds from a parked record's bytes what restore(decode_record(...)) builds."""

from __future__ import annotations

import dataclasses

import pytest

from broker.parked_record import ParkedRecordReader, parse_properties
from broker.schedule import ScheduleMessageService
from broker.topic import SCHEDULE_TOPIC
from store.message import (
    POS_MAGIC,
    TRANSACTION_COMMIT_TYPE,
    MessageExtBrokerInner,
    RecordError,
    decode_properties,
    decode_record,
    encode_record,
)

PARKED = {"DELAY": "3", "REAL_TOPIC": "Orders", "REAL_QID": "2"}


def parked_record(properties_string: str, **fields) -> memoryview:
    """A record as the store parks it, with `properties_string` written as it is (junk included)."""
    msg = MessageExtBrokerInner.create(
        SCHEDULE_TOPIC,
        fields.pop("body", b"body \x00\xff"),
        queue_id=2,
        born_timestamp=1_700_000_000_123,
        born_host=("10.1.2.3", 40123),
        store_host=("192.168.0.7", 10911),
        **fields,
    )
    msg.properties_string = properties_string
    msg.store_timestamp = 1_700_000_000_456
    return memoryview(bytes(encode_record(msg)))


def as_fields(msg: MessageExtBrokerInner) -> dict:
    return dataclasses.asdict(msg)


def props_string(props: dict[str, str]) -> str:
    return "\x02".join(f"{k}\x01{v}" for k, v in props.items())


CASES = {
    "plain": props_string({"KEYS": "k1 k2", "TAGS": "TagA", **PARKED, "UNIQ_KEY": "AC1100"}),
    "no tags": props_string({"KEYS": "k", **PARKED}),
    "delay first": props_string({"DELAY": "1", "TAGS": "é中", "REAL_TOPIC": "T", "REAL_QID": "0"}),
    "trailing separator": props_string({"TAGS": "x", **PARKED}) + "\x02",
    "empty value and empty name": props_string(PARKED) + "\x02WAIT\x01\x02\x01v\x02TAGS\x01t",
    "repeated name": props_string({"TAGS": "a", **PARKED, "KEYS": "1"}) + "\x02TAGS\x01b",
    "value with separator": props_string({**PARKED, "X": "a\x01b"}),
    "bad queue id": props_string({"DELAY": "2", "REAL_TOPIC": "T", "REAL_QID": "x"}),
    "no queue id": props_string({"REAL_TOPIC": "T"}),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_delivery_equals_restore_of_the_decoded_record(name):
    view = parked_record(CASES[name], flag=7, sys_flag=TRANSACTION_COMMIT_TYPE, reconsume_times=3)
    expected = ScheduleMessageService.restore(decode_record(view))
    got = ParkedRecordReader().inner(view)
    assert got is not None
    assert as_fields(got) == as_fields(expected)
    assert "DELAY" not in got.properties


def test_an_empty_body_and_no_properties_beyond_the_real_topic():
    view = parked_record(props_string({"REAL_TOPIC": "T"}), body=b"")
    got = ParkedRecordReader().inner(view)
    assert got is not None and got.body == b"" and got.topic == "T" and got.queue_id == 0


def test_a_record_without_real_topic_is_no_delivery():
    assert ParkedRecordReader().inner(parked_record(props_string({"DELAY": "1", "TAGS": "a"}))) is None
    assert ParkedRecordReader().inner(parked_record("")) is None


@pytest.mark.parametrize(
    "damage",
    ["magic", "short", "extra byte", "properties length"],
)
def test_damaged_bytes_raise_record_error(damage):
    raw = bytearray(parked_record(props_string(PARKED)))
    if damage == "magic":
        raw[POS_MAGIC] ^= 0xFF
    elif damage == "short":
        raw = raw[:60]
    elif damage == "extra byte":
        raw += b"\x00"
    else:
        raw[-len(props_string(PARKED)) - 2] = 0x7F  # the properties length's high byte
    with pytest.raises(RecordError):
        ParkedRecordReader().inner(memoryview(bytes(raw)))


@pytest.mark.parametrize("text", [*CASES.values(), "", "\x02", "a", "\x01", "a\x01", "\x01b", "a\x01b\x02\x02c\x01d"])
def test_parse_properties_is_j_string2message_properties(text):
    assert parse_properties(text) == decode_properties(text)
