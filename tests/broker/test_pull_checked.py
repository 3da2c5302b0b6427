"""The pull processor reuses the outcome of a pull's checks (group, topic, queue, subscription) while the topic,
subscription-group and consumer tables keep their versions, and a parked pull's re-run reuses the checks it passed
when it parked: every change to one of those tables, and the broker's own permission, must be seen by the very next
pull and by a pull already parked, exactly as a processor that re-checks every pull sees it."""

from __future__ import annotations

import random

import pytest
from broker_helpers import FakeChannel, pull_request, send_request, woken_answers

from broker.client.channel_info import ClientChannelInfo
from broker.heartbeat import ConsumerData, build_subscription
from broker.processor.pull import PullMessageProcessor
from broker.subscription_group_manager import SubscriptionGroupConfig
from broker.topic import PERM_READ, PERM_WRITE, TopicConfig
from remoting.codes import ResponseCode
from remoting.pull_header import PullHeaderValues, decode_pull_message_values

TOPICS = ("TC1", "TC2")
GROUPS = ("GC1", "GC2")
SUSPEND = 0x2


def _answer(response) -> tuple:  # noqa: ANN001
    """What a pull's answer says: code, remark, offsets and the body's bytes."""
    body = bytes(response.body) if response.body is not None else None
    return response.code, response.remark, dict(response.ext_fields), body


def _register(broker, channels: dict, group: str, model: str, sub: str, version: int) -> None:  # noqa: ANN001
    subs = [build_subscription(topic, sub, "TAG", version) for topic in TOPICS]
    channel = channels.setdefault(group, FakeChannel())
    info = ClientChannelInfo(channel, f"cid-{group}", "JAVA", 409, 0)
    broker.consumer_manager.register_consumer(
        ConsumerData(group, "CONSUME_PASSIVELY", model, "CONSUME_FROM_LAST_OFFSET", subs), info, notify=False
    )


async def test_every_table_change_is_seen_by_the_next_pull_as_by_a_processor_that_rechecks(broker):
    for topic in TOPICS:
        for queue_id in range(4):
            for tag in ("A", "B"):
                response = await broker.send_processor.process_request(
                    FakeChannel(), send_request(topic, queue_id=queue_id, props={"TAGS": tag})
                )
                assert response.code == ResponseCode.SUCCESS
    cached = broker.pull_processor
    reference = PullMessageProcessor.of(broker)  # its cache is emptied before each of its pulls: it checks each
    reference.hold_service = broker.pull_hold_service
    channels: dict = {}
    rng = random.Random(12)
    hits = mismatches = 0
    kinds: set[int] = set()
    for _ in range(1500):
        roll = rng.random()
        if roll < 0.04:
            topic = rng.choice(TOPICS)
            broker.topic_config_manager.update_topic_config(
                TopicConfig(
                    topic,
                    read_queue_nums=rng.choice((4, 2)),
                    write_queue_nums=4,
                    perm=rng.choice((PERM_READ | PERM_WRITE, PERM_WRITE, PERM_READ)),
                )
            )
        elif roll < 0.05:
            broker.topic_config_manager.delete_topic_config(rng.choice(TOPICS))
        elif roll < 0.09:
            broker.subscription_group_manager.update_subscription_group_config(
                SubscriptionGroupConfig(
                    rng.choice(GROUPS), consume_enable=rng.random() < 0.7, consume_broadcast_enable=rng.random() < 0.5
                )
            )
        elif roll < 0.10:
            broker.subscription_group_manager.delete_subscription_group_config(rng.choice(GROUPS))
        elif roll < 0.15:
            _register(
                broker,
                channels,
                rng.choice(GROUPS),
                rng.choice(("CLUSTERING", "BROADCASTING")),
                rng.choice(("*", "A", "B")),
                rng.randrange(3),
            )
        elif roll < 0.17:
            group = rng.choice(GROUPS)
            if group in channels:
                broker.consumer_manager.unregister_consumer(group, channels[group], notify=False)
        elif roll < 0.18:
            broker.config.broker_permission = rng.choice((6, 6, 2))
        else:
            sys_flag = rng.choice((0, 0, 0x4))  # the heartbeat's subscription, or the request's
            request = pull_request(
                rng.choice(GROUPS), rng.choice(TOPICS), rng.randrange(5), 0, sys_flag=sys_flag, sub=rng.choice("*AB")
            )
            before = len(cached._checked)
            got = cached._process(FakeChannel(), request, True)
            reference._checked.clear()
            want = reference._process(FakeChannel(), request, True)
            hits += len(cached._checked) == before
            kinds.add(want.code)
            mismatches += _answer(got) != _answer(want)
    assert mismatches == 0
    assert hits > 500, hits  # most pulls took the kept checks
    # the sequence reached the answers of every check it can fail and pass
    assert {
        ResponseCode.SUCCESS,
        ResponseCode.NO_PERMISSION,
        ResponseCode.TOPIC_NOT_EXIST,
        ResponseCode.SYSTEM_ERROR,
        ResponseCode.SUBSCRIPTION_NOT_EXIST,
    } <= kinds, kinds


async def _parked_answer(broker, change, serialize: int = 0) -> object:  # noqa: ANN001
    """A pull parked at the end of TP's queue 0, then ``change(broker)``, then a message to that queue: the woken
    pull's answer."""
    channel = FakeChannel()
    send = broker.send_processor
    assert (await send.process_request(FakeChannel(), send_request("TP"))).code == ResponseCode.SUCCESS
    pull = broker.pull_processor
    end = broker.store.get_max_offset_in_queue("TP", 0)
    assert pull._process(channel, pull_request("GP", "TP", 0, end - 1, sys_flag=0x4), True).code == 0  # checked
    request = pull_request("GP", "TP", 0, end, sys_flag=0x4 | SUSPEND)
    request.serialize_type = serialize  # (answered in the request's serialization)
    assert pull._process(channel, request, True) is None  # parked
    change(broker)
    assert (await send.process_request(FakeChannel(), send_request("TP"))).code == ResponseCode.SUCCESS
    await woken_answers(channel)
    assert len(channel.sent) == 1
    # the same pull re-run by a processor that checks every pull and answers through `_answer`: the same bytes
    reference = PullMessageProcessor.of(broker)
    want = reference._process(FakeChannel(), request, False)
    assert b"".join(bytes(p) for p in channel.sent[0].encode()) == b"".join(bytes(p) for p in want.encode())
    return channel.sent[0]


def _topic_write_only(broker) -> None:  # noqa: ANN001
    broker.topic_config_manager.update_topic_config(TopicConfig("TP", 4, 4, PERM_WRITE))


def _group_disabled(broker) -> None:  # noqa: ANN001
    broker.subscription_group_manager.update_subscription_group_config(
        SubscriptionGroupConfig("GP", consume_enable=False)
    )


def _broker_write_only(broker) -> None:  # noqa: ANN001
    broker.config.broker_permission = PERM_WRITE


@pytest.mark.parametrize("serialize", [0, 1], ids=["json", "rocketmq"])
async def test_a_parked_pull_s_rerun_sees_a_change_made_while_it_was_parked(broker, serialize):
    for _ in range(3):
        assert (await _parked_answer(broker, lambda b: None, serialize)).code == ResponseCode.SUCCESS
    response = await _parked_answer(broker, _topic_write_only, serialize)
    assert (response.code, response.remark) == (
        ResponseCode.NO_PERMISSION,
        "the topic[TP] pulling message is forbidden",
    )
    broker.topic_config_manager.update_topic_config(TopicConfig("TP", 4, 4, PERM_READ | PERM_WRITE))
    response = await _parked_answer(broker, _group_disabled, serialize)
    assert (response.code, response.remark) == (ResponseCode.NO_PERMISSION, "subscription group no permission, GP")
    broker.subscription_group_manager.update_subscription_group_config(SubscriptionGroupConfig("GP"))
    response = await _parked_answer(broker, _broker_write_only, serialize)
    assert response.code == ResponseCode.NO_PERMISSION and "pulling message is forbidden" in response.remark


async def test_a_heartbeat_while_parked_is_seen_by_the_rerun(broker):
    """The Java consumer's pull carries no subscription: a heartbeat that turns its group to BROADCASTING (which the
    group refuses) while the pull is parked is refused by the re-run, as a fresh check refuses it."""
    channels: dict = {}
    broker.subscription_group_manager.update_subscription_group_config(
        SubscriptionGroupConfig("GH", consume_broadcast_enable=False)
    )
    _register(broker, channels, "GH", "CLUSTERING", "*", 0)
    send = broker.send_processor
    assert (await send.process_request(FakeChannel(), send_request("TC1"))).code == ResponseCode.SUCCESS
    channel = FakeChannel()
    pull = broker.pull_processor
    assert pull._process(channel, pull_request("GH", "TC1", 0, 1, sys_flag=SUSPEND), True) is None  # parked
    _register(broker, channels, "GH", "BROADCASTING", "*", 0)
    assert (await send.process_request(FakeChannel(), send_request("TC1"))).code == ResponseCode.SUCCESS
    await woken_answers(channel)
    assert [r.code for r in channel.sent] == [ResponseCode.NO_PERMISSION]


def test_the_fast_header_is_a_tuple_equal_to_the_map_decoder_s_header() -> None:
    from remoting.headers import PullMessageRequestHeader, decode_header

    ext = {
        "consumerGroup": "G",
        "topic": "T",
        "queueId": "3",
        "queueOffset": "12345",
        "maxMsgNums": "32",
        "sysFlag": "3",
        "commitOffset": "12340",
        "suspendTimeoutMillis": "15000",
        "subVersion": "1764021600123",
        "expressionType": "TAG",
    }
    fast = decode_pull_message_values(tuple(ext), tuple(ext.values()))
    slow = decode_header(PullMessageRequestHeader, ext)
    assert type(fast) is PullHeaderValues
    assert fast == slow and slow == fast and not fast != slow
    assert [getattr(fast, name) for name in PullHeaderValues._fields] == [
        getattr(slow, name) for name in PullHeaderValues._fields
    ]
