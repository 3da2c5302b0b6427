"""Send, pull, offsets and client management through the wire, on an in-process broker.

These pin the broker-side rules of protocol.md §2 with exact codes and remarks; the real-client
proof of the same paths lives in tests/compat.
"""

from __future__ import annotations

import asyncio
import struct
import time

import orjson
from broker_helpers import pull_request, send_request, start_broker

from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from store.message import decode_records, encode_properties


def batch_body(bodies, props_list):
    out = bytearray()
    for body, props in zip(bodies, props_list):
        p = encode_properties(props).encode()
        total = 20 + len(body) + 2 + len(p)
        out += struct.pack(">iiiii", total, 0, 0, 0, len(body)) + body + struct.pack(">h", len(p)) + p
    return bytes(out)


async def test_send_then_pull_byte_identical(broker, client):
    addr = broker.config.broker_addr
    resp = await client.invoke(addr, send_request("T1", b"hello", props={"TAGS": "A", "KEYS": "k1"}), 5)
    assert resp.code == ResponseCode.SUCCESS
    assert set(resp.ext_fields) >= {"msgId", "queueId", "queueOffset", "MSG_REGION", "TRACE_ON"}
    assert all(isinstance(v, str) for v in resp.ext_fields.values())
    assert len(resp.ext_fields["msgId"]) == 32
    pulled = await client.invoke(addr, pull_request("G1", "T1", 0, 0), 5)
    assert pulled.code == ResponseCode.SUCCESS and pulled.remark == "FOUND"
    assert pulled.ext_fields["nextBeginOffset"] == "1" and pulled.ext_fields["minOffset"] == "0"
    (msg,) = decode_records(bytes(pulled.body))
    assert msg.body == b"hello" and msg.topic == "T1" and msg.properties["TAGS"] == "A"
    assert msg.properties["CLUSTER"] == "DefaultCluster"


async def test_caught_up_pull_is_not_found_then_offset_moved(broker, client):
    addr = broker.config.broker_addr
    await client.invoke(addr, send_request("T2"), 5)
    resp = await client.invoke(addr, pull_request("G", "T2", 0, 1, sys_flag=0x4), 5)
    assert resp.code == ResponseCode.PULL_NOT_FOUND and resp.ext_fields["nextBeginOffset"] == "1"
    resp = await client.invoke(addr, pull_request("G", "T2", 0, 9, sys_flag=0x4), 5)
    assert resp.code == ResponseCode.PULL_OFFSET_MOVED and resp.ext_fields["nextBeginOffset"] == "1"
    # an empty queue: offset 0 → not found, any other offset → moved to 0
    resp = await client.invoke(addr, pull_request("G", "T2", 1, 0, sys_flag=0x4), 5)
    assert resp.code == ResponseCode.PULL_NOT_FOUND


async def test_long_poll_wakes_on_arrival_and_times_out(broker, client):
    addr = broker.config.broker_addr
    await client.invoke(addr, send_request("T3"), 5)
    t0 = time.monotonic()
    parked = asyncio.ensure_future(client.invoke(addr, pull_request("G", "T3", 0, 1, suspend_ms=10_000), 15))
    await asyncio.sleep(0.3)
    assert not parked.done()
    await client.invoke(addr, send_request("T3", b"late"), 5)
    resp = await parked
    assert resp.code == ResponseCode.SUCCESS and time.monotonic() - t0 < 5
    t0 = time.monotonic()
    resp = await client.invoke(addr, pull_request("G", "T3", 0, 2, suspend_ms=400), 5)
    elapsed = time.monotonic() - t0
    assert resp.code == ResponseCode.PULL_NOT_FOUND and 0.35 <= elapsed < 3


async def test_tag_filter_skips_but_advances(broker, client):
    addr = broker.config.broker_addr
    for tag in ("A", "B", "A", "C"):
        await client.invoke(addr, send_request("T4", tag.encode(), props={"TAGS": tag}), 5)
    resp = await client.invoke(addr, pull_request("G", "T4", 0, 0, sub="A || C"), 5)
    assert [m.body for m in decode_records(bytes(resp.body))] == [b"A", b"A", b"C"]
    assert resp.ext_fields["nextBeginOffset"] == "4"
    resp = await client.invoke(addr, pull_request("G", "T4", 0, 1, sub="B", max_nums=1), 5)
    assert [m.body for m in decode_records(bytes(resp.body))] == [b"B"]


async def test_batch_v2_and_cpp_batch_quirk_store_separate_messages(broker, client):
    addr = broker.config.broker_addr
    body = batch_body([b"m1", b"m2", b"m3"], [{"UNIQ_KEY": f"U{i}"} for i in range(3)])
    resp = await client.invoke(addr, send_request("T5", body, code=RequestCode.SEND_BATCH_MESSAGE, batch=True), 5)
    assert resp.code == ResponseCode.SUCCESS and len(resp.ext_fields["msgId"].split(",")) == 3
    # the C++ client: code 10 with batch="1" (Java would store one blob)
    req = send_request(
        "T5", batch_body([b"c1", b"c2"], [{}, {}]), code=RequestCode.SEND_MESSAGE, extra_ext={"batch": "1"}
    )
    resp = await client.invoke(addr, req, 5)
    assert resp.code == ResponseCode.SUCCESS and resp.ext_fields["queueOffset"] == "3"
    pulled = await client.invoke(addr, pull_request("G", "T5", 0, 0), 5)
    assert [m.body for m in decode_records(bytes(pulled.body))] == [b"m1", b"m2", b"m3", b"c1", b"c2"]


async def test_send_refusals_are_clear(tmp_path, client):
    broker = await start_broker(tmp_path, maxMessageSize=1024, autoCreateTopicEnable="false")
    try:
        addr = broker.config.broker_addr
        resp = await client.invoke(addr, send_request("NoSuchTopic"), 5)
        assert resp.code == ResponseCode.TOPIC_NOT_EXIST and resp.remark.startswith("topic[NoSuchTopic] not exist")
        await client.invoke(
            addr,
            RemotingCommand.request(
                RequestCode.UPDATE_AND_CREATE_TOPIC,
                {
                    "topic": "Small",
                    "defaultTopic": "TBW102",
                    "readQueueNums": "2",
                    "writeQueueNums": "2",
                    "perm": "6",
                    "topicFilterType": "SINGLE_TAG",
                    "order": "false",
                },
            ),
            5,
        )
        resp = await client.invoke(addr, send_request("Small", b"x" * 1025), 5)
        assert resp.code == ResponseCode.MESSAGE_ILLEGAL and "maxMessageSize 1024" in resp.remark
        resp = await client.invoke(addr, send_request("Small", queue_id=7), 5)
        assert resp.code == ResponseCode.SYSTEM_ERROR and resp.remark.startswith("request queueId[7] is illegal")
        resp = await client.invoke(addr, send_request("bad topic"), 5)
        assert resp.code == ResponseCode.SYSTEM_ERROR and "illegal characters" in resp.remark
        bad = send_request("Small")
        del bad.ext_fields["b"]
        resp = await client.invoke(addr, bad, 5)
        assert resp.code == ResponseCode.SYSTEM_ERROR and "'b' is missing" in resp.remark
        resp = await client.invoke(
            addr, send_request("Small", b"garbage", code=RequestCode.SEND_BATCH_MESSAGE, batch=True), 5
        )
        assert resp.code == ResponseCode.MESSAGE_ILLEGAL
    finally:
        await broker.shutdown()
        await client.close()


async def test_retry_topic_promotes_to_dlq(broker, client):
    addr = broker.config.broker_addr
    resp = await client.invoke(addr, send_request("%RETRY%G9", reconsume_times=16, max_reconsume_times=16), 5)
    assert resp.code == ResponseCode.SUCCESS
    assert broker.store.get_max_offset_in_queue("%DLQ%G9", 0) == 1


async def test_query_offset_young_queue_and_commit(broker, client):
    addr = broker.config.broker_addr
    await client.invoke(addr, send_request("T6"), 5)
    q = {"consumerGroup": "G", "topic": "T6", "queueId": "0"}
    resp = await client.invoke(addr, RemotingCommand.request(RequestCode.QUERY_CONSUMER_OFFSET, dict(q)), 5)
    assert resp.code == ResponseCode.SUCCESS and resp.ext_fields["offset"] == "0"
    await client.invoke(
        addr, RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, {**q, "commitOffset": "1"}), 5
    )
    resp = await client.invoke(addr, RemotingCommand.request(RequestCode.QUERY_CONSUMER_OFFSET, dict(q)), 5)
    assert resp.ext_fields["offset"] == "1"
    resp = await client.invoke(
        addr, RemotingCommand.request(RequestCode.GET_MAX_OFFSET, {"topic": "T6", "queueId": "0"}), 5
    )
    assert resp.ext_fields["offset"] == "1"


def heartbeat_body(group, topic, sub="*", model="CLUSTERING"):
    return orjson.dumps(
        {
            "clientID": "127.0.0.1@test",
            "consumerDataSet": [
                {
                    "groupName": group,
                    "consumeType": "CONSUME_PASSIVELY",
                    "messageModel": model,
                    "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                    "subscriptionDataSet": [
                        {"topic": topic, "subString": sub, "subVersion": 5, "expressionType": "TAG"}
                    ],
                }
            ],
            "producerDataSet": [],
        }
    )


async def test_heartbeat_registers_group_and_go_style_pull(broker, client):
    addr = broker.config.broker_addr
    await client.invoke(addr, send_request("T7", props={"TAGS": "A"}), 5)
    # a pull without the subscription bit (the Go client) needs the heartbeat's subscription
    resp = await client.invoke(addr, pull_request("GG", "T7", 0, 0, sys_flag=0), 5)
    assert resp.code == ResponseCode.SUBSCRIPTION_NOT_EXIST
    hb = RemotingCommand.request(RequestCode.HEART_BEAT, {}, heartbeat_body("GG", "T7", "A"))
    assert (await client.invoke(addr, hb, 5)).code == ResponseCode.SUCCESS
    assert broker.topic_config_manager.select_topic_config("%RETRY%GG") is not None
    ids = await client.invoke(
        addr, RemotingCommand.request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "GG"}), 5
    )
    assert orjson.loads(bytes(ids.body)) == {"consumerIdList": ["127.0.0.1@test"]}
    pulled = await client.invoke(addr, pull_request("GG", "T7", 0, 0, sys_flag=0), 5)
    assert pulled.code == ResponseCode.SUCCESS
    newer = pull_request("GG", "T7", 0, 0, sys_flag=0)
    newer.ext_fields["subVersion"] = "6"
    assert (await client.invoke(addr, newer, 5)).code == ResponseCode.SUBSCRIPTION_NOT_LATEST
    missing = await client.invoke(
        addr, RemotingCommand.request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "nobody"}), 5
    )
    assert missing.code == ResponseCode.SYSTEM_ERROR and missing.remark == "no consumer for this group, nobody"


async def test_membership_change_notifies_the_group(broker, client):
    addr = broker.config.broker_addr
    notified = asyncio.Event()

    async def on_notify(channel, request):
        assert request.ext_fields["consumerGroup"] == "GN"
        notified.set()

    client.set_request_handler(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, on_notify)
    await client.invoke(addr, RemotingCommand.request(RequestCode.HEART_BEAT, {}, heartbeat_body("GN", "T8")), 5)
    other = RemotingClient()
    try:
        body = heartbeat_body("GN", "T8").replace(b"127.0.0.1@test", b"127.0.0.1@other")
        await other.invoke(addr, RemotingCommand.request(RequestCode.HEART_BEAT, {}, body), 5)
        await asyncio.wait_for(notified.wait(), 5)
    finally:
        await other.close()


async def test_unknown_code_and_bad_heartbeat(broker, client):
    addr = broker.config.broker_addr
    resp = await client.invoke(addr, RemotingCommand.request(4242, {}), 5)
    assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED and resp.remark == " request type 4242 not supported"
    resp = await client.invoke(addr, RemotingCommand.request(RequestCode.HEART_BEAT, {}, b"{not json"), 5)
    assert resp.code == ResponseCode.SYSTEM_ERROR and "bad heartbeat body" in resp.remark


async def test_messages_and_offsets_survive_restart(tmp_path, client):
    broker = await start_broker(tmp_path)
    addr = broker.config.broker_addr
    ports = {"listenPort": broker.config.listen_port, "namesrvListenPort": broker.config.namesrv_listen_port}
    for i in range(10):
        await client.invoke(addr, send_request("TR", f"m{i}".encode()), 5)
    await client.invoke(
        addr,
        RemotingCommand.request(
            RequestCode.UPDATE_CONSUMER_OFFSET,
            {"consumerGroup": "G", "topic": "TR", "queueId": "0", "commitOffset": "4"},
        ),
        5,
    )
    await broker.shutdown()
    await client.close()
    broker = await start_broker(tmp_path, **ports)
    client = RemotingClient()
    try:
        resp = await client.invoke(
            addr,
            RemotingCommand.request(
                RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": "G", "topic": "TR", "queueId": "0"}
            ),
            5,
        )
        assert resp.ext_fields["offset"] == "4"
        pulled = await client.invoke(addr, pull_request("G", "TR", 0, 4), 5)
        assert [m.body for m in decode_records(bytes(pulled.body))] == [f"m{i}".encode() for i in range(4, 10)]
    finally:
        await broker.shutdown()
        await client.close()
