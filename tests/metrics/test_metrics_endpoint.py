"""The Prometheus endpoint (metricsExporterType=PROM): scraped over HTTP and parsed with prometheus_client."""

from __future__ import annotations

import asyncio
import socket
import time
import urllib.error
import urllib.request

import pytest
from metrics_helpers import scrape

from remoting.client import RemotingClient
from remoting.codes import RequestCode
from remoting.command import RemotingCommand

PROCESSORS = {
    "send",
    "pull",
    "query_message",
    "client_manager",
    "heartbeat",
    "consumer_manager",
    "transaction",
    "admin",
}


def send_request(topic: str, queue_id: int, body: bytes = b"x", group: str = "PG_metrics") -> RemotingCommand:
    ext = {
        "a": group,
        "b": topic,
        "c": "TBW102",
        "d": "4",
        "e": str(queue_id),
        "f": "0",
        "g": str(int(time.time() * 1000)),
        "h": "0",
        "i": "",
        "j": "0",
        "k": "false",
    }
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, ext, body)


def pull_request(topic: str, group: str, queue_id: int, offset: int = 0) -> RemotingCommand:
    ext = {
        "consumerGroup": group,
        "topic": topic,
        "queueId": str(queue_id),
        "queueOffset": str(offset),
        "maxMsgNums": "32",
        "sysFlag": "4",
        "commitOffset": "0",
        "suspendTimeoutMillis": "0",
        "subscription": "*",
        "subVersion": "0",
        "expressionType": "TAG",
    }
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, ext)


async def exchange(addr: str, requests: list[RemotingCommand], timeout_s: float = 10.0) -> list[RemotingCommand]:
    """Send all requests concurrently on one connection; the answers in order."""
    client = RemotingClient()
    try:
        return list(await asyncio.gather(*(client.invoke(addr, r, timeout_s) for r in requests)))
    finally:
        await client.close()


def test_messages_throughput_and_common_labels(prom_broker):
    broker = prom_broker()
    broker.create_topic("T_in", 2)
    answers = asyncio.run(exchange(broker.broker_addr, [send_request("T_in", i % 2, b"0123456789") for i in range(5)]))
    assert [a.code for a in answers] == [0] * 5
    pulled = asyncio.run(
        exchange(broker.broker_addr, [pull_request("T_in", "CG_m", 0), pull_request("T_in", "CG_m", 1)])
    )
    assert [a.code for a in pulled] == [0, 0]
    s = scrape(broker.metrics_url)
    common = {"cluster": broker.cluster_name, "node_type": "broker", "node_id": broker.broker_name}
    assert s.value("rocketmq_messages_in_total", topic="T_in", is_system="false", **common) == 5
    assert s.value("rocketmq_throughput_in_total", topic="T_in") > 50  # whole records, bodies included
    assert s.value("rocketmq_messages_out_total", topic="T_in", consumer_group="CG_m", is_retry="false") == 5
    assert s.value("rocketmq_throughput_out_total", topic="T_in", consumer_group="CG_m") > 50
    assert s.families["rocketmq_messages_in"].type == "counter"
    assert s.value("rocketmq_topic_number", **common) >= 1
    assert s.value("rocketmq_broker_permission") == 6


def test_rpc_latency_histogram(prom_broker):
    broker = prom_broker()
    broker.create_topic("T_lat", 1)
    asyncio.run(exchange(broker.broker_addr, [send_request("T_lat", 0) for _ in range(4)]))
    s = scrape(broker.metrics_url)
    family = s.families["rocketmq_rpc_latency"]
    assert family.type == "histogram"
    labels = {
        "request_code": "send_message_v2",
        "response_code": "success",
        "protocol_type": "remoting",
        "is_long_polling": "false",
        "result": "success",
    }
    buckets = s.samples("rocketmq_rpc_latency_bucket", **labels)
    assert [b.labels["le"] for b in buckets] == [
        "1.0",
        "3.0",
        "5.0",
        "7.0",
        "10.0",
        "100.0",
        "1000.0",
        "2000.0",
        "3000.0",
        "+Inf",
    ]
    counts = [b.value for b in buckets]
    assert counts == sorted(counts) and counts[-1] == 4
    assert s.value("rocketmq_rpc_latency_count", **labels) == 4
    assert 0 < s.value("rocketmq_rpc_latency_sum", **labels) < 4 * 3000
    # The admin request that created the topic is timed too, under its upstream code name.
    assert s.value("rocketmq_rpc_latency_count", request_code="update_and_create_topic") == 1


def test_queue_gauges_for_every_processor(prom_broker):
    broker = prom_broker(sendThreadPoolQueueCapacity=77)
    s = scrape(broker.metrics_url)
    assert {x.labels["processor"] for x in s.samples("rocketmq_processor_watermark")} == PROCESSORS
    assert s.value("rocketmq_processor_queue_capacity", processor="send") == 77
    for name in (
        "rocketmq_processor_queue_peak",
        "rocketmq_processor_head_wait_milliseconds",
        "rocketmq_processor_completed_total",
        "rocketmq_processor_rejected_total",
        "rocketmq_processor_expired_total",
    ):
        assert {x.labels["processor"] for x in s.samples(name)} == PROCESSORS


def test_flow_control_counters_per_queue_and_kind(prom_broker):
    """OVERLOAD (queue full), TIMEOUT_CLEAN_QUEUE (swept) and REJECTREQUEST (page cache busy), each counted."""
    broker = prom_broker(sendThreadPoolQueueCapacity=2, waitTimeMillsInSendQueue=50, osPageCacheBusyTimeOutMills=100)
    broker.create_topic("T_busy", 1)
    broker.inject_fault("stall_queue", 3000, target="send")
    answers = asyncio.run(exchange(broker.broker_addr, [send_request("T_busy", 0) for _ in range(5)]))
    remarks = [a.remark or "" for a in answers]
    assert sum(r.startswith("[OVERLOAD]") for r in remarks) == 3, remarks
    assert sum(r.startswith("[TIMEOUT_CLEAN_QUEUE]") for r in remarks) == 2, remarks
    broker.clear_faults()

    async def page_cache_busy() -> RemotingCommand:
        client = RemotingClient()
        try:
            stuck = asyncio.ensure_future(client.invoke(broker.broker_addr, send_request("T_busy", 0), 10.0))
            await asyncio.sleep(0.6)  # the stuck append has held the lock past osPageCacheBusyTimeOutMills
            refused = await client.invoke(broker.broker_addr, send_request("T_busy", 0), 10.0)
            await stuck
            return refused
        finally:
            await client.close()

    broker.inject_fault("stall_append", 1500)
    refused = asyncio.run(page_cache_busy())
    assert refused.remark.startswith("[REJECTREQUEST]"), refused.remark
    s = scrape(broker.metrics_url)
    assert s.value("rocketmq_flow_control_total", processor="send", kind="OVERLOAD") == 3
    assert s.value("rocketmq_flow_control_total", processor="send", kind="TIMEOUT_CLEAN_QUEUE") == 2
    assert s.value("rocketmq_flow_control_total", processor="send", kind="REJECTREQUEST") >= 1
    assert s.value("rocketmq_processor_rejected_total", processor="send") == 3
    assert s.value("rocketmq_processor_expired_total", processor="send") == 2


def test_store_gauges(prom_broker):
    broker = prom_broker()
    broker.create_topic("T_store", 1)
    asyncio.run(exchange(broker.broker_addr, [send_request("T_store", 0)]))
    s = scrape(broker.metrics_url)
    store_labels = {"storage_type": "local", "storage_medium": "disk"}
    assert s.value("rocketmq_storage_size", **store_labels) > 0
    assert s.value("rocketmq_storage_flush_behind_bytes", **store_labels) >= 0
    assert s.value("rocketmq_storage_dispatch_behind_bytes", **store_labels) >= 0
    assert s.value("rocketmq_storage_message_reserve_time", **store_labels) >= 0
    assert s.value("rocketmq_storage_commit_log_max_offset", **store_labels) > 0
    assert s.value("rocketmq_storage_os_page_cache_busy", **store_labels) == 0


def test_consumer_lag_and_fault_gauges(prom_broker):
    broker = prom_broker()
    broker.create_topic("T_lag", 1)
    asyncio.run(exchange(broker.broker_addr, [send_request("T_lag", 0) for _ in range(3)]))
    broker.request(
        RequestCode.UPDATE_CONSUMER_OFFSET,
        {"consumerGroup": "CG_lag", "topic": "T_lag", "queueId": 0, "commitOffset": 1},
    )
    broker.inject_fault("stall_queue", 60_000, target="query")
    s = scrape(broker.metrics_url)
    assert s.value("rocketmq_consumer_lag_messages", topic="T_lag", consumer_group="CG_lag") == 2
    assert s.value("rocketmq_fault_active", kind="stall_queue:query") == 1
    broker.clear_faults()


def test_each_broker_has_its_own_registry(prom_broker):
    first, second = prom_broker(), prom_broker()
    first.create_topic("T_only_first", 1)
    asyncio.run(exchange(first.broker_addr, [send_request("T_only_first", 0)]))
    assert scrape(first.metrics_url).samples("rocketmq_messages_in_total", topic="T_only_first")
    assert not scrape(second.metrics_url).samples("rocketmq_messages_in_total", topic="T_only_first")


def test_http_paths_methods_and_openmetrics(prom_broker):
    broker = prom_broker()
    base = broker.metrics_url.rsplit("/", 1)[0]
    assert "rocketmq_processor_watermark" in scrape(base + "/").text
    om = scrape(broker.metrics_url, accept="application/openmetrics-text; version=1.0.0")
    assert om.text.rstrip().endswith("# EOF")
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(base + "/nothing", timeout=10)
    assert err.value.code == 404
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(urllib.request.Request(broker.metrics_url, data=b"x", method="POST"), timeout=10)
    assert err.value.code == 405
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:  # garbage → 400, not a hang
        sock.sendall(b"hello\r\n\r\n")
        assert sock.recv(100).startswith(b"HTTP/1.1 400")
    with socket.create_connection((host, int(port)), timeout=10) as sock:  # a scraper that hangs up early
        sock.sendall(b"GET /metr")
    assert "rocketmq_processor_watermark" in scrape(broker.metrics_url).text  # still serving


def test_disabled_by_default(rocketmq_broker):
    assert rocketmq_broker.controller.config.metrics_exporter_type == "DISABLE"
    assert rocketmq_broker.metrics_url is None


def test_missing_prometheus_client_is_a_clear_error(rocketmq_broker_factory, monkeypatch):
    from broker.metrics import BrokerMetrics

    def no_client(self):
        raise ImportError("No module named 'prometheus_client'")

    monkeypatch.setattr(BrokerMetrics, "build_registry", no_client)
    with pytest.raises(RuntimeError, match=r"dependency 'prometheus_client' \(extra \[metrics\]\); install it with: "):
        rocketmq_broker_factory(metricsExporterType="PROM")
