"""Consumer semantics with the real C++ client (wheel `rocketmq` 0.4.4) and our transaction producer.

One broker for the module, booted with short delay levels ("1s 2s 1s 1s 1s 1s": retries use level
3 + reconsumeTimes, so every retry waits 1 s), short transaction timeouts, property filters on, and a
subscriptionGroup.json written before its first boot that gives the retry group retryMaxTimes=2.

The `scenario` fixture runs one C++ push consumer over three topics while a producer sends plain,
failing, delayed and tag-colliding messages and our TransactionProducer commits, rolls back and leaves
one transaction unknown (answered COMMIT when the broker checks back); each test then asserts one
aspect of what the consumer saw. Measured delivery figures are printed (pytest -s shows them).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from dataclasses import dataclass, field

import pytest
from compat_support import BrokerFactory, Collector, Received, cpp_producer, cpp_push_consumer, make_message, unique

from mqclient.message import Message
from mqclient.producer import ProducerConfig
from mqclient.transaction import LocalTransactionState, TransactionProducer
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.headers import PullMessageRequestHeader, encode_header
from store.message import decode_records, tags_hash

# The wheel reports RECONSUME_LATER by letting the callback's exception escape; ctypes then warns about it.
pytestmark = [pytest.mark.compat, pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")]
pytest.importorskip("rocketmq.client", reason="the rocketmq==0.4.4 wheel is part of the test extra")

DELAY_LEVELS = "1s 2s 1s 1s 1s 1s 1s 1s"
RETRY_MAX = 2
PROPS = ("RETRY_TOPIC", "ORIGIN_MESSAGE_ID", "UNIQ_KEY", "TRAN_MSG", "PGROUP", "REAL_TOPIC", "DELAY")
COLLIDING = ("Aa", "BB")  # Java String.hashCode: both 2112


@pytest.fixture(scope="module")
def sem(tmp_path_factory):
    root = tmp_path_factory.mktemp("semantics_cpp")
    group = unique("CG_retry")
    config = root / "sem" / "store" / "config"
    config.mkdir(parents=True)
    (config / "subscriptionGroup.json").write_text(
        json.dumps(
            {
                "subscriptionGroupTable": {
                    group: {
                        "groupName": group,
                        "consumeEnable": True,
                        "consumeBroadcastEnable": True,
                        "retryQueueNums": 1,
                        "retryMaxTimes": RETRY_MAX,
                    }
                },
                "dataVersion": {"counter": 1, "timestamp": 0},
            }
        )
    )
    factory = BrokerFactory(root)
    try:
        broker = factory.start(
            f"messageDelayLevel={DELAY_LEVELS}",
            "transactionTimeOut=1000",
            "transactionCheckInterval=200",
            "enablePropertyFilter=true",
            "rebalanceLockMaxLiveTime=3000",
            name="sem",
        )
        broker.retry_group = group  # type: ignore[attr-defined]
        yield broker
    finally:
        factory.close()


# ------------------------------------------------------------------------------------------ helpers


def raw_pull(broker_addr: str, topic: str, queue_id: int = 0, expression: str = "*") -> tuple[int, list, int]:
    """One PULL_MESSAGE over a plain connection: (code, messages, nextBeginOffset)."""

    async def go():
        client = RemotingClient()
        try:
            header = PullMessageRequestHeader(
                consumer_group="semantics_probe",
                topic=topic,
                queue_id=queue_id,
                queue_offset=0,
                max_msg_nums=32,
                sys_flag=0x4,
                commit_offset=0,
                suspend_timeout_millis=0,
                sub_version=0,
                subscription=expression,
                expression_type="TAG",
            )
            resp = await client.invoke(
                broker_addr, RemotingCommand.request(RequestCode.PULL_MESSAGE, encode_header(header)), 5.0
            )
            msgs = decode_records(resp.body) if resp.code == ResponseCode.SUCCESS and resp.body else []
            return resp.code, msgs, int(resp.ext_fields.get("nextBeginOffset", "-1"))
        finally:
            await client.close()

    return asyncio.run(go())


def admin(broker_addr: str, code: int, ext: dict[str, str]) -> RemotingCommand:
    async def go() -> RemotingCommand:
        client = RemotingClient()
        try:
            return await client.invoke(broker_addr, RemotingCommand.request(code, ext), 15.0)
        finally:
            await client.close()

    return asyncio.run(go())


def wait_for(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"{what}: not within {timeout_s} s")


class TxListener:
    def __init__(self) -> None:
        self.checked: list[str] = []

    def execute_local_transaction(self, msg, arg):
        return {
            "tx-commit": LocalTransactionState.COMMIT_MESSAGE,
            "tx-rollback": LocalTransactionState.ROLLBACK_MESSAGE,
        }.get(msg.keys, LocalTransactionState.UNKNOW)

    def check_local_transaction(self, msg):
        self.checked.append(msg.properties.get("KEYS"))
        return LocalTransactionState.COMMIT_MESSAGE


def run_transactions(namesrv: str, topic: str) -> tuple[dict, TxListener, float]:
    """Our TransactionProducer: commit, rollback and unknown; stays online until the broker checked back."""
    listener = TxListener()
    results = {}

    async def main() -> float:
        async with TransactionProducer(namesrv, listener, ProducerConfig(group=unique("PG_TX"))) as producer:
            for key in ("tx-commit", "tx-rollback", "tx-unknown"):
                results[key] = await producer.send_message_in_transaction(
                    Message(topic, f"body-{key}".encode(), keys=key)
                )
            sent = time.monotonic()
            while not listener.checked and time.monotonic() - sent < 10:
                await asyncio.sleep(0.02)
            return time.monotonic() - sent

    waited = asyncio.run(main())
    return results, listener, waited


@dataclass
class Scenario:
    items: list[Received]
    topics: dict[str, str]
    dlq: list = field(default_factory=list)
    tx_results: dict = field(default_factory=dict)
    tx_listener: TxListener | None = None
    tx_check_wait_s: float = 0.0
    sent_at: dict[str, float] = field(default_factory=dict)
    running_info: RemotingCommand | None = None
    reset: RemotingCommand | None = None
    client_ids: list[str] = field(default_factory=list)

    def of(self, key: str) -> list[Received]:
        return sorted((i for i in self.items if i.key == key), key=lambda i: i.at)


@pytest.fixture(scope="module")
def scenario(sem) -> Scenario:
    ns, group = sem.namesrv_addr, sem.retry_group
    topics = {"main": unique("T_sem"), "tags": unique("T_tags"), "tx": unique("T_tx")}
    collector = Collector(PROPS)
    record = collector.callback("c1")

    def on_message(msg):
        record(msg)
        keys = msg.keys.decode() if isinstance(msg.keys, bytes) else msg.keys
        if keys == "bad":
            raise RuntimeError("consume failed on purpose")  # the wheel answers RECONSUME_LATER

    sent_at: dict[str, float] = {}
    with cpp_producer(ns) as producer:
        for t in topics.values():
            producer.send_sync(make_message(t, b"warm", key="warm", tags="warm"))
        from compat_support import _call_within, shutdown_client, start_client
        from rocketmq.client import PushConsumer  # the harness's consumer, with our failing callback

        consumer = PushConsumer(group)
        consumer.set_instance_name(unique("sem"))
        consumer.set_namesrv_addr(ns)
        consumer.subscribe(topics["main"], on_message, "*")
        consumer.subscribe(topics["tags"], on_message, COLLIDING[0])
        consumer.subscribe(topics["tx"], on_message, "*")
        start_client(consumer)
        try:
            for key, level in (("good", None), ("bad", None), ("d1", 1), ("d2", 2)):
                sent_at[key] = time.monotonic()
                producer.send_sync(make_message(topics["main"], f"body-{key}".encode(), key=key, delay_level=level))
            reset_to_ms = int(time.time() * 1000)
            for key, tag in (("a1", "Aa"), ("b1", "BB"), ("a2", "Aa"), ("b2", "BB"), ("c1", "Cc")):
                producer.send_sync(make_message(topics["tags"], f"body-{key}".encode(), key=key, tags=tag))
            tx_results, tx_listener, tx_wait = run_transactions(ns, topics["tx"])
            wanted = {"good", "d1", "d2", "a1", "a2", "tx-commit", "tx-unknown"}
            assert collector.wait_until(
                lambda items: wanted <= {i.key for i in items} and sum(i.key == "bad" for i in items) >= RETRY_MAX + 1,
                20,
            ), sorted((i.key, i.reconsume_times) for i in collector.items())
            dlq = wait_for(lambda: raw_pull(sem.broker_addr, f"%DLQ%{group}")[1], 8, "the failing message in the DLQ")
            collector.settle(0.5)
            # consumer management against the live C++ consumer: who is it, what is it doing, rewind it
            conns = admin(sem.broker_addr, RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": group})
            client_ids = [c["clientId"] for c in json.loads(conns.body)["connectionSet"]]
            running = admin(
                sem.broker_addr,
                RequestCode.GET_CONSUMER_RUNNING_INFO,
                {"consumerGroup": group, "clientId": client_ids[0], "jstackEnable": "false"},
            )
            reset = admin(
                sem.broker_addr,
                RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
                {"topic": topics["tags"], "group": group, "timestamp": str(reset_to_ms), "isForce": "true"},
            )
            # The client restarts a queue only when its parked long poll returns; new matching messages
            # wake those polls (otherwise they sit out their 15 s suspend time, as with any broker).
            for q in range(4):
                producer.send_orderly(make_message(topics["tags"], b"wake", key=f"wake{q}", tags="Aa"), q)
            collector.wait_until(lambda items: sum(i.key in ("a1", "a2") for i in items) >= 4, 10)
            collector.settle(1.0)
        finally:
            _call_within(lambda: shutdown_client(consumer), 20, "PushConsumer.shutdown()")
    return Scenario(
        collector.items(), topics, dlq, tx_results, tx_listener, tx_wait, sent_at, running, reset, client_ids
    )


# -------------------------------------------------------------------------------------------- tests


def test_reconsume_later_is_redelivered_then_dead_lettered(scenario, sem):
    deliveries = scenario.of("bad")
    assert [i.reconsume_times for i in deliveries] == list(range(RETRY_MAX + 1)), (
        "one delivery per reconsume time up to retryMaxTimes from subscriptionGroup.json, then the DLQ"
    )
    first = deliveries[0]
    for retry in deliveries[1:]:
        # the client sees the real topic again (RETRY_TOPIC) and the same message id
        assert retry.topic == scenario.topics["main"] and retry.props["RETRY_TOPIC"] == scenario.topics["main"]
        assert retry.msg_id == first.msg_id and retry.body == first.body
        assert retry.props["ORIGIN_MESSAGE_ID"], "ORIGIN_MESSAGE_ID is kept across retries"
    origins = {r.props["ORIGIN_MESSAGE_ID"] for r in deliveries[1:]}
    assert len(origins) == 1, f"the origin message id changed between retries: {origins}"
    gaps = [b.at - a.at for a, b in zip(deliveries, deliveries[1:])]
    print(f"\nretry gaps (level 3+n = 1 s each): {[round(g, 3) for g in gaps]} s")
    assert all(0.9 <= g < 4.0 for g in gaps), gaps
    (dead,) = scenario.dlq
    assert dead.topic == f"%DLQ%{sem.retry_group}" and dead.reconsume_times == RETRY_MAX + 1
    assert dead.properties["KEYS"] == "bad" and dead.properties["RETRY_TOPIC"] == scenario.topics["main"]
    assert dead.properties["ORIGIN_MESSAGE_ID"] == next(iter(origins))
    assert "DELAY" not in dead.properties or dead.properties["DELAY"] in ("", "0")
    assert len(scenario.of("good")) == 1, "a consumed message is not redelivered"


def test_delay_levels_deliver_on_time(scenario):
    figures = {}
    for key, delay_ms in (("d1", 1000), ("d2", 2000)):
        (item,) = scenario.of(key)
        assert item.topic == scenario.topics["main"] and item.props["REAL_TOPIC"] == scenario.topics["main"]
        assert item.props["DELAY"] == "", "DELAY is cleared when the message reaches its real topic"
        held_ms = item.store_timestamp - item.born_timestamp
        figures[key] = (held_ms, round((item.at - scenario.sent_at[key]) * 1000))
        assert held_ms >= delay_ms, f"{key} re-stored after {held_ms} ms, before its {delay_ms} ms delay"
        # store time of the delivered copy minus born time: the delay plus send latency plus lateness
        assert held_ms < delay_ms + 250, f"{key} re-stored {held_ms - delay_ms} ms late"
    print(f"\ndelay levels: (re-stored after ms, consumed after ms) {figures}")


def test_tag_filter_with_colliding_hashes(scenario, sem):
    assert tags_hash(COLLIDING[0]) == tags_hash(COLLIDING[1])
    keys = {i.key for i in scenario.items if i.topic == scenario.topics["tags"]}
    assert keys == {"a1", "a2", "wake0", "wake1", "wake2", "wake3"}, keys
    # the broker itself re-checks TAGS, so a colliding tag is not even sent to the client
    delivered = {
        m.properties["KEYS"]
        for q in range(4)
        for m in raw_pull(sem.broker_addr, scenario.topics["tags"], q, COLLIDING[0])[1]
    }
    assert delivered == {"a1", "a2", "wake0", "wake1", "wake2", "wake3"}, delivered


def test_reset_offset_by_time_rewinds_the_live_cpp_consumer(scenario):
    assert scenario.reset.code == ResponseCode.SUCCESS, scenario.reset.remark
    tags = [i for i in scenario.items if i.topic == scenario.topics["tags"] and not i.key.startswith("wake")]
    assert sorted(i.key for i in tags) == ["a1", "a1", "a2", "a2"], (
        "after RESET_CONSUMER_CLIENT_OFFSET the consumer reads the tag topic again from the reset time"
    )


def test_running_info_comes_from_the_cpp_consumer(scenario):
    assert len(scenario.client_ids) == 1
    info = scenario.running_info
    assert info.code == ResponseCode.SUCCESS and info.body, info.remark
    assert scenario.topics["main"].encode() in bytes(info.body), "the C++ client describes its subscriptions"


def test_transactions_through_our_producer(scenario):
    results = scenario.tx_results
    assert results["tx-commit"].local_state is LocalTransactionState.COMMIT_MESSAGE
    assert results["tx-rollback"].local_state is LocalTransactionState.ROLLBACK_MESSAGE
    assert results["tx-unknown"].local_state is LocalTransactionState.UNKNOW
    got = {i.key: i for i in scenario.items if i.topic == scenario.topics["tx"] and i.key != "warm"}
    assert sorted(got) == ["tx-commit", "tx-unknown"], "rolled back messages are never delivered"
    assert scenario.tx_listener.checked == ["tx-unknown"], "only the undecided transaction is checked back"
    print(
        f"\ncheck-back of the unknown transaction arrived {scenario.tx_check_wait_s:.2f} s after the send "
        f"(transactionTimeOut=1 s, transactionCheckInterval=0.2 s)"
    )
    assert 0.8 <= scenario.tx_check_wait_s < 5.0
    for key in got:
        assert got[key].body == f"body-{key}".encode()
        assert got[key].msg_id == results[key].msg_id, "the consumer sees the producer's message id (UNIQ_KEY)"
        assert got[key].props["TRAN_MSG"] == "" and got[key].props["PGROUP"]


def test_orderly_two_competing_consumers_and_a_rebalance(sem):
    """A consumes alone; B joins: each queue changes owner at most once (A unlocks, B locks), shards stay
    in order, nothing is lost."""
    ns = sem.namesrv_addr
    topic, group = unique("T_ord"), unique("CG_ord")
    collector = Collector()
    stop = threading.Event()
    sent: list[str] = []
    with cpp_producer(ns) as producer:
        producer.send_sync(make_message(topic, b"warm", key="warm"))

        def produce() -> None:
            seq = 0
            while not stop.is_set():
                for shard in range(4):
                    key = f"s{shard}-{seq}"
                    producer.send_orderly(make_message(topic, b"ordered", key=key), shard)
                    sent.append(key)
                seq += 1
                time.sleep(0.05)

        thread = threading.Thread(target=produce, name="orderly-producer")
        thread.start()
        try:
            with cpp_push_consumer(ns, group, {topic: "*"}, collector, name="A", orderly=True):
                assert collector.wait_until(lambda items: len(items) >= 20, 15), "A consumed nothing"
                with cpp_push_consumer(ns, group, {topic: "*"}, collector, name="B", orderly=True):
                    assert collector.wait_until(lambda items: any(i.consumer == "B" for i in items), 20), (
                        "B never got a queue after the rebalance"
                    )
                    time.sleep(1.5)
                    stop.set()
                    thread.join()
                    assert collector.wait_keys(sent, 15), f"missing {set(sent) - {i.key for i in collector.items()}}"
                    collector.settle(0.5)
        finally:
            stop.set()
            thread.join()
    items = sorted(collector.items(), key=lambda i: i.at)
    owners = {}
    for q in range(4):
        seq = [i.consumer for i in items if i.queue_id == q]
        owners[q] = [c for n, c in enumerate(seq) if n == 0 or seq[n - 1] != c]
        assert len(owners[q]) <= 2 and owners[q][0] == "A", f"queue {q} owners over time: {owners[q]}"
    assert {o[-1] for o in owners.values()} == {"A", "B"}, f"final owners {owners}"
    for shard in range(4):
        first_seen: list[int] = []
        for i in items:
            if i.key.startswith(f"s{shard}-"):
                seq = int(i.key.split("-")[1])
                if seq not in first_seen:
                    first_seen.append(seq)
        assert first_seen == sorted(first_seen), f"shard {shard} consumed out of order"
    duplicates = len([i for i in items if i.key != "warm"]) - len(set(sent))
    print(f"\norderly handover: owners {owners}, {len(sent)} sent, {duplicates} redelivered at the handover")
