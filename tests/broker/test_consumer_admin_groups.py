"""Subscription groups and orderly locks as consumers meet them, on an in-process broker.

subscriptionGroup.json settings (consumeEnable, consumeBroadcastEnable, retryQueueNums, retryMaxTimes),
auto-creation of groups, send-back and send-path promotion to the DLQ, and LOCK_BATCH_MQ /
UNLOCK_BATCH_MQ with one owner per queue per group and lock expiry (rebalanceLockMaxLiveTime).
"""

from __future__ import annotations

import asyncio
import json
import time

import orjson
import pytest
from broker_helpers import start_broker

from broker.controller import BrokerController
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.headers import (
    PullMessageRequestHeader,
    SendMessageRequestHeaderV2,
    encode_header,
)
from store import GetMessageStatus, MessageExtBrokerInner, decode_records
from store.message import encode_properties

LOCK_LIVE_MS = 400


async def _start(root, groups: dict | None = None, **overrides: str) -> BrokerController:
    if groups:
        (root / "config").mkdir(parents=True, exist_ok=True)
        table = {g: {"groupName": g, **cfg} for g, cfg in groups.items()}
        (root / "config" / "subscriptionGroup.json").write_text(json.dumps({"subscriptionGroupTable": table}))
    return await start_broker(
        root,
        storePathRootDir=root,
        namesrvListenPort=-1,
        rebalanceLockMaxLiveTime=LOCK_LIVE_MS,
        messageDelayLevel="1s 1s 1s 1s 1s",
        **overrides,
    )


@pytest.fixture
async def rig(tmp_path):
    made: list[BrokerController] = []
    client = RemotingClient()

    async def start(groups=None, **overrides) -> BrokerController:
        c = await _start(tmp_path / f"s{len(made)}", groups, **overrides)
        made.append(c)
        return c

    yield start, client
    await client.close()
    for c in made:
        await c.shutdown()


async def _call(client, c, code, ext=None, body=None) -> RemotingCommand:
    return await client.invoke(c.config.broker_addr, RemotingCommand.request(code, ext or {}, body), 5.0)


def _pull_ext(group: str, topic: str, sys_flag: int = 0x4, queue_id: int = 0) -> dict[str, str]:
    return encode_header(
        PullMessageRequestHeader(
            consumer_group=group,
            topic=topic,
            queue_id=queue_id,
            queue_offset=0,
            max_msg_nums=32,
            sys_flag=sys_flag,
            commit_offset=0,
            suspend_timeout_millis=0,
            sub_version=0,
            subscription="*",
            expression_type="TAG",
        )
    )


async def _put(c: BrokerController, topic: str, body: bytes = b"x", **props: str) -> int:
    c.topic_config_manager.create_topic_in_send_message_back_method(topic, 1, 6)
    r = await c.store.put_message(MessageExtBrokerInner.create(topic, body, properties=props, store_host=c.store_host))
    for _ in range(200):
        if c.store.get_max_offset_in_queue(topic, 0) > r.append_result.logics_offset:
            break
        await asyncio.sleep(0.005)
    return r.append_result.wrote_offset


def _messages(c: BrokerController, topic: str, queue_id: int = 0) -> list:
    r = c.store.get_message("t", topic, queue_id, 0, 32, None)
    return decode_records(b"".join(r.buffers)) if r.status == GetMessageStatus.FOUND else []


async def _heartbeat(client, c, group: str, client_id: str, model: str = "CLUSTERING", topic: str = "T") -> None:
    body = orjson.dumps(
        {
            "clientID": client_id,
            "consumerDataSet": [
                {
                    "groupName": group,
                    "consumeType": "CONSUME_PASSIVELY",
                    "messageModel": model,
                    "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
                    "subscriptionDataSet": [{"topic": topic, "subString": "*", "subVersion": 1}],
                }
            ],
        }
    )
    assert (await _call(client, c, RequestCode.HEART_BEAT, body=body)).code == ResponseCode.SUCCESS


async def test_consume_enable_and_broadcast_enable(rig):
    start, client = rig
    c = await start({"G_off": {"consumeEnable": False}, "G_nobc": {"consumeBroadcastEnable": False}})
    await _put(c, "T")
    resp = await _call(client, c, RequestCode.PULL_MESSAGE, _pull_ext("G_off", "T"))
    assert resp.code == ResponseCode.NO_PERMISSION and "G_off" in resp.remark
    # a broadcasting group refused broadcast consumption, pulling with the heartbeat's subscription (Go)
    await _heartbeat(client, c, "G_nobc", "cid-bc", model="BROADCASTING")
    resp = await _call(client, c, RequestCode.PULL_MESSAGE, _pull_ext("G_nobc", "T", sys_flag=0))
    assert resp.code == ResponseCode.NO_PERMISSION and "broadcast" in resp.remark
    resp = await _call(client, c, RequestCode.PULL_MESSAGE, _pull_ext("G_ok", "T"))
    assert resp.code == ResponseCode.SUCCESS  # auto-created with the defaults
    assert c.subscription_group_manager.table["G_ok"].retry_max_times == 16


async def test_groups_are_not_auto_created_when_disabled(rig):
    start, client = rig
    c = await start(autoCreateSubscriptionGroup="false")
    offset = await _put(c, "T")
    resp = await _call(client, c, RequestCode.PULL_MESSAGE, _pull_ext("G_unknown", "T"))
    assert resp.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
    resp = await _call(
        client, c, RequestCode.CONSUMER_SEND_MSG_BACK, {"offset": str(offset), "group": "G_unknown", "delayLevel": "0"}
    )
    assert resp.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST


async def test_send_back_uses_the_group_retry_settings(rig):
    start, client = rig
    c = await start({"G3": {"retryQueueNums": 3, "retryMaxTimes": 1}, "G0": {"retryQueueNums": 0}})
    offset = await _put(c, "T", b"payload", KEYS="k", UNIQ_KEY="U1")
    ext = {"offset": str(offset), "group": "G3", "delayLevel": "0", "originMsgId": "U1", "originTopic": "T"}
    assert (await _call(client, c, RequestCode.CONSUMER_SEND_MSG_BACK, ext)).code == ResponseCode.SUCCESS
    assert c.topic_config_manager.select_topic_config("%RETRY%G3").write_queue_nums == 3
    await asyncio.sleep(0.05)
    parked = [m for q in range(18) for m in _messages(c, "SCHEDULE_TOPIC_XXXX", q)]
    assert len(parked) == 1 and parked[0].queue_id == 2, "delay level 3 + reconsumeTimes(0) = queue 2"
    retry = parked[0]
    assert retry.properties["REAL_TOPIC"] == "%RETRY%G3" and retry.properties["RETRY_TOPIC"] == "T"
    assert retry.reconsume_times == 1 and retry.body == b"payload"
    # that copy failing again: reconsumeTimes 1 >= retryMaxTimes 1 → the DLQ, without delay
    assert (
        await _call(client, c, RequestCode.CONSUMER_SEND_MSG_BACK, dict(ext, offset=str(retry.commit_log_offset)))
    ).code == ResponseCode.SUCCESS
    await asyncio.sleep(0.05)
    (dead,) = _messages(c, "%DLQ%G3")
    assert dead.reconsume_times == 2 and dead.properties["RETRY_TOPIC"] == "T"
    assert dead.properties["ORIGIN_MESSAGE_ID"] == retry.properties["ORIGIN_MESSAGE_ID"]
    # retryQueueNums 0: upstream answers SUCCESS and keeps nothing
    assert (
        await _call(client, c, RequestCode.CONSUMER_SEND_MSG_BACK, dict(ext, group="G0"))
    ).code == ResponseCode.SUCCESS
    assert c.topic_config_manager.select_topic_config("%RETRY%G0") is None


async def test_send_back_header_max_reconsume_times_needs_a_recent_client(rig):
    start, client = rig
    c = await start({"G5": {"retryMaxTimes": 5}})
    offset = await _put(c, "T")
    ext = {"offset": str(offset), "group": "G5", "delayLevel": "0", "maxReconsumeTimes": "0"}
    old = RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK, dict(ext))
    old.version = 120  # before V3_4_9: the header's maxReconsumeTimes is not read
    assert (await client.invoke(c.config.broker_addr, old, 5.0)).code == ResponseCode.SUCCESS
    new = RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK, dict(ext))
    new.version = 121
    assert (await client.invoke(c.config.broker_addr, new, 5.0)).code == ResponseCode.SUCCESS
    await asyncio.sleep(0.05)
    assert len(_messages(c, "%DLQ%G5")) == 1
    assert len([m for q in range(18) for m in _messages(c, "SCHEDULE_TOPIC_XXXX", q)]) == 1


async def test_sending_to_the_retry_topic_itself_is_promoted_to_the_dlq(rig):
    """What ali-ons does when CONSUMER_SEND_MSG_BACK fails (and J orderly consumers always do)."""
    start, client = rig
    c = await start({"G7": {"retryMaxTimes": 16}})

    def send(reconsume: int, max_times: int) -> RemotingCommand:
        props = encode_properties({"RETRY_TOPIC": "T", "ORIGIN_MESSAGE_ID": "O1", "KEYS": f"r{reconsume}"})
        hdr = SendMessageRequestHeaderV2(
            a="P",
            b="%RETRY%G7",
            c="TBW102",
            d=4,
            e=0,
            f=0,
            g=int(time.time() * 1000),
            h=0,
            i=props,
            j=reconsume,
            l=max_times,
        )
        return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, encode_header(hdr), b"again")

    for reconsume, max_times in ((1, 3), (3, 3)):
        resp = await client.invoke(c.config.broker_addr, send(reconsume, max_times), 5.0)
        assert resp.code == ResponseCode.SUCCESS, resp.remark
    await asyncio.sleep(0.05)
    assert [(m.properties["KEYS"], m.reconsume_times) for m in _messages(c, "%RETRY%G7")] == [("r1", 1)]
    (dead,) = _messages(c, "%DLQ%G7")
    assert dead.properties["KEYS"] == "r3" and dead.properties["ORIGIN_MESSAGE_ID"] == "O1"


def _lock_body(group: str, client_id: str, queues: list[int]) -> bytes:
    return orjson.dumps(
        {
            "consumerGroup": group,
            "clientId": client_id,
            "mqSet": [{"topic": "T", "brokerName": "broker-a", "queueId": q} for q in queues],
        }
    )


async def _lock(client, c, group, client_id, queues) -> list[int]:
    resp = await _call(client, c, RequestCode.LOCK_BATCH_MQ, body=_lock_body(group, client_id, queues))
    assert resp.code == ResponseCode.SUCCESS
    return sorted(m["queueId"] for m in orjson.loads(resp.body)["lockOKMQSet"])


async def test_orderly_locks_one_owner_per_queue_and_expiry(rig):
    start, client = rig
    c = await start()
    assert await _lock(client, c, "GO", "A", [0, 1]) == [0, 1]
    assert await _lock(client, c, "GO", "B", [1, 2]) == [2], "queue 1 is A's"
    assert await _lock(client, c, "OTHER", "B", [1]) == [1], "locks are per group"
    assert await _lock(client, c, "GO", "A", [0, 1]) == [0, 1], "the owner renews"
    # an owner that stops renewing loses its queues after rebalanceLockMaxLiveTime
    await asyncio.sleep(LOCK_LIVE_MS / 1000 + 0.15)
    assert await _lock(client, c, "GO", "B", [1, 2]) == [1, 2]
    assert await _lock(client, c, "GO", "A", [1]) == []
    # only the owner can unlock
    await _call(client, c, RequestCode.UNLOCK_BATCH_MQ, body=_lock_body("GO", "A", [1, 2]))
    assert await _lock(client, c, "GO", "A", [1, 2]) == []
    await _call(client, c, RequestCode.UNLOCK_BATCH_MQ, body=_lock_body("GO", "B", [1, 2]))
    assert await _lock(client, c, "GO", "A", [1, 2]) == [1, 2]
    bad = await _call(client, c, RequestCode.LOCK_BATCH_MQ, body=b"{not json")
    assert bad.code == ResponseCode.SYSTEM_ERROR
