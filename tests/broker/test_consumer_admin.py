"""Consumer management admin requests against an in-process broker, with scripted clients.

The clients here are plain remoting connections that heartbeat like a Java or C++ consumer and
answer the broker's requests (220 reset offsets, 307 running info) the way those clients would.
"""

from __future__ import annotations

import asyncio
import re
import time

import orjson
import pytest
from broker_helpers import start_broker

from broker.controller import BrokerController
from broker.processor import consumer_admin
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from store import MessageExtBrokerInner


@pytest.fixture
async def controller(tmp_path):
    c = await start_broker(tmp_path, namesrvListenPort=-1)
    yield c
    await c.shutdown()


class FakeConsumer:
    """A connection that registers as a consumer of ``group`` and records what the broker sends it."""

    def __init__(
        self,
        c: BrokerController,
        group: str,
        client_id: str,
        *,
        language: str = "JAVA",
        topics: tuple[str, ...] = ("T",),
        running_info_delay_s: float = 0.0,
    ) -> None:
        self.addr = c.config.broker_addr
        self.group, self.client_id, self.language, self.topics = group, client_id, language, topics
        self.client = RemotingClient()
        self.resets: list[RemotingCommand] = []
        self.delay = running_info_delay_s
        self.client.set_request_handler(RequestCode.RESET_CONSUMER_CLIENT_OFFSET, self._on_reset)
        self.client.set_request_handler(RequestCode.GET_CONSUMER_RUNNING_INFO, self._on_running_info)

    async def _on_reset(self, channel, request):
        self.resets.append(request)

    async def _on_running_info(self, channel, request):
        await asyncio.sleep(self.delay)
        body = orjson.dumps(
            {
                "properties": {"clientId": self.client_id, "consumeType": "CONSUME_PASSIVELY"},
                "subscriptionSet": [{"topic": t} for t in self.topics],
            }
        )
        return request.response(ResponseCode.SUCCESS, body=body)

    async def heartbeat(self) -> None:
        subs = [{"topic": t, "subString": "*", "subVersion": 1, "expressionType": "TAG"} for t in self.topics]
        body = orjson.dumps(
            {
                "clientID": self.client_id,
                "consumerDataSet": [
                    {
                        "groupName": self.group,
                        "consumeType": "CONSUME_PASSIVELY",
                        "messageModel": "CLUSTERING",
                        "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
                        "subscriptionDataSet": subs,
                    }
                ],
            }
        )
        request = RemotingCommand.request(RequestCode.HEART_BEAT, {}, body)
        request.language = self.language
        assert (await self.client.invoke(self.addr, request, 3.0)).code == ResponseCode.SUCCESS

    async def close(self) -> None:
        await self.client.close()


async def _admin(c: BrokerController, code: int, ext: dict[str, str]) -> RemotingCommand:
    client = RemotingClient()
    try:
        return await client.invoke(c.config.broker_addr, RemotingCommand.request(code, ext), 15.0)
    finally:
        await client.close()


def _mq_table(body: bytes) -> dict[tuple[str, int], object]:
    """Parse fastjson's ``{{"brokerName":..,"queueId":q,"topic":t}:value}`` maps."""
    text = body.decode()
    out = {}
    for m in re.finditer(r'\{"brokerName":"[^"]*","queueId":(\d+),"topic":"([^"]*)"\}:(\{[^{}]*\}|-?\d+)', text):
        out[(m.group(2), int(m.group(1)))] = orjson.loads(m.group(3))
    return out


async def _put(c: BrokerController, topic: str, queue_id: int, n: int) -> list[int]:
    c.topic_config_manager.create_topic_in_send_message_back_method(topic, 2, 6)
    stamps = []
    for i in range(n):
        r = await c.store.put_message(MessageExtBrokerInner.create(topic, f"m{i}".encode(), queue_id=queue_id))
        stamps.append(r.append_result.store_timestamp)
        await asyncio.sleep(0.003)
    for _ in range(200):
        if c.store.get_max_offset_in_queue(topic, queue_id) >= n:
            break
        await asyncio.sleep(0.01)
    return stamps


async def test_consume_stats(controller):
    c = controller
    stamps = await _put(c, "T", 0, 5)
    await _put(c, "Other", 0, 2)
    c.consumer_offset_manager.commit_offset("G", "T", 0, 3)
    c.consumer_offset_manager.commit_offset("G", "Other", 0, 1)
    c.consumer_offset_manager.commit_offset("G", "%RETRY%G", 0, 0)
    c.topic_config_manager.create_topic_in_send_message_back_method("%RETRY%G", 1, 6)
    resp = await _admin(c, RequestCode.GET_CONSUME_STATS, {"consumerGroup": "G"})
    assert resp.code == ResponseCode.SUCCESS
    table = _mq_table(resp.body)
    assert table[("T", 0)] == {"brokerOffset": 5, "consumerOffset": 3, "lastTimestamp": stamps[2]}
    assert table[("T", 1)] == {"brokerOffset": 0, "consumerOffset": 0, "lastTimestamp": 0}
    assert ("Other", 0) in table and ("%RETRY%G", 0) in table
    assert b'"consumeTps":' in resp.body
    # online members of G subscribe only T (and the retry topic): Other is left out, as upstream does
    fc = FakeConsumer(c, "G", "cid-1", topics=("T", "%RETRY%G"))
    try:
        await fc.heartbeat()
        table = _mq_table((await _admin(c, RequestCode.GET_CONSUME_STATS, {"consumerGroup": "G"})).body)
        assert {t for t, _ in table} == {"T", "%RETRY%G"}
        only = _mq_table((await _admin(c, RequestCode.GET_CONSUME_STATS, {"consumerGroup": "G", "topic": "T"})).body)
        assert {t for t, _ in only} == {"T"}
    finally:
        await fc.close()


async def test_connection_list_and_consume_by_who(controller):
    c = controller
    resp = await _admin(c, RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "G2"})
    assert resp.code == ResponseCode.CONSUMER_NOT_ONLINE and "G2" in resp.remark
    fc = FakeConsumer(c, "G2", "cid-cpp", language="CPP", topics=("T",))
    try:
        await fc.heartbeat()
        resp = await _admin(c, RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "G2"})
        body = orjson.loads(resp.body)
        assert [(x["clientId"], x["language"]) for x in body["connectionSet"]] == [("cid-cpp", "CPP")]
        assert body["messageModel"] == "CLUSTERING" and "T" in body["subscriptionTable"]
        c.consumer_offset_manager.commit_offset("G9", "T", 0, 1)
        resp = await _admin(c, RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": "T"})
        assert orjson.loads(resp.body) == {"groupList": ["G2", "G9"]}
        assert (await _admin(c, RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, {})).code == ResponseCode.SYSTEM_ERROR
    finally:
        await fc.close()


async def test_reset_offset_by_time_reaches_every_live_consumer(controller):
    c = controller
    stamps = await _put(c, "T", 0, 6)
    await _put(c, "T", 1, 2)
    c.consumer_offset_manager.commit_offset("G3", "T", 0, 6)
    c.consumer_offset_manager.commit_offset("G3", "T", 1, 0)
    ext = {"topic": "T", "group": "G3", "timestamp": str(stamps[3]), "isForce": "false"}
    resp = await _admin(c, RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, ext)
    assert resp.code == ResponseCode.CONSUMER_NOT_ONLINE
    java, cpp = FakeConsumer(c, "G3", "cid-j"), FakeConsumer(c, "G3", "cid-c", language="CPP")
    try:
        await java.heartbeat()
        await cpp.heartbeat()
        resp = await _admin(c, RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, ext)
        assert resp.code == ResponseCode.SUCCESS
        # queue 0 moves back to the first message stored at or after the time; queue 1 (offset 0) stays
        assert _mq_table(resp.body) == {("T", 0): 3, ("T", 1): 0}
        for _ in range(100):
            if java.resets and cpp.resets:
                break
            await asyncio.sleep(0.01)
        (jr,), (cr,) = java.resets, cpp.resets
        assert jr.ext_fields["group"] == "G3" and jr.ext_fields["timestamp"] == str(stamps[3])
        assert _mq_table(jr.body) == {("T", 0): 3, ("T", 1): 0}
        assert orjson.loads(cr.body) == {
            "offsetTable": [
                {"brokerName": "broker-a", "offset": 3, "queueId": 0, "topic": "T"},
                {"brokerName": "broker-a", "offset": 0, "queueId": 1, "topic": "T"},
            ]
        }
        assert c.consumer_offset_manager.query_offset("G3", "T", 0) == 3
        # without isForce a reset never moves a queue forward; with it, -1 means the end of each queue
        c.consumer_offset_manager.commit_offset("G3", "T", 0, 1)
        ext2 = dict(ext, timestamp="-1")
        assert _mq_table((await _admin(c, RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, ext2)).body)[("T", 0)] == 1
        ext2["isForce"] = "true"
        assert _mq_table((await _admin(c, RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, ext2)).body) == {
            ("T", 0): 6,
            ("T", 1): 2,
        }
    finally:
        await java.close()
        await cpp.close()
    # a queue the group never committed takes the target (upstream refuses the whole reset)
    c.consumer_offset_manager.commit_offset("G3b", "T", 0, 6)
    young = FakeConsumer(c, "G3b", "cid-y")
    try:
        await young.heartbeat()
        resp = await _admin(c, RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, dict(ext, group="G3b", timestamp="-1"))
        assert _mq_table(resp.body) == {("T", 0): 6, ("T", 1): 2}
    finally:
        await young.close()
    bad = await _admin(c, RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, dict(ext, group="NOPE"))
    assert bad.code == ResponseCode.SYSTEM_ERROR and "not exist" in bad.remark
    bad = await _admin(c, RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, dict(ext, topic="NoTopic"))
    assert bad.code == ResponseCode.SYSTEM_ERROR and "no topic" in bad.remark


async def test_running_info_is_forwarded_to_the_client(controller, monkeypatch):
    c = controller
    fc = FakeConsumer(c, "G4", "cid-4")
    slow = FakeConsumer(c, "G4", "cid-slow", running_info_delay_s=1.0)
    try:
        await fc.heartbeat()
        await slow.heartbeat()
        resp = await _admin(
            c,
            RequestCode.GET_CONSUMER_RUNNING_INFO,
            {"consumerGroup": "G4", "clientId": "cid-4", "jstackEnable": "false"},
        )
        assert resp.code == ResponseCode.SUCCESS
        assert orjson.loads(resp.body)["properties"]["clientId"] == "cid-4"
        resp = await _admin(c, RequestCode.GET_CONSUMER_RUNNING_INFO, {"consumerGroup": "G4", "clientId": "nobody"})
        assert resp.code == ResponseCode.SYSTEM_ERROR and "not online" in resp.remark
        monkeypatch.setattr(consumer_admin, "CALL_CLIENT_TIMEOUT_S", 0.2)
        started = time.monotonic()
        resp = await _admin(c, RequestCode.GET_CONSUMER_RUNNING_INFO, {"consumerGroup": "G4", "clientId": "cid-slow"})
        assert resp.code == ResponseCode.CONSUME_MSG_TIMEOUT and time.monotonic() - started < 1.0
    finally:
        await fc.close()
        await slow.close()
