"""Transactions end to end in one process: our TransactionProducer against a BrokerController.

Half messages, END_TRANSACTION commit and rollback with op records, the check-back of undecided
messages (after transactionTimeOut, up to transactionCheckMax times, then TRANS_CHECK_MAX_TIME_TOPIC),
immunity times, and state that survives a broker restart.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from broker_helpers import start_broker

from broker.controller import BrokerController
from broker.topic import (
    TRANS_CHECK_MAX_TIME_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
)
from broker.transaction.check import CHECK_GROUP
from mqclient.message import Message
from mqclient.producer import ProducerConfig
from mqclient.transaction import LocalTransactionState, TransactionProducer
from remoting.client import RemotingClient
from remoting.codes import RequestCode
from remoting.command import RemotingCommand
from store import GetMessageStatus, decode_records
from store.message import TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE

COMMIT, ROLLBACK, UNKNOW = (
    LocalTransactionState.COMMIT_MESSAGE,
    LocalTransactionState.ROLLBACK_MESSAGE,
    LocalTransactionState.UNKNOW,
)
TIMEOUT_MS = 400


class Broker:
    """``broker_helpers.start_broker`` with this file's transaction timings; a restart keeps its ports and store."""

    def __init__(self, root, **overrides: str) -> None:
        assert root.name == "store", "start_broker keeps its store in <tmp_path>/store"
        self.root = root
        self.overrides = {
            "transactionTimeOut": str(TIMEOUT_MS),
            "transactionCheckInterval": "100",
            "flushConsumerOffsetInterval": "200",
            **overrides,
        }
        self.controller: BrokerController | None = None

    @property
    def namesrv(self) -> str:
        return f"127.0.0.1:{self.config.namesrv_listen_port}"

    async def start(self) -> Broker:
        self.controller = await start_broker(self.root.parent, **self.overrides)
        self.config = self.controller.config
        self.overrides.update(
            listenPort=str(self.config.listen_port), namesrvListenPort=str(self.config.namesrv_listen_port)
        )
        return self

    async def stop(self) -> None:
        if self.controller is not None:
            await self.controller.shutdown()
            self.controller = None

    def messages(self, topic: str, queue_id: int | None = None) -> list:
        store = self.controller.store
        tc = self.controller.topic_config_manager.select_topic_config(topic)
        queues = [queue_id] if queue_id is not None else range(tc.read_queue_nums if tc else 1)
        out = []
        for q in queues:
            offset = 0
            while True:
                r = store.get_message("t", topic, q, offset, 32, None)
                if r.status != GetMessageStatus.FOUND:
                    break
                out += decode_records(b"".join(r.buffers))
                offset = r.next_begin_offset
        return out


async def eventually(predicate, timeout_s: float = 5.0, what: str = "condition"):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        await asyncio.sleep(0.01)
    raise AssertionError(f"{what} not reached within {timeout_s} s")


class Listener:
    def __init__(self, execute=COMMIT, check=COMMIT) -> None:
        self.execute_state, self.check_state = execute, check
        self.executed: list[tuple[str, object]] = []
        self.checked: list[str] = []

    def execute_local_transaction(self, msg, arg):
        self.executed.append((msg.keys, arg))
        if isinstance(self.execute_state, Exception):
            raise self.execute_state
        return self.execute_state

    async def check_local_transaction(self, msg):
        self.checked.append(msg.properties.get("KEYS"))
        return self.check_state


@pytest.fixture
async def broker(tmp_path):
    b = await Broker(tmp_path / "store").start()
    yield b
    await b.stop()


def _producer(broker: Broker, listener: Listener, group: str = "PG_TX", **kw) -> TransactionProducer:
    return TransactionProducer(broker.namesrv, listener, ProducerConfig(group=group), **kw)


async def test_commit_stores_the_real_message_once(broker):
    listener = Listener(execute=COMMIT)
    async with _producer(broker, listener) as producer:
        result = await producer.send_message_in_transaction(Message("TxTopic", b"pay", keys="k1", tags="T"), 42)
    assert result.local_state is COMMIT and listener.executed == [("k1", 42)]
    got = await eventually(lambda: broker.messages("TxTopic"), what="committed message")
    assert len(got) == 1
    m = got[0]
    assert m.body == b"pay" and m.properties["KEYS"] == "k1" and m.properties["TAGS"] == "T"
    assert m.sys_flag & TRANSACTION_ROLLBACK_TYPE == TRANSACTION_COMMIT_TYPE
    assert "REAL_TOPIC" not in m.properties and "TRAN_MSG" not in m.properties
    assert m.properties["PGROUP"] == "PG_TX" and m.properties["UNIQ_KEY"] == result.msg_id
    half = broker.messages(TRANS_HALF_TOPIC)
    assert len(half) == 1 and m.prepared_transaction_offset == half[0].commit_log_offset
    assert half[0].properties["REAL_TOPIC"] == "TxTopic" and half[0].sys_flag & 0xC == 0
    ops = await eventually(lambda: broker.messages(TRANS_OP_HALF_TOPIC), what="op record")
    assert [(o.body, o.properties["TAGS"]) for o in ops] == [(b"0", "d")]
    # decided: the check service passes it over without asking anyone
    await asyncio.sleep(TIMEOUT_MS / 1000 + 0.3)
    assert producer.checks == [] and broker.controller.transaction_check_service.total.checked == 0
    assert len(broker.messages("TxTopic")) == 1


async def test_rollback_stores_nothing_but_the_op_record(broker):
    async with _producer(broker, Listener(execute=ROLLBACK)) as producer:
        await producer.send_message_in_transaction(Message("TxTopic2", b"x"))
        # a failing local transaction reports UNKNOW (the broker asks later); rollback it on the check
        producer.listener.execute_state = RuntimeError("db down")
        producer.listener.check_state = ROLLBACK
        r2 = await producer.send_message_in_transaction(Message("TxTopic2", b"y"))
        assert r2.local_state is UNKNOW and "db down" in r2.local_error
        await eventually(lambda: len(broker.messages(TRANS_OP_HALF_TOPIC)) >= 2, what="two op records")
    assert broker.messages("TxTopic2") == []
    assert len(broker.messages(TRANS_OP_HALF_TOPIC)) == 2


async def test_unknown_state_is_checked_back_and_committed(broker):
    listener = Listener(execute=UNKNOW, check=COMMIT)
    async with _producer(broker, listener) as producer:
        sent = time.monotonic()
        result = await producer.send_message_in_transaction(Message("TxTopic3", b"later", keys="k3"))
        assert result.local_state is UNKNOW
        await asyncio.sleep(TIMEOUT_MS / 1000 / 2)
        assert broker.messages("TxTopic3") == [] and listener.checked == []
        got = await eventually(lambda: broker.messages("TxTopic3"), what="commit after check")
        waited = time.monotonic() - sent
    assert listener.checked == ["k3"] and len(producer.checks) == 1
    check = producer.checks[0]
    assert check.msg_id == result.msg_id and check.state is COMMIT
    assert got[0].properties["UNIQ_KEY"] == result.msg_id and got[0].body == b"later"
    assert TIMEOUT_MS / 1000 <= waited < TIMEOUT_MS / 1000 + 2.0
    # the check was about a fresh copy of the half message, with the check count
    halves = broker.messages(TRANS_HALF_TOPIC)
    assert len(halves) == 2 and halves[1].properties["TRANSACTION_CHECK_TIMES"] == "1"
    assert check.commit_log_offset == halves[1].commit_log_offset
    await asyncio.sleep(0.4)
    assert len(broker.messages("TxTopic3")) == 1 and len(producer.checks) == 1


async def test_checks_stop_after_transaction_check_max(tmp_path):
    broker = await Broker(tmp_path / "store", transactionCheckMax="3").start()
    try:
        listener = Listener(execute=UNKNOW, check=UNKNOW)
        async with _producer(broker, listener) as producer:
            await producer.send_message_in_transaction(Message("TxTopic4", b"undecided", keys="k4"))
            parked = await eventually(
                lambda: broker.messages(TRANS_CHECK_MAX_TIME_TOPIC),
                timeout_s=8,
                what="discard to TRANS_CHECK_MAX_TIME_TOPIC",
            )
            await asyncio.sleep(0.5)
        assert listener.checked == ["k4"] * 3
        assert parked[0].properties["TRANSACTION_CHECK_TIMES"] == "3" and parked[0].body == b"undecided"
        assert broker.controller.topic_config_manager.select_topic_config(TRANS_CHECK_MAX_TIME_TOPIC) is not None
        assert broker.messages("TxTopic4") == []
    finally:
        await broker.stop()


async def test_check_waits_for_a_producer_of_the_group(broker):
    async with _producer(broker, Listener(execute=UNKNOW)) as first:
        await first.send_message_in_transaction(Message("TxTopic5", b"orphan", keys="k5"))
    # the only producer of the group is gone: rounds find nobody to ask
    svc = broker.controller.transaction_check_service
    await eventually(lambda: svc.total.no_producer >= 1, what="a round without a producer")
    listener = Listener(check=COMMIT)
    async with _producer(broker, listener) as second:
        await second._register_with(broker.config.broker_addr)  # a heartbeat is all the broker needs
        await eventually(lambda: broker.messages("TxTopic5"), what="commit through the new producer")
    assert listener.checked == ["k5"]


async def test_undecided_transaction_survives_a_restart(tmp_path):
    broker = await Broker(tmp_path / "store").start()
    listener = Listener(execute=UNKNOW, check=UNKNOW)
    try:
        async with _producer(broker, listener) as producer:
            await producer.send_message_in_transaction(Message("TxTopic6", b"durable", keys="k6"))
            await eventually(lambda: listener.checked, what="a first check")
        await broker.stop()
        await broker.start()
        listener2 = Listener(check=COMMIT)
        async with _producer(broker, listener2) as producer2:
            await producer2._register_with(broker.config.broker_addr)
            got = await eventually(lambda: broker.messages("TxTopic6"), what="commit after restart")
        assert [m.body for m in got] == [b"durable"] and listener2.checked == ["k6"]
        await broker.stop()
        await broker.start()  # decided and its offsets persisted: nothing to ask after this restart
        listener3 = Listener(check=COMMIT)
        async with _producer(broker, listener3) as producer3:
            await producer3._register_with(broker.config.broker_addr)
            await asyncio.sleep(TIMEOUT_MS / 1000 + 0.4)
        assert listener3.checked == [] and len(broker.messages("TxTopic6")) == 1
        offsets = broker.controller.consumer_offset_manager
        assert offsets.query_offset(CHECK_GROUP, TRANS_HALF_TOPIC, 0) == 3
        assert offsets.query_offset(CHECK_GROUP, TRANS_OP_HALF_TOPIC, 0) == 1
    finally:
        await broker.stop()


async def test_immunity_time_delays_the_check_without_blocking_others(broker):
    listener = Listener(execute=UNKNOW, check=COMMIT)
    async with _producer(broker, listener) as producer:
        await producer.send_message_in_transaction(
            Message("TxTopic7", b"immune", keys="imm", properties={"CHECK_IMMUNITY_TIME_IN_SECONDS": "2"})
        )
        await producer.send_message_in_transaction(Message("TxTopic7", b"normal", keys="norm"))
        await eventually(lambda: listener.checked == ["norm"], what="the normal message checked first")
        assert [m.body for m in broker.messages("TxTopic7")] in ([], [b"normal"])
        await eventually(lambda: len(broker.messages("TxTopic7")) == 2, timeout_s=6, what="immune one later")
    assert listener.checked == ["norm", "imm"]


async def test_end_transaction_that_does_not_match_is_refused(broker):
    async with _producer(broker, Listener(execute=UNKNOW, check=UNKNOW)) as producer:
        result = await producer.send_message_in_transaction(Message("TxTopic8", b"x"))
    client = RemotingClient()
    try:
        good = {
            "producerGroup": "PG_TX",
            "tranStateTableOffset": str(result.send_result.queue_offset),
            "commitLogOffset": str(int(result.send_result.offset_msg_id[-16:], 16)),
            "commitOrRollback": "8",
            "msgId": result.msg_id,
        }
        for bad, remark in (
            (dict(good, producerGroup="OTHER"), "producer group wrong"),
            (dict(good, tranStateTableOffset="77"), "state table offset wrong"),
            (dict(good, commitLogOffset="999999"), "Find prepared transaction message failed"),
            (dict(good, commitOrRollback="5"), "not 0, 8 or 12"),
        ):
            resp = await client.invoke(
                broker.config.broker_addr, RemotingCommand.request(RequestCode.END_TRANSACTION, bad), 3.0
            )
            assert resp.code == 1 and remark in resp.remark
        assert broker.messages("TxTopic8") == []
        resp = await client.invoke(
            broker.config.broker_addr, RemotingCommand.request(RequestCode.END_TRANSACTION, good), 3.0
        )
        assert resp.code == 0 and len(broker.messages("TxTopic8")) == 1
    finally:
        await client.close()
