"""Issue 13 items 1-4: names that become folders are checked before the store sees them, the send checks match
4.9.7's TopicValidator and SendMessageProcessor, and a client's malformed body gets a clear answer (not the
executor's catch-all SYSTEM_ERROR "SomeError: ...", which is what a traceback in the log comes with)."""

from __future__ import annotations

import os
import struct

import orjson
import pytest
from broker_helpers import send_request, start_broker

from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from store.message import encode_properties


def send_back(group: str, offset: int = 0) -> RemotingCommand:
    return RemotingCommand.request(
        RequestCode.CONSUMER_SEND_MSG_BACK,
        {
            "group": group,
            "offset": str(offset),
            "delayLevel": "0",
            "originMsgId": "",
            "originTopic": "T",
            "unitMode": "false",
            "maxReconsumeTimes": "16",
        },
    )


def heartbeat(body) -> RemotingCommand:
    return RemotingCommand.request(RequestCode.HEART_BEAT, {}, orjson.dumps(body))


def consumer_heartbeat(group, topic="T"):
    return heartbeat(
        {
            "clientID": "c1",
            "producerDataSet": [],
            "consumerDataSet": [
                {
                    "groupName": group,
                    "consumeType": "CONSUME_PASSIVELY",
                    "messageModel": "CLUSTERING",
                    "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                    "subscriptionDataSet": [{"topic": topic, "subString": "*"}],
                    "unitMode": False,
                }
            ],
        }
    )


def folders_under(root) -> set[str]:
    out = set()
    for dirpath, dirnames, filenames in os.walk(root):
        out.update(os.path.join(dirpath, n) for n in dirnames + filenames)
    return out


@pytest.mark.parametrize("group", ["G\u0000", "x/../../../escaped", "a" * 200_000, "G\n", ".."])
async def test_send_back_with_an_illegal_group_touches_nothing(tmp_path, client, group):
    broker = await start_broker(tmp_path)
    try:
        addr = broker.config.broker_addr
        assert (await client.invoke(addr, send_request("T"), 5)).code == ResponseCode.SUCCESS
        resp = await client.invoke(addr, send_back(group), 5)
        assert resp.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
        assert not any(t.startswith(("%RETRY%", "%DLQ%")) for t in broker.topic_config_manager.table)
        assert group not in broker.subscription_group_manager.table
        # the broker keeps working: later sends are stored and dispatched
        for _ in range(3):
            assert (await client.invoke(addr, send_request("T", queue_id=0), 5)).code == ResponseCode.SUCCESS
        assert broker.store.get_max_offset_in_queue("T", 0) >= 3
    finally:
        await broker.shutdown()
    assert not [p for p in folders_under(tmp_path) if "escaped" in p]


async def test_heartbeat_with_illegal_groups_is_refused(broker, client):
    addr = broker.config.broker_addr
    for group in ("a/b", "G\u0000", "g" * 200_000, "G\n", "%RETRY%x y"):
        resp = await client.invoke(addr, consumer_heartbeat(group), 5)
        assert resp.code == ResponseCode.SYSTEM_ERROR and resp.remark.startswith("bad heartbeat body: the specified"), (
            resp.remark[:200]
        )
    resp = await client.invoke(addr, consumer_heartbeat("CG_ok", topic="T\n"), 5)
    assert resp.code == ResponseCode.SYSTEM_ERROR and "illegal characters" in resp.remark
    assert [t for t in broker.topic_config_manager.table if t.startswith("%RETRY%")] == []
    resp = await client.invoke(addr, consumer_heartbeat("CG_ok"), 5)
    assert resp.code == ResponseCode.SUCCESS
    assert "%RETRY%CG_ok" in broker.topic_config_manager.table


async def test_topic_with_a_trailing_newline_is_refused(broker, client):
    resp = await client.invoke(broker.config.broker_addr, send_request("FuzzNL\n"), 5)
    assert resp.code == ResponseCode.SYSTEM_ERROR
    assert resp.remark == "The specified topic contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
    assert "FuzzNL\n" not in broker.topic_config_manager.table
    assert not os.path.exists(os.path.join(broker.config.store_path_root_dir, "consumequeue", "FuzzNL\n"))


async def test_topic_length_limit_is_upstreams(broker, client):
    addr = broker.config.broker_addr
    assert (await client.invoke(addr, send_request("t" * 127), 5)).code == ResponseCode.SUCCESS
    resp = await client.invoke(addr, send_request("t" * 128), 5)
    assert (
        resp.code == ResponseCode.SYSTEM_ERROR and resp.remark == "The specified topic is longer than topic max length."
    )


@pytest.mark.parametrize(
    "topic",
    [
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
        "SELF_TEST_TOPIC",
        "OFFSET_MOVED_EVENT",
        "SCHEDULE_TOPIC_XXXX",
    ],
)
async def test_not_allowed_send_topics_are_refused(broker, client, topic):
    resp = await client.invoke(broker.config.broker_addr, send_request(topic), 5)
    assert resp.code == ResponseCode.NO_PERMISSION and resp.remark == f"Sending message to topic[{topic}] is forbidden."


async def test_the_cluster_topic_accepts_sends_as_upstream(broker, client):
    resp = await client.invoke(broker.config.broker_addr, send_request(broker.config.broker_cluster_name), 5)
    assert resp.code == ResponseCode.SUCCESS, resp.remark


async def test_a_delay_that_is_not_an_int_is_refused(broker, client):
    addr = broker.config.broker_addr
    for bad in ("abc", " 3", "99999999999", "3.0"):
        resp = await client.invoke(addr, send_request("TD", props={"DELAY": bad}), 5)
        assert resp.code == ResponseCode.SYSTEM_ERROR and "NumberFormatException" in resp.remark, (bad, resp.remark)
    for good in ("0", "-1", "+2", "99"):
        resp = await client.invoke(addr, send_request("TD", props={"DELAY": good}), 5)
        assert resp.code == ResponseCode.SUCCESS, (good, resp.remark)


async def test_max_message_size_is_checked_on_the_body_as_upstream(tmp_path, client):
    # 4.9.7's MessageExtEncoder: body > maxMessageSize is refused; the record may be up to 64 KiB larger
    broker = await start_broker(tmp_path, maxMessageSize=2048)
    try:
        addr = broker.config.broker_addr
        assert (await client.invoke(addr, send_request("TS", b"x" * 2048), 5)).code == ResponseCode.SUCCESS
        resp = await client.invoke(addr, send_request("TS", b"x" * 2049), 5)
        assert resp.code == ResponseCode.MESSAGE_ILLEGAL
    finally:
        await broker.shutdown()


# -------------------------------------------------------------------------- item 4: a client's malformed body


async def test_batch_element_with_a_lying_body_length(broker, client):
    props = encode_properties({"K": "v"}).encode()
    body = b"hello"
    total = 20 + len(body) + 2 + len(props)
    element = struct.pack(">iiiii", total, 0, 0, 0, total - 21) + body + struct.pack(">h", len(props)) + props
    resp = await client.invoke(
        broker.config.broker_addr, send_request("TB", element, code=RequestCode.SEND_BATCH_MESSAGE, batch=True), 5
    )
    assert resp.code == ResponseCode.MESSAGE_ILLEGAL and "bad size at byte 0" in resp.remark


@pytest.mark.parametrize(
    "body",
    [
        {
            "clientID": "c",
            "consumerDataSet": [{"groupName": "G", "subscriptionDataSet": [{"topic": "T", "subString": 5}]}],
        },
        {"clientID": "c", "consumerDataSet": [{"groupName": "G", "subscriptionDataSet": [{"topic": ["T"]}]}]},
        {"clientID": "c", "consumerDataSet": [{"groupName": {"a": 1}}]},
        {"clientID": "c", "consumerDataSet": {"groupName": "G"}},
        {"clientID": "c", "producerDataSet": [{"groupName": 7}]},
        {"clientID": "c", "consumerDataSet": [{"groupName": "G", "consumeType": "\u00b2"}]},
        {
            "clientID": "c",
            "consumerDataSet": [{"groupName": "G", "subscriptionDataSet": [{"topic": "T", "subVersion": [1]}]}],
        },
        {
            "clientID": "c",
            "consumerDataSet": [{"groupName": "G", "subscriptionDataSet": [{"topic": "T", "expressionType": 1}]}],
        },
    ],
)
async def test_heartbeat_with_wrong_types_is_answered(broker, client, body):
    resp = await client.invoke(broker.config.broker_addr, heartbeat(body), 5)
    assert resp.code == ResponseCode.SYSTEM_ERROR and resp.remark.startswith("bad heartbeat body: "), resp.remark


@pytest.mark.parametrize("code", [RequestCode.LOCK_BATCH_MQ, RequestCode.UNLOCK_BATCH_MQ])
@pytest.mark.parametrize(
    "body", [[1, 2], "x", 5, {"mqSet": {"a": 1}}, {"mqSet": [{"topic": "T", "brokerName": "b", "queueId": [1]}]}]
)
async def test_lock_batch_with_a_body_of_another_shape(broker, client, code, body):
    resp = await client.invoke(broker.config.broker_addr, RemotingCommand.request(code, {}, orjson.dumps(body)), 5)
    assert resp.code == ResponseCode.SYSTEM_ERROR and resp.remark.startswith(
        ("bad lock batch body", "bad unlock batch")
    ), resp.remark


@pytest.mark.parametrize(
    "body",
    [
        [1],
        {"subscriptionData": [1]},
        {"subscriptionData": {"expressionType": 3}},
        {"subscriptionData": {"expressionType": "SQL92", "subString": {"a": 1}}},
    ],
)
async def test_check_client_config_with_wrong_types(broker, client, body):
    req = RemotingCommand.request(
        RequestCode.CHECK_CLIENT_CONFIG, {"producerGroup": "PG", "clientId": "c"}, orjson.dumps(body)
    )
    resp = await client.invoke(broker.config.broker_addr, req, 5)
    assert resp.code == ResponseCode.SYSTEM_ERROR and resp.remark.startswith("bad check client config body"), (
        resp.remark
    )


async def test_send_back_of_a_message_at_the_reconsume_limit_of_java_int(broker, client):
    """A stored reconsumeTimes of 2^31-1 plus one wraps as in Java instead of failing the store's encoder
    (found by the fuzz campaign: struct.error in the writer)."""
    addr = broker.config.broker_addr
    resp = await client.invoke(addr, send_request("TR", reconsume_times=2**31 - 1), 5)
    assert resp.code == ResponseCode.SUCCESS
    offset = int(resp.ext_fields["msgId"][-16:], 16)
    resp = await client.invoke(addr, send_back("CG_wrap", offset), 5)
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    assert broker.store.get_max_offset_in_queue("%DLQ%CG_wrap", 0) == 1
