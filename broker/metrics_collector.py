"""The Prometheus collector: reads the controller when scraped and yields RocketMQ 5's metric families.

Metric names follow RocketMQ 5 (``rocketmq_messages_in_total``, ``rocketmq_throughput_in_total``,
``rocketmq_rpc_latency``, ``rocketmq_storage_flush_behind_bytes``, …) with its common labels
``cluster``, ``node_type``, ``node_id``; ``rocketmq_flow_control_total`` and the
``rocketmq_processor_*`` queue gauges other than ``rocketmq_processor_watermark`` are ours.
prometheus_client is imported only when a collection runs (it is an optional dependency).
"""

from __future__ import annotations

import shutil
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from broker.request_metrics import RPC_LATENCY_BUCKETS_MS, LatencyCell, RequestMetrics
from broker.topic import is_system_topic
from remoting.codes import RequestCode, ResponseCode

if TYPE_CHECKING:
    from broker.controller import BrokerController

#: Our executor names → the ``processor`` label values of upstream's rocketmq_processor_watermark.
PROCESSOR_LABELS = {
    "send": "send",
    "pull": "pull",
    "query": "query_message",
    "client_manage": "client_manager",
    "heartbeat": "heartbeat",
    "consumer_manage": "consumer_manager",
    "end_transaction": "transaction",
    "admin": "admin",
}

SYSTEM_GROUPS = frozenset(
    {
        "SELF_TEST_P_GROUP",
        "SELF_TEST_C_GROUP",
        "CID_ONS-HTTP-PROXY",
        "CID_ONSAPI_PERMISSION",
        "CID_ONSAPI_OWNER",
        "CID_ONSAPI_PULL",
        "CID_RMQ_SYS_TRANS",
        "TOOLS_CONSUMER",
        "FILTERSRV_CONSUMER",
        "__MONITOR_CONSUMER",
        "CLIENT_INNER_PRODUCER",
        "PRODUCER_DEFAULT",
        "TOOLS_PRODUCER",
    }
)


def is_system(topic: str, group: str = "") -> bool:
    """RocketMQ 5's ``is_system`` label: a system topic or a system group (or its retry/DLQ topic)."""
    if is_system_topic(topic) or group in SYSTEM_GROUPS:
        return True
    for prefix in ("%RETRY%", "%DLQ%"):
        if topic.startswith(prefix) and topic[len(prefix) :] in SYSTEM_GROUPS:
            return True
    return False


def _code_names(enum: type) -> dict[int, str]:
    return {int(m): m.name.lower() for m in enum}


class BrokerCollector:
    """A prometheus_client custom collector reading the controller when scraped."""

    def __init__(self, controller: BrokerController, requests: RequestMetrics) -> None:
        self.c = controller
        self.requests = requests
        self._request_names = _code_names(RequestCode)
        self._response_names = _code_names(ResponseCode)

    def describe(self) -> list[Any]:
        return []  # registering must not run a collection

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )

        c = self.c
        cfg = c.config
        common_names = ["cluster", "node_type", "node_id"]
        common = [cfg.broker_cluster_name, "broker", cfg.broker_name]

        def counter(name: str, doc: str, labels: Iterable[str] = ()) -> Any:
            return CounterMetricFamily(name, doc, labels=common_names + list(labels))

        def gauge(name: str, doc: str, labels: Iterable[str] = (), unit: str = "") -> Any:
            return GaugeMetricFamily(name, doc, labels=common_names + list(labels), unit=unit)

        stats = c.stats
        # -- messages ---------------------------------------------------------------------
        msgs_in = counter("rocketmq_messages_in_total", "Messages stored", ["topic", "is_system"])
        bytes_in = counter("rocketmq_throughput_in_total", "Bytes stored", ["topic", "is_system"])
        for topic, n in sorted(stats.put_nums.items()):
            system = _bool(is_system(topic))
            msgs_in.add_metric(common + [topic, system], n)
            bytes_in.add_metric(common + [topic, system], stats.put_size.get(topic, 0))
        out_labels = ["topic", "consumer_group", "is_retry", "is_system"]
        msgs_out = counter("rocketmq_messages_out_total", "Messages pulled", out_labels)
        bytes_out = counter("rocketmq_throughput_out_total", "Bytes pulled", out_labels)
        for (group, topic), n in sorted(stats.get_nums.items()):
            values = common + [topic, group, _bool(topic.startswith("%RETRY%")), _bool(is_system(topic, group))]
            msgs_out.add_metric(values, n)
            bytes_out.add_metric(values, stats.get_size.get((group, topic), 0))
        yield from (msgs_in, bytes_in, msgs_out, bytes_out)

        # -- requests -----------------------------------------------------------------------
        latency = HistogramMetricFamily(
            "rocketmq_rpc_latency",
            "Time a processor took to answer a request, in milliseconds",
            labels=common_names + ["protocol_type", "request_code", "response_code", "is_long_polling", "result"],
        )
        bounds = [_le(b) for b in RPC_LATENCY_BUCKETS_MS] + ["+Inf"]
        for (code, resp, long_polling, result), cell in sorted(self.requests.latency.items(), key=_latency_order):
            cumulative, running = [], 0
            for bound, n in zip(bounds, cell.buckets):
                running += n
                cumulative.append((bound, running))
            latency.add_metric(
                common
                + [
                    "remoting",
                    self._request_names.get(code, str(code)),
                    "" if resp is None else self._response_names.get(resp, str(resp)),
                    _bool(long_polling),
                    result,
                ],
                cumulative,
                cell.total_ms,
            )
        yield latency

        # -- request queues and flow control ----------------------------------------------------
        watermark = gauge("rocketmq_processor_watermark", "Requests waiting in the queue", ["processor"])
        capacity = gauge("rocketmq_processor_queue_capacity", "Queue bound ([OVERLOAD] above it)", ["processor"])
        peak = gauge("rocketmq_processor_queue_peak", "Largest queue length seen", ["processor"])
        head_wait = gauge(
            "rocketmq_processor_head_wait_milliseconds", "How long the oldest queued request has waited", ["processor"]
        )
        completed = counter("rocketmq_processor_completed_total", "Requests the workers finished", ["processor"])
        rejected = counter(
            "rocketmq_processor_rejected_total", "Requests refused because the queue was full", ["processor"]
        )
        expired = counter(
            "rocketmq_processor_expired_total", "Queued requests the fast-failure sweeper answered", ["processor"]
        )
        flow = counter(
            "rocketmq_flow_control_total",
            "Requests answered SYSTEM_BUSY/SYSTEM_ERROR by flow control, per queue and busy kind",
            ["processor", "kind"],
        )
        shed: Counter[tuple[str, str]] = Counter(stats.shed_by_queue)
        for name, executor in c.executors.items():
            label = PROCESSOR_LABELS.get(name, name)
            values = common + [label]
            watermark.add_metric(values, executor.size)
            capacity.add_metric(values, executor.capacity)
            peak.add_metric(values, executor.peak)
            head_wait.add_metric(values, executor.head_wait_ms())
            completed.add_metric(values, executor.completed)
            rejected.add_metric(values, executor.rejected)
            expired.add_metric(values, executor.expired)
            # BrokerStats may fold these counts in itself (periodically): take the larger, never the sum.
            shed[(name, "OVERLOAD")] = max(shed[(name, "OVERLOAD")], executor.rejected)
        for queue, n in self.requests.rejected.items():
            shed[(queue, "REJECTREQUEST")] = max(shed[(queue, "REJECTREQUEST")], n)
        for (queue, kind), n in sorted(shed.items()):
            flow.add_metric(common + [PROCESSOR_LABELS.get(queue, queue), kind], n)
        yield from (watermark, capacity, peak, head_wait, completed, rejected, expired, flow)

        # -- metadata and clients ----------------------------------------------------------------
        g = gauge("rocketmq_broker_permission", "brokerPermission (6 = read and write)")
        g.add_metric(common, cfg.broker_permission)
        yield g
        g = gauge("rocketmq_topic_number", "Topics on this broker")
        g.add_metric(common, len(c.topic_config_manager.table))
        yield g
        g = gauge("rocketmq_consumer_group_number", "Subscription groups on this broker")
        g.add_metric(common, len(c.subscription_group_manager.table))
        yield g
        producers = gauge(
            "rocketmq_producer_connections", "Producer connections", ["language", "version", "protocol_type"]
        )
        per_client: Counter[tuple[str, ...]] = Counter()
        for channels in c.producer_manager.table.values():
            for info in channels.values():
                per_client[(str(info.language).lower(), str(info.version), "remoting")] += 1
        for labels, n in sorted(per_client.items()):
            producers.add_metric(common + list(labels), n)
        yield producers
        consumers = gauge(
            "rocketmq_consumer_connections",
            "Consumer connections",
            ["consumer_group", "language", "version", "consume_mode", "protocol_type", "is_system"],
        )
        per_group: Counter[tuple[str, ...]] = Counter()
        for group, info in c.consumer_manager.table.items():
            mode = "push" if str(info.consume_type).endswith("PASSIVELY") else "pull"
            for ci in info.channels.values():
                per_group[
                    (group, str(ci.language).lower(), str(ci.version), mode, "remoting", _bool(group in SYSTEM_GROUPS))
                ] += 1
        for labels, n in sorted(per_group.items()):
            consumers.add_metric(common + list(labels), n)
        yield consumers
        yield self._lag(common_names, common)

        # -- store ------------------------------------------------------------------------------
        yield from self._store(common_names, common)

        # -- ours: long polling and fault injection --------------------------------------------------
        g = gauge("rocketmq_pull_hold_requests", "Long-polling pull requests parked")
        g.add_metric(common, c.pull_hold_service.parked_count)
        yield g
        g = gauge("rocketmq_fault_active", "Injected faults still active (1) by kind", ["kind"])
        now = c.now_ms()
        for kind, until in sorted(c.fault_injector.active.items()):
            g.add_metric(common + [kind], 1 if until > now else 0)
        yield g

    def _lag(self, names: list[str], common: list[str]) -> Any:
        from prometheus_client.core import GaugeMetricFamily

        lag = GaugeMetricFamily(
            "rocketmq_consumer_lag_messages",
            "Messages stored but not yet consumed",
            labels=names + ["topic", "consumer_group", "is_retry", "is_system"],
        )
        c = self.c
        for key, queues in sorted(c.consumer_offset_manager.offset_table.items()):
            topic, _, group = key.partition("@")
            tc = c.topic_config_manager.select_topic_config(topic)
            if tc is None:
                continue
            behind = 0
            for qid in range(tc.read_queue_nums):
                consumed = queues.get(qid, -1)
                if consumed >= 0:
                    behind += max(0, c.store.get_max_offset_in_queue(topic, qid) - consumed)
            lag.add_metric(
                common + [topic, group, _bool(topic.startswith("%RETRY%")), _bool(is_system(topic, group))], behind
            )
        return lag

    def _store(self, names: list[str], common: list[str]) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        store, cfg = self.c.store, self.c.config
        labels = names + ["storage_type", "storage_medium"]
        values = common + ["local", "disk"]
        info = store.runtime_info()

        def gauge(name: str, doc: str, value: float) -> Any:
            g = GaugeMetricFamily(name, doc, labels=labels)
            g.add_metric(values, value)
            return g

        try:
            used = shutil.disk_usage(cfg.store_path_root_dir).used
        except OSError:
            used = 0
        yield gauge("rocketmq_storage_size", "Bytes used on the store's disk", used)
        yield gauge(
            "rocketmq_storage_flush_behind_bytes",
            "Bytes written but not yet flushed to disk",
            _int(info.get("remainHowManyDataToFlush")),
        )
        yield gauge(
            "rocketmq_storage_dispatch_behind_bytes",
            "Commit log bytes not yet in consume queues",
            store.dispatch_behind_bytes(),
        )
        earliest = earliest_message_time(store)
        yield gauge(
            "rocketmq_storage_message_reserve_time",
            "Milliseconds since the oldest stored message",
            max(0, self.c.now_ms() - earliest) if earliest > 0 else 0,
        )
        yield gauge(
            "rocketmq_storage_commit_behind_bytes",
            "Bytes in the transient pool not yet committed",
            _int(info.get("remainHowManyDataToCommit")),
        )
        yield gauge(
            "rocketmq_storage_page_cache_lock_milliseconds",
            "How long the current append has held the commit-log lock",
            store.lock_time_mills(),
        )
        yield gauge(
            "rocketmq_storage_os_page_cache_busy",
            "1 while the page cache counts as busy",
            1 if store.is_os_page_cache_busy() else 0,
        )
        yield gauge(
            "rocketmq_storage_transient_pool_remain",
            "Free transient store pool buffers",
            store.remain_transient_store_buffer_numbs(),
        )
        yield gauge(
            "rocketmq_storage_commit_log_max_offset", "Commit log max physical offset", store.get_max_phy_offset()
        )


def earliest_message_time(store: Any) -> int:
    """Store time of the oldest message in the commit log (upstream getEarliestMessageTime), 0 if none."""
    try:
        lo, hi = store.get_min_phy_offset(), store.get_max_phy_offset()
        if hi <= lo:
            return 0
        msg = store.look_message_by_offset(lo)
    except Exception:  # noqa: BLE001 - a file being deleted under us: report "unknown"
        return 0
    return int(getattr(msg, "store_timestamp", 0) or 0) if msg is not None else 0


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _le(bound: float) -> str:
    return str(float(bound))


def _int(text: str | None) -> int:
    try:
        return int(text or 0)
    except ValueError:
        return 0


def _latency_order(item: tuple[tuple[int, int | None, bool, str], LatencyCell]) -> tuple[int, int, bool, str]:
    (code, resp, long_polling, result), _ = item
    return code, -1 if resp is None else resp, long_polling, result


@dataclass(frozen=True, slots=True)
class CollectedFamilies:
    """Already collected metric families, shaped like a registry for prometheus_client's encoders."""

    families: list[Any]

    def collect(self) -> list[Any]:
        return self.families
