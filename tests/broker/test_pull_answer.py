"""``PullAnswer`` writes a pull's ROCKETMQ answer from pre-encoded parts: pinned byte for byte against the generic
``RemotingCommand.encode`` (on the answers a pull gives and on arbitrary changes of them), and end to end: a pull
sent ROCKETMQ-serialized (as RocketMQ's benchmark Consumer sends it) through a real broker's port."""

from __future__ import annotations

import dataclasses

import pytest
from broker_helpers import pull_request, send_request
from hypothesis import given
from hypothesis import strategies as st

from broker.processor.pull_answer import KEYS, PullAnswer
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from store.results import GetMessageStatus

ROCKETMQ, JSON = 1, 0
LONG = st.integers(min_value=-(2**63), max_value=2**63 - 1)
INT32 = st.integers(min_value=-(2**31), max_value=2**31 - 1)
CODES = st.sampled_from(
    [
        ResponseCode.SUCCESS,
        ResponseCode.PULL_NOT_FOUND,
        ResponseCode.PULL_RETRY_IMMEDIATELY,
        ResponseCode.PULL_OFFSET_MOVED,
    ]
)
REMARKS = st.sampled_from([s.name for s in GetMessageStatus])
BODIES = st.one_of(st.none(), st.just(b""), st.binary(max_size=64), st.binary(min_size=1, max_size=64).map(memoryview))


def generic(cmd: RemotingCommand) -> bytes:
    """What ``RemotingCommand.encode`` writes for the same fields."""
    plain = RemotingCommand(**{f.name: getattr(cmd, f.name) for f in dataclasses.fields(RemotingCommand)})
    assert type(plain) is RemotingCommand
    return b"".join(bytes(p) for p in plain.encode())


def fast(cmd: PullAnswer) -> bytes:
    return b"".join(bytes(p) for p in cmd.encode())


def request(serialize: int, opaque: int) -> RemotingCommand:
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, {}, opaque=opaque, serialize_type=serialize)


@given(
    serialize=st.sampled_from([ROCKETMQ, JSON]),
    opaque=INT32,
    code=CODES,
    remark=REMARKS,
    offsets=st.tuples(LONG, LONG, LONG),
    body=BODIES,
    flag=st.sampled_from([1, 3]),
)
def test_a_pull_answer_is_the_generic_encode_byte_for_byte(serialize, opaque, code, remark, offsets, body, flag):
    answer = PullAnswer(request(serialize, opaque), code, remark, *offsets, body)
    answer.flag = flag  # (the executor sets the response bit again before writing)
    written = fast(answer)  # from the three ints: nobody read the map yet
    assert generic(answer) == written
    assert fast(answer) == written  # and from the map, once it was read
    decoded = RemotingCommand.decode(fast(answer)[4:])
    assert (decoded.code, decoded.opaque, decoded.remark, decoded.serialize_type) == (code, opaque, remark, serialize)
    assert decoded.ext_fields == dict(zip(KEYS, ("0", *map(str, offsets))))
    assert (decoded.body or b"") == bytes(body or b"")


@given(
    digits=st.sampled_from([150, 177, 178, 179, 200, 300]),
    which=st.integers(min_value=0, max_value=2),
    body=BODIES,
)
def test_offsets_of_hundreds_of_digits_are_the_generic_encode(digits, which, body):
    """Offsets whose digits make the extFields 256 bytes or longer (no int64 has them; Python ints may) are not
    one length char: they are written by the generic encode, byte for byte."""
    offsets = [33, 0, 64]
    offsets[which] = 10 ** (digits - 1)
    answer = PullAnswer(request(ROCKETMQ, 9), ResponseCode.SUCCESS, "FOUND", *offsets, body)
    written = fast(answer)
    assert written == generic(answer)


EXT_CHANGES = st.one_of(
    st.dictionaries(st.text(max_size=8), st.text(max_size=24), max_size=5),  # anything
    st.tuples(st.sampled_from(KEYS), st.one_of(st.text(max_size=24), st.integers(), st.none())).map(
        lambda kv: {kv[0]: kv[1]}  # one key changed to any value (non-ASCII, too long, not a str)
    ),
    st.just({"extra": "1"}),
    st.sampled_from(KEYS[1:]).map(lambda key: {key: "9" * 1100}),  # extFields past the template's length table
    st.sampled_from(KEYS[1:]).map(lambda key: {key: "7" * 300}),
)


@given(
    offsets=st.tuples(LONG, LONG, LONG),
    change=EXT_CHANGES,
    remark=st.one_of(st.none(), REMARKS, st.text(max_size=12)),
    language=st.sampled_from(["JAVA", "CPP"]),
    version=st.sampled_from([409, 317]),
    reorder=st.booleans(),
)
def test_any_other_answer_falls_back_to_the_generic_encode(offsets, change, remark, language, version, reorder):
    answer = PullAnswer(request(ROCKETMQ, 7), ResponseCode.SUCCESS, "FOUND", *offsets, b"x")
    answer.ext_fields.update(change)
    if reorder:
        answer.ext_fields = dict(reversed(list(answer.ext_fields.items())))
    answer.remark, answer.language, answer.version = remark, language, version
    try:
        expected = generic(answer)
    except Exception as exc:  # noqa: BLE001 - then the fast encode must fail the same way
        with pytest.raises(type(exc)):
            fast(answer)
        return
    assert fast(answer) == expected


def test_the_template_path_does_not_use_the_generic_encode(monkeypatch):
    """The fast path is taken for a pull's answer (without it, this answer would go through the generic encode),
    without building the extFields map, and from the map once it was read."""
    answer = PullAnswer(request(ROCKETMQ, 5), ResponseCode.SUCCESS, "FOUND", 33, 0, 64, b"records")
    expected = generic(PullAnswer(request(ROCKETMQ, 5), ResponseCode.SUCCESS, "FOUND", 33, 0, 64, b"records"))
    encode = RemotingCommand.encode

    def refuse(self):  # noqa: ANN001, ANN202
        raise AssertionError("generic encode used")

    monkeypatch.setattr(RemotingCommand, "encode", refuse)
    assert fast(answer) == expected
    assert answer._ext is None  # the map was never built
    assert answer.ext_fields == {
        "suggestWhichBrokerId": "0",
        "nextBeginOffset": "33",
        "minOffset": "0",
        "maxOffset": "64",
    }
    assert fast(answer) == expected
    answer.ext_fields["maxOffset"] = "65"  # a changed map is written as changed
    monkeypatch.setattr(RemotingCommand, "encode", encode)
    assert fast(answer) == generic(answer) != expected


async def test_rocketmq_serialized_pulls_through_the_broker(broker, client):
    """Found, not found (no suspend) and offset moved, each sent ROCKETMQ-serialized over the broker's port: the
    answers decode to the same fields a JSON pull gets."""
    addr = broker.config.broker_addr
    for _ in range(3):
        assert (await client.invoke(addr, send_request("TPA"), 5)).code == ResponseCode.SUCCESS
    for offset, code in (
        (0, ResponseCode.SUCCESS),
        (3, ResponseCode.PULL_NOT_FOUND),
        (9, ResponseCode.PULL_OFFSET_MOVED),
    ):
        answers = []
        for serialize in (JSON, ROCKETMQ):
            req = pull_request("GPA", "TPA", 0, offset, sys_flag=0x4)
            req.serialize_type = serialize
            answers.append(await client.invoke(addr, req, 5))
        as_json, as_rocketmq = answers
        assert as_rocketmq.serialize_type == ROCKETMQ and as_json.serialize_type == JSON
        assert as_rocketmq.code == as_json.code == code
        assert as_rocketmq.remark == as_json.remark
        assert as_rocketmq.ext_fields == as_json.ext_fields
        assert list(as_rocketmq.ext_fields) == list(KEYS)
        assert bytes(as_rocketmq.body or b"") == bytes(as_json.body or b"")
