"""The processor/executor table (upstream BrokerController.registerProcessor) and the executors' upstream
config keys and defaults, read from a controller that is built but not started."""

from __future__ import annotations

import os

import pytest

from broker.config import build_config
from broker.controller import BrokerController
from remoting.codes import RequestCode

CPUS = os.cpu_count() or 1

#: request code → queue, as upstream 4.9.x registers them (everything else: the admin queue)
UPSTREAM_TABLE = {
    RequestCode.SEND_MESSAGE: "send",
    RequestCode.SEND_MESSAGE_V2: "send",
    RequestCode.SEND_BATCH_MESSAGE: "send",
    RequestCode.CONSUMER_SEND_MSG_BACK: "send",
    RequestCode.PULL_MESSAGE: "pull",
    RequestCode.QUERY_MESSAGE: "query",
    RequestCode.VIEW_MESSAGE_BY_ID: "query",
    RequestCode.HEART_BEAT: "heartbeat",
    RequestCode.UNREGISTER_CLIENT: "client_manage",
    RequestCode.CHECK_CLIENT_CONFIG: "client_manage",
    RequestCode.GET_CONSUMER_LIST_BY_GROUP: "consumer_manage",
    RequestCode.UPDATE_CONSUMER_OFFSET: "consumer_manage",
    RequestCode.QUERY_CONSUMER_OFFSET: "consumer_manage",
    RequestCode.END_TRANSACTION: "end_transaction",
    # ours, not upstream's: fault injection waits in its own queue so a stalled admin queue can be cleared
    RequestCode.FAULT_INJECT: "fault_inject",
}


@pytest.fixture
def controller(tmp_path):
    config, _ = build_config(
        [
            ("storePathRootDir", str(tmp_path / "store")),
            ("brokerIP1", "127.0.0.1"),
            ("listenPort", "0"),
            ("namesrvListenPort", "-1"),
        ]
    )
    return BrokerController(config)


def processor_of(route):
    return getattr(route.processor, "inner", route.processor)  # metrics wraps processors for timing


def queue_of(controller: BrokerController, code: int) -> str:
    server = controller.server
    route = server._routes.get(int(code)) or server._default
    names = {id(e): n for n, e in controller.executors.items()}
    names[id(controller.fault_executor)] = "fault_inject"
    return names[id(route.executor)]


def test_request_codes_wait_in_upstreams_queues(controller):
    for code, queue in UPSTREAM_TABLE.items():
        assert queue_of(controller, code) == queue, RequestCode(code).name
    for code in (
        RequestCode.GET_BROKER_RUNTIME_INFO,
        RequestCode.UPDATE_AND_CREATE_TOPIC,
        RequestCode.GET_MAX_OFFSET,
        RequestCode.LOCK_BATCH_MQ,
        9999,
    ):
        assert queue_of(controller, code) == "admin", code


def test_only_the_send_processor_can_reject_before_queueing(controller):
    server = controller.server
    rejecting = {code for code, route in server._routes.items() if processor_of(route) is controller.send_processor}
    assert rejecting == {int(c) for c, q in UPSTREAM_TABLE.items() if q == "send"}
    controller.store.commit_log.begin_time_in_lock = controller.now_ms() - 5000  # a lock held 5 s: busy
    try:
        assert controller.send_processor.reject_request() is True
        assert controller.stats.busy["REJECTREQUEST"] == 1
        for code, route in server._routes.items():
            if processor_of(route) is not controller.send_processor and route.reject is not None:
                assert route.reject() is False, code
    finally:
        controller.store.commit_log.begin_time_in_lock = 0


def test_executor_sizes_follow_upstreams_keys_and_defaults(controller):
    e = controller.executors
    expected = {  # (workers, capacity) from BrokerConfig 4.9.x
        "send": (min(CPUS, 4), 10_000),
        "pull": (16 + 2 * CPUS, 100_000),
        "query": (8 + CPUS, 20_000),
        "client_manage": (32, 1_000_000),
        "consumer_manage": (32, 1_000_000),
        "heartbeat": (min(32, CPUS), 50_000),
        "end_transaction": (max(8 + 2 * CPUS, min(CPUS, 4) * 4), 100_000),
        "admin": (16, 100_000),  # upstream: unbounded; ours is bounded
    }
    assert {n: (x.workers, x.capacity) for n, x in e.items()} == expected


def test_executor_keys_are_honoured(tmp_path):
    keys = {
        "sendMessageThreadPoolNums": 3,
        "sendThreadPoolQueueCapacity": 7,
        "pullMessageThreadPoolNums": 5,
        "pullThreadPoolQueueCapacity": 11,
        "queryMessageThreadPoolNums": 2,
        "queryThreadPoolQueueCapacity": 13,
        "heartbeatThreadPoolNums": 4,
        "heartbeatThreadPoolQueueCapacity": 17,
        "clientManageThreadPoolNums": 6,
        "clientManagerThreadPoolQueueCapacity": 19,
        "consumerManageThreadPoolNums": 8,
        "consumerManagerThreadPoolQueueCapacity": 23,
        "endTransactionThreadPoolNums": 9,
        "endTransactionPoolQueueCapacity": 29,
        "adminBrokerThreadPoolNums": 10,
    }
    config, _ = build_config(
        [
            ("storePathRootDir", str(tmp_path / "store")),
            ("namesrvListenPort", "-1"),
            *((k, str(v)) for k, v in keys.items()),
        ]
    )
    e = BrokerController(config).executors
    assert {n: (x.workers, x.capacity) for n, x in e.items() if n != "admin"} == {
        "send": (3, 7),
        "pull": (5, 11),
        "query": (2, 13),
        "heartbeat": (4, 17),
        "client_manage": (6, 19),
        "consumer_manage": (8, 23),
        "end_transaction": (9, 29),
    }
    assert e["admin"].workers == 10
