"""HeartbeatData from every client family folds into one shape."""

from __future__ import annotations

import pytest

from broker.heartbeat import HeartbeatError, build_subscription, parse_heartbeat
from store.message import tags_hash


def test_java_string_hash_matches_known_values():
    # Values from java.lang.String#hashCode
    assert tags_hash("TagA") == 2598919
    assert tags_hash("") == 0
    assert tags_hash("hello world") == 1794106052
    assert tags_hash("zzzzzzzzzzzzzzzz") < 0  # overflow wraps to a signed int32


def test_cpp_ordinals_and_string_subversion():
    hb = parse_heartbeat(
        {
            "clientID": "127.0.0.1@1",
            "consumerDataSet": [
                {
                    "groupName": "G",
                    "consumeType": 1,
                    "messageModel": 0,
                    "consumeFromWhere": 4,
                    "subscriptionDataSet": [
                        {
                            "topic": "T",
                            "subString": "TagA || TagB",
                            "subVersion": "1700000000000",
                            "codeSet": [0, 0],
                            "tagsSet": ["TagA", "TagB"],
                        }
                    ],
                }
            ],
        }
    )
    c = hb.consumers[0]
    assert (c.consume_type, c.message_model, c.consume_from_where) == (
        "CONSUME_PASSIVELY",
        "BROADCASTING",
        "CONSUME_FROM_FIRST_OFFSET",
    )
    sub = c.subscriptions[0]
    assert sub.tags_set == {"TagA", "TagB"}
    # C++ sends atoi(tag) as its code set; the broker hashes the tags itself.
    assert sub.code_set == {tags_hash("TagA"), tags_hash("TagB")}
    assert sub.sub_version == 1700000000000


def test_go_nanosecond_subversion_and_string_codes():
    hb = parse_heartbeat(
        {
            "clientID": "c",
            "consumerDataSet": [
                {
                    "groupName": "G",
                    "consumeType": "CONSUME_PASSIVELY",
                    "messageModel": "CLUSTERING",
                    "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                    "subscriptionDataSet": [
                        {
                            "topic": "T",
                            "subString": "*",
                            "subVersion": 1700000000000123456,
                            "codeSet": ["1"],
                            "expressionType": "TAG",
                        }
                    ],
                }
            ],
        }
    )
    assert hb.consumers[0].subscriptions[0].sub_version == 1700000000000
    assert hb.consumers[0].subscriptions[0].matches_all


def test_producer_only_heartbeat():
    hb = parse_heartbeat(
        {"clientID": "c", "producerDataSet": [{"groupName": "P"}, {"groupName": "CLIENT_INNER_PRODUCER"}]}
    )
    assert hb.producer_groups == ["P", "CLIENT_INNER_PRODUCER"] and hb.consumers == []


@pytest.mark.parametrize(
    "body",
    [
        [],
        {},
        {"clientID": ""},
        {"clientID": "c", "consumerDataSet": [{"x": 1}]},
        {"clientID": "c", "consumerDataSet": [{"groupName": "G", "consumeType": 9}]},
    ],
)
def test_bad_heartbeats_raise(body):
    with pytest.raises(HeartbeatError):
        parse_heartbeat(body)


def test_sql_subscription_keeps_expression():
    sub = build_subscription("T", "a > 1", "SQL92")
    assert sub.expression_type == "SQL92" and not sub.matches_all and sub.sub_string == "a > 1"
