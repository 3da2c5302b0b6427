"""The ``mqadmin`` CLI against an in-process broker: each upstream command, its table and its ``--json``."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time

import pytest
from tools_helpers import producer_heartbeat, pull, run_cli, run_json, send_messages

from mqclient.mqadmin import main
from mqclient.mqadmin.common import parse_timestamp, table
from remoting.client import RemotingClient
from remoting.codes import RequestCode


def commit_offset(broker, group: str, topic: str, queue_id: int, offset: int) -> None:
    resp = broker.request(
        RequestCode.UPDATE_CONSUMER_OFFSET,
        {"consumerGroup": group, "topic": topic, "queueId": queue_id, "commitOffset": offset},
    )
    assert resp.code == 0, resp.remark


def query_offset(broker, group: str, topic: str, queue_id: int) -> int:
    resp = broker.request(
        RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": group, "topic": topic, "queueId": queue_id}
    )
    assert resp.code == 0, resp.remark
    return int(resp.ext_fields["offset"])


async def _pull_all(broker, topic: str, group: str) -> int:
    client = RemotingClient()
    try:
        total = 0
        for qid in range(4):
            resp = await pull(client, broker, topic, group, qid)
            if resp.code == 0:
                total += int(resp.ext_fields["nextBeginOffset"])
        return total
    finally:
        await client.close()


@pytest.fixture
def live_consumer(rocketmq_broker, bg_loop, topic):
    """A push consumer (mqclient) of ``topic`` in group CG_live, running on a background loop."""
    from mqclient.consumer import ConsumerConfig, PushConsumer

    received = []

    async def make():
        consumer = PushConsumer(
            rocketmq_broker.namesrv_addr,
            topic,
            ConsumerConfig(group="CG_live", commit_interval_s=0.2, rebalance_interval_s=1.0),
            lambda msg, mq: received.append(msg),
        )
        await consumer.start()
        return consumer

    consumer = bg_loop.run(make())
    consumer.received = received
    yield consumer
    bg_loop.run(consumer.close())


# ------------------------------------------------------------------------------------------ cluster


def test_cluster_list(capsys, rocketmq_broker, topic):
    asyncio.run(send_messages(rocketmq_broker, topic, 3))
    code, out, _ = run_cli(capsys, rocketmq_broker, "clusterList")
    assert code == 0
    header, row = out.splitlines()
    assert header.split()[:4] == ["#Cluster", "Name", "#Broker", "Name"]
    assert row.split()[:5] == [
        rocketmq_broker.cluster_name,
        rocketmq_broker.broker_name,
        "0",
        rocketmq_broker.broker_addr,
        "V4_9_8",
    ]
    [item] = run_json(capsys, rocketmq_broker, "clusterList")
    assert item["addr"] == rocketmq_broker.broker_addr and item["brokerId"] == 0 and item["hours"] >= 0
    [more] = run_json(capsys, rocketmq_broker, "clusterList", "-m")
    assert more["inTotalToday"] == 3 and more["inTotalYest"] == 0


def test_broker_status_and_config(capsys, rocketmq_broker):
    status = run_json(capsys, rocketmq_broker, "brokerStatus", "-b", rocketmq_broker.broker_addr)
    assert status["brokerVersionDesc"] == "V4_9_8" and "sendThreadPoolQueueSize" in status
    code, out, _ = run_cli(capsys, rocketmq_broker, "brokerStatus", "-c", rocketmq_broker.cluster_name)
    assert code == 0 and "brokerVersionDesc" in out
    config = run_json(capsys, rocketmq_broker, "getBrokerConfig", "-b", rocketmq_broker.broker_addr)
    assert config["brokerName"] == rocketmq_broker.broker_name
    code, out, _ = run_cli(
        capsys,
        rocketmq_broker,
        "updateBrokerConfig",
        "-c",
        rocketmq_broker.cluster_name,
        "-k",
        "waitTimeMillsInPullQueue",
        "-v",
        "4321",
    )
    assert (code, out.strip()) == (0, f"update broker config success, {rocketmq_broker.broker_addr}")
    config = run_json(capsys, rocketmq_broker, "getBrokerConfig", "-c", rocketmq_broker.cluster_name)
    assert config["waitTimeMillsInPullQueue"] == "4321"
    code, _, err = run_cli(
        capsys, rocketmq_broker, "updateBrokerConfig", "-b", rocketmq_broker.broker_addr, "-k", "noSuchKey", "-v", "1"
    )
    assert code == 1 and "unknown configuration key 'noSuchKey'" in err


def test_set_log_level(capsys, rocketmq_broker):
    import logging

    before = logging.getLogger().level
    try:
        code, out, _ = run_cli(
            capsys,
            rocketmq_broker,
            "setLogLevel",
            "-b",
            rocketmq_broker.broker_addr,
            "-l",
            "WARNING",
            "--request-log",
            "true",
        )
        assert code == 0 and "logLevel=WARNING, requestLogEnable=true" in out
        config = run_json(capsys, rocketmq_broker, "getBrokerConfig", "-b", rocketmq_broker.broker_addr)
        assert (config["logLevel"], config["requestLogEnable"]) == ("WARNING", "true")
    finally:
        logging.getLogger().setLevel(before)
        logging.getLogger("broker.requests").setLevel(logging.NOTSET)
    assert run_cli(capsys, rocketmq_broker, "setLogLevel", "-b", rocketmq_broker.broker_addr)[0] == 2


# ------------------------------------------------------------------------------------------ topics


def test_topic_list_route_status(capsys, rocketmq_broker, topic):
    asyncio.run(send_messages(rocketmq_broker, topic, 2))
    code, out, _ = run_cli(capsys, rocketmq_broker, "topicList")
    assert code == 0 and topic in out.splitlines()
    route = run_json(capsys, rocketmq_broker, "topicRoute", "-t", topic)
    assert route["brokerDatas"][0]["brokerAddrs"] == {"0": rocketmq_broker.broker_addr}
    code, out, _ = run_cli(capsys, rocketmq_broker, "topicRoute", "-t", topic, "-l")
    assert code == 0 and out.splitlines()[-1].split() == ["Total:", "1", "4", "4"]
    status = run_json(capsys, rocketmq_broker, "topicStatus", "-t", topic)
    assert [q["queueId"] for q in status] == [0, 1, 2, 3]
    assert sum(q["maxOffset"] for q in status) == 2
    code, out, _ = run_cli(capsys, rocketmq_broker, "topicStatus", "-t", topic)
    assert out.splitlines()[0].split()[:4] == ["#Broker", "Name", "#QID", "#Min"]


def test_update_and_delete_topic(capsys, rocketmq_broker):
    code, out, _ = run_cli(
        capsys,
        rocketmq_broker,
        "updateTopic",
        "-c",
        rocketmq_broker.cluster_name,
        "-t",
        "T_cli_order",
        "-r",
        "2",
        "-w",
        "3",
        "-o",
        "true",
    )
    assert code == 0 and f"create topic to {rocketmq_broker.broker_addr} success." in out
    route = run_json(capsys, rocketmq_broker, "topicRoute", "-t", "T_cli_order")
    assert (route["queueDatas"][0]["readQueueNums"], route["queueDatas"][0]["writeQueueNums"]) == (2, 3)
    # The ordered layout went to the name server's KV store, as upstream's updateTopic -o true does.
    kv = rocketmq_broker.request(
        RequestCode.GET_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG", "key": "T_cli_order"}, namesrv=True
    )
    assert kv.ext_fields["value"] == f"{rocketmq_broker.broker_name}:3"
    code, out, _ = run_cli(
        capsys, rocketmq_broker, "updateTopic", "-b", rocketmq_broker.broker_addr, "-t", "T_cli_b", "-p", "4"
    )
    assert code == 0 and '"perm": 4' in out
    code, out, _ = run_cli(
        capsys, rocketmq_broker, "deleteTopic", "-t", "T_cli_order", "-c", rocketmq_broker.cluster_name
    )
    assert code == 0 and "delete topic [T_cli_order] from NameServer success." in out
    assert "T_cli_order" not in run_json(capsys, rocketmq_broker, "topicList")
    code, _, err = run_cli(capsys, rocketmq_broker, "updateTopic", "-t", "T_x")
    assert code == 2 and "-b host:port or a cluster with -c" in err
    code, _, err = run_cli(capsys, rocketmq_broker, "updateTopic", "-b", rocketmq_broker.broker_addr, "-t", "TBW102")
    assert code == 1 and "conflict with system topic" in err


# ------------------------------------------------------------------------------------------ consumers


def test_consumer_progress_and_stats_all_offline_group(capsys, rocketmq_broker, topic):
    asyncio.run(send_messages(rocketmq_broker, topic, 8))
    pulled = asyncio.run(_pull_all(rocketmq_broker, topic, "CG_off"))
    assert pulled == 8
    for qid in range(4):
        commit_offset(rocketmq_broker, "CG_off", topic, qid, 1)
    rocketmq_broker.create_topic("%RETRY%CG_off", 1)  # what a consumer's heartbeat would have created
    progress = run_json(capsys, rocketmq_broker, "consumerProgress", "-g", "CG_off")
    mine = [q for q in progress["queues"] if q["topic"] == topic]
    assert sum(q["brokerOffset"] for q in mine) == 8 and sum(q["consumerOffset"] for q in mine) == 4
    assert progress["diffTotal"] == 4
    code, out, _ = run_cli(capsys, rocketmq_broker, "consumerProgress", "-g", "CG_off")
    assert code == 0 and out.rstrip().endswith("Diff Total: 4")
    groups = run_json(capsys, rocketmq_broker, "consumerProgress")
    [off] = [g for g in groups if g["group"] == "CG_off"]
    assert (off["count"], off["version"], off["diffTotal"]) == (0, "OFFLINE", 4)
    stats = run_json(capsys, rocketmq_broker, "statsAll", "-t", topic)
    [row] = stats
    assert (row["consumerGroup"], row["inMsg24Hour"], row["outMsg24Hour"], row["accumulation"]) == ("CG_off", 8, 8, 4)
    code, out, _ = run_cli(capsys, rocketmq_broker, "statsAll", "-a")
    assert code == 0 and topic in out and "TBW102" not in out  # -a: active topics only


def test_reset_offset_by_time_offline_group_falls_back(capsys, rocketmq_broker, topic):
    """222 answers CONSUMER_NOT_ONLINE → upstream's old way: 208, then 29/30 and 15 per queue."""
    asyncio.run(send_messages(rocketmq_broker, topic, 4, queue_id=0))
    for qid in range(4):  # upstream: a queue without an offset makes 222 answer "group not exist"
        commit_offset(rocketmq_broker, "CG_reset", topic, qid, 4 if qid == 0 else 0)
    rocketmq_broker.create_topic("%RETRY%CG_reset", 1)
    result = run_json(capsys, rocketmq_broker, "resetOffsetByTime", "-g", "CG_reset", "-t", topic, "-s", "0")
    assert result["offline"] is True
    q0 = next(q for q in result["offsets"] if q["queueId"] == 0)
    assert (q0["consumerOffset"], q0["timestampOffset"], q0["rollbackOffset"]) == (4, 0, 0)
    assert query_offset(rocketmq_broker, "CG_reset", topic, 0) == 0
    result = run_json(capsys, rocketmq_broker, "resetOffsetByTime", "-g", "CG_reset", "-t", topic, "-s", "now")
    assert query_offset(rocketmq_broker, "CG_reset", topic, 0) == 4
    code, out, _ = run_cli(
        capsys, rocketmq_broker, "resetOffsetByTime", "-g", "CG_reset", "-t", topic, "-s", "2000-01-01#00:00:00:000"
    )
    assert code == 0 and out.startswith("rollback consumer offset by specified group[CG_reset]")
    code, _, err = run_cli(capsys, rocketmq_broker, "resetOffsetByTime", "-g", "CG_reset", "-t", topic, "-s", "noon")
    assert code == 2 and "bad timestamp" in err


def test_online_consumer_connection_progress_and_reset(capsys, rocketmq_broker, topic, live_consumer):
    asyncio.run(send_messages(rocketmq_broker, topic, 6))
    deadline = time.monotonic() + 20
    while len(live_consumer.received) < 6 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(live_consumer.received) == 6
    cc = run_json(capsys, rocketmq_broker, "consumerConnection", "-g", "CG_live")
    assert [c["clientId"] for c in cc["connectionSet"]] == [live_consumer.client_id]
    assert topic in cc["subscriptionTable"] and cc["messageModel"] == "CLUSTERING"
    code, out, _ = run_cli(
        capsys, rocketmq_broker, "consumerConnection", "-g", "CG_live", "-b", rocketmq_broker.broker_addr
    )
    assert code == 0 and "Below is subscription:" in out and live_consumer.client_id in out
    while time.monotonic() < deadline:  # the consumer commits every 0.2 s
        progress = run_json(capsys, rocketmq_broker, "consumerProgress", "-g", "CG_live")
        if (
            progress["diffTotal"] == 0
            and sum(q["consumerOffset"] for q in progress["queues"] if q["topic"] == topic) == 6
        ):
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"offsets never committed: {progress}")
    groups = run_json(capsys, rocketmq_broker, "topicList", "-c")
    assert {"cluster": rocketmq_broker.cluster_name, "topic": topic, "consumerGroup": "CG_live"} in groups
    # Online group: the broker itself resets (222 → 220 to the client) and answers the new offsets.
    result = run_json(capsys, rocketmq_broker, "resetOffsetByTime", "-g", "CG_live", "-t", topic, "-s", "0")
    assert "offline" not in result and len(result["offsets"]) == 4
    assert all(q["offset"] == 0 for q in result["offsets"])


def test_producer_connection(capsys, rocketmq_broker, topic):
    async def beat():
        client = RemotingClient()
        try:
            await producer_heartbeat(client, rocketmq_broker, "PG_cli", "10.0.0.9@77")
            code, out, err = await asyncio.to_thread(
                run_cli, capsys, rocketmq_broker, "producerConnection", "-g", "PG_cli", "-t", topic
            )
            return code, out, err
        finally:
            await client.close()

    code, out, err = asyncio.run(beat())
    assert code == 0, err
    assert out.splitlines()[1].split()[:2] == ["0001", "10.0.0.9@77"]
    code, _, err = run_cli(capsys, rocketmq_broker, "producerConnection", "-g", "PG_none", "-t", topic)
    assert code == 1 and "the producer group[PG_none] not exist" in err


# ------------------------------------------------------------------------------------------ messages


def test_query_msg_by_key_and_id(capsys, rocketmq_broker, topic):
    results = asyncio.run(send_messages(rocketmq_broker, topic, 2, keys="K1 K2"))
    asyncio.run(send_messages(rocketmq_broker, topic, 1, keys="K3"))
    found = run_json(capsys, rocketmq_broker, "queryMsgByKey", "-t", topic, "-k", "K2")
    assert sorted(m["msgId"] for m in found) == sorted(r.msg_id for r in results)
    code, out, _ = run_cli(capsys, rocketmq_broker, "queryMsgByKey", "-t", topic, "-k", "K3")
    assert code == 0 and len(out.splitlines()) == 2
    [msg] = run_json(capsys, rocketmq_broker, "queryMsgById", "-i", results[0].offset_msg_id)
    assert msg["offsetMsgId"] == results[0].offset_msg_id and msg["properties"]["KEYS"] == "K1 K2"
    code, out, _ = run_cli(
        capsys, rocketmq_broker, "queryMsgById", "-i", f"{results[0].offset_msg_id},{results[1].offset_msg_id}"
    )
    assert code == 0 and out.count("OffsetID:") == 2 and "Store Host:" in out
    # A client id (UNIQ_KEY) needs the topic; without it the tool says so.
    [by_uniq] = run_json(capsys, rocketmq_broker, "queryMsgById", "-i", results[1].msg_id, "-t", topic)
    assert by_uniq["offsetMsgId"] == results[1].offset_msg_id
    code, _, err = run_cli(capsys, rocketmq_broker, "queryMsgById", "-i", results[1].msg_id)
    assert code == 1 and "-t" in err
    code, _, err = run_cli(
        capsys, rocketmq_broker, "queryMsgById", "-i", "FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF", "-t", topic
    )
    assert code == 1 and "no message" in err


# ------------------------------------------------------------------------------------------ faults


def test_inject_and_clear_faults(capsys, rocketmq_broker):
    code, out, _ = run_cli(
        capsys,
        rocketmq_broker,
        "injectFault",
        "-b",
        rocketmq_broker.broker_addr,
        "-k",
        "stall_queue",
        "--target",
        "query",
        "-d",
        "60000",
    )
    assert code == 0 and "stall_queue on query for 60000 ms armed" in out
    assert any(k.startswith("stall_queue") for k in rocketmq_broker.controller.fault_injector.active)
    code, out, _ = run_cli(capsys, rocketmq_broker, "clearFaults", "-c", rocketmq_broker.cluster_name)
    assert code == 0 and "faults cleared" in out
    assert rocketmq_broker.controller.fault_injector.active == {}
    code, _, err = run_cli(
        capsys, rocketmq_broker, "injectFault", "-b", rocketmq_broker.broker_addr, "-k", "stall_append"
    )
    assert code == 2 and "-d" in err
    code, _, err = run_cli(
        capsys,
        rocketmq_broker,
        "injectFault",
        "-b",
        rocketmq_broker.broker_addr,
        "-k",
        "stall_queue",
        "--target",
        "nosuch",
        "-d",
        "10",
    )
    assert code == 1 and "unknown queue 'nosuch'" in err


@pytest.mark.rocketmq_broker_config(faultInjectionEnable=False)
def test_inject_fault_refused_when_disabled(capsys, rocketmq_broker):
    code, _, err = run_cli(
        capsys, rocketmq_broker, "injectFault", "-b", rocketmq_broker.broker_addr, "-k", "stall_append", "-d", "100"
    )
    assert code == 1 and "fault injection is disabled" in err and "code 16" in err


# ------------------------------------------------------------------------------------------ errors and process


def test_unreachable_name_server_is_a_clear_error(capsys):
    from broker.testing.ports import free_port

    code = main(["clusterList", "-n", f"127.0.0.1:{free_port()}", "--timeout", "1"])
    err = capsys.readouterr().err
    assert code == 1 and err.startswith("mqadmin clusterList failed: 127.0.0.1:")


def test_console_script_in_a_subprocess(rocketmq_broker):
    env = {**os.environ, "NAMESRV_ADDR": rocketmq_broker.namesrv_addr}
    proc = subprocess.run(
        [sys.executable, "-m", "mqclient.mqadmin", "clusterList", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)[0]["addr"] == rocketmq_broker.broker_addr
    proc = subprocess.run(
        [sys.executable, "-m", "mqclient.mqadmin", "noSuchCommand"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2 and "invalid choice" in proc.stderr


def test_table_and_timestamp_helpers():
    assert table(["#A", "#Num"], [["x", 1], ["yy", 22]]).splitlines() == ["#A  #Num", "x      1", "yy    22"]
    assert parse_timestamp("now") == -1 and parse_timestamp("1700000000000") == 1700000000000
    assert parse_timestamp("2024-01-02#03:04:05:006") % 1000 == 6
