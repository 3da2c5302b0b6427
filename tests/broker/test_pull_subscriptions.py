"""PullMessageProcessor reuses parsed subscriptions and TAG filters from pull to pull; a consumer that
changes its subscription (a new heartbeat, or another expression in the request) must be filtered by
the new one at once."""

from __future__ import annotations

import orjson
from broker_helpers import pull_request, send_request

from broker.processor.pull import PullMessageProcessor
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from store.message import decode_records


def heartbeat(group: str, topic: str, sub: str, version: int) -> RemotingCommand:
    body = {
        "clientID": "127.0.0.1@subs",
        "consumerDataSet": [
            {
                "groupName": group,
                "consumeType": "CONSUME_PASSIVELY",
                "messageModel": "CLUSTERING",
                "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                "subscriptionDataSet": [
                    {"topic": topic, "subString": sub, "subVersion": version, "expressionType": "TAG"}
                ],
            }
        ],
        "producerDataSet": [],
    }
    return RemotingCommand.request(RequestCode.HEART_BEAT, {}, orjson.dumps(body))


async def _tags_pulled(client, addr, request) -> list[str]:
    resp = await client.invoke(addr, request, 5)
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    return [m.properties["TAGS"] for m in decode_records(bytes(resp.body))]


async def _send_tagged(client, addr, topic: str) -> None:
    for tag in ("A", "B", "A", "B"):
        assert (await client.invoke(addr, send_request(topic, props={"TAGS": tag}), 5)).code == ResponseCode.SUCCESS


async def test_new_heartbeat_subscription_filters_the_next_pull(broker, client):
    addr = broker.config.broker_addr
    await _send_tagged(client, addr, "TS1")
    assert (await client.invoke(addr, heartbeat("GS1", "TS1", "A", 1), 5)).code == ResponseCode.SUCCESS
    for _ in range(2):  # the second pull takes the cached filter
        assert await _tags_pulled(client, addr, pull_request("GS1", "TS1", 0, 0, sys_flag=0)) == ["A", "A"]
    assert (await client.invoke(addr, heartbeat("GS1", "TS1", "B", 2), 5)).code == ResponseCode.SUCCESS
    assert await _tags_pulled(client, addr, pull_request("GS1", "TS1", 0, 0, sys_flag=0)) == ["B", "B"]


async def test_request_subscriptions_are_parsed_per_expression(broker, client):
    addr = broker.config.broker_addr
    await _send_tagged(client, addr, "TS2")
    for sub, expected in (("A", ["A", "A"]), ("B", ["B", "B"]), ("A", ["A", "A"]), ("A || B", ["A", "B", "A", "B"])):
        assert await _tags_pulled(client, addr, pull_request("GS2", "TS2", 0, 0, sub=sub)) == expected


async def test_processor_takes_its_parts_not_the_controller(broker):
    processor = broker.pull_processor
    assert isinstance(processor, PullMessageProcessor)
    assert not hasattr(processor, "c")
    assert processor.store is broker.store and processor.hold_service is broker.pull_hold_service
