"""BrokerController: builds the store, managers and services, and registers every request code with its
processor and executor, as upstream's BrokerController.

The table itself (every code the broker and its name server serve, and which queue it waits in) is
broker/request_table.py; ``_register_processors`` registers it. The controller also owns the periodic
chores (offset persistence, channel expiry, name server registration) and the order of start-up and
graceful shutdown. What the broker reports about itself (GET_BROKER_RUNTIME_INFO) is broker/runtime_info.py.
"""

from __future__ import annotations

import asyncio
import time
import zlib
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any

import orjson
import structlog

from broker.client.consumer_manager import ConsumerManager
from broker.client.producer_manager import ProducerManager
from broker.client.rebalance_lock_manager import RebalanceLockManager
from broker.config import BrokerConfig, ConfigError
from broker.consumer_offset_manager import ConsumerOffsetManager
from broker.data_version import DataVersion
from broker.fast_failure import BrokerFastFailure, SweptQueue
from broker.fault_injection import FaultInjector
from broker.filter import ExpressionCompiler
from broker.long_polling import PullRequestHoldService
from broker.metrics import BrokerMetrics
from broker.namesrv.processor import NamesrvProcessor
from broker.namesrv.route_info_manager import RouteInfoManager
from broker.pop import PopService
from broker.pop_checkpoint import PopCheckpointFile
from broker.processor.pull import PullMessageProcessor
from broker.processor.send import SendMessageProcessor
from broker.pull_wake import PullWakeRounds
from broker.request_table import ADMIN, FAULT_INJECT, NotSupportedProcessor, broker_routes, namesrv_routes
from broker.runtime_info import BrokerRuntimeInfo
from broker.schedule import ScheduleMessageService
from broker.stats import BrokerStats
from broker.subscription_group_manager import SubscriptionGroupManager
from broker.timer import TIMER_TOPIC, TimerMessageService
from broker.topic import (
    DEFAULT_TOPIC,
    PERM_READ,
    PERM_WRITE,
    RETRY_GROUP_TOPIC_PREFIX,
    SCHEDULE_TOPIC,
    TopicConfig,
    check_topic_name,
)
from broker.topic_config_manager import TopicConfigManager
from broker.transaction.check import TransactionalMessageCheckService, send_to_producer, system_topic_creator
from broker.transaction.service import TransactionalMessageService
from broker.warmup import FirstClientWarmup, WarmupOnRequest
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.executor import RequestExecutor
from remoting.server import RemotingServer
from store.message_store import MessageStore

if TYPE_CHECKING:
    from broker.acl.permission_manager import PlainPermissionManager

log = structlog.get_logger(__name__)

# Java producers ask TBW102 for 4 queues by default; a route invented by the name server matches that.
NAMESRV_AUTO_CREATE_QUEUE_NUMS = 4
CLIENT_HOUSEKEEPING_INTERVAL_S = 10.0
ACL_WATCH_INTERVAL_S = 5.0  # upstream's AclFileWatchService period


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


class BrokerController:
    def __init__(self, config: BrokerConfig, *, now_ms: Callable[[], int] = wall_ms) -> None:
        self.config = config
        self.now_ms = now_ms
        self.store_host = (config.broker_ip1, config.listen_port)
        self.config_data_version = DataVersion()
        self.stats = BrokerStats(now_ms=now_ms)
        self.store = MessageStore(config.to_store_config(), now_ms=now_ms, store_host=self.store_host)
        # numpy and the store's threads, started off the loop at a client's first request (broker.warmup)
        self.first_client_warmup = FirstClientWarmup(executors=(self.store.io_executor(),))

        self.topic_config_manager = TopicConfigManager(config, on_change=self._on_topic_change, now_ms=now_ms)
        self.consumer_offset_manager = ConsumerOffsetManager(config.store_path_root_dir)
        self.subscription_group_manager = SubscriptionGroupManager(
            config.store_path_root_dir,
            auto_create=config.auto_create_subscription_group,
            default_retry_max_times=config.max_reconsume_times,
        )
        self.consumer_manager = ConsumerManager(
            now_ms=now_ms,
            channel_expired_ms=config.channel_expired_timeout,
            on_ids_changed=self._notify_consumer_ids_changed,
        )
        self.producer_manager = ProducerManager(now_ms=now_ms, channel_expired_ms=config.channel_expired_timeout)
        self.rebalance_lock_manager = RebalanceLockManager(
            now_ms=now_ms, max_live_ms=config.rebalance_lock_max_live_time
        )
        self.schedule_service = ScheduleMessageService(
            store=self.store,
            delay_levels_ms=config.delay_levels_ms,
            store_path_root_dir=config.store_path_root_dir,
            now_ms=now_ms,
        )
        self.timer_service = TimerMessageService(
            store=self.store, store_path_root_dir=config.store_path_root_dir, now_ms=now_ms
        )  # exact delivery times (TIMER_DELIVER_MS)
        self.transaction_service = TransactionalMessageService(
            store=self.store, store_host=self.store_host, now_ms=now_ms
        )
        self.transaction_check_service = TransactionalMessageCheckService(
            store=self.store,
            service=self.transaction_service,
            offsets=self.consumer_offset_manager,
            config=config,
            send_check=send_to_producer(self.producer_manager),
            ensure_topic=system_topic_creator(self.topic_config_manager),
            now_ms=now_ms,
        )
        self.expression_compiler: Callable[[str, str], Callable[[dict[str, str]], bool]] | None = ExpressionCompiler()

        self.send_processor = SendMessageProcessor(
            config=config,
            store=self.store,
            topic_config_manager=self.topic_config_manager,
            subscription_group_manager=self.subscription_group_manager,
            transaction_service=self.transaction_service,
            stats=self.stats,
            store_host=self.store_host,
            now_ms=now_ms,
        )
        self.pull_processor = PullMessageProcessor.of(self)
        # pulls woken by arrivals are re-run in rounds, as upstream's reput thread wakes them (broker/pull_wake.py)
        self.pull_wake = PullWakeRounds(self.pull_processor.execute_requests_when_wakeup)
        self.pull_hold_service = PullRequestHoldService(
            self.pull_wake.wake, self.store.get_max_offset_in_queue, expire=self.pull_wake.wake_now
        )
        self.pull_processor.hold_service = self.pull_hold_service
        self.store.message_arriving_listener = self._on_message_arriving
        self.store.rows_arriving_listener = self._on_rows_arriving
        self.pop_service = PopService(
            store=self.store,
            offsets=self.consumer_offset_manager,
            forward_to_dlq=self._pop_forward_to_dlq,
            now_ms=now_ms,
        )  # 5.x consumers
        self.pop_checkpoint = PopCheckpointFile(config.store_path_root_dir)

        self.server = RemotingServer(
            config.listen_host, config.listen_port, listener=self, now_ms=now_ms, frame_max=config.frame_max_length
        )
        self.executors = self._build_executors()
        self.fault_executor = RequestExecutor("fault_inject", 1, 1000, now_ms=now_ms)
        self.metrics = BrokerMetrics(self)  # request timing, stats windows, Prometheus endpoint
        self.runtime_info = BrokerRuntimeInfo(
            config=config,
            store=self.store,
            stats=self.stats,
            windows=self.metrics.windows,
            executors=self.executors,
            pull_hold_service=self.pull_hold_service,
            schedule_service=self.schedule_service,
            timer_service=self.timer_service,
            transaction_check_service=self.transaction_check_service,
            now_ms=now_ms,
        )
        self.fault_injector = FaultInjector(executors=lambda: self.executors, store=self.store, now_ms=now_ms)
        # ACL 1.0: checked in the worker before every broker processor (never on the name server's port).
        self.acl: PlainPermissionManager | None = None
        if config.acl_enable:  # imported only then: aclEnable is false by default (issue 15, start time)
            from broker.acl.permission_manager import PlainPermissionManager
            from broker.acl.validator import PlainAccessValidator

            self.acl = PlainPermissionManager(config.rocketmq_home or config.store_path_root_dir, now_ms=now_ms)
            self.server.set_request_hook(PlainAccessValidator(self.acl))
        self._register_processors()

        self.fast_failure = BrokerFastFailure(
            send_executor=self.executors["send"],
            queues=[
                SweptQueue(self.executors["send"], lambda: self.config.wait_time_mills_in_send_queue),
                SweptQueue(self.executors["pull"], lambda: self.config.wait_time_mills_in_pull_queue),
                SweptQueue(self.executors["heartbeat"], lambda: self.config.wait_time_mills_in_heartbeat_queue),
                SweptQueue(self.executors["end_transaction"], lambda: self.config.wait_time_mills_in_transaction_queue),
            ],
            is_page_cache_busy=self.store.is_os_page_cache_busy,
            now_ms=now_ms,
            enabled=lambda: self.config.broker_fast_failure_enable,
            on_shed=lambda queue, kind, n: self.stats.on_busy(kind, queue, n),
        )

        # Embedded name server (its own port, its own executor).
        self.routes = RouteInfoManager(now_ms=now_ms)
        self.namesrv_processor = NamesrvProcessor(
            self.routes, topic_creator=self._create_topic_for_route if config.auto_create_topic_enable else None
        )
        self.namesrv_server: RemotingServer | None = None
        if config.namesrv_listen_port >= 0:
            self.namesrv_server = RemotingServer(
                config.namesrv_listen_host, config.namesrv_listen_port, now_ms=now_ms, frame_max=config.frame_max_length
            )
            self.namesrv_executor = RequestExecutor("namesrv", 8, 100_000, now_ms=now_ms)
            for route in namesrv_routes(self.namesrv_processor):
                # a client's first stop (its routes) starts the warm-up (broker.warmup)
                processor = WarmupOnRequest(route.processor, self.first_client_warmup)
                self.namesrv_server.register_processor(route.code, processor, self.namesrv_executor)

        self.client = RemotingClient()
        self._tasks: list[asyncio.Task[None]] = []
        self._register_pending: asyncio.Event | None = None

    # -- the dispatch table -------------------------------------------------------------------
    def _build_executors(self) -> dict[str, RequestExecutor]:
        """One bounded queue per request family, sized by the config (request_table.py names them)."""
        c = self.config
        sizes = {
            "send": (c.send_message_thread_pool_nums, c.send_thread_pool_queue_capacity),
            "pull": (c.pull_message_thread_pool_nums, c.pull_thread_pool_queue_capacity),
            "query": (c.query_message_thread_pool_nums, c.query_thread_pool_queue_capacity),
            "client_manage": (c.client_manage_thread_pool_nums, c.client_manager_thread_pool_queue_capacity),
            "heartbeat": (c.heartbeat_thread_pool_nums, c.heartbeat_thread_pool_queue_capacity),
            "consumer_manage": (c.consumer_manage_thread_pool_nums, c.consumer_manager_thread_pool_queue_capacity),
            "end_transaction": (c.end_transaction_thread_pool_nums, c.end_transaction_pool_queue_capacity),
            "admin": (c.admin_broker_thread_pool_nums, c.admin_broker_thread_pool_queue_capacity),
        }
        return {name: RequestExecutor(name, n, cap, now_ms=self.now_ms) for name, (n, cap) in sizes.items()}

    def _register_processors(self) -> None:
        """broker/request_table.py's routes, each on its queue and timed by the metrics."""
        queues = {**self.executors, FAULT_INJECT: self.fault_executor}
        reg = self.metrics.instrumented(self.server.register_processor)
        for route in broker_routes(self):
            processor = route.processor
            if route.code == RequestCode.HEART_BEAT:  # a client's first request here: starts the warm-up
                processor = WarmupOnRequest(processor, self.first_client_warmup)
            reg(route.code, processor, queues[route.queue])
        # A code absent from the table is answered "not supported" after the ACL hook, in the admin queue
        # (upstream's AdminBrokerProcessor default branch).
        self.server.register_default_processor(self.metrics.wrap(NotSupportedProcessor(), ADMIN), self.executors[ADMIN])

    # -- helpers used by processors --------------------------------------------------------------
    def compile_expression(self, expression_type: str, expression: str) -> Callable[[dict[str, str]], bool]:
        if self.expression_compiler is None:
            raise ValueError(f"expression type {expression_type} is not supported by this broker")
        return self.expression_compiler(expression_type, expression)

    # -- events ------------------------------------------------------------------------------------
    def _on_message_arriving(
        self,
        topic: str,
        queue_id: int,
        max_offset: int,
        tags_code: int,
        store_timestamp: int,
        properties: dict[str, str] | None,
    ) -> None:
        """Called by the store after a message is dispatched; ``max_offset`` is the queue's new max."""
        if topic == SCHEDULE_TOPIC:
            self.schedule_service.on_message_arriving(queue_id)
            return
        if topic == TIMER_TOPIC:
            self.timer_service.on_message_arriving()
            return
        self.pull_hold_service.notify_message_arriving(topic, queue_id, max_offset, tags_code, properties)
        self.pop_service.notify_arrival(topic)

    def _on_rows_arriving(self, rows: list, results: list, store_timestamp: int, topics: Collection[str]) -> None:
        """The arrivals of a group of sends the store put in its one pass (`store.dispatcher.RowsArrivingListener`):
        nothing to do while no pull or POP receive waits and none is a delay or timer message (the SEND load's
        common case: one test a group, not a call a message); only parked pulls: the hold service's one pass over
        the group (a caught-up consumer's every message); else each as `_on_message_arriving`."""
        if self.pop_service.has_waiters() or SCHEDULE_TOPIC in topics or TIMER_TOPIC in topics:
            notify = self._on_message_arriving
            for row, result in zip(rows, results):  # (SendRow: topic, queue id, _, properties, _, tags code, ...)
                notify(row[0], row[1], result[1] + 1, row[5], store_timestamp, row[3])
        elif self.pull_hold_service.table:
            self.pull_hold_service.notify_rows_arriving(rows, results)

    async def _pop_forward_to_dlq(self, group: str, msg) -> bool:
        """The POP revive's last step: the send processor's send-back with delay level -1 (to %DLQ%<group>)."""
        ext = {
            "offset": str(msg.commit_log_offset),
            "group": group,
            "delayLevel": "-1",
            "originMsgId": msg.properties.get("UNIQ_KEY", msg.msg_id),
            "originTopic": msg.topic,
            "unitMode": "false",
            "maxReconsumeTimes": "0",
        }
        response = await self.send_processor.consumer_send_msg_back(
            None, RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK, ext)
        )
        return response.code == ResponseCode.SUCCESS

    def _on_topic_change(self, tc: TopicConfig | None) -> None:
        if tc is not None:
            self.routes.register_topic(self.config.broker_name, tc.topic_name, tc.to_json())
        else:
            self._register_embedded()
        if self._register_pending is not None:
            self._register_pending.set()

    def _create_topic_for_route(self, topic: str) -> bool:
        """The embedded name server's auto-create: invent the topic a client asked a route for."""
        if check_topic_name(topic) is not None:
            return False
        tcm = self.topic_config_manager
        if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            tcm.create_topic_in_send_message_back_method(topic, 1, PERM_READ | PERM_WRITE)
        elif topic.startswith("%"):
            return False
        else:
            if (
                tcm.create_topic_in_send_message(topic, DEFAULT_TOPIC, "namesrv", NAMESRV_AUTO_CREATE_QUEUE_NUMS, 0)
                is None
            ):
                return False
        return True

    def _notify_consumer_ids_changed(self, group: str, channels: list[Any]) -> None:
        for channel in channels:
            if not channel.is_active:
                continue
            try:
                channel.invoke_oneway(
                    RemotingCommand.request(
                        RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": group}, oneway=True
                    )
                )
            except Exception as exc:  # noqa: BLE001 - a dead peer must not break the heartbeat
                log.info("cannot notify consumer ids changed", group=group, remote=channel.remote_addr, error=str(exc))

    # ChannelEventListener
    def on_channel_connect(self, remote: str, channel) -> None:
        log.debug("client connected", remote=remote)

    def on_channel_close(self, remote: str, channel) -> None:
        self.consumer_manager.do_channel_close_event(channel)
        self.producer_manager.do_channel_close_event(channel)
        self.pull_hold_service.on_channel_closed(channel)

    def on_channel_exception(self, remote: str, channel) -> None:
        self.on_channel_close(remote, channel)

    # -- name server registration ---------------------------------------------------------------
    def _topic_wrapper(self) -> dict[str, Any]:
        tcm = self.topic_config_manager
        return {
            "topicConfigTable": {n: tc.to_json() for n, tc in tcm.table.items()},
            "dataVersion": tcm.data_version.to_json(),
        }

    def _register_embedded(self) -> None:
        c = self.config
        wrapper = self._topic_wrapper()
        self.routes.register_broker(
            c.broker_cluster_name,
            c.broker_addr,
            c.broker_name,
            c.broker_id,
            "",
            wrapper["topicConfigTable"],
            wrapper["dataVersion"],
        )

    async def register_broker_all(self) -> None:
        self._register_embedded()
        addrs = self.config.namesrv_addr_list
        if not addrs:
            return
        c = self.config
        body = orjson.dumps({"topicConfigSerializeWrapper": self._topic_wrapper(), "filterServerList": []})
        ext = {
            "brokerName": c.broker_name,
            "brokerAddr": c.broker_addr,
            "clusterName": c.broker_cluster_name,
            "haServerAddr": f"{c.broker_ip1}:{c.listen_port + 1}",
            "brokerId": str(c.broker_id),
            "compressed": "false",
            "bodyCrc32": str(_crc32(body)),
        }
        for addr in addrs:
            try:
                resp = await self.client.invoke(
                    addr,
                    RemotingCommand.request(RequestCode.REGISTER_BROKER, dict(ext), body),
                    c.register_broker_timeout_mills / 1000,
                )
                if resp.code != ResponseCode.SUCCESS:
                    log.warning("register broker refused", namesrv=addr, code=resp.code, remark=resp.remark)
            except Exception as exc:  # noqa: BLE001 - a name server down must not stop the broker
                log.warning("register broker failed", namesrv=addr, error=str(exc))

    async def unregister_broker_all(self) -> None:
        c = self.config
        ext = {
            "brokerName": c.broker_name,
            "brokerAddr": c.broker_addr,
            "clusterName": c.broker_cluster_name,
            "brokerId": str(c.broker_id),
        }
        for addr in c.namesrv_addr_list:
            try:
                await self.client.invoke(addr, RemotingCommand.request(RequestCode.UNREGISTER_BROKER, dict(ext)), 3.0)
            except Exception as exc:  # noqa: BLE001
                log.info("unregister broker failed", namesrv=addr, error=str(exc))

    # -- lifecycle ---------------------------------------------------------------------------------
    async def start(self) -> None:
        self.runtime_info.mark_boot()
        if self.acl is not None:
            from broker.acl.errors import AclError

            try:
                self.acl.load()
            except AclError as exc:
                raise ConfigError(f"acl: {exc}") from None
        await self.store.load()
        self.topic_config_manager.load()
        self.consumer_offset_manager.load()
        if (pop_state := self.pop_checkpoint.read()) is not None:
            self.pop_service.import_state(pop_state)
        self.subscription_group_manager.load()
        self.schedule_service.load()
        self.timer_service.load()
        self.topic_config_manager.persist(sync=True)
        await self.store.start()
        for executor in self.executors.values():
            executor.start()
        self.fault_executor.start()
        if self.namesrv_server is not None:
            self.namesrv_executor.start()
            await self.namesrv_server.start()
        await self.server.start()
        self.schedule_service.start()
        self.timer_service.start()
        self.transaction_check_service.start()
        self.fast_failure.start()
        await self.metrics.start()
        self._register_pending = asyncio.Event()
        await self.register_broker_all()
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(
                self._every(self.config.flush_consumer_offset_interval / 1000, self._persist_offsets),
                name="persist-offsets",
            ),
            loop.create_task(self._every(CLIENT_HOUSEKEEPING_INTERVAL_S, self._housekeeping), name="housekeeping"),
            loop.create_task(self._registration_loop(), name="register-broker"),
            loop.create_task(self.stats.run_shed_reporter(lambda: self.executors), name="load-shedding-log"),
        ]
        if self.acl is not None:
            self._tasks.append(
                loop.create_task(self._every(ACL_WATCH_INTERVAL_S, self.acl.reload_if_changed), name="acl-watch")
            )

    async def _every(self, interval_s: float, fn: Callable[[], Any]) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                result = fn()
                if asyncio.iscoroutine(result):
                    await result
            except Exception:  # noqa: BLE001 - a chore failing once must not stop it for good
                log.exception("periodic task failed", task=getattr(fn, "__name__", str(fn)))

    async def _persist_offsets(self) -> None:
        # The snapshot is taken here, on the loop that changes the table; only the file write is threaded.
        snap = self.consumer_offset_manager.take_snapshot()
        if snap is not None:
            await asyncio.to_thread(self.consumer_offset_manager.write_snapshot, snap)
        if self.pop_service.dirty:
            pop_snap = self.pop_checkpoint.take(self.pop_service.export_state())
            await asyncio.to_thread(self.pop_checkpoint.write, pop_snap)

    def _housekeeping(self) -> None:
        for channel in self.consumer_manager.scan_not_active_channel():
            channel.close()
        for channel in self.producer_manager.scan_not_active_channel():
            channel.close()
        self.routes.scan_not_active_broker()
        self._register_embedded()

    async def _registration_loop(self) -> None:
        assert self._register_pending is not None
        period = self.config.register_name_server_period / 1000
        while True:
            try:
                await asyncio.wait_for(self._register_pending.wait(), period)
                await asyncio.sleep(0.05)  # coalesce a burst of topic creations into one registration
            except TimeoutError:
                pass
            self._register_pending.clear()
            await self.register_broker_all()

    async def shutdown(self) -> None:
        """Stop accepting, answer what is in flight, flush, persist offsets."""
        grace = self.config.shutdown_grace_mills / 1000
        await cancel_until_done(self._tasks)
        await self.fast_failure.stop()
        await self.metrics.stop()
        for pr in self.pull_hold_service.shutdown():
            self.pull_processor.execute_request_when_wakeup(pr)
        self.pull_wake.run_now()  # (woken pulls waiting for their round: answered now, before the server stops)
        await self.server.stop(grace)
        for executor in (*self.executors.values(), self.fault_executor):
            await executor.stop(grace)
        await self.transaction_check_service.stop()
        await self.schedule_service.stop()
        await self.timer_service.stop()
        if self.config.namesrv_addr_list:
            await self.unregister_broker_all()
        if self.namesrv_server is not None:
            await self.namesrv_server.stop(1.0)
            await self.namesrv_executor.stop(1.0)
        await self.client.close()
        self.consumer_offset_manager.persist(force=True)
        self.pop_checkpoint.write(self.pop_checkpoint.take(self.pop_service.export_state()))
        self.topic_config_manager.persist(sync=True)
        self.subscription_group_manager.persist(sync=True)
        await self.store.shutdown()


async def cancel_until_done(tasks: list[asyncio.Task[None]], retry_s: float = 1.0) -> None:
    """Cancel ``tasks`` and wait for them, cancelling again whatever is still running after ``retry_s``.

    One cancel is not always enough on Python 3.11: ``asyncio.wait_for`` turns a cancellation that meets
    an inner future which has just finished into that future's result or exception (gh-86296). The
    registration loop then saw a failed connect to a bad name server, logged it, went round again, and
    SIGTERM never finished (found by the fuzzer after an UPDATE_BROKER_CONFIG set namesrvAddr=1e9).
    """
    pending = {t for t in tasks if not t.done()}
    while pending:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=retry_s)
    await asyncio.gather(*tasks, return_exceptions=True)


def _crc32(data: bytes) -> int:
    return zlib.crc32(data) & 0x7FFFFFFF
