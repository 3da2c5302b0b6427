"""Acceptance tests with the real RocketMQ C++ client (PyPI `rocketmq` 0.4.4, its bundled librocketmq.so).

What the wheel does that shapes these tests (read from the wheel's client.py and upstream client-cpp 1.2.3):
* `Message.set_body` and `RecvMessage.body` go through C strings, so bodies here never contain NUL.
* A new push-consumer group has no consume-from-where knob (CONSUME_FROM_LAST_OFFSET): a queue with no
  committed offset starts at 0 only because the broker answers QUERY_CONSUMER_OFFSET with 0 while the queue's
  min offset is 0 (as J does); otherwise it would start at the queue's max offset. Tests that send before they
  consume rely on that J behaviour. Broadcasting consumers keep offsets locally and always start at the max
  offset, so the broadcasting test starts its consumers first and sends probes until every queue is pulled.
* Timers (MQClientFactory): heartbeat 10 ms after start then 30 s, routes 3 s then 30 s, rebalance once at
  start then every 10 s (faster when the broker sends NOTIFY_CONSUMER_IDS_CHANGED), offsets committed every 5 s
  and at shutdown. Every client here gets its own instance name, hence its own factory and immediate rebalance.
* A failed send's broker remark never reaches Python (sync sends retry 5 times, then raise "No route info of
  this topic"); the client logs it as "processSendResponse error remark:..., error code:N", which we read.
"""

from __future__ import annotations

import json
import re
import shutil
import threading
import time

import pytest
from compat_support import (
    Collector,
    CppClientLog,
    Received,
    compressible_body,
    counts_by_key,
    cpp_producer,
    cpp_pull_all,
    cpp_push_consumer,
    describe_missing,
    make_message,
    nul_free_body,
    read_consumer_offsets,
    unb64,
    unique,
)

pytestmark = pytest.mark.compat

rocketmq = pytest.importorskip("rocketmq.client", reason="the rocketmq==0.4.4 wheel is part of the test extra")
from rocketmq.client import ProducerSendAsyncFailed, SendStatus  # noqa: E402 (after the importorskip)
from rocketmq.exceptions import ProducerSendSyncFailed  # noqa: E402 (after the importorskip)

CONSUME_TIMEOUT_S = 15.0
MiB = 1024 * 1024


def send_keyed(
    producer, topic: str, n: int, *, prefix: str = "m", size: int = 100, tags: str | None = None
) -> dict[str, bytes]:
    """Sync-send `n` messages with unique keys; returns key -> body."""
    sent = {}
    for i in range(n):
        key = f"{prefix}-{i}"
        body = nul_free_body(size, seed=f"{key}:")
        result = producer.send_sync(make_message(topic, body, key=key, tags=tags))
        assert result.status == SendStatus.OK, f"send {key}: {result}"
        sent[key] = body
    return sent


def assert_exactly_once(sent: dict[str, bytes], items: list[Received]) -> None:
    counts = counts_by_key(items)
    assert set(counts) == set(sent), describe_missing(sent, items)
    assert all(n == 1 for n in counts.values()), describe_missing(sent, items)
    for item in items:
        assert item.body == sent[item.key], (
            f"body of {item.key} differs: sent {len(sent[item.key])} B, got {len(item.body)} B"
        )


def consume_all(
    namesrv: str, topic: str, sent: dict[str, bytes], *, expression: str = "*", group: str | None = None
) -> list[Received]:
    """A fresh clustering group consumes `topic` until every key in `sent` arrived, then a quiet second."""
    collector = Collector()
    with cpp_push_consumer(namesrv, group or unique("CG"), {topic: expression}, collector):
        assert collector.wait_keys(sent, CONSUME_TIMEOUT_S), describe_missing(sent, collector.items())
        collector.settle(0.5)
    assert not collector.errors, collector.errors
    return collector.items()


# ------------------------------------------------------------------------------------------- sends


def test_sync_send_round_trips_body_keys_tags_properties_and_ids(broker):
    topic = unique("T_sync")
    sent, results = {}, {}
    with cpp_producer(broker.namesrv_addr) as producer:
        for i in range(12):
            key = f"sync-{i}"
            body = nul_free_body(100 + i, seed=f"{key}:")
            result = producer.send_sync(
                make_message(topic, body, key=key, tags=f"Tag{i % 3}", props={"compat_seq": str(i), "who": "cpp"})
            )
            assert result.status == SendStatus.OK
            assert re.fullmatch(r"[0-9A-F]{32}", result.msg_id), f"send result msg id (UNIQ_KEY) {result.msg_id!r}"
            sent[key], results[key] = body, result

    collector = Collector(props=("compat_seq", "who", "UNIQ_KEY"))
    with cpp_push_consumer(broker.namesrv_addr, unique("CG"), {topic: "*"}, collector):
        assert collector.wait_keys(sent, CONSUME_TIMEOUT_S), describe_missing(sent, collector.items())
        collector.settle(0.5)
    items = collector.items()
    assert_exactly_once(sent, items)
    for item in items:
        i = int(item.key.split("-")[1])
        assert item.topic == topic
        assert item.tags == f"Tag{i % 3}"
        assert item.props["compat_seq"] == str(i) and item.props["who"] == "cpp"
        # The client-generated UNIQ_KEY is the msg id on both sides; the queue offset is the one the send reported.
        assert item.msg_id == results[item.key].msg_id == item.props["UNIQ_KEY"]
        assert item.queue_offset == results[item.key].offset
    # A fresh topic: every queue's offsets are 0..n-1 without holes.
    by_queue: dict[int, list[int]] = {}
    for item in items:
        by_queue.setdefault(item.queue_id, []).append(item.queue_offset)
    for queue_id, offsets in by_queue.items():
        assert sorted(offsets) == list(range(len(offsets))), f"queue {queue_id} offsets {sorted(offsets)}"


def test_async_send_calls_back_once_per_message(broker):
    topic = unique("T_async")
    bodies = {f"async-{i}": nul_free_body(200, seed=f"async-{i}:") for i in range(20)}
    cond = threading.Condition()
    outcomes: dict[str, object] = {}

    def record(key):
        def cb(result_or_exc):  # runs on a native client thread
            with cond:
                outcomes[key] = result_or_exc
                cond.notify_all()

        return cb

    with cpp_producer(broker.namesrv_addr) as producer:
        # send_async resolves the topic route synchronously on the first call; replies arrive on client threads.
        for key, body in bodies.items():
            producer.send_async(make_message(topic, body, key=key), record(key), record(key))
        with cond:
            assert cond.wait_for(lambda: len(outcomes) == len(bodies), timeout=CONSUME_TIMEOUT_S), (
                f"{len(outcomes)}/{len(bodies)} callbacks"
            )
    failures = {k: str(v) for k, v in outcomes.items() if isinstance(v, ProducerSendAsyncFailed)}
    assert not failures, failures
    assert all(r.status == SendStatus.OK for r in outcomes.values())
    assert len({r.msg_id for r in outcomes.values()}) == len(bodies)
    assert_exactly_once(bodies, consume_all(broker.namesrv_addr, topic, bodies))


def test_oneway_send_is_stored(broker):
    topic = unique("T_oneway")
    bodies = {f"oneway-{i}": nul_free_body(150, seed=f"oneway-{i}:") for i in range(10)}
    # The producer stays up until the messages are consumed: the wheel may drop oneway frames still in its
    # write queue when it shuts down (seen ~19 ms after the last send, under load), which is the client's affair.
    with cpp_producer(broker.namesrv_addr) as producer:
        for key, body in bodies.items():
            producer.send_oneway(make_message(topic, body, key=key))
        # No reply exists for a oneway send: only consumption proves every message was stored, once.
        assert_exactly_once(bodies, consume_all(broker.namesrv_addr, topic, bodies))


def test_orderly_send_and_orderly_consume_keep_per_shard_order(broker):
    """send_orderly picks queue `shard % queue_count`; an orderly consumer (LOCK_BATCH_MQ) sees each shard in order."""
    topic = unique("T_orderly")
    shards, per_shard = 3, 8
    sent = {}
    with cpp_producer(broker.namesrv_addr) as producer:
        for seq in range(per_shard):
            for shard in range(shards):
                key = f"s{shard}-{seq}"
                body = nul_free_body(120, seed=f"{key}:")
                result = producer.send_orderly(make_message(topic, body, key=key), shard)
                assert result.status == SendStatus.OK
                sent[key] = body
    collector = Collector()
    with cpp_push_consumer(broker.namesrv_addr, unique("CG"), {topic: "*"}, collector, orderly=True):
        assert collector.wait_keys(sent, CONSUME_TIMEOUT_S), (
            describe_missing(sent, collector.items()) + " (an orderly consumer only consumes queues it locked)"
        )
        collector.settle(0.5)
    items = collector.items()
    assert_exactly_once(sent, items)
    for shard in range(shards):
        mine = [i for i in items if i.key.startswith(f"s{shard}-")]
        assert len({i.queue_id for i in mine}) == 1, (
            f"shard {shard} spread over queues {sorted({i.queue_id for i in mine})}"
        )
        assert [int(i.key.split("-")[1]) for i in mine] == list(range(per_shard)), (
            f"shard {shard} consumed out of order"
        )


def test_batch_send_is_stored_as_separate_messages(broker):
    """The wheel sends a batch as SEND_MESSAGE (10) with "batch":"1"; each inner message must be its own message."""
    topic = unique("T_batch")
    sent = {f"batch-{i}": nul_free_body(300, seed=f"batch-{i}:") for i in range(5)}  # < 4 KiB: no whole-blob zlib
    with cpp_producer(broker.namesrv_addr) as producer:
        result = producer.send_batch([make_message(topic, body, key=key, tags="B") for key, body in sent.items()])
        assert result.status == SendStatus.OK
    items = consume_all(broker.namesrv_addr, topic, sent)
    assert_exactly_once(sent, items)
    assert len({i.queue_id for i in items}) == 1, "a batch goes to one queue"
    offsets = sorted(i.queue_offset for i in items)
    assert offsets == list(range(offsets[0], offsets[0] + len(sent))), f"consecutive offsets expected, got {offsets}"
    assert len({i.msg_id for i in items}) == len(sent), "each inner message keeps its own UNIQ_KEY"
    assert {i.tags for i in items} == {"B"}


def test_compressed_batch_round_trips(broker):
    """Over 4 KiB the wheel zlib-compresses the whole batch body and sets sysFlag COMPRESSED (issue 13 item 7):
    the broker inflates it, then stores each of the 45 messages with its own plain body."""
    topic = unique("T_zbatch")
    sent = {f"zb-{i}": nul_free_body(120, seed=f"zb-{i}:") for i in range(45)}  # ~ 9 KiB of batch body
    with cpp_producer(broker.namesrv_addr) as producer:
        result = producer.send_batch([make_message(topic, body, key=key) for key, body in sent.items()])
        assert result.status == SendStatus.OK
    items = consume_all(broker.namesrv_addr, topic, sent)
    assert_exactly_once(sent, items)


# ---------------------------------------------------------------------------------------- consumers


def test_push_clustering_two_consumers_share_the_queues(broker):
    topic, group = unique("T_cluster"), unique("CG")
    with cpp_producer(broker.namesrv_addr) as producer:
        send_keyed(producer, topic, 1, prefix="warmup")  # creates the topic, so consumers find its route
        collector = Collector()
        with (
            cpp_push_consumer(broker.namesrv_addr, group, {topic: "*"}, collector, name="A"),
            cpp_push_consumer(broker.namesrv_addr, group, {topic: "*"}, collector, name="B"),
        ):
            # Rebalance is settled when a probe on every queue arrives exactly once and both consumers got some.
            deadline = time.monotonic() + 25
            settled, rounds = False, 0
            while not settled and time.monotonic() < deadline:
                rounds += 1
                probes = [f"probe{rounds}-{q}" for q in range(4)]
                for q, key in enumerate(probes):
                    producer.send_orderly(make_message(topic, b"probe", key=key), q)
                arrived = collector.wait_keys(probes, 4)
                collector.settle(0.3)
                got = [i for i in collector.items() if i.key in probes]
                settled = arrived and len(got) == len(probes) and {i.consumer for i in got} == {"A", "B"}
            assert settled, (
                f"two consumers of one group never split the queues after {rounds} probe rounds: "
                + ", ".join(
                    f"{i.key}->{i.consumer}/q{i.queue_id}" for i in collector.items() if i.key.startswith("probe")
                )
            )
            sent = send_keyed(producer, topic, 24, prefix="real")
            assert collector.wait_keys(sent, CONSUME_TIMEOUT_S), describe_missing(sent, collector.items())
            collector.settle(0.5)
    real = [i for i in collector.items() if i.key in sent]
    assert_exactly_once(sent, real)
    owners: dict[int, set[str]] = {}
    for item in real:
        owners.setdefault(item.queue_id, set()).add(item.consumer)
    assert {c for cs in owners.values() for c in cs} == {"A", "B"}, f"queue owners {owners}"
    assert all(len(cs) == 1 for cs in owners.values()), f"a queue was consumed by both: {owners}"


def test_push_broadcasting_each_consumer_gets_everything(broker):
    topic, group = unique("T_bcast"), unique("CG")
    with cpp_producer(broker.namesrv_addr) as producer:
        send_keyed(producer, topic, 1, prefix="warmup")
        collector = Collector()
        with (
            cpp_push_consumer(broker.namesrv_addr, group, {topic: "*"}, collector, name="A", broadcasting=True),
            cpp_push_consumer(broker.namesrv_addr, group, {topic: "*"}, collector, name="B", broadcasting=True),
        ):
            # Broadcasting consumers start at the max offset: probe until both pull every queue.
            deadline = time.monotonic() + 20
            pulling: dict[str, set[int]] = {"A": set(), "B": set()}
            queues: set[int] = set()
            rounds = 0
            while time.monotonic() < deadline:
                rounds += 1
                probes = [f"probe{rounds}-{q}" for q in range(4)]
                for q, key in enumerate(probes):
                    producer.send_orderly(make_message(topic, b"probe", key=key), q)
                collector.wait_until(
                    lambda items, probes=probes: sum(i.key in probes for i in items) >= 2 * len(probes), 1.5
                )
                for item in collector.items():
                    if item.key.startswith("probe"):
                        pulling[item.consumer].add(item.queue_id)
                        queues.add(item.queue_id)
                if len(queues) == 4 and pulling["A"] == pulling["B"] == queues:
                    break
            assert pulling["A"] == pulling["B"] == queues and len(queues) == 4, (
                f"queues pulled after {rounds} rounds: {pulling}"
            )
            sent = send_keyed(producer, topic, 12, prefix="real")
            for name in ("A", "B"):
                assert collector.wait_keys(sent, CONSUME_TIMEOUT_S, consumer=name), (
                    name + ": " + describe_missing(sent, [i for i in collector.items() if i.consumer == name])
                )
            collector.settle(0.5)
    for name in ("A", "B"):
        assert_exactly_once(sent, [i for i in collector.items() if i.consumer == name and i.key in sent])


def test_pull_consumer_reads_every_queue(broker):
    topic = unique("T_pull")
    with cpp_producer(broker.namesrv_addr) as producer:
        sent = send_keyed(producer, topic, 20, prefix="pull", size=333)
    run = cpp_pull_all(broker.namesrv_addr, unique("PCG"), topic)
    got = run["messages"]
    assert sorted(m["key"] for m in got) == sorted(sent), f"pulled keys {sorted(m['key'] for m in got)}"
    for m in got:
        assert unb64(m["body_b64"]) == sent[m["key"]]
    # On a fresh topic a queue's offsets are 0..n-1; the generator stops at the queue's end, so the
    # nextBeginOffset it kept per queue is the queue's message count.
    per_queue: dict[int, int] = {}
    for m in got:
        per_queue[m["queue_id"]] = per_queue.get(m["queue_id"], 0) + 1
    for q, n in per_queue.items():
        assert sorted(m["queue_offset"] for m in got if m["queue_id"] == q) == list(range(n))
    next_offsets = {int(q): offset for q, offset in run["done"]["next_offsets"].items()}
    assert {q: next_offsets.get(q) for q in per_queue} == per_queue, f"next offsets {next_offsets}"


def test_tag_filter_delivers_only_matching_tags(broker):
    topic = unique("T_tags")
    with cpp_producer(broker.namesrv_addr) as producer:
        wanted = send_keyed(producer, topic, 4, prefix="a", tags="TagA")
        wanted |= send_keyed(producer, topic, 4, prefix="b", tags="TagB")
        send_keyed(producer, topic, 4, prefix="c", tags="TagC")
        send_keyed(producer, topic, 4, prefix="none")
    items = consume_all(broker.namesrv_addr, topic, wanted, expression="TagA || TagB")
    assert_exactly_once(wanted, items)
    pulled = cpp_pull_all(broker.namesrv_addr, unique("PCG"), topic, "TagA || TagB")["messages"]
    assert sorted(m["key"] for m in pulled) == sorted(wanted)


def test_delay_level_1_is_delivered_after_about_a_second(broker):
    topic = unique("T_delay")
    with cpp_producer(broker.namesrv_addr) as producer:
        sent_at = time.monotonic()
        body = nul_free_body(64, seed="delayed:")
        assert producer.send_sync(make_message(topic, body, key="delayed", delay_level=1)).status == SendStatus.OK
    items = consume_all(broker.namesrv_addr, topic, {"delayed": body})
    assert len(items) == 1 and items[0].body == body and items[0].topic == topic
    # Level 1 = 1 s: the broker re-stores the message in the real topic when due (store time - born time >= ~1 s).
    assert items[0].store_timestamp - items[0].born_timestamp >= 900, items[0]
    assert items[0].at - sent_at >= 0.9


# ------------------------------------------------------------------------------------------- bodies


@pytest.mark.parametrize(
    ("size", "compressible"),
    [(100, False), (4 * 1024, True), (64 * 1024, False), (MiB, False)],
    ids=["100B", "4KiB-zlib", "64KiB", "1MiB"],
)
def test_body_sizes_arrive_byte_identical(broker, size, compressible):
    topic = unique("T_size")
    body = compressible_body(size, topic) if compressible else nul_free_body(size, seed=topic)
    # The wheel's client-side limit is 128 KiB unless max_message_size is raised.
    with cpp_producer(broker.namesrv_addr, max_message_size=4 * MiB, timeout_ms=10000) as producer:
        assert producer.send_sync(make_message(topic, body, key="big")).status == SendStatus.OK
    (item,) = consume_all(broker.namesrv_addr, topic, {"big": body})
    assert item.body == body
    if compressible:
        # Bodies >= 4 KiB are zlib-compressed by the client and stored as sent (SYSFLAG bit 0): the stored record
        # is much smaller than the body, and the consumer inflated it back to the exact bytes.
        assert item.store_size < size // 2, f"stored record {item.store_size} B for a {size} B compressible body"


def test_wheel_refuses_bodies_over_its_own_max_message_size(broker):
    """Client-side knob, no broker involved: default 128 KiB (Producer(max_message_size=...) raises it)."""
    topic = unique("T_client_max")
    too_big = make_message(topic, nul_free_body(200 * 1024), key="too-big")
    with (
        cpp_producer(broker.namesrv_addr) as producer,
        pytest.raises(ProducerSendSyncFailed, match=r"the message body size over max value, MAX: 131072"),
    ):
        producer.send_sync(too_big)


def test_body_over_broker_max_message_size_is_refused(broker_factory):
    small = broker_factory.start("maxMessageSize=1024", name="max1k")
    topic = unique("T_max")
    log = CppClientLog()
    with cpp_producer(small.namesrv_addr, timeout_ms=3000) as producer:
        ok_body = nul_free_body(200, seed="ok:")
        assert producer.send_sync(make_message(topic, ok_body, key="ok")).status == SendStatus.OK
        log.mark()
        # 2000 B stays under the client's 4 KiB compression threshold, so the broker sees 2000 raw bytes.
        with pytest.raises(ProducerSendSyncFailed) as refused:
            producer.send_sync(make_message(topic, nul_free_body(2000, seed="big:"), key="big"))
    # The wheel raises its own text; the broker's answer is in the client log.
    answers = re.findall(r"processSendResponse error remark:(.*?), error code:(-?\d+)", log.since_mark())
    assert answers, f"client raised {refused.value!s} but logged no broker error response\n{log.tail()}"
    remark, code = answers[-1]
    assert code == "13", f"expected MESSAGE_ILLEGAL (13), got {code}: {remark}"
    assert "1024" in remark, f"the refusal should name the limit maxMessageSize=1024: {remark!r}"
    # The client retried the refused send; none of the attempts may have been stored.
    items = consume_all(small.namesrv_addr, topic, {"ok": ok_body})
    assert [i.key for i in items] == ["ok"]


# ------------------------------------------------------------------------------------------ restart


def test_crash_with_queues_and_index_deleted_is_rebuilt_while_the_scan_runs(broker_factory):
    """SIGKILL the broker after single and batch sends, delete its consume queues and index, start it
    again: the recovery scan verifies the CommitLog and the queues are rebuilt from what it accepted
    while it scans (store/predispatch.py, the broker's log says how many), and a fresh C++ consumer
    gets every message exactly once, byte-identical."""
    b = broker_factory.start(name="crash-rebuild")
    topic = unique("T_crash")
    with cpp_producer(b.namesrv_addr) as producer:
        sent = send_keyed(producer, topic, 30, prefix="s", size=600)
        batch = {f"b-{i}": nul_free_body(300, seed=f"b-{i}:") for i in range(5)}
        result = producer.send_batch([make_message(topic, body, key=key) for key, body in batch.items()])
        assert result.status == SendStatus.OK
    sent |= batch
    b.kill()  # SIGKILL: the abort file stays, the next start recovers abnormally
    assert (b.store_dir / "abort").exists()
    shutil.rmtree(b.store_dir / "consumequeue")
    shutil.rmtree(b.store_dir / "index")
    (b.store_dir / "consumequeue.manifest").unlink()
    since = b.log_size()
    b.start()
    recovered = [json.loads(line) for line in b.log_text(since).splitlines() if '"store recovered"' in line]
    assert recovered, b.tail(since=since)
    info = recovered[0]  # (the broker logs JSON lines)
    assert info["normally"] is False and info["records_checked"] >= len(sent), info
    assert info["pre_dispatched"] == info["records_checked"], info
    assert_exactly_once(sent, consume_all(b.namesrv_addr, topic, sent))


def test_restart_keeps_messages_and_committed_offsets(broker_factory):
    """Send, consume part with group G1, stop gracefully, start on the same store and ports, then:
    a new group G2 reads everything from offset 0 byte-identical; G1 continues from its committed offsets.

    G1's offsets were committed when its consumer shut down (UPDATE_CONSUMER_OFFSET, before the broker stopped),
    and we check they reached consumerOffset.json. So G1 may not see any batch-A message again: at-least-once
    allows redelivery only of messages whose consumption was not committed, and all of batch A was.
    """
    b = broker_factory.start(name="restart")
    topic, g1, g2 = unique("T_restart"), unique("CG1"), unique("CG2")
    with cpp_producer(b.namesrv_addr) as producer:
        batch_a = send_keyed(producer, topic, 10, prefix="a", size=500)
        batch_a["a-zlib"] = compressible_body(8192, "a-zlib")
        assert producer.send_sync(make_message(topic, batch_a["a-zlib"], key="a-zlib")).status == SendStatus.OK
    assert_exactly_once(batch_a, consume_all(b.namesrv_addr, topic, batch_a, group=g1))
    with cpp_producer(b.namesrv_addr) as producer:
        batch_b = send_keyed(producer, topic, 10, prefix="b", size=700)

    b.stop()  # SIGTERM; must exit 0
    offsets = read_consumer_offsets(b.store_dir)
    committed = offsets.get(f"{topic}@{g1}")
    assert committed and sum(committed.values()) == len(batch_a), (
        f"G1 consumed {len(batch_a)} messages of a fresh topic; consumerOffset.json has {committed} for {topic}@{g1}"
    )
    b.start()

    everything = batch_a | batch_b
    assert_exactly_once(everything, consume_all(b.namesrv_addr, topic, everything, group=g2))
    after = consume_all(b.namesrv_addr, topic, batch_b, group=g1)
    assert not [i.key for i in after if i.key in batch_a], "G1 got batch-A messages again after the restart"
    assert_exactly_once(batch_b, after)

    # The restarted broker re-registered its routes: a new producer can send and G1 keeps going.
    with cpp_producer(b.namesrv_addr) as producer:
        batch_c = send_keyed(producer, topic, 4, prefix="c")
    assert_exactly_once(batch_c, consume_all(b.namesrv_addr, topic, batch_c, group=g1))
