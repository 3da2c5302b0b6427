"""Admin requests upstream's mqadmin sends, answered as upstream answers them (read with our AdminClient).

Each test names the mqadmin command whose requests it checks; the parsing mirrors what the Java tool
does with the answer (Long.parseLong of runtime-info values, fastjson MessageQueue keys, Properties).
"""

from __future__ import annotations

import logging

import orjson
import pytest
import structlog.testing
from tools_helpers import producer_heartbeat, pull, send_messages

from mqclient.admin import (
    AdminError,
    MessageQueue,
    create_offset_msg_id,
    decode_offset_msg_id,
)
from mqclient.fastjson import parse_fastjson
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand

# Keys upstream's clusterList / clusterList -m read from GET_BROKER_RUNTIME_INFO, and how it parses them.
CLUSTER_LIST_LONGS = (
    "msgPutTotalYesterdayMorning",
    "msgPutTotalTodayMorning",
    "msgPutTotalTodayNow",
    "msgGetTotalYesterdayMorning",
    "msgGetTotalTodayMorning",
    "msgGetTotalTodayNow",
    "earliestMessageTimeStamp",
)
CLUSTER_LIST_STRINGS = (
    "sendThreadPoolQueueSize",
    "pullThreadPoolQueueSize",
    "sendThreadPoolQueueHeadWaitTimeMills",
    "pullThreadPoolQueueHeadWaitTimeMills",
    "pageCacheLockTimeMills",
    "brokerVersionDesc",
)
# Further keys of upstream's prepareRuntimeInfo (brokerStatus prints them all).
UPSTREAM_RUNTIME_KEYS = (
    "brokerVersion",
    "sendThreadPoolQueueCapacity",
    "pullThreadPoolQueueCapacity",
    "queryThreadPoolQueueSize",
    "queryThreadPoolQueueCapacity",
    "EndTransactionQueueSize",
    "EndTransactionThreadPoolQueueCapacity",
    "dispatchBehindBytes",
    "queryThreadPoolQueueHeadWaitTimeMills",
    "startAcceptSendRequestTimeStamp",
    "remainTransientStoreBufferNumbs",
    "remainHowManyDataToFlush",
    "commitLogDirCapacity",
    "bootTimestamp",
    "runtime",
    "putMessageTimesTotal",
    "putMessageSizeTotal",
    "getFoundTps",
    "getMissTps",
    "getTransferedTps",
    "commitLogMinOffset",
    "commitLogMaxOffset",
    "consumeQueueDiskRatio",
)


# ---------------------------------------------------------------------------------------- name server


async def test_cluster_info_106_has_master_address_and_cluster_table(rocketmq_broker, admin):
    """clusterList, updateTopic -c, deleteTopic -c: GET_BROKER_CLUSTER_INFO."""
    info = await admin.cluster_info()
    bd = info["brokerAddrTable"][rocketmq_broker.broker_name]
    assert bd["brokerAddrs"] == {"0": rocketmq_broker.broker_addr}
    assert bd["cluster"] == rocketmq_broker.cluster_name
    assert info["clusterAddrTable"] == {rocketmq_broker.cluster_name: [rocketmq_broker.broker_name]}
    assert await admin.masters(rocketmq_broker.cluster_name) == {
        rocketmq_broker.broker_name: rocketmq_broker.broker_addr
    }
    with pytest.raises(AdminError, match="not known"):
        await admin.masters("NoSuchCluster")


async def test_topic_list_206_and_route_105(rocketmq_broker, admin, topic):
    """topicList, topicRoute."""
    assert topic in await admin.topic_list()
    route = await admin.topic_route(topic)
    assert route["queueDatas"] == [
        {
            "brokerName": rocketmq_broker.broker_name,
            "perm": 6,
            "readQueueNums": 4,
            "topicSysFlag": 0,
            "writeQueueNums": 4,
        }
    ]
    with pytest.raises(AdminError) as err:
        await admin.topic_route("%DLQ%nobody")  # the embedded name server invents routes for plain names
    assert err.value.code == ResponseCode.TOPIC_NOT_EXIST


# ---------------------------------------------------------------------------------------- topics


async def test_update_topic_17_and_delete_topic_215_216(rocketmq_broker, admin):
    """updateTopic -b, deleteTopic -c: create, then delete from the broker and the name server."""
    await admin.create_topic(rocketmq_broker.broker_addr, "T_lifecycle", read_queues=2, write_queues=3, perm=6)
    route = await admin.topic_route("T_lifecycle")
    assert route["queueDatas"][0]["readQueueNums"] == 2 and route["queueDatas"][0]["writeQueueNums"] == 3
    await admin.delete_topic_in_broker(rocketmq_broker.broker_addr, "T_lifecycle")
    await admin.delete_topic_in_namesrv("T_lifecycle", rocketmq_broker.cluster_name)
    assert "T_lifecycle" not in await admin.topic_list()
    # Deleting what is not there is fine upstream too.
    await admin.delete_topic_in_broker(rocketmq_broker.broker_addr, "T_lifecycle")


@pytest.mark.parametrize(
    "name, remark",
    [
        ("TBW102", "The topic[TBW102] is conflict with system topic."),
        ("SCHEDULE_TOPIC_XXXX", "The topic[SCHEDULE_TOPIC_XXXX] is conflict with system topic."),
        ("rmq_sys_anything", "The topic[rmq_sys_anything] is conflict with system topic."),
        ("bad topic!", "The specified topic contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"),
    ],
)
async def test_delete_topic_215_refuses_system_and_bad_names(rocketmq_broker, admin, name, remark):
    with pytest.raises(AdminError) as err:
        await admin.delete_topic_in_broker(rocketmq_broker.broker_addr, name)
    assert (err.value.code, err.value.remark) == (ResponseCode.SYSTEM_ERROR, remark)
    if name == "TBW102":  # and nothing was deleted
        assert "TBW102" in await admin.topic_list()


async def test_create_17_and_delete_215_share_upstreams_system_topic_set(rocketmq_broker, admin):
    """TopicValidator.isSystemTopic for both: the fixed set, the rmq_sys_ prefix and the topics made at start."""
    addr = rocketmq_broker.broker_addr
    for name in ("rmq_sys_anything", "RMQ_SYS_TRACE_TOPIC", "SCHEDULE_TOPIC_XXXX"):
        with pytest.raises(AdminError) as err:
            await admin.create_topic(addr, name, read_queues=1, write_queues=1, perm=6)
        assert (err.value.code, err.value.remark) == (
            ResponseCode.SYSTEM_ERROR,
            f"The topic[{name}] is conflict with system topic.",
        )
    reply = f"{rocketmq_broker.cluster_name}_REPLY_TOPIC"  # created at start, so a system topic of this broker
    with pytest.raises(AdminError) as err:
        await admin.delete_topic_in_broker(addr, reply)
    assert err.value.remark == f"The topic[{reply}] is conflict with system topic."


async def test_topic_stats_202_uses_fastjson_mq_keys(rocketmq_broker, admin, topic):
    """topicStatus: TopicStatsTable with MessageQueue object keys; empty queues read 0, never -1."""
    await send_messages(rocketmq_broker, topic, 3, queue_id=1)
    resp = await admin.invoke(rocketmq_broker.broker_addr, RequestCode.GET_TOPIC_STATS_INFO, {"topic": topic})
    text = bytes(resp.body).decode()
    assert text.startswith('{"offsetTable":{{"brokerName":')  # an object as a key: fastjson's form
    stats = await admin.topic_stats(rocketmq_broker.broker_addr, topic)
    assert sorted(stats) == [MessageQueue(topic, rocketmq_broker.broker_name, q) for q in range(4)]
    q1 = stats[MessageQueue(topic, rocketmq_broker.broker_name, 1)]
    assert (q1["minOffset"], q1["maxOffset"]) == (0, 3) and q1["lastUpdateTimestamp"] > 0
    q0 = stats[MessageQueue(topic, rocketmq_broker.broker_name, 0)]
    assert (q0["minOffset"], q0["maxOffset"], q0["lastUpdateTimestamp"]) == (0, 0, 0)
    with pytest.raises(AdminError) as err:
        await admin.topic_stats(rocketmq_broker.broker_addr, "NoSuchTopic_stats")
    assert err.value.code == ResponseCode.TOPIC_NOT_EXIST


# ---------------------------------------------------------------------------------------- brokers


async def test_runtime_info_28_has_every_key_cluster_list_parses(rocketmq_broker, admin, topic):
    """clusterList (-m) and brokerStatus: every key present and parseable as the Java tool parses it."""
    assert (await admin.runtime_info(rocketmq_broker.broker_addr))["earliestMessageTimeStamp"] == "-1"  # empty
    await send_messages(rocketmq_broker, topic, 2)
    kv = await admin.runtime_info(rocketmq_broker.broker_addr)
    for key in CLUSTER_LIST_LONGS:
        int(kv[key])  # Long.parseLong
    for key in CLUSTER_LIST_STRINGS + UPSTREAM_RUNTIME_KEYS:
        assert key in kv, key
    float(kv["putTps"].split(" ")[0])  # Double.parseDouble(putTps.split(" ")[0])
    float(kv["getTransferedTps"].split(" ")[0])
    float(kv["commitLogDiskRatio"])
    assert kv["brokerVersionDesc"] == "V4_9_8"
    assert int(kv["msgPutTotalTodayNow"]) >= 2
    assert int(kv["earliestMessageTimeStamp"]) > 0
    assert kv["commitLogDirCapacity"].startswith("Total : ") and kv["commitLogDirCapacity"].endswith(".")


async def test_get_broker_config_26_is_properties_with_version_header(rocketmq_broker, admin):
    """getBrokerConfig: a Properties body, the DataVersion JSON in the header, our run-time switches listed."""
    resp = await admin.invoke(rocketmq_broker.broker_addr, RequestCode.GET_BROKER_CONFIG)
    assert set(orjson.loads(resp.ext_fields["version"])) == {"counter", "timestamp"}
    props = await admin.broker_config(rocketmq_broker.broker_addr)
    assert props["brokerName"] == rocketmq_broker.broker_name
    assert props["listenPort"] == rocketmq_broker.broker_addr.rsplit(":", 1)[1]
    assert props["logLevel"] in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL", "NOTSET")
    assert props["requestLogEnable"] in ("true", "false")


async def test_update_broker_config_25_changes_a_live_key(rocketmq_broker, admin):
    """updateBrokerConfig -k waitTimeMillsInSendQueue -v 321: applied, visible in getBrokerConfig."""
    await admin.update_broker_config(rocketmq_broker.broker_addr, {"waitTimeMillsInSendQueue": "321"})
    assert (await admin.broker_config(rocketmq_broker.broker_addr))["waitTimeMillsInSendQueue"] == "321"
    assert rocketmq_broker.controller.config.wait_time_mills_in_send_queue == 321


@pytest.mark.parametrize(
    "props, code, remark",
    [
        ({"brokerConfigPath": "/etc/x"}, ResponseCode.NO_PERMISSION, "Can not update config in black list."),
        ({"configBlackList": "x"}, ResponseCode.NO_PERMISSION, "Can not update config in black list."),
        ({"noSuchKey": "1"}, ResponseCode.SYSTEM_ERROR, "unknown configuration key 'noSuchKey'"),
        ({"listenPort": "1234"}, ResponseCode.SYSTEM_ERROR, "cannot change while the broker runs: listenPort"),
        ({"logLevel": "LOUD"}, ResponseCode.SYSTEM_ERROR, "unknown log level 'LOUD'"),
        # found by the fuzzer: a number above CRITICAL silenced the broker's log for good
        ({"logLevel": "99999999999999999999"}, ResponseCode.SYSTEM_ERROR, "unknown log level '99999999999999999999'"),
        ({"logLevel": "51"}, ResponseCode.SYSTEM_ERROR, "unknown log level '51'"),
        ({"requestLogEnable": "1"}, ResponseCode.SYSTEM_ERROR, "requestLogEnable must be true or false"),
    ],
)
async def test_update_broker_config_25_refusals(rocketmq_broker, admin, props, code, remark):
    with pytest.raises(AdminError) as err:
        await admin.update_broker_config(rocketmq_broker.broker_addr, props)
    assert err.value.code == code
    assert remark in err.value.remark


async def test_update_broker_config_25_switches_log_level_and_request_logging(rocketmq_broker, admin):
    """updateBrokerConfig -k logLevel / requestLogEnable: applied at once, one debug line per request."""
    root, request_logger = logging.getLogger(), logging.getLogger("broker.requests")
    before = root.level
    try:
        await admin.update_broker_config(rocketmq_broker.broker_addr, {"logLevel": "ERROR"})
        assert root.level == logging.ERROR
        assert (await admin.broker_config(rocketmq_broker.broker_addr))["logLevel"] == "ERROR"
        await admin.update_broker_config(rocketmq_broker.broker_addr, {"requestLogEnable": "true"})
        assert request_logger.isEnabledFor(logging.DEBUG)  # on even though the root says ERROR
        with structlog.testing.capture_logs() as events:
            await admin.runtime_info(rocketmq_broker.broker_addr)
        mine = [e for e in events if e.get("code") == RequestCode.GET_BROKER_RUNTIME_INFO]
        assert len(mine) == 1, events
        assert mine[0]["event"] == "request" and mine[0]["log_level"] == "debug"
        assert mine[0]["answer"] == 0 and mine[0]["queue"] == "admin" and mine[0]["elapsed_ms"] >= 0
        assert mine[0]["remote"].startswith("127.0.0.1:") and mine[0]["opaque"] > 0
        await admin.update_broker_config(rocketmq_broker.broker_addr, {"requestLogEnable": "false"})
        with structlog.testing.capture_logs() as events:
            await admin.runtime_info(rocketmq_broker.broker_addr)
        assert not [e for e in events if e.get("event") == "request"]
        await admin.update_broker_config(rocketmq_broker.broker_addr, {"logLevel": "debug"})  # names in any case
        assert root.level == logging.DEBUG
        # off holds even at DEBUG: one line per request would drown everything else
        assert not request_logger.isEnabledFor(logging.DEBUG)
    finally:
        root.setLevel(before)
        request_logger.setLevel(logging.NOTSET)


# ---------------------------------------------------------------------------------------- stats


async def test_view_broker_stats_data_315(rocketmq_broker, admin, topic, rclient):
    """statsAll: TOPIC_PUT_NUMS by topic, GROUP_GET_NUMS by topic@group, 'not exist' for the rest."""
    await send_messages(rocketmq_broker, topic, 5, queue_id=0)
    bsd = await admin.view_stats(rocketmq_broker.broker_addr, "TOPIC_PUT_NUMS", topic)
    assert set(bsd) == {"statsMinute", "statsHour", "statsDay"}
    for window in bsd.values():
        assert set(window) == {"sum", "tps", "avgpt"}
        assert window["sum"] == 5
    resp = await pull(rclient, rocketmq_broker, topic, "CG_stats", 0)
    assert resp.code == ResponseCode.SUCCESS
    bsd = await admin.view_stats(rocketmq_broker.broker_addr, "GROUP_GET_NUMS", f"{topic}@CG_stats")
    assert bsd["statsDay"]["sum"] == 5
    size = await admin.view_stats(rocketmq_broker.broker_addr, "TOPIC_PUT_SIZE", topic)
    assert size["statsMinute"]["sum"] > 0
    with pytest.raises(AdminError) as err:
        await admin.view_stats(rocketmq_broker.broker_addr, "TOPIC_PUT_NUMS", "never_written")
    assert err.value.code == ResponseCode.SYSTEM_ERROR
    assert err.value.remark == "The stats <TOPIC_PUT_NUMS> <never_written> not exist"
    with pytest.raises(AdminError, match="statsName"):
        await admin.invoke(rocketmq_broker.broker_addr, RequestCode.VIEW_BROKER_STATS_DATA, {"statsKey": "x"})


# ---------------------------------------------------------------------------------------- messages


async def test_query_message_12_by_key_and_view_message_33(rocketmq_broker, admin, topic):
    """queryMsgByKey (12 with the index) and queryMsgById (33 with the offset id)."""
    results = await send_messages(rocketmq_broker, topic, 3, keys="order-42")
    msgs = await admin.query_message(rocketmq_broker.broker_addr, topic, "order-42")
    assert len(msgs) == 3 and all("order-42" in m.keys and m.topic == topic for m in msgs)
    assert {m.msg_id for m in msgs} == {r.msg_id for r in results}  # UNIQ_KEY set by the producer
    assert await admin.query_message(rocketmq_broker.broker_addr, topic, "no-such-key") == []
    offset_id = results[1].offset_msg_id
    addr, phy = decode_offset_msg_id(offset_id)
    assert addr == rocketmq_broker.broker_addr
    msg = await admin.view_message(addr, phy)
    assert msg.offset_msg_id == offset_id and msg.body == b"body-1" and msg.tags == "TagA"
    by_uniq = await admin.query_message(rocketmq_broker.broker_addr, topic, results[2].msg_id, unique_key=True)
    assert [m.body for m in by_uniq] == [b"body-2"]
    with pytest.raises(AdminError) as err:
        await admin.view_message(addr, phy + 10_000_000)
    assert err.value.code == ResponseCode.SYSTEM_ERROR


# ---------------------------------------------------------------------------------------- connections


async def test_producer_connection_204(rocketmq_broker, admin, rclient):
    await producer_heartbeat(rclient, rocketmq_broker, "PG_conn", "127.0.0.1@4242")
    pc = await admin.producer_connection(rocketmq_broker.broker_addr, "PG_conn")
    [conn] = pc["connectionSet"]
    assert conn["clientId"] == "127.0.0.1@4242" and conn["language"] == "JAVA" and isinstance(conn["version"], int)
    with pytest.raises(AdminError) as err:
        await admin.producer_connection(rocketmq_broker.broker_addr, "PG_nobody")
    assert (err.value.code, err.value.remark) == (ResponseCode.SYSTEM_ERROR, "the producer group[PG_nobody] not exist")


async def test_unknown_admin_code_answers_not_supported(rocketmq_broker, rclient):
    resp = await rclient.invoke(rocketmq_broker.broker_addr, RemotingCommand.request(4999), 5.0)
    assert (resp.code, resp.remark) == (ResponseCode.REQUEST_CODE_NOT_SUPPORTED, " request type 4999 not supported")


# ---------------------------------------------------------------------------------------- parsing


def test_parse_fastjson_object_and_numeric_keys():
    text = (
        '{"offsetTable":{{"topic":"t","queueId":1,"brokerName":"b"}:{"maxOffset":3},'
        '{"brokerName":"b","queueId":0,"topic":"t"}:{"maxOffset":0}},"brokerAddrs":{0:"a:1", 1 : "b:2"}}'
    )
    data = parse_fastjson(text)
    keys = sorted(MessageQueue.from_key(k) for k in data["offsetTable"])
    assert keys == [MessageQueue("t", "b", 0), MessageQueue("t", "b", 1)]
    assert data["brokerAddrs"] == {"0": "a:1", "1": "b:2"}
    assert parse_fastjson(b"") is None
    assert parse_fastjson('{"a":[1,{"b":null}],"c":true}') == {"a": [1, {"b": None}], "c": True}


@pytest.mark.parametrize("text", ['{"a":1', '{"a" 1}', "[1,2", '{"a":1} x', '{"a":tru}'])
def test_parse_fastjson_rejects_broken_text(text):
    with pytest.raises(ValueError):
        parse_fastjson(text)


def test_offset_msg_id_round_trip_and_refusals():
    msg_id = create_offset_msg_id("10.1.2.3:10911", 123456789)
    assert msg_id == "0A01020300002A9F00000000075BCD15"
    assert decode_offset_msg_id(msg_id) == ("10.1.2.3:10911", 123456789)
    for bad in ("xyz", "0A01020300002A9F00000000075BCD1", "ZZ010203000000000000000000000000"):
        with pytest.raises(ValueError):
            decode_offset_msg_id(bad)
