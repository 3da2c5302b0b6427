"""The request table: every code the broker and its embedded name server answer, its handler and its queue.

Upstream spreads this over ``BrokerController.registerProcessor`` and the switch statements of each
processor; here it is one file a newcomer reads top to bottom. ``broker_routes`` lists the broker's port,
``namesrv_routes`` the name server's. The controller registers each route with ``RemotingServer`` on the
executor named by ``queue``.

A code missing from a table is not silently handed to some processor: on the name server's port the
server itself answers 3 ``" request type N not supported"``; on the broker's port the default route does
the same after the ACL hook (``NotSupportedProcessor`` in the admin queue, exactly where upstream's
``AdminBrokerProcessor`` answers its ``default:`` branch, so an unsigned unknown code is refused by the ACL
first, as upstream).

Processors with one job per code (the admin families, the name server) are given here as one method per
code, wrapped in a ``HandlerProcessor``; the send, pull and client processors keep their own small
dispatch because their codes share most of their work.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from broker.processor.acl_admin import AclAdminProcessor
from broker.processor.admin import AdminBrokerProcessor
from broker.processor.client_manage import ClientManageProcessor
from broker.processor.consumer_admin import ConsumerAdminProcessor
from broker.processor.consumer_manage import ConsumerManageProcessor
from broker.processor.end_transaction import EndTransactionProcessor
from broker.processor.query import QueryMessageProcessor
from broker.processor.runtime_admin import RuntimeAdminProcessor
from remoting.codes import RequestCode
from remoting.command import RemotingCommand
from remoting.server import not_supported

if TYPE_CHECKING:
    from broker.controller import BrokerController
    from broker.namesrv.processor import NamesrvProcessor

#: One method answering one code: ``(channel, request) -> response`` (or an awaitable of it; None: no answer).
Handler = Callable[[Any, RemotingCommand], "RemotingCommand | None | Awaitable[RemotingCommand | None]"]

#: Queue (executor) names; the controller maps each to its RequestExecutor.
SEND, PULL, QUERY, HEARTBEAT, CLIENT_MANAGE, CONSUMER_MANAGE, END_TRANSACTION, ADMIN, FAULT_INJECT, NAMESRV = (
    "send",
    "pull",
    "query",
    "heartbeat",
    "client_manage",
    "consumer_manage",
    "end_transaction",
    "admin",
    "fault_inject",
    "namesrv",
)


@dataclass(frozen=True, slots=True)
class Route:
    code: int
    processor: Any  # remoting.server.RequestProcessor
    queue: str


class HandlerProcessor:
    """A RequestProcessor over ``{code: handler}``: upstream's ``switch (request.getCode())`` as a dict."""

    def __init__(self, handlers: dict[int, Handler]) -> None:
        self.handlers = handlers

    def reject_request(self) -> bool:
        return False

    async def process_request(self, channel: Any, request: RemotingCommand) -> RemotingCommand | None:
        handler = self.handlers.get(request.code)
        if handler is None:
            return not_supported(request)
        result = handler(channel, request)
        if inspect.isawaitable(result):
            result = await result
        return result  # type: ignore[return-value]


class NotSupportedProcessor:
    """The broker's default route: every code absent from ``broker_routes``."""

    def reject_request(self) -> bool:
        return False

    async def process_request(self, channel: Any, request: RemotingCommand) -> RemotingCommand | None:
        return not_supported(request)


def _routes(handlers: dict[int, Handler], queue: str) -> list[Route]:
    processor = HandlerProcessor(handlers)
    return [Route(code, processor, queue) for code in handlers]


def broker_routes(c: BrokerController) -> list[Route]:
    """The broker port's table, in upstream's ``registerProcessor`` order."""
    send, pull = c.send_processor, c.pull_processor
    query = QueryMessageProcessor(c.store, c.config)
    client_manage = ClientManageProcessor(
        config=c.config,
        consumer_manager=c.consumer_manager,
        producer_manager=c.producer_manager,
        subscription_group_manager=c.subscription_group_manager,
        topic_config_manager=c.topic_config_manager,
        compile_expression=c.compile_expression,
        now_ms=c.now_ms,
    )
    consumer_manage = ConsumerManageProcessor(c.store, c.consumer_manager, c.consumer_offset_manager)
    end_transaction = EndTransactionProcessor(c.store, c.config, c.transaction_service)
    admin = AdminBrokerProcessor(
        config=c.config,
        store=c.store,
        topic_config_manager=c.topic_config_manager,
        consumer_offset_manager=c.consumer_offset_manager,
        subscription_group_manager=c.subscription_group_manager,
        producer_manager=c.producer_manager,
        rebalance_lock_manager=c.rebalance_lock_manager,
    )
    runtime = RuntimeAdminProcessor(
        config=c.config,
        config_version=c.config_data_version,
        runtime_table=c.runtime_info.table,
        windows=c.metrics.windows,
        fault_injector=c.fault_injector,
        now_ms=c.now_ms,
    )
    consumer_admin = ConsumerAdminProcessor(
        config=c.config,
        store=c.store,
        topic_config_manager=c.topic_config_manager,
        consumer_manager=c.consumer_manager,
        consumer_offset_manager=c.consumer_offset_manager,
        stats=c.stats,
    )
    acl = AclAdminProcessor(c.acl, c.config)
    R = RequestCode
    routes = [
        Route(R.SEND_MESSAGE, send, SEND),
        Route(R.SEND_MESSAGE_V2, send, SEND),
        Route(R.SEND_BATCH_MESSAGE, send, SEND),
        Route(R.CONSUMER_SEND_MSG_BACK, send, SEND),
        Route(R.PULL_MESSAGE, pull, PULL),
        Route(R.QUERY_MESSAGE, query, QUERY),
        Route(R.VIEW_MESSAGE_BY_ID, query, QUERY),
        Route(R.HEART_BEAT, client_manage, HEARTBEAT),
        Route(R.UNREGISTER_CLIENT, client_manage, CLIENT_MANAGE),
        Route(R.CHECK_CLIENT_CONFIG, client_manage, CLIENT_MANAGE),
        Route(R.GET_CONSUMER_LIST_BY_GROUP, consumer_manage, CONSUMER_MANAGE),
        Route(R.UPDATE_CONSUMER_OFFSET, consumer_manage, CONSUMER_MANAGE),
        Route(R.QUERY_CONSUMER_OFFSET, consumer_manage, CONSUMER_MANAGE),
        Route(R.END_TRANSACTION, end_transaction, END_TRANSACTION),
    ]
    routes += _routes(
        {
            # topics, offsets, locks, groups, producers (AdminBrokerProcessor)
            R.UPDATE_AND_CREATE_TOPIC: admin.update_and_create_topic,
            R.DELETE_TOPIC_IN_BROKER: admin.delete_topic,
            R.GET_ALL_TOPIC_CONFIG: admin.get_all_topic_config,
            R.GET_TOPIC_STATS_INFO: admin.get_topic_stats_info,
            R.GET_MAX_OFFSET: admin.get_max_offset,
            R.GET_MIN_OFFSET: admin.get_min_offset,
            R.SEARCH_OFFSET_BY_TIMESTAMP: admin.search_offset_by_timestamp,
            R.GET_EARLIEST_MSG_STORETIME: admin.get_earliest_msg_storetime,
            R.LOCK_BATCH_MQ: admin.lock_batch_mq,
            R.UNLOCK_BATCH_MQ: admin.unlock_batch_mq,
            R.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: admin.get_all_subscription_group_config,
            R.DELETE_SUBSCRIPTIONGROUP: admin.delete_subscription_group,
            R.GET_PRODUCER_CONNECTION_LIST: admin.get_producer_connection_list,
            R.GET_ALL_CONSUMER_OFFSET: admin.get_all_consumer_offset,
            # the broker process itself: runtime info, config, stats (RuntimeAdminProcessor)
            R.GET_BROKER_RUNTIME_INFO: runtime.get_broker_runtime_info,
            R.GET_BROKER_CONFIG: runtime.get_broker_config,
            R.UPDATE_BROKER_CONFIG: runtime.update_broker_config,
            R.VIEW_BROKER_STATS_DATA: runtime.view_broker_stats_data,
            # consumer groups (ConsumerAdminProcessor)
            R.GET_CONSUME_STATS: consumer_admin.get_consume_stats,
            R.GET_CONSUMER_CONNECTION_LIST: consumer_admin.get_consumer_connection_list,
            R.QUERY_TOPIC_CONSUME_BY_WHO: consumer_admin.query_topic_consume_by_who,
            R.INVOKE_BROKER_TO_RESET_OFFSET: consumer_admin.reset_offset,
            R.GET_CONSUMER_RUNNING_INFO: consumer_admin.call_consumer,
            R.CONSUME_MESSAGE_DIRECTLY: consumer_admin.call_consumer,
            # ACL 1.0 (AclAdminProcessor)
            R.UPDATE_AND_CREATE_ACL_CONFIG: acl.update_and_create_access_config,
            R.DELETE_ACL_CONFIG: acl.delete_access_config,
            R.GET_BROKER_CLUSTER_ACL_INFO: acl.get_broker_acl_config_version,
            R.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG: acl.update_global_white_addrs_config,
            R.GET_BROKER_CLUSTER_ACL_CONFIG: acl.get_broker_cluster_acl_config,
        },
        ADMIN,
    )
    # Fault injection has a queue of its own, outside the ones the injector can stall, so that a stalled
    # admin queue can still be cleared.
    routes += _routes({R.FAULT_INJECT: runtime.fault_inject}, FAULT_INJECT)
    return routes


def namesrv_routes(ns: NamesrvProcessor) -> list[Route]:
    """The embedded name server's port (upstream's ``DefaultRequestProcessor`` switch)."""
    R = RequestCode
    return _routes(
        {
            R.GET_ROUTEINFO_BY_TOPIC: ns.get_route_info_by_topic,
            R.REGISTER_BROKER: ns.register_broker,
            R.UNREGISTER_BROKER: ns.unregister_broker,
            R.GET_BROKER_CLUSTER_INFO: ns.get_broker_cluster_info,
            R.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: ns.get_all_topic_list,
            R.GET_TOPICS_BY_CLUSTER: ns.get_topics_by_cluster,
            R.DELETE_TOPIC_IN_NAMESRV: ns.delete_topic_in_namesrv,
            R.PUT_KV_CONFIG: ns.put_kv_config,
            R.GET_KV_CONFIG: ns.get_kv_config,
            R.DELETE_KV_CONFIG: ns.delete_kv_config,
        },
        NAMESRV,
    )
