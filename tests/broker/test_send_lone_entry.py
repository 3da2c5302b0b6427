"""``SendMessageProcessor.process_request_now``: a lone send (one a read, its header decoded ahead) checked, built,
stored and answered on the caller's stack, with each topic's checks kept from one lone send to the next
(``_lone_checked``) while what they were made from is unchanged.

Pinned against ``process_request`` (the coroutine path: ``send_message`` with fresh checks a send) in a second
broker fed the same seeded random stream: sends to several topics, queue ids in and out of range, picked by the
broker, bodies over and under the size limit, the Producer's properties and others (tags, DELAY, a half message),
a retry topic, and between them the changes the kept checks depend on, made alike to both brokers: the broker's
permission, role, maxMessageSize and cluster name set in place, a topic updated, deleted (then auto-created again)
or its queue counts changed in place. Same answers (code, remark, queue id and offset), same records, consume
queues and statistics. Fails if an entry is kept past any of those changes."""

from __future__ import annotations

import random
import re

from broker_helpers import FakeChannel, send_request, start_broker

from broker.topic import TopicConfig
from remoting.codes import ResponseCode
from remoting.pending import Pending, finish
from store.message import decode_records

_TOPICS = ("LoneA", "LoneB", "LoneC")


def _no_port(remark: str | None) -> str | None:
    return None if remark is None else re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1", remark)


def _request(rng: random.Random, n: int):
    topic = rng.choice(_TOPICS + ("%RETRY%LoneG",)) if rng.random() < 0.1 else rng.choice(_TOPICS)
    uniq = f"7F0000014E2A18B4AAC27D2F6B9E{n:04X}"
    props = rng.choice(
        (
            {"UNIQ_KEY": uniq, "WAIT": "true"},
            {"UNIQ_KEY": uniq, "WAIT": "true"},
            {"UNIQ_KEY": uniq, "TAGS": "t", "KEYS": "k"},
            {"UNIQ_KEY": uniq, "DELAY": "2"},
            {"UNIQ_KEY": uniq, "TRAN_MSG": "true", "PGROUP": "PG"},
        )
    )
    body = bytes([n % 251]) * rng.choice((0, 10, 200, 1500))
    return send_request(topic, body, queue_id=rng.choice((0, 1, 2, 3, 3, 7, 9, -1)), props=props)


def _change(rng: random.Random, brokers) -> None:
    kind = min(rng.randrange(9), 6)  # (in place: a third of the changes)
    topic = rng.choice(_TOPICS)
    value = rng.random()
    for broker in brokers:
        cfg = broker.config
        tcm = broker.topic_config_manager
        if kind == 0:
            cfg.broker_permission = 4 if value < 0.3 else 6
        elif kind == 1:
            cfg.broker_role = "SLAVE" if value < 0.3 else "ASYNC_MASTER"
        elif kind == 2:
            cfg.max_message_size = 100 if value < 0.4 else 4 * 1024 * 1024
        elif kind == 3:
            cfg.broker_cluster_name = "ClusterX" if value < 0.5 else "DefaultCluster"
        elif kind == 4:
            nums = 1 + int(value * 8)
            tcm.update_topic_config(TopicConfig(topic, read_queue_nums=nums, write_queue_nums=nums, perm=6))
        elif kind == 5:
            tcm.delete_topic_config(topic)
        else:
            tc = tcm.select_topic_config(topic)
            if tc is not None:  # (in place: the same object; one count or both)
                nums = 1 + int((value * 7919) % 1 * 12)
                if value < 0.7:
                    tc.write_queue_nums = nums
                if value > 0.3:
                    tc.read_queue_nums = nums


async def _answer(broker, channel, request, *, now: bool):
    processor = broker.send_processor
    assert processor.groupable(request)  # (the header kept on it, as the connection's reader keeps it)
    if not now:
        return await processor.process_request(channel, request)
    answer = processor.process_request_now(channel, request)
    if answer.__class__ is Pending:
        answer = await finish(answer)
    return answer


def _records(broker) -> list[tuple]:
    cl = broker.store.commit_log
    _, view = cl.get_data(0)
    return [
        (m.topic, m.queue_id, m.queue_offset, m.body, m.properties, m.flag, m.sys_flag)
        for m in decode_records(view[: cl.get_max_offset()])
    ]


def _queues(broker) -> dict:
    table = broker.store.dispatcher.consume_queue_table
    return {(t, q): cq.get_max_offset_in_queue() for t, queues in table.items() for q, cq in queues.items()}


async def test_the_lone_entry_answers_and_stores_what_the_coroutine_path_does_across_changes(tmp_path) -> None:
    now_side = await start_broker(tmp_path / "now")
    general = await start_broker(tmp_path / "general")
    try:
        rng = random.Random(1513)
        kept = 0
        for n in range(1500):
            if rng.random() < 0.15:
                _change(rng, (now_side, general))
                continue
            seed = rng.random()
            random.seed(seed)  # (a queue id the broker picks: the same pick on either side)
            a = await _answer(now_side, FakeChannel(), _request(random.Random(seed), n), now=True)
            random.seed(seed)
            b = await _answer(general, FakeChannel(), _request(random.Random(seed), n), now=False)
            got = (a.code, _no_port(a.remark), a.ext_fields.get("queueId"), a.ext_fields.get("queueOffset"))
            want = (b.code, _no_port(b.remark), b.ext_fields.get("queueId"), b.ext_fields.get("queueOffset"))
            assert got == want, n
            kept += bool(now_side.send_processor._lone_checked)
        assert kept > 800
        assert _records(now_side) == _records(general)
        assert _queues(now_side) == _queues(general)
        for name in ("put_nums", "put_size", "busy"):
            assert getattr(now_side.stats, name) == getattr(general.stats, name), name
    finally:
        await now_side.shutdown()
        await general.shutdown()


async def test_every_answer_kind_is_met_by_the_stream(tmp_path) -> None:
    """The stream above reaches each refusal the kept checks could hide (else the differential proves little)."""
    broker = await start_broker(tmp_path / "b")
    try:
        rng = random.Random(1513)
        codes: set[int] = set()
        remarks: set[str] = set()
        for n in range(1500):
            if rng.random() < 0.15:
                _change(rng, (broker,))
                continue
            answer = await _answer(broker, FakeChannel(), _request(random.Random(rng.random()), n), now=True)
            codes.add(answer.code)
            remarks.add((answer.remark or "")[:24])
        assert {
            ResponseCode.SUCCESS,
            ResponseCode.NO_PERMISSION,
            ResponseCode.SERVICE_NOT_AVAILABLE,
            ResponseCode.MESSAGE_ILLEGAL,
            ResponseCode.SYSTEM_ERROR,
        } <= codes, codes
        assert any(r.startswith("request queueId[") for r in remarks), remarks
    finally:
        await broker.shutdown()


async def test_lone_sends_answered_on_the_stack_never_yield_to_the_loop(tmp_path) -> None:
    """A lone send's caller (a read's callback) returns to the loop after it, so its put is not one of the puts "in a
    row" that yield every 64th (``SendRowPut.put_one_now``): 300 of the Producer's sends all answered at once, none
    a ``Pending`` rest, the store's count of puts in a row untouched. Before, every 64th became a task."""
    broker = await start_broker(tmp_path / "b")
    try:
        putter = broker.store.putter
        for queue_id in range(4):  # (the topic and its queues made: a new queue's first put goes the general way)
            first = await _answer(broker, FakeChannel(), send_request("LoneY", b"x", queue_id=queue_id), now=True)
            assert first.code == ResponseCode.SUCCESS
        before = putter._inline_appends
        processor = broker.send_processor
        for n in range(300):
            props = {"UNIQ_KEY": f"7F0000014E2A18B4AAC27D2F6B9E{n:04X}", "WAIT": "true"}
            request = send_request("LoneY", b"y" * 100, queue_id=n % 4, props=props)
            assert processor.groupable(request)
            answer = processor.process_request_now(FakeChannel(), request)
            if answer.__class__ is Pending:  # (driven to its end: a rest left undriven would hold the store)
                await finish(answer)
                raise AssertionError(f"send {n} had to wait")
            assert (answer.code, answer.ext_fields["queueOffset"]) == (ResponseCode.SUCCESS, str(n // 4 + 1))
        assert putter._inline_appends == before
    finally:
        await broker.shutdown()
