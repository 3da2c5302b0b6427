"""Typed headers: round trips for every class, J parsing semantics, wire names, clear errors."""

from __future__ import annotations

import dataclasses
import typing

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remoting import headers as h
from remoting.errors import HeaderError
from remoting.headers import (
    ALL_HEADERS,
    decode_header,
    encode_header,
    header_wire_names,
)

_INT = st.integers(-(2**31), 2**31 - 1)
_LONG = st.integers(-(2**63), 2**63 - 1)


def _strategy_for(tp: typing.Any) -> st.SearchStrategy:
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return _LONG
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    if args and len(args) < len(typing.get_args(tp)):
        return st.none() | _strategy_for(args[0])
    return {str: st.text(max_size=30), int: _INT, bool: st.booleans()}[tp]


def instances(cls: type) -> st.SearchStrategy:
    hints = typing.get_type_hints(cls, include_extras=True)
    return st.builds(cls, **{f.name: _strategy_for(hints[f.name]) for f in dataclasses.fields(cls)})


def test_every_protocol_header_is_declared() -> None:
    names = {cls.__name__ for cls in ALL_HEADERS}
    for expected in [
        "GetRouteInfoRequestHeader",
        "RegisterBrokerRequestHeader",
        "SendMessageRequestHeaderV2",
        "PullMessageResponseHeader",
        "FaultInjectRequestHeader",
        "EndTransactionRequestHeader",
        "CheckTransactionStateRequestHeader",
        "ResetOffsetRequestHeader",
        "GetConsumerRunningInfoRequestHeader",
        "QueryMessageRequestHeader",
    ]:
        assert expected in names
    assert len(ALL_HEADERS) >= 45


@pytest.mark.parametrize("cls", ALL_HEADERS, ids=lambda c: c.__name__)
@settings(max_examples=30, deadline=None)  # no per-example deadline: the CI machine is shared and noisy
@given(data=st.data())
def test_round_trip_every_header(cls: type, data: st.DataObject) -> None:
    value = data.draw(instances(cls))
    ext = encode_header(value)
    assert all(type(k) is str and type(v) is str for k, v in ext.items())
    assert decode_header(cls, ext) == value


def test_send_v2_uses_short_names_and_converts() -> None:
    assert header_wire_names(h.SendMessageRequestHeaderV2) == tuple("abcdefghijklmn")
    # What N sends (after RemotingCommand normalised its JSON numbers/booleans).
    v2 = decode_header(
        h.SendMessageRequestHeaderV2,
        {
            "a": "pg",
            "b": "T",
            "c": "TBW102",
            "d": "4",
            "e": "2",
            "f": "0",
            "g": "1700000000123",
            "h": "0",
            "i": "UNIQ_KEY\x01abc\x02",
            "j": "0",
            "k": "false",
        },
    )
    v1 = h.SendMessageRequestHeader.from_v2(v2)
    assert (v1.producer_group, v1.topic, v1.queue_id, v1.born_timestamp, v1.properties) == (
        "pg",
        "T",
        2,
        1_700_000_000_123,
        "UNIQ_KEY\x01abc\x02",
    )
    assert v1.max_reconsume_times is None and v1.batch is False
    assert v1.to_v2() == v2


def test_wire_names_that_are_not_camel_case() -> None:
    assert "clientID" in header_wire_names(h.UnregisterClientRequestHeader)
    assert "bname" in header_wire_names(h.SendMessageRequestHeader)
    resp = h.SendMessageResponseHeader(
        msg_id="ID", queue_id=1, queue_offset=5, msg_region="DefaultRegion", trace_on="true"
    )
    assert encode_header(resp) == {
        "msgId": "ID",
        "queueId": "1",
        "queueOffset": "5",
        "MSG_REGION": "DefaultRegion",
        "TRACE_ON": "true",
    }
    assert "isForce" in header_wire_names(h.ResetOffsetRequestHeader)
    assert header_wire_names(h.FaultInjectRequestHeader) == ("kind", "target", "durationMs", "value")


def test_missing_required_field_names_it() -> None:
    with pytest.raises(HeaderError, match="the header field 'queueId' is missing"):
        decode_header(h.QueryConsumerOffsetRequestHeader, {"consumerGroup": "g", "topic": "t"})


@pytest.mark.parametrize("value", ["x", "", " 1", "1 ", "1_000", "1.0", "0x10", "١٢", "2147483648", "-2147483649"])
def test_integer_fields_parse_like_java_parse_int(value: str) -> None:
    with pytest.raises(HeaderError, match="'queueId' is (not an integer|out of range)"):
        decode_header(h.GetMaxOffsetRequestHeader, {"topic": "t", "queueId": value})


def test_integer_and_long_accepted_forms() -> None:
    assert decode_header(h.GetMaxOffsetRequestHeader, {"topic": "t", "queueId": "+7"}).queue_id == 7
    assert decode_header(h.GetMaxOffsetRequestHeader, {"topic": "t", "queueId": "-1"}).queue_id == -1
    assert decode_header(h.ViewMessageRequestHeader, {"offset": str(2**63 - 1)}).offset == 2**63 - 1
    with pytest.raises(HeaderError, match="'offset' is out of range for a long"):
        decode_header(h.ViewMessageRequestHeader, {"offset": str(2**63)})
    with pytest.raises(HeaderError, match="'offset' is not a long"):
        decode_header(h.ViewMessageRequestHeader, {"offset": "12abc"})
    with pytest.raises(HeaderError, match="'offset' is out of range for a long"):
        decode_header(h.ViewMessageRequestHeader, {"offset": "9" * 5000})
    assert decode_header(h.ViewMessageRequestHeader, {"offset": "0" * 5000 + "42"}).offset == 42
    assert decode_header(h.ViewMessageRequestHeader, {"offset": str(-(2**63))}).offset == -(2**63)
    assert decode_header(h.GetMaxOffsetRequestHeader, {"topic": "t", "queueId": "-0000"}).queue_id == 0


def test_optional_fields_are_still_type_checked() -> None:
    base = {"a": "g", "b": "t", "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": "1", "h": "0"}
    with pytest.raises(HeaderError, match="'j' is not an integer"):
        decode_header(h.SendMessageRequestHeaderV2, {**base, "j": "many"})


@pytest.mark.parametrize(
    "raw, expected",
    [("true", True), ("TRUE", True), ("True", True), ("false", False), ("1", False), ("yes", False), ("", False)],
)
def test_booleans_follow_java_parse_boolean(raw: str, expected: bool) -> None:
    # C sends "1" for booleans; J (and so we) read that as false — see protocol §2.2 batch quirk.
    hdr = decode_header(
        h.EndTransactionRequestHeader,
        {
            "producerGroup": "p",
            "tranStateTableOffset": "1",
            "commitLogOffset": "2",
            "commitOrRollback": "8",
            "msgId": "m",
            "fromTransactionCheck": raw,
        },
    )
    assert hdr.from_transaction_check is expected


def test_unknown_ext_fields_are_ignored() -> None:
    hdr = decode_header(
        h.GetRouteInfoRequestHeader, {"topic": "T", "Signature": "x", "AccessKey": "", "OnsChannel": "ALIYUN"}
    )
    assert hdr == h.GetRouteInfoRequestHeader(topic="T")


def test_none_fields_are_omitted_and_values_are_strings() -> None:
    pull = h.PullMessageResponseHeader(suggest_which_broker_id=0, next_begin_offset=10, min_offset=0, max_offset=10)
    assert encode_header(pull) == {
        "suggestWhichBrokerId": "0",
        "nextBeginOffset": "10",
        "minOffset": "0",
        "maxOffset": "10",
    }
    assert encode_header(h.GetKVConfigResponseHeader()) == {}


def test_plans_are_per_class_and_immutable() -> None:
    plan = h.GetMaxOffsetRequestHeader.__header_plan__  # type: ignore[attr-defined]
    assert isinstance(plan, tuple)
    assert h.GetMinOffsetRequestHeader.__header_plan__ is not plan  # type: ignore[attr-defined]


def test_send_message_v2_decodes_straight_into_the_v1_header_with_v2_rules_and_errors() -> None:
    v1 = h.SendMessageRequestHeader(
        producer_group="PG",
        topic="T",
        default_topic="TBW102",
        default_topic_queue_nums=4,
        queue_id=3,
        sys_flag=0,
        born_timestamp=1_700_000_000_000,
        flag=7,
        properties="TAGS\x01a\x02",
        reconsume_times=2,
        unit_mode=True,
        batch=False,
        max_reconsume_times=16,
        broker_name="broker-a",
    )
    ext = h.encode_header(v1.to_v2())
    assert (
        h.decode_send_message_v2(ext)
        == v1
        == h.SendMessageRequestHeader.from_v2(decode_header(h.SendMessageRequestHeaderV2, ext))
    )
    minimal = {k: ext[k] for k in "abcdefgh"}
    assert h.decode_send_message_v2(minimal).properties is None
    with pytest.raises(HeaderError, match="SendMessageRequestHeaderV2: the header field 'g' is missing"):
        h.decode_send_message_v2({k: v for k, v in minimal.items() if k != "g"})
    with pytest.raises(HeaderError, match="'e' is not an integer"):
        h.decode_send_message_v2({**minimal, "e": "x"})
