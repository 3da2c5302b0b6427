"""The properties a sent message is stored with, through a broker: the request's text with CLUSTER set and WAIT
dropped, byte for byte what encoding the decoded dict writes (the send processor edits the sent text instead of
encoding the dict when it can: `store.message.split_properties`; tests/store/test_store_sent_properties.py pins it
function by function, this test through the request path, alone and in a group, in both serializations).
"""

from __future__ import annotations

from broker_helpers import send_request
from test_send_group import exchange

from remoting.codes import ResponseCode
from store.message import decode_properties, decode_records, encode_properties

TEXTS = [
    "UNIQ_KEY\x017F0000014E2A18B4AAC27D2F6B9E0000\x02WAIT\x01true\x02",  # the Java benchmark Producer's
    "WAIT\x01false\x02TAGS\x01TagA\x02KEYS\x01k1 k2\x02UNIQ_KEY\x01AC11",  # no trailing separator (C++, Node)
    "TAGS\x01TagA\x02CLUSTER\x01theirs\x02WAIT\x01true",  # a CLUSTER sent by the client is replaced in its place
    "TAGS\x01A\x02TAGS\x01B\x02KEYS\x01k",  # a name sent twice: the last value, the first place
    "a\x01\x02\x01b\x02junk\x02\x02KEYS\x01x\x01y\x02",  # junk pieces are dropped
    "日本\x01語\x02WAIT\x01true",
    "",
]


def expected(text: str, cluster: str) -> str:
    props = decode_properties(text)
    props["CLUSTER"] = cluster
    props.pop("WAIT", None)
    return encode_properties(props)


async def test_stored_properties_are_the_dict_paths_byte_for_byte(broker) -> None:
    cluster = broker.config.broker_cluster_name
    requests = []
    for serialize in (0, 1):  # JSON, ROCKETMQ
        for text in TEXTS:
            request = send_request("PropsT", text.encode() or b"-", queue_id=0)
            request.ext_fields["i"] = text
            request.serialize_type = serialize
            requests.append(request)
    answers = await exchange(broker, requests)  # one read: a group
    assert {a.code for a in answers.values()} == {ResponseCode.SUCCESS}
    lone = send_request("PropsT", b"lone", queue_id=0)
    lone.ext_fields["i"] = TEXTS[0]
    assert (await exchange(broker, [lone]))[1].code == ResponseCode.SUCCESS
    stored = decode_records(broker.store.get_message("G", "PropsT", 0, 0, 32).body)
    want = [expected(t, cluster) for t in TEXTS] * 2 + [expected(TEXTS[0], cluster)]
    assert [m.properties_string for m in stored] == want
    assert [m.properties for m in stored] == [decode_properties(w) for w in want]
