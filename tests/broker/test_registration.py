"""A broker registers with every name server in namesrvAddr, and re-registers when topics change."""

from __future__ import annotations

import asyncio

import orjson
from broker_helpers import free_port, start_broker

from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand


async def route(client, namesrv, topic):
    return await client.invoke(
        namesrv, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}), 5
    )


async def test_second_broker_registers_with_first_brokers_name_server(tmp_path):
    first = await start_broker(tmp_path / "a", autoCreateTopicEnable="false")
    namesrv = f"127.0.0.1:{first.config.namesrv_listen_port}"
    second = await start_broker(
        tmp_path / "b", brokerName="broker-b", namesrvListenPort=-1, namesrvAddr=namesrv, listenPort=free_port()
    )
    client = RemotingClient()
    try:
        info = orjson.loads(
            bytes(
                (await client.invoke(namesrv, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO, {}), 5)).body
            )
        )
        assert sorted(info["clusterAddrTable"]["DefaultCluster"]) == ["broker-a", "broker-b"]
        assert info["brokerAddrTable"]["broker-b"]["brokerAddrs"] == {"0": second.config.broker_addr}
        # a topic created on the second broker appears in the first one's name server promptly
        resp = await client.invoke(
            second.config.broker_addr,
            RemotingCommand.request(
                RequestCode.UPDATE_AND_CREATE_TOPIC,
                {
                    "topic": "OnB",
                    "defaultTopic": "TBW102",
                    "readQueueNums": "3",
                    "writeQueueNums": "3",
                    "perm": "6",
                    "topicFilterType": "SINGLE_TAG",
                    "order": "false",
                },
            ),
            5,
        )
        assert resp.code == ResponseCode.SUCCESS
        for _ in range(50):
            resp = await route(client, namesrv, "OnB")
            if resp.code == ResponseCode.SUCCESS:
                break
            await asyncio.sleep(0.1)
        data = orjson.loads(bytes(resp.body))
        assert data["brokerDatas"][0]["brokerName"] == "broker-b"
        assert data["queueDatas"][0]["writeQueueNums"] == 3
        # graceful shutdown unregisters
        await second.shutdown()
        second = None
        resp = await route(client, namesrv, "OnB")
        assert resp.code == ResponseCode.TOPIC_NOT_EXIST
    finally:
        await client.close()
        if second is not None:
            await second.shutdown()
        await first.shutdown()


async def test_embedded_name_server_invents_routes_only_with_auto_create(tmp_path):
    broker = await start_broker(tmp_path)
    client = RemotingClient()
    namesrv = f"127.0.0.1:{broker.config.namesrv_listen_port}"
    try:
        resp = await route(client, namesrv, "Invented")
        assert resp.code == ResponseCode.SUCCESS
        assert orjson.loads(bytes(resp.body))["queueDatas"][0]["readQueueNums"] == 4
        resp = await route(client, namesrv, "%RETRY%SomeGroup")
        assert orjson.loads(bytes(resp.body))["queueDatas"][0]["readQueueNums"] == 1
        assert (await route(client, namesrv, "%DLQ%SomeGroup")).code == ResponseCode.TOPIC_NOT_EXIST
        assert (await route(client, namesrv, "bad topic")).code == ResponseCode.TOPIC_NOT_EXIST
    finally:
        await client.close()
        await broker.shutdown()
