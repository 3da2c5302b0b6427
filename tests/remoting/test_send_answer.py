"""``SendResultAnswer`` writes, from its template, the bytes the generic encode writes for the same answer, in both
serializations; its extFields map is there for whoever reads it, and once read (or anything the template does not
cover is set) the generic encode writes it."""

from __future__ import annotations

import string
import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from remoting.command import DEFAULT_VERSION, FLAG_ONEWAY, FLAG_RESPONSE, RemotingCommand
from remoting.errors import RemotingCommandError
from remoting.send_answer import SendResultAnswer, SendResultTemplate, SentAnswers, encode_answers

_INT32 = st.integers(-(2**31), 2**31 - 1)
# the store's msgId is 32 hex digits; anything else must give the generic bytes too (quotes, non-ASCII, long)
_MSG_IDS = st.one_of(
    st.text(alphabet="0123456789ABCDEF", min_size=32, max_size=32),
    st.text(alphabet=string.ascii_letters + string.digits, max_size=300),
    st.text(max_size=40),
)


def _generic(request: RemotingCommand, answer: SendResultAnswer) -> RemotingCommand:
    """The same answer as any processor makes it: a map and the generic encode."""
    return RemotingCommand(
        answer.code,
        answer.opaque,
        answer.flag,
        None,
        {
            "msgId": answer.msg_id,
            "queueId": str(answer.queue_id),
            "queueOffset": str(answer.queue_offset),
            "MSG_REGION": answer.template.region,
            "TRACE_ON": answer.template.trace_on,
        },
        None,
        "JAVA",
        DEFAULT_VERSION,
        request.serialize_type,
    )


def _request(serialize_type: int, opaque: int) -> RemotingCommand:
    return RemotingCommand.request(310, {"a": "g"}, b"body", opaque=opaque, serialize_type=serialize_type)


@settings(max_examples=300, deadline=None)
@given(
    serialize_type=st.sampled_from([0, 1]),
    opaque=_INT32,
    flag=st.sampled_from([FLAG_RESPONSE, FLAG_RESPONSE | FLAG_ONEWAY, 0, 7]),
    code=st.sampled_from([0, 10, 11, 12, 1, 2**15 - 1, 999]),  # (2**15 - 1, 999: not response codes, not in the table)
    msg_id=_MSG_IDS,
    queue_id=st.one_of(st.integers(0, 300), st.integers(-(2**31), 2**31 - 1)),  # (the queueId table: below 256)
    queue_offset=st.integers(-(2**63), 2**63 - 1),
    region=st.one_of(st.just("DefaultRegion"), st.text(max_size=20)),
    trace_on=st.sampled_from(["true", "false"]),
)
def test_the_template_writes_the_generic_bytes(
    serialize_type, opaque, flag, code, msg_id, queue_id, queue_offset, region, trace_on
) -> None:
    request = _request(serialize_type, 0)
    answer = SendResultAnswer(SendResultTemplate(region, trace_on), request, code, msg_id, queue_id, queue_offset)
    answer.opaque = opaque  # (as RequestGroup sets them after the processor made the answer)
    answer.flag = flag
    expected = _generic(request, answer).encode()
    assert answer.encode() == expected
    # and it reads back as that answer
    back = RemotingCommand.decode(b"".join(answer.encode())[4:])
    assert (back.code, back.opaque, back.flag, back.serialize_type) == (code, opaque, flag, serialize_type)
    assert back.ext_fields == _generic(request, answer).ext_fields


def test_a_java_answer_is_written_from_the_template_not_the_generic_encode(monkeypatch) -> None:
    """The common answer (hex msgId, no remark) never reaches ``RemotingCommand.encode``."""
    template = SendResultTemplate("DefaultRegion", "true")
    for serialize_type in (0, 1):
        request = _request(serialize_type, 42)
        answer = SendResultAnswer(template, request, 0, "7F00000100002A9F0000000000001234", 3, 99)
        expected = _generic(request, answer).encode()
        monkeypatch.setattr(RemotingCommand, "encode", lambda self: (_ for _ in ()).throw(AssertionError("generic")))
        got = answer.encode()
        monkeypatch.undo()
        assert got == expected


def test_the_map_is_built_when_read_and_then_written_as_changed() -> None:
    template = SendResultTemplate("DefaultRegion", "false")
    for serialize_type in (0, 1):
        request = _request(serialize_type, 5)
        answer = SendResultAnswer(template, request, 0, "AB", 1, 2)
        assert answer.ext_fields == {
            "msgId": "AB",
            "queueId": "1",
            "queueOffset": "2",
            "MSG_REGION": "DefaultRegion",
            "TRACE_ON": "false",
        }
        answer.ext_fields["extra"] = "x"
        back = RemotingCommand.decode(b"".join(answer.encode())[4:])
        assert back.ext_fields["extra"] == "x" and back.ext_fields["msgId"] == "AB"
        answer.ext_fields = {"only": "this"}
        assert RemotingCommand.decode(b"".join(answer.encode())[4:]).ext_fields == {"only": "this"}


def test_a_remark_a_body_or_another_version_go_through_the_generic_encode() -> None:
    template = SendResultTemplate("DefaultRegion", "true")
    for serialize_type in (0, 1):
        request = _request(serialize_type, 5)
        for change in ({"remark": "note"}, {"body": b"payload"}, {"version": 317}, {"language": "CPP"}):
            answer = SendResultAnswer(template, request, 0, "AB", 1, 2)
            for name, value in change.items():
                setattr(answer, name, value)
            generic = _generic(request, answer)
            for name, value in change.items():
                setattr(generic, name, value)
            assert answer.encode() == generic.encode(), change


def test_an_opaque_out_of_range_fails_as_the_generic_encode_fails() -> None:
    from remoting.errors import RemotingCommandError

    answer = SendResultAnswer(SendResultTemplate("r", "true"), _request(1, 0), 0, "AB", 1, 2)
    answer.opaque = 2**40
    try:
        answer.encode()
    except RemotingCommandError as exc:
        assert "cannot encode ROCKETMQ header" in str(exc)
    else:
        raise AssertionError("no error")


def test_the_answer_has_the_request_s_opaque_and_serialization() -> None:
    request = _request(1, 77)
    answer = SendResultAnswer(SendResultTemplate("r", "true"), request, 0, "AB", 1, 2)
    assert (answer.opaque, answer.flag, answer.serialize_type, answer.code, answer.remark) == (77, 1, 1, 0, None)
    assert answer.is_response


def test_the_fields_the_template_fixes_read_as_a_generic_answer_s_until_changed() -> None:
    """remark, body, language and version are properties over one map of changes: unchanged they read as the
    generic answer's fields do, and each change is read back as set."""
    template = SendResultTemplate("DefaultRegion", "true")
    request = _request(1, 9)
    answer = SendResultAnswer(template, request, 0, "AB", 1, 2)
    generic = _generic(request, answer)
    assert (answer.remark, answer.body, answer.language, answer.version) == (None, None, "JAVA", generic.version)
    assert (generic.remark, generic.body, generic.language) == (None, None, "JAVA")
    fields = ("code", "opaque", "flag", "remark", "body", "language", "version", "serialize_type", "ext_fields")
    assert [getattr(answer, f) for f in fields] == [getattr(generic, f) for f in fields]
    changed = {"remark": "r", "body": b"b", "language": "CPP", "version": 317}
    for name, value in changed.items():
        setattr(answer, name, value)
    assert {name: getattr(answer, name) for name in changed} == changed
    assert answer.ext_fields["queueOffset"] == "2"


def test_msg_ids_of_any_length_give_the_generic_bytes() -> None:
    """A msgId's length takes one byte of the template's ROCKETMQ text: 255 is the most it may take."""
    template = SendResultTemplate("DefaultRegion", "true")
    for serialize_type in (0, 1):
        request = _request(serialize_type, 5)
        for length in (0, 1, 127, 128, 255, 256, 1000, 70000):
            answer = SendResultAnswer(template, request, 0, "A" * length, 1, 2)
            assert answer.encode() == _generic(request, answer).encode(), length


def _written_one_by_one(requests: list[RemotingCommand], answers: list[SendResultAnswer]) -> bytes:
    """What RequestGroup's general loop writes for a group's answers: each given its request's opaque and the
    response bit, then encoded."""
    out = []
    for request, answer in zip(requests, answers):
        answer.opaque = request.opaque
        answer.flag |= FLAG_RESPONSE
        out += answer.encode()
    return b"".join(out)


_ANSWER = st.fixed_dictionaries(
    {
        "serialize_type": st.sampled_from([1, 1, 1, 0]),
        "opaque": st.one_of(_INT32, st.integers(2**31, 2**40)),
        "flag": st.sampled_from([FLAG_RESPONSE, 0, 7]),
        "code": st.sampled_from([0, 10, 2**15 - 1, 2**15]),
        "msg_id": st.one_of(st.text(alphabet="0123456789ABCDEF", min_size=32, max_size=32), _MSG_IDS),
        "queue_id": st.one_of(st.integers(0, 300), st.integers(-(2**31), 2**31 - 1)),
        "queue_offset": st.integers(-(2**63), 2**63 - 1),
        "template": st.sampled_from([("DefaultRegion", "true"), ("DefaultRegion", "false"), ("é", "true")]),
        "changed": st.sampled_from([None, None, None, None, "remark", "read"]),
    }
)


@settings(max_examples=400, deadline=None)
@given(st.lists(_ANSWER, min_size=1, max_size=20), st.booleans())
def test_a_group_s_answers_in_one_buffer_are_the_bytes_written_one_by_one(specs, common) -> None:
    """``encode_answers`` (RequestGroup's write of a group of stored sends): the bytes of the general loop, or None
    (then that loop writes them) or an error (the loop then says which answer), never other bytes. ``common``: the
    benchmark Producer's group (ROCKETMQ, hex ids, small queue ids, one template), which it must not decline."""
    templates = {key: SendResultTemplate(*key) for key in {spec["template"] for spec in specs}}
    requests, answers = [], []
    for spec in specs:
        if common:
            spec = {**spec, "serialize_type": 1, "template": specs[0]["template"], "changed": None}
            spec["msg_id"] = (spec["msg_id"] * 32 + "0" * 32)[:32].encode().hex()[:32].upper()
            spec["queue_id"] %= 256
            spec["opaque"] %= 2**31
            spec["code"] = 0
            spec["flag"] = FLAG_RESPONSE
        request = _request(spec["serialize_type"], spec["opaque"])
        answer = SendResultAnswer(
            templates[spec["template"]], request, spec["code"], spec["msg_id"], spec["queue_id"], spec["queue_offset"]
        )
        answer.flag = spec["flag"]
        if spec["changed"] == "remark":
            answer.remark = "note"
        elif spec["changed"] == "read":
            _ = answer.ext_fields
        requests.append(request)
        answers.append(answer)
    try:
        got = encode_answers(requests, answers)
    except struct.error:
        got = "error"
    try:
        expected = _written_one_by_one(requests, answers)
    except RemotingCommandError:
        expected = "error"
    if common:
        assert got == expected and got is not None
    else:
        assert got is None or got == expected


_SENT = st.fixed_dictionaries(
    {
        "serialize_type": st.sampled_from([1, 1, 1, 1, 0]),
        "opaque": st.one_of(_INT32, st.integers(2**31, 2**40)),
        "msg_id": st.one_of(st.text(alphabet="0123456789ABCDEF", min_size=32, max_size=32), _MSG_IDS),
        "queue_id": st.one_of(st.integers(0, 300), st.integers(-(2**31), 2**31 - 1)),
        "queue_offset": st.one_of(st.integers(0, 2**40), st.integers(-(2**63), 2**63 - 1)),
    }
)
_TEMPLATES = st.sampled_from(
    [("DefaultRegion", "true"), ("DefaultRegion", "false"), ("é", "true"), ("{r}", "{0}"), ("}{", "{}")]
)


@settings(max_examples=500, deadline=None)
@given(st.lists(_SENT, min_size=1, max_size=20), _TEMPLATES, st.booleans(), st.sampled_from([None, "read", "remark"]))
def test_a_stored_group_s_answers_from_the_results_are_the_bytes_of_its_answers(specs, key, common, changed) -> None:
    """``SentAnswers`` (a group of stored sends answered as the store's results): its ``encode`` gives what
    ``encode_answers`` gives for the same ``SendResultAnswer``s (the bytes the general loop writes, or, as it does,
    None or an error: the general way), its answers read one by one are those answers, and once read (and perhaps changed) it writes them.
    ``common``: the benchmark Producer's group (ROCKETMQ, hex ids, queue ids of the table), which it must write."""
    template = SendResultTemplate(*key)
    requests, results, queue_ids = [], [], []
    for spec in specs:
        if common:
            spec = {**spec, "serialize_type": 1, "queue_id": spec["queue_id"] % 256, "opaque": spec["opaque"] % 2**31}
            spec["msg_id"] = (spec["msg_id"] * 32 + "0" * 32)[:32].encode().hex()[:32].upper()
            spec["queue_offset"] %= 2**63
        requests.append(_request(spec["serialize_type"], spec["opaque"]))
        results.append((spec["msg_id"], spec["queue_offset"], 100))
        queue_ids.append(spec["queue_id"])
    expected_answers = [
        SendResultAnswer(template, request, 0, msg_id, queue_id, offset)
        for request, (msg_id, offset, _), queue_id in zip(requests, results, queue_ids)
    ]
    sent = SentAnswers(template, requests, results, queue_ids)
    if changed is not None:  # an answer read (the metrics' per-request path, a log) and perhaps changed
        answers = sent.answers()
        if changed == "remark":
            answers[-1].remark = "note"
            expected_answers[-1].remark = "note"
    try:
        got = sent.encode()
    except struct.error:
        got = "error"
    try:
        expected = encode_answers(requests, expected_answers)
    except struct.error:
        expected = "error"
    # (None and the error both send the group the general way, which writes or refuses each answer itself)
    if got is None or got == "error":
        assert expected is None or expected == "error"
    else:
        assert got == expected
    if common and changed != "remark":
        assert got is not None and got == _written_one_by_one(requests, expected_answers)
    assert len(sent) == len(requests)
    for answer, other in zip(sent, expected_answers):
        assert (answer.code, answer.opaque, answer.flag, answer.serialize_type, answer.remark) == (
            other.code,
            other.opaque,
            other.flag,
            other.serialize_type,
            other.remark,
        )
        assert (answer.msg_id, answer.queue_id, answer.queue_offset, answer.template) == (
            other.msg_id,
            other.queue_id,
            other.queue_offset,
            other.template,
        )
    assert sent[0] is sent.answers()[0]
