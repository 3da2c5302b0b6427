"""The compiled header decoders' fast path (one itemgetter for the required fields, one digit check and one range
check for all the numbers) returns exactly what the field-by-field decoder returns, and raises its errors: it
only ever answers requests that one would decode the same way, and hands everything else over to it."""

from __future__ import annotations

import random

import pytest
from remoting_helpers import JAVA_SEND_V2

from remoting import headers as hdrs
from remoting.header_codec import _PLAN_ATTR, _compile_decoder, _compile_fast_decoder, header
from remoting.headers import HeaderError, Long, SendMessageRequestHeader, decode_send_message_v2

_V2 = JAVA_SEND_V2

# values that parse one way or another, or not at all, under Java's rules
_ODD = [
    "",
    "0",
    "-1",
    "+5",
    "007",
    " 1",
    "1 ",
    "1_0",
    "١٢",
    "2147483647",
    "2147483648",
    "-2147483648",
    "9223372036854775807",
    "9223372036854775808",
    "0" * 30 + "12",
    "9" * 5000,
    "TRUE",
    "True",
    "1",
    "x\u00e9",
    12,
    True,
    None,
    # not str: each must take the checked decoder, whose _as_str text they get (the fast path checks the type
    # of each field it reads, and a number's through the digits' concatenation)
    0,
    0.0,
    False,
    b"1",
    "7".join(["", ""]) + "7",  # a str made at run time (not interned)
]


@header
class _Probe:
    count: int
    total: Long
    name: str
    on: bool
    maybe: int | None = None
    limit: int = 7
    big: Long | None = None
    flag: bool = False
    note: str | None = None


def _outcome(decode, ext):
    try:
        return "ok", decode(ext)
    except HeaderError as exc:
        return "error", str(exc)


def _both(cls, wire_names=None):
    plan = getattr(cls, _PLAN_ATTR)
    if wire_names:
        plan = tuple(fp.__class__(fp.attr, wire_names.get(fp.attr, fp.wire), fp.kind, fp.required) for fp in plan)
    return _compile_fast_decoder(cls, plan), _compile_decoder(cls, plan)


def _mutations(base, rng):
    keys = list(base)
    yield dict(base)
    for key in keys:
        without = dict(base)
        del without[key]
        yield without
        for odd in _ODD:
            yield {**base, key: odd}
    for _ in range(300):
        ext = dict(base)
        for key in rng.sample(keys, rng.randint(1, 3)):
            ext[key] = rng.choice(_ODD)
        yield ext


def test_the_fast_path_decodes_and_refuses_exactly_as_the_field_by_field_decoder():
    rng = random.Random(15)
    names = "producer_group topic default_topic default_topic_queue_nums queue_id sys_flag born_timestamp flag"
    names += " properties reconsume_times unit_mode max_reconsume_times batch broker_name"
    v2_wire = dict(zip(names.split(), "abcdefghijklmn"))  # (remoting.headers.decode_send_message_v2's names)
    assert _outcome(_both(SendMessageRequestHeader, v2_wire)[0], _V2) == _outcome(decode_send_message_v2, _V2)
    probe = {"count": "3", "total": "99", "name": "n", "on": "true", "maybe": "1", "big": "5", "flag": "TRUE"}
    for cls, base, wire_names in ((SendMessageRequestHeader, _V2, v2_wire), (_Probe, probe, None)):
        fast, slow = _both(cls, wire_names)
        for ext in _mutations(base, rng):
            assert _outcome(fast, ext) == _outcome(slow, ext), ext


@pytest.mark.parametrize("cls_name", [n for n in dir(hdrs) if n.endswith("Header")])
def test_every_declared_header_decodes_its_own_encoding_the_same_both_ways(cls_name):
    cls = getattr(hdrs, cls_name)
    plan = getattr(cls, _PLAN_ATTR)
    sample = {fp.wire: {0: "s", 1: "42", 2: "1764021600123", 3: "true"}[fp.kind] for fp in plan}
    fast, slow = _both(cls)
    assert _outcome(fast, sample) == _outcome(slow, sample)
    required_only = {fp.wire: sample[fp.wire] for fp in plan if fp.required}
    assert _outcome(fast, required_only) == _outcome(slow, required_only)


def test_a_plain_send_header_takes_the_fast_path():
    decode_send_message_v2(_V2)  # compiled on first use
    cells = dict(zip(decode_send_message_v2.__code__.co_freevars, decode_send_message_v2.__closure__))
    compiled = cells["compiled"].cell_contents
    real_slow = compiled.__globals__["_slow"]
    compiled.__globals__["_slow"] = lambda ext: pytest.fail("a plain V2 header went field by field")
    try:
        got = decode_send_message_v2(_V2)
    finally:
        compiled.__globals__["_slow"] = real_slow
    assert (got.queue_id, got.born_timestamp, got.unit_mode, got.max_reconsume_times) == (3, 1764021600123, False, 16)
    with pytest.raises(HeaderError, match="'e' is not an integer"):
        decode_send_message_v2({**_V2, "e": "3x"})
