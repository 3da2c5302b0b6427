"""Broker metrics: the counters behind the Prometheus endpoint and behind ``mqadmin statsAll``.

One ``BrokerMetrics`` per broker owns
- ``RequestMetrics``: request latency per code and answer (``rocketmq_rpc_latency``) and the
  ``[REJECTREQUEST]`` refusals, fed by ``InstrumentedProcessor``, a thin wrapper the controller puts
  around each processor; the same wrapper writes the run-time switchable per-request debug line;
- ``StatsWindows``: minute/hour/day snapshots of ``BrokerStats`` (upstream's StatsItem sampling), read
  by VIEW_BROKER_STATS_DATA (315) and the runtime info's ``msgPutTotalTodayMorning`` family;
- with ``metricsExporterType=PROM``, a ``CollectorRegistry`` of its own (no global registry state) with
  one custom collector, served by a tiny asyncio HTTP handler on ``metricsPromExporterPort``. Collection
  runs on the broker's event loop, so it reads a consistent state without locks.

Metric names follow RocketMQ 5 (``rocketmq_messages_in_total``, ``rocketmq_throughput_in_total``,
``rocketmq_rpc_latency``, ``rocketmq_storage_flush_behind_bytes``, …) with its common labels
``cluster``, ``node_type``, ``node_id``; ``rocketmq_flow_control_total`` and the
``rocketmq_processor_*`` queue gauges other than ``rocketmq_processor_watermark`` are ours.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import shutil
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import structlog

from broker.logging_setup import REQUEST_LOGGER
from broker.topic import is_system_topic
from remoting.codes import RequestCode, ResponseCode
from remoting.command import FLAG_ONEWAY, RemotingCommand

if TYPE_CHECKING:
    from broker.controller import BrokerController

log = structlog.get_logger(__name__)
request_log = structlog.get_logger(REQUEST_LOGGER)

#: Upstream's rpc latency view (RemotingMetricsManager), in milliseconds.
RPC_LATENCY_BUCKETS_MS: tuple[float, ...] = (1, 3, 5, 7, 10, 100, 1000, 2000, 3000)

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


# ------------------------------------------------------------------------------------------------
# request timing


@dataclass(slots=True)
class LatencyCell:
    """One histogram series: per-bucket (non-cumulative) counts, the +Inf bucket last."""

    buckets: list[int] = field(default_factory=lambda: [0] * (len(RPC_LATENCY_BUCKETS_MS) + 1))
    count: int = 0
    total_ms: float = 0.0


class RequestMetrics:
    """rocketmq_rpc_latency cells keyed by (request code, response code, long polling, result), plus the
    [REJECTREQUEST] refusals per queue (the server answers those before any processor runs)."""

    def __init__(self) -> None:
        self.latency: dict[tuple[int, int | None, bool, str], LatencyCell] = {}
        self.rejected: Counter[str] = Counter()

    def observe(
        self,
        code: int,
        response_code: int | None,
        elapsed_ms: float,
        *,
        long_polling: bool = False,
        result: str = "success",
    ) -> None:
        key = (code, response_code, long_polling, result)
        cell = self.latency.get(key)
        if cell is None:
            cell = self.latency[key] = LatencyCell()
        cell.buckets[bisect.bisect_left(RPC_LATENCY_BUCKETS_MS, elapsed_ms)] += 1
        cell.count += 1
        cell.total_ms += elapsed_ms

    def on_reject(self, queue: str) -> None:
        self.rejected[queue] += 1


class InstrumentedProcessor:
    """Wraps a processor: times ``process_request``, counts refusals, writes the per-request debug line.

    The timing covers the processor only (queue wait is the executor's ``head wait``); a long-polled pull
    that the processor parks (answer None) is counted when parked, with ``is_long_polling=true``.
    """

    __slots__ = ("_clock", "_reject", "_std_log", "inner", "metrics", "queue")

    def __init__(
        self, inner: Any, queue: str, metrics: RequestMetrics, *, clock: Callable[[], float] = time.perf_counter
    ) -> None:
        self.inner = inner
        self.queue = queue
        self.metrics = metrics
        self._reject = getattr(inner, "reject_request", None)
        self._std_log = logging.getLogger(REQUEST_LOGGER)
        self._clock = clock

    def reject_request(self) -> bool:
        if self._reject is not None and self._reject():
            self.metrics.on_reject(self.queue)
            if self._std_log.isEnabledFor(logging.DEBUG):
                request_log.debug("request refused before queueing", queue=self.queue, kind="REJECTREQUEST")
            return True
        return False

    async def process_request(self, channel: Any, request: RemotingCommand) -> RemotingCommand | None:
        start = self._clock()
        try:
            response = await self.inner.process_request(channel, request)
        except Exception as exc:
            elapsed_ms = (self._clock() - start) * 1000.0
            self.metrics.observe(request.code, ResponseCode.SYSTEM_ERROR, elapsed_ms, result="process_request_failed")
            if self._std_log.isEnabledFor(logging.DEBUG):
                request_log.debug(
                    "request failed",
                    code=request.code,
                    opaque=request.opaque,
                    remote=getattr(channel, "remote_addr", None),
                    queue=self.queue,
                    error=f"{type(exc).__name__}: {exc}",
                    elapsed_ms=round(elapsed_ms, 3),
                )
            raise
        elapsed_ms = (self._clock() - start) * 1000.0
        if response is None:
            oneway = bool(request.flag & FLAG_ONEWAY)
            self.metrics.observe(
                request.code, None, elapsed_ms, long_polling=not oneway, result="oneway" if oneway else "success"
            )
        else:
            self.metrics.observe(request.code, response.code, elapsed_ms)
        if self._std_log.isEnabledFor(logging.DEBUG):
            request_log.debug(
                "request",
                code=request.code,
                opaque=request.opaque,
                remote=getattr(channel, "remote_addr", None),
                queue=self.queue,
                answer=None if response is None else response.code,
                remark=None if response is None or not response.remark else response.remark,
                elapsed_ms=round(elapsed_ms, 3),
            )
        return response


# ------------------------------------------------------------------------------------------------
# upstream's minute / hour / day stats windows


@dataclass(frozen=True, slots=True)
class _Snapshot:
    at_ms: int
    values: dict[str, dict[str, int]]


class StatsWindows:
    """Periodic snapshots of BrokerStats, read like upstream's StatsItem (VIEW_BROKER_STATS_DATA).

    Upstream samples every 10 s for the minute view (7 samples), every 10 min for the hour view and
    every hour for the day view; a view's sum is the newest value minus the oldest sample in it, its
    tps that sum over the time between them. We use the live value as the newest one, so a message is
    visible at once instead of after the next sample.
    """

    WINDOWS: ClassVar[dict[str, tuple[int, int]]] = {
        "minute": (10_000, 7),
        "hour": (600_000, 7),
        "day": (3_600_000, 25),
    }

    def __init__(self, stats: Any, *, cluster_name: Callable[[], str], now_ms: Callable[[], int]) -> None:
        self._stats = stats
        self._cluster_name = cluster_name
        self._now_ms = now_ms
        self._windows: dict[str, deque[_Snapshot]] = {
            name: deque(maxlen=keep) for name, (_, keep) in self.WINDOWS.items()
        }
        # msgPut/GetTotal{Yesterday,Today}Morning of the runtime info: totals at the last two midnights.
        self.put_total_yesterday_morning = 0
        self.put_total_today_morning = 0
        self.get_total_yesterday_morning = 0
        self.get_total_today_morning = 0
        self._day: tuple[int, int] | None = None

    def current(self) -> dict[str, dict[str, int]]:
        s, cluster = self._stats, self._cluster_name()
        return {
            "TOPIC_PUT_NUMS": dict(s.put_nums),
            "TOPIC_PUT_SIZE": dict(s.put_size),
            "GROUP_GET_NUMS": {f"{topic}@{group}": n for (group, topic), n in s.get_nums.items()},
            "GROUP_GET_SIZE": {f"{topic}@{group}": n for (group, topic), n in s.get_size.items()},
            "BROKER_PUT_NUMS": {cluster: s.total_put},
            "BROKER_GET_NUMS": {cluster: s.total_get},
        }

    def tick(self) -> None:
        """Take the snapshots that are due (call about once a second)."""
        now = self._now_ms()
        snapshot: _Snapshot | None = None
        for name, (period, _) in self.WINDOWS.items():
            window = self._windows[name]
            if not window or now - window[-1].at_ms >= period:
                snapshot = snapshot or _Snapshot(now, self.current())
                window.append(snapshot)
        lt = time.localtime(now / 1000)
        day = (lt.tm_year, lt.tm_yday)
        if self._day is None:
            self._day = day
        elif day != self._day:
            self._day = day
            self.put_total_yesterday_morning = self.put_total_today_morning
            self.get_total_yesterday_morning = self.get_total_today_morning
            self.put_total_today_morning = self._stats.total_put
            self.get_total_today_morning = self._stats.total_get

    def view(self, stats_name: str, stats_key: str) -> dict[str, dict[str, float | int]] | None:
        """BrokerStatsData as upstream encodes it, or None when the item was never counted."""
        live = self.current().get(stats_name, {})
        if stats_key not in live:
            return None
        now, value = self._now_ms(), live[stats_key]
        out: dict[str, dict[str, float | int]] = {}
        for name, key in (("minute", "statsMinute"), ("hour", "statsHour"), ("day", "statsDay")):
            window = self._windows[name]
            first = window[0] if window else None
            base = first.values.get(stats_name, {}).get(stats_key, 0) if first else 0
            total = value - base
            span_ms = now - first.at_ms if first else 0
            tps = total * 1000.0 / span_ms if span_ms > 0 else 0.0
            # avgpt is value per call upstream; BrokerStats keeps no call counts, so it stays 0.
            out[key] = {"avgpt": 0.0, "sum": total, "tps": tps}
        return out


# ------------------------------------------------------------------------------------------------
# the Prometheus collector


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
class _Families:
    """Already collected metric families, shaped like a registry for prometheus_client's encoders."""

    families: list[Any]

    def collect(self) -> list[Any]:
        return self.families


# ------------------------------------------------------------------------------------------------
# the facade the controller owns


class BrokerMetrics:
    """Owns the request metrics, the stats windows and (with PROM) the registry and its HTTP endpoint."""

    TICK_S = 1.0

    def __init__(self, controller: BrokerController) -> None:
        self.c = controller
        self.requests = RequestMetrics()
        self.windows = StatsWindows(
            controller.stats, cluster_name=lambda: controller.config.broker_cluster_name, now_ms=controller.now_ms
        )
        self.registry: Any = None
        self._wrappers: dict[tuple[int, str], InstrumentedProcessor] = {}
        self._server: asyncio.AbstractServer | None = None
        self._task: asyncio.Task[None] | None = None
        self.port: int | None = None

    # -- instrumentation ------------------------------------------------------------------
    def wrap(self, processor: Any, queue: str) -> InstrumentedProcessor:
        key = (id(processor), queue)
        wrapper = self._wrappers.get(key)
        if wrapper is None:
            wrapper = self._wrappers[key] = InstrumentedProcessor(processor, queue, self.requests)
        return wrapper

    def instrumented(self, register: Callable[[int, Any, Any], None]) -> Callable[[int, Any, Any], None]:
        """``register_processor`` that wraps each processor for the executor's queue first."""

        def reg(code: int, processor: Any, executor: Any) -> None:
            register(code, self.wrap(processor, executor.name), executor)

        return reg

    # -- Prometheus -----------------------------------------------------------------------
    @property
    def enabled(self) -> bool:
        return self.c.config.metrics_exporter_type.upper() == "PROM"

    def build_registry(self) -> Any:
        from prometheus_client import CollectorRegistry

        registry = CollectorRegistry(auto_describe=False)
        registry.register(BrokerCollector(self.c, self.requests))
        return registry

    def render(self, accept: str | None = None) -> tuple[bytes, str]:
        """The exposition text (and its content type) for one scrape, all on the caller's thread."""
        from prometheus_client.exposition import choose_encoder

        if self.registry is None:
            self.registry = self.build_registry()
        encoder, content_type = choose_encoder(accept or "")
        return encoder(self.registry), content_type

    async def render_async(self, accept: str | None = None) -> tuple[bytes, str]:
        """Collect on the loop (a consistent read of live state), encode on a worker thread: encoding
        is most of a scrape's cost (~75 ms of ~95 ms with 1000 topics) and needs only the collected,
        immutable families, so the loop is not held for it."""
        from prometheus_client.exposition import choose_encoder

        if self.registry is None:
            self.registry = self.build_registry()
        families = _Families(list(self.registry.collect()))
        encoder, content_type = choose_encoder(accept or "")
        return await asyncio.to_thread(encoder, families), content_type

    # -- lifecycle --------------------------------------------------------------------------
    async def start(self) -> None:
        self.windows.tick()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="metrics-tick")
        if not self.enabled:
            return
        try:
            self.registry = self.build_registry()
        except ImportError as exc:
            from mqclient.cli_support import MissingDependency

            raise MissingDependency("prometheus_client", "metrics") from exc
        cfg = self.c.config
        self._server = await asyncio.start_server(
            self._serve, cfg.metrics_prom_exporter_host, cfg.metrics_prom_exporter_port, limit=16 * 1024
        )
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("prometheus exporter listening", host=cfg.metrics_prom_exporter_host, port=self.port)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        server, self._server = self._server, None
        if server is not None:
            server.close()
            await server.wait_closed()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.TICK_S)
            try:
                self.windows.tick()
            except Exception:
                log.exception("stats sampling failed")

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One HTTP/1.x request per connection: ``GET /metrics`` (or ``/``); anything else 404/405."""
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10.0)
            lines = head.decode("latin-1").split("\r\n")
            parts = lines[0].split()
            headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
            if len(parts) != 3 or not parts[2].startswith("HTTP/"):
                status, body, ctype = "400 Bad Request", b"bad request line\n", "text/plain"
            elif parts[0] not in ("GET", "HEAD"):
                status, body, ctype = "405 Method Not Allowed", b"only GET\n", "text/plain"
            elif parts[1].split("?", 1)[0] not in ("/metrics", "/"):
                status, body, ctype = "404 Not Found", b"try /metrics\n", "text/plain"
            else:
                body, ctype = await self.render_async(headers.get("accept"))
                status = "200 OK"
            head_out = (
                f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
                "Connection: close\r\n\r\n"
            ).encode("latin-1")
            writer.write(head_out if parts and parts[0] == "HEAD" else head_out + body)
            await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ConnectionError):
            pass  # a scraper that hung up or sent garbage gets nothing more
        except Exception:
            log.exception("metrics scrape failed")
            try:
                writer.write(b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            except ConnectionError:
                pass
        finally:
            writer.close()
