"""Processors are given what they use, not the controller: each can be built and tried on its own."""

from __future__ import annotations

import orjson
import pytest

from broker.config import ConfigError, build_config
from broker.controller import BrokerController
from broker.data_version import DataVersion
from broker.processor.admin import AdminBrokerProcessor
from broker.processor.runtime_admin import RuntimeAdminProcessor
from broker.request_table import HandlerProcessor, broker_routes
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand

# send.py and pull.py are being changed by other work; they still hold the controller for now.
STILL_GIVEN_THE_CONTROLLER = {
    RequestCode.SEND_MESSAGE,
    RequestCode.SEND_MESSAGE_V2,
    RequestCode.SEND_BATCH_MESSAGE,
    RequestCode.CONSUMER_SEND_MSG_BACK,
    RequestCode.PULL_MESSAGE,
}


def _holders(processor) -> list[object]:
    if isinstance(processor, HandlerProcessor):
        return [handler.__self__ for handler in processor.handlers.values()]
    return [processor]


def test_no_processor_in_the_table_holds_the_controller(broker):
    for route in broker_routes(broker):
        if route.code in STILL_GIVEN_THE_CONTROLLER:
            continue
        for holder in _holders(route.processor):
            held = [name for name, value in vars(holder).items() if isinstance(value, BrokerController)]
            assert not held, f"{type(holder).__name__} (code {route.code}) holds the controller as {held}"


class _Store:
    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return 40 + queue_id


class _Channel:
    remote_addr = "127.0.0.1:1"


def _admin() -> AdminBrokerProcessor:
    config, _ = build_config([])
    return AdminBrokerProcessor(
        config=config,
        store=_Store(),
        topic_config_manager=None,
        consumer_offset_manager=None,
        subscription_group_manager=None,
        producer_manager=None,
        rebalance_lock_manager=None,
    )


def test_admin_answers_from_the_store_it_is_given():
    request = RemotingCommand.request(RequestCode.GET_MAX_OFFSET, {"topic": "T", "queueId": "2"})
    resp = _admin().get_max_offset(_Channel(), request)
    assert (resp.code, resp.ext_fields["offset"]) == (ResponseCode.SUCCESS, "42")


@pytest.mark.parametrize("code, word", [(RequestCode.LOCK_BATCH_MQ, "lock"), (RequestCode.UNLOCK_BATCH_MQ, "unlock")])
def test_a_bad_lock_body_is_refused_by_name(code, word):
    admin = _admin()
    handler = admin.lock_batch_mq if code == RequestCode.LOCK_BATCH_MQ else admin.unlock_batch_mq
    resp = handler(_Channel(), RemotingCommand.request(code, {}, orjson.dumps({"mqSet": [{"topic": "T"}]})))
    assert resp.code == ResponseCode.SYSTEM_ERROR
    assert resp.remark.startswith(f"bad {word} batch body: ")


def test_runtime_admin_changes_the_config_in_place_and_bumps_its_version():
    config, _ = build_config([])
    version = DataVersion()
    runtime = RuntimeAdminProcessor(
        config=config, config_version=version, runtime_table=dict, windows=None, fault_injector=None, now_ms=lambda: 7
    )
    before = version.to_json()
    runtime.update_config([("maxMessageSize", "1024")])
    assert config.max_message_size == 1024
    assert version.to_json() != before
    with pytest.raises(ConfigError, match="cannot change while the broker runs: aclEnable"):
        runtime.update_config([("aclEnable", "true")])
    assert not config.acl_enable


async def test_runtime_info_holds_the_windows_and_the_store_figures(broker, client):
    resp = await client.invoke(
        broker.config.broker_addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO, {}), 5
    )
    table = orjson.loads(resp.body)["table"]
    for key in (
        "msgPutTotalTodayMorning",
        "EndTransactionQueueSize",
        "earliestMessageTimeStamp",
        "commitLogMaxOffset",
        "sendThreadPoolQueueCapacity",
    ):
        assert key in table, key
    assert int(table["bootTimestamp"]) > 0
