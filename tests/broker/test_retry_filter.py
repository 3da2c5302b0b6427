"""filterSupportRetry: pulls from a group's retry topic filtered by the group's SQL92 subscription to the
topic each message was first sent to (upstream's ExpressionForRetryMessageFilter), and left unfiltered
without the option, as upstream's default does."""

from __future__ import annotations

import orjson
import pytest
from broker_helpers import pull_request, send_request, start_broker

from broker.filter import retry_expression_filter
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from store.message import decode_records


def heartbeat(group: str, subscriptions: list[tuple[str, str, str]]) -> RemotingCommand:
    body = orjson.dumps(
        {
            "clientID": "127.0.0.1@retry-filter",
            "consumerDataSet": [
                {
                    "groupName": group,
                    "consumeType": "CONSUME_PASSIVELY",
                    "messageModel": "CLUSTERING",
                    "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                    "subscriptionDataSet": [
                        {"topic": topic, "subString": sub, "subVersion": 1, "expressionType": kind}
                        for topic, sub, kind in subscriptions
                    ],
                }
            ],
            "producerDataSet": [],
        }
    )
    return RemotingCommand.request(RequestCode.HEART_BEAT, {}, body)


async def _pulled_bodies(client, addr, group: str) -> list[bytes]:
    resp = await client.invoke(addr, pull_request(group, f"%RETRY%{group}", 0, 0, suspend_ms=0, sys_flag=0x2), 5)
    if resp.code == ResponseCode.PULL_NOT_FOUND:
        return []
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    return [m.body for m in decode_records(resp.body)]


async def _load_retry_topic(client, addr, group: str) -> None:
    """Four retried messages: two first sent to the SQL92-subscribed topic (one matching), one first sent
    to a TAG-subscribed topic, one without RETRY_TOPIC."""
    sends = [
        (b"sql-match", {"RETRY_TOPIC": "Orders", "amount": "10"}),
        (b"sql-miss", {"RETRY_TOPIC": "Orders", "amount": "1"}),
        (b"tag-topic", {"RETRY_TOPIC": "Audit", "amount": "1"}),
        (b"no-origin", {"amount": "1"}),
    ]
    for body, props in sends:
        resp = await client.invoke(addr, send_request(f"%RETRY%{group}", body, props=props), 5)
        assert resp.code == ResponseCode.SUCCESS, resp.remark
    subs = [("Orders", "amount > 5", "SQL92"), ("Audit", "*", "TAG"), (f"%RETRY%{group}", "*", "TAG")]
    assert (await client.invoke(addr, heartbeat(group, subs), 5)).code == ResponseCode.SUCCESS


@pytest.mark.parametrize(
    ("support_retry", "expected"),
    [
        ("true", [b"sql-match", b"tag-topic", b"no-origin"]),
        ("false", [b"sql-match", b"sql-miss", b"tag-topic", b"no-origin"]),
    ],
)
async def test_retry_topic_pull_follows_the_original_topics_sql_subscription(tmp_path, client, support_retry, expected):
    broker = await start_broker(tmp_path, enablePropertyFilter="true", filterSupportRetry=support_retry)
    try:
        addr = broker.config.broker_addr
        await _load_retry_topic(client, addr, "GR")
        assert await _pulled_bodies(client, addr, "GR") == expected
    finally:
        await broker.shutdown()


async def test_retry_filter_follows_a_changed_subscription(tmp_path, client):
    """The group's subscription is looked up at each pull: a consumer that changes its expression gets its
    retries filtered by the new one."""
    broker = await start_broker(tmp_path, enablePropertyFilter="true", filterSupportRetry="true")
    try:
        addr = broker.config.broker_addr
        await _load_retry_topic(client, addr, "GC")
        changed = [("Orders", "amount < 5", "SQL92"), ("%RETRY%GC", "*", "TAG")]
        assert (await client.invoke(addr, heartbeat("GC", changed), 5)).code == ResponseCode.SUCCESS
        assert await _pulled_bodies(client, addr, "GC") == [b"sql-miss", b"tag-topic", b"no-origin"]
    finally:
        await broker.shutdown()


def test_retry_filter_checks_properties_for_long_polling():
    """The wake-up check of a parked pull uses the arriving message's properties the same way."""
    flt = retry_expression_filter(lambda topic: (lambda p: p.get("amount") == "10") if topic == "Orders" else None)
    assert flt.is_matched_by_properties({"RETRY_TOPIC": "Orders", "amount": "10"})
    assert not flt.is_matched_by_properties({"RETRY_TOPIC": "Orders", "amount": "2"})
    assert flt.is_matched_by_properties({"RETRY_TOPIC": "Other", "amount": "2"})
    assert flt.is_matched_by_properties({"amount": "2"}) and flt.is_matched_by_properties(None)
    assert flt.is_matched_by_consume_queue(12345) and not flt.matches_all
