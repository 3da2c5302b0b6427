"""The embedded name server's route table and its request processor."""

from __future__ import annotations

import orjson
import pytest

from broker.namesrv.processor import NamesrvProcessor
from broker.namesrv.route_info_manager import RouteInfoManager
from broker.request_table import namesrv_routes
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.server import not_supported


class Clock:
    now = 1_000

    def __call__(self):
        return self.now


def registered(clock=None):
    routes = RouteInfoManager(now_ms=clock or Clock())
    routes.register_broker(
        "DefaultCluster",
        "127.0.0.1:10911",
        "broker-a",
        0,
        "",
        {"T": {"readQueueNums": 4, "writeQueueNums": 4, "perm": 6}},
        {"counter": 1},
    )
    return routes


async def call(proc, code, ext=None, body=None):
    """Through the name server's request table, as the server dispatches it."""
    table = {route.code: route.processor for route in namesrv_routes(proc)}
    request = RemotingCommand.request(code, ext or {}, body, opaque=7)
    if code not in table:
        return not_supported(request)  # what RemotingServer answers for a code with no route
    return await table[code].process_request(None, request)


async def test_route_body_is_compact_json_with_quoted_keys():
    proc = NamesrvProcessor(registered())
    resp = await call(proc, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"})
    assert resp.code == ResponseCode.SUCCESS and resp.opaque == 7
    body = bytes(resp.body)
    assert b" " not in body and b'"brokerAddrs":{"0":"127.0.0.1:10911"}' in body
    route = orjson.loads(body)
    assert route["queueDatas"] == [
        {"brokerName": "broker-a", "perm": 6, "readQueueNums": 4, "topicSysFlag": 0, "writeQueueNums": 4}
    ]


async def test_unknown_topic_is_17_with_upstream_remark():
    proc = NamesrvProcessor(registered())
    resp = await call(proc, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Nope"})
    assert resp.code == ResponseCode.TOPIC_NOT_EXIST
    assert resp.remark.startswith("No topic route info in name server for the topic: Nope")


async def test_auto_create_hook_invents_a_route():
    routes = registered()

    def creator(topic):
        routes.register_topic("broker-a", topic, {"readQueueNums": 4, "writeQueueNums": 4, "perm": 6})
        return True

    proc = NamesrvProcessor(routes, topic_creator=creator)
    resp = await call(proc, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Fresh"})
    assert resp.code == ResponseCode.SUCCESS and orjson.loads(bytes(resp.body))["queueDatas"][0]["writeQueueNums"] == 4


async def test_register_over_the_wire_and_cluster_info():
    proc = NamesrvProcessor(RouteInfoManager(now_ms=Clock()))
    body = orjson.dumps(
        {
            "topicConfigSerializeWrapper": {
                "topicConfigTable": {"X": {"topicName": "X", "readQueueNums": 2, "writeQueueNums": 2, "perm": 6}},
                "dataVersion": {"counter": 3, "timestamp": 1},
            },
            "filterServerList": [],
        }
    )
    resp = await call(
        proc,
        RequestCode.REGISTER_BROKER,
        {"brokerName": "b", "brokerAddr": "1.2.3.4:5", "clusterName": "C", "haServerAddr": "", "brokerId": "0"},
        body,
    )
    assert resp.code == ResponseCode.SUCCESS and all(isinstance(v, str) for v in resp.ext_fields.values())
    info = orjson.loads(bytes((await call(proc, RequestCode.GET_BROKER_CLUSTER_INFO)).body))
    assert info["clusterAddrTable"] == {"C": ["b"]}
    topics = orjson.loads(bytes((await call(proc, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)).body))
    assert topics == {"topicList": ["X"]}


@pytest.mark.parametrize(
    "body",
    [
        b"[]",
        b"1",
        b"not json",
        b'{"topicConfigSerializeWrapper": true}',
        b'{"topicConfigSerializeWrapper": {"topicConfigTable": false}}',
        b'{"topicConfigSerializeWrapper": {"topicConfigTable": {"X": 1}}}',
        b'{"topicConfigSerializeWrapper": {"topicConfigTable": {"X": {"perm": "abc"}}}}',
        b'{"topicConfigSerializeWrapper": {"topicConfigTable": {"X": {"readQueueNums": [4]}}}}',
        b'{"topicConfigSerializeWrapper": {"topicConfigTable": {"X": {"writeQueueNums": 1e99}}}}',
        b'{"topicConfigSerializeWrapper": {"topicConfigTable": {}, "dataVersion": [1]}}',
    ],
)
async def test_register_with_a_wrong_typed_body_is_refused_and_keeps_the_routes(body):
    """Found by the fuzzer: a registration body of the wrong shape raised AttributeError/ValueError half-way
    through replacing the broker's topics (a traceback, and a route table left half updated)."""
    routes = registered()
    proc = NamesrvProcessor(routes)
    resp = await call(
        proc,
        RequestCode.REGISTER_BROKER,
        {
            "brokerName": "broker-a",
            "brokerAddr": "127.0.0.1:10911",
            "clusterName": "DefaultCluster",
            "haServerAddr": "",
            "brokerId": "0",
        },
        body,
    )
    assert resp.code == ResponseCode.SYSTEM_ERROR and resp.remark.startswith("register broker body: ")
    route = await call(proc, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"})
    assert route.code == ResponseCode.SUCCESS


async def test_kv_config_round_trip():
    proc = NamesrvProcessor(RouteInfoManager(now_ms=Clock()))
    assert (await call(proc, RequestCode.GET_KV_CONFIG, {"namespace": "N", "key": "k"})).code == 22
    await call(proc, RequestCode.PUT_KV_CONFIG, {"namespace": "N", "key": "k", "value": "v"})
    resp = await call(proc, RequestCode.GET_KV_CONFIG, {"namespace": "N", "key": "k"})
    assert resp.code == 0 and resp.ext_fields == {"value": "v"}


async def test_unknown_code_answers_not_supported():
    resp = await call(NamesrvProcessor(RouteInfoManager(now_ms=Clock())), 9999)
    assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED and resp.remark == " request type 9999 not supported"


def test_silent_broker_expires_after_120s():
    clock = Clock()
    routes = registered(clock)
    clock.now += 120_001
    assert routes.scan_not_active_broker() == ["127.0.0.1:10911"]
    assert routes.pickup_topic_route_data("T") is None


async def test_missing_required_header_is_an_error():
    from remoting.errors import HeaderError

    with pytest.raises(HeaderError, match="topic"):
        await call(NamesrvProcessor(registered()), RequestCode.GET_ROUTEINFO_BY_TOPIC, {})
