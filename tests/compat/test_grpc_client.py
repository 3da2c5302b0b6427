"""The official RocketMQ 5.x Python client (gRPC) against the broker's 5.x endpoint, and 4.x <-> 5.x on one store.

Each test drives ``grpc_client/client.py`` in the client's own venv (see grpc_support) against a broker
subprocess whose gRPC endpoint listens on a free loopback port.
"""

from __future__ import annotations

import base64
import time

import pytest
from compat_support import (
    BrokerFactory,
    BrokerProcess,
    cpp_producer,
    cpp_pull_all,
    create_topic,
    make_message,
    unique,
)
from grpc_support import ClientVenvError, ensure_client_venv, run_client

from broker.testing.ports import free_port

pytestmark = [pytest.mark.compat]


@pytest.fixture(scope="session")
def grpc_client() -> None:
    try:
        ensure_client_venv()
    except ClientVenvError as exc:
        pytest.fail(str(exc))


def _body(pulled: dict) -> str:
    return base64.b64decode(pulled["body_b64"]).decode()


def start_grpc_broker(factory: BrokerFactory, *extra: str, tls: bool = False) -> tuple[BrokerProcess, str]:
    broker = factory.start(*extra, grpc_port=0, grpc_tls=tls)
    return broker, broker.grpc_endpoint


@pytest.fixture(scope="module")
def grpc_broker(tmp_path_factory, grpc_client) -> tuple[BrokerProcess, str]:
    factory = BrokerFactory(tmp_path_factory.mktemp("grpc"))
    try:
        yield start_grpc_broker(factory, "maxReconsumeTimes=2", "enablePropertyFilter=true")
    finally:
        factory.close()


def test_producer_and_simple_consumer_round_trip(grpc_broker):
    broker, endpoint = grpc_broker
    topic, group = unique("G5T"), unique("G5G")
    sent = run_client(
        endpoint,
        "produce",
        {
            "topic": topic,
            "count": 5,
            "tag": "tagA",
            "keys": ["k1", "k2"],
            "properties": {"color": "red"},
            "body": "five-{i}",
        },
    )
    assert len(sent.of("sent")) == 5, sent.describe()
    got = run_client(endpoint, "consume", {"topic": topic, "group": group, "count": 5})
    received = got.of("received")
    assert sorted(r["body"] for r in received) == [f"five-{i}" for i in range(5)], got.describe()
    assert {r["message_id"] for r in received} == {s["message_id"] for s in sent.of("sent")}
    assert all(
        r["tag"] == "tagA" and r["keys"] == ["k1", "k2"] and r["properties"] == {"color": "red"} and r["attempt"] == 1
        for r in received
    ), received
    assert len(got.of("acked")) == 5
    # acked means consumed: a second consumer of the group finds nothing
    again = run_client(endpoint, "consume", {"topic": topic, "group": group, "count": 1, "timeout_s": 3})
    assert again.of("received") == [], again.describe()


def test_tag_filter_delivers_only_matching_messages(grpc_broker):
    _, endpoint = grpc_broker
    topic, group = unique("G5F"), unique("G5FG")
    run_client(endpoint, "produce", {"topic": topic, "count": 3, "tag": "skip", "body": "skip-{i}"})
    run_client(endpoint, "produce", {"topic": topic, "count": 2, "tag": "take", "body": "take-{i}"})
    got = run_client(endpoint, "consume", {"topic": topic, "group": group, "count": 2, "tag": "take"})
    assert sorted(r["body"] for r in got.of("received")) == ["take-0", "take-1"], got.describe()


def test_sql92_filter_delivers_only_matching_messages(grpc_broker):
    _, endpoint = grpc_broker
    topic, group = unique("G5SQL"), unique("G5SQLG")
    for color in ("red", "blue", "red"):
        run_client(
            endpoint, "produce", {"topic": topic, "count": 1, "properties": {"color": color}, "body": color + "-{i}"}
        )
    got = run_client(endpoint, "consume", {"topic": topic, "group": group, "count": 2, "sql": "color = 'red'"})
    assert sorted(r["body"] for r in got.of("received")) == ["red-0", "red-0"], got.describe()


def test_unacked_message_is_redelivered_after_its_invisible_time(grpc_broker):
    _, endpoint = grpc_broker
    topic, group = unique("G5R"), unique("G5RG")
    run_client(endpoint, "produce", {"topic": topic, "count": 1, "body": "again"})
    got = run_client(
        endpoint,
        "consume",
        {"topic": topic, "group": group, "count": 1, "skip_ack": 1, "invisible_s": 2, "timeout_s": 20},
    )
    received = got.of("received")
    assert [r["attempt"] for r in received] == [1, 2], got.describe()
    assert received[1]["at"] - received[0]["at"] >= 1.5


def test_change_invisible_duration_brings_redelivery_forward(grpc_broker):
    _, endpoint = grpc_broker
    topic, group = unique("G5C"), unique("G5CG")
    run_client(endpoint, "produce", {"topic": topic, "count": 1, "body": "soon"})
    # received with 60 s of invisibility, then changed to 1 s: back within seconds, not a minute
    got = run_client(
        endpoint,
        "consume",
        {
            "topic": topic,
            "group": group,
            "count": 1,
            "skip_ack": 1,
            "invisible_s": 60,
            "change_invisible_s": 1,
            "timeout_s": 15,
        },
    )
    received = got.of("received")
    assert len(got.of("changed")) == 1 and [r["attempt"] for r in received] == [1, 2], got.describe()
    assert received[1]["at"] - received[0]["at"] < 10


def test_message_goes_to_the_dlq_after_max_attempts(grpc_broker):
    broker, endpoint = grpc_broker  # maxReconsumeTimes=2: three deliveries, then %DLQ%
    topic, group = unique("G5D"), unique("G5DG")
    run_client(endpoint, "produce", {"topic": topic, "count": 1, "body": "doomed"})
    # after the third delivery the consumer keeps receiving 4 s (four invisible times): a fourth delivery would
    # show up there, and those receives are what revives the message into the DLQ
    got = run_client(
        endpoint,
        "consume",
        {
            "topic": topic,
            "group": group,
            "count": 1,
            "skip_ack": 10,
            "invisible_s": 1,
            "timeout_s": 12,
            "quiet_after": 3,
            "quiet_s": 4,
        },
    )
    assert [r["attempt"] for r in got.of("received")] == [1, 2, 3], got.describe()
    dlq = cpp_pull_all(broker.namesrv_addr, unique("DLQREADER"), f"%DLQ%{group}")
    assert [_body(m) for m in dlq["messages"]] == ["doomed"], dlq


def test_cpp_4x_producer_to_5x_consumer_and_5x_producer_to_4x_consumer(grpc_broker):
    broker, endpoint = grpc_broker
    topic = unique("G5X")
    with cpp_producer(broker.namesrv_addr) as producer:
        for i in range(3):
            result = producer.send_sync(make_message(topic, f"from-4x-{i}".encode(), key=f"key{i}", tags="t4"))
            assert result.status == 0
    got = run_client(endpoint, "consume", {"topic": topic, "group": unique("G5XG"), "count": 3})
    received = got.of("received")
    assert sorted(r["body"] for r in received) == [f"from-4x-{i}" for i in range(3)], got.describe()
    assert {r["tag"] for r in received} == {"t4"} and sorted(k for r in received for k in r["keys"]) == [
        "key0",
        "key1",
        "key2",
    ]

    back = unique("G5Y")
    run_client(endpoint, "produce", {"topic": back, "count": 3, "tag": "t5", "body": "from-5x-{i}"})
    pulled = cpp_pull_all(broker.namesrv_addr, unique("CPPG"), back)
    assert sorted(_body(m) for m in pulled["messages"]) == [f"from-5x-{i}" for i in range(3)], pulled
    assert {m["tags"] for m in pulled["messages"]} == {"t5"}


def test_tls_endpoint_serves_a_client_that_trusts_the_generated_certificate(tmp_path, grpc_client):
    factory = BrokerFactory(tmp_path)
    try:
        broker, endpoint = start_grpc_broker(factory, tls=True)
        cert = broker.store_dir / "grpc-tls" / "cert.pem"
        assert cert.exists(), broker.tail()
        env = {"GRPC_CLIENT_TLS": "1", "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": str(cert)}
        topic = unique("G5TLS")
        sent = run_client(endpoint, "produce", {"topic": topic, "count": 2}, env=env)
        assert len(sent.of("sent")) == 2, sent.describe()
        got = run_client(endpoint, "consume", {"topic": topic, "group": unique("G5TLSG"), "count": 2}, env=env)
        assert len(got.of("acked")) == 2, got.describe()
        # a plaintext client cannot talk to the TLS endpoint
        plain = run_client(endpoint, "produce", {"topic": topic, "count": 1}, timeout_s=60)
        assert (plain.of("startup_failed") or plain.of("send_failed")) and not plain.of("sent"), plain.describe()
    finally:
        factory.close()


def test_grpc_server_port_minus_one_disables_the_endpoint(tmp_path):
    factory = BrokerFactory(tmp_path)
    try:
        port = free_port()
        broker = factory.start("grpcServerPort=-1", "grpcListenHost=127.0.0.1")
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", port))  # nothing else would have bound it; the broker logged no endpoint
        assert "gRPC endpoint listening" not in broker.log_text()
    finally:
        factory.close()


def test_transaction_commit_rollback_and_check_back(tmp_path, grpc_client):
    factory = BrokerFactory(tmp_path)
    try:
        broker, endpoint = start_grpc_broker(factory, "transactionCheckInterval=1000", "transactionTimeOut=1000")
        topic = unique("G5TX")
        create_topic(broker, topic, "TRANSACTION")
        run_client(endpoint, "transaction", {"topic": topic, "body": "committed", "end": "commit"})
        run_client(endpoint, "transaction", {"topic": topic, "body": "rolled-back", "end": "rollback"})
        # neither committed nor rolled back: the broker asks the producer, which answers COMMIT (the producer
        # waits up to 8 s for that check, then a second for its answer to go out)
        orphan = run_client(
            endpoint,
            "transaction",
            {"topic": topic, "body": "recovered", "end": "none", "check": "commit", "linger_s": 8},
            timeout_s=60,
        )
        assert orphan.of("checked"), orphan.describe()
        got = run_client(endpoint, "consume", {"topic": topic, "group": unique("G5TXG"), "count": 2, "timeout_s": 15})
        assert sorted(r["body"] for r in got.of("received")) == ["committed", "recovered"], got.describe()
    finally:
        factory.close()


def test_topic_message_type_is_checked_on_send(grpc_broker):
    broker, endpoint = grpc_broker
    topic = unique("G5FIFOONLY")
    create_topic(broker, topic, "FIFO")
    # a NORMAL message to a FIFO topic: the client checks the route's accepted types, the broker checks too
    refused = run_client(endpoint, "produce", {"topic": topic, "count": 1})
    assert refused.of("send_failed") and not refused.of("sent"), refused.describe()
    accepted = run_client(endpoint, "produce", {"topic": topic, "count": 1, "group": "g1"})
    assert accepted.of("sent"), accepted.describe()


def test_fifo_messages_of_a_group_are_consumed_in_order_even_across_redelivery(grpc_broker):
    broker, endpoint = grpc_broker
    topic, group = unique("G5FIFO"), unique("G5FIFOG")
    create_topic(broker, topic, "FIFO")
    sent = run_client(endpoint, "produce", {"topic": topic, "count": 6, "group": "order-1", "body": "f-{i}"})
    assert len(sent.of("sent")) == 6, sent.describe()
    # one message per receive; the first delivery is not acked: nothing behind it may be delivered before
    # it comes back (a batch is handed out in order, and the next one waits for the whole batch)
    got = run_client(
        endpoint,
        "consume",
        {"topic": topic, "group": group, "count": 6, "skip_ack": 1, "invisible_s": 2, "timeout_s": 25, "batch": 1},
    )
    bodies = [r["body"] for r in got.of("received")]
    assert bodies == ["f-0", "f-0", "f-1", "f-2", "f-3", "f-4", "f-5"], got.describe()
    assert {r["group"] for r in got.of("received")} == {"order-1"}


def test_push_consumer_redelivers_a_failed_message_after_the_backoff(grpc_broker):
    _, endpoint = grpc_broker
    topic, group = unique("G5P"), unique("G5PG")
    run_client(endpoint, "produce", {"topic": topic, "count": 2, "body": "push-{i}"})
    got = run_client(
        endpoint, "push", {"topic": topic, "group": group, "count": 2, "fail_first": 1, "timeout_s": 30}, timeout_s=60
    )
    by_body: dict[str, list[dict]] = {}
    for r in got.of("received"):
        by_body.setdefault(r["body"], []).append(r)
    assert sorted(by_body) == ["push-0", "push-1"], got.describe()
    for deliveries in by_body.values():
        assert [d["attempt"] for d in deliveries] == [1, 2], got.describe()
        assert deliveries[1]["at"] - deliveries[0]["at"] >= 0.8  # the first step of the backoff (1 s)


def test_delivery_timestamp_is_exact(grpc_broker):
    """Delivered at its own time as 5.x brokers do (the timer topic), not rounded up to a delay level: the
    5.x Python client's delivery_timestamp is whole seconds, now + 3 s is 2-3 s ahead; the 5 s level would
    deliver 5 s after the send."""
    _, endpoint = grpc_broker
    topic = unique("G5DELAY")
    create_topic(grpc_broker[0], topic, "DELAY")
    sent = run_client(endpoint, "produce", {"topic": topic, "count": 1, "delay_s": 3, "body": "later"})
    (s,) = sent.of("sent")
    got = run_client(endpoint, "consume", {"topic": topic, "group": unique("G5DELAYG"), "count": 1, "timeout_s": 25})
    (r,) = got.of("received")
    assert r["body"] == "later", got.describe()
    assert r["at"] >= s["due"] - 0.05, (s, r)  # never before its time (one machine, one clock)
    assert r["at"] - s["due"] < 1.0 and r["at"] - s["at"] < 4.0, (s, r)  # and not at the 5 s level


def test_a_4x_producer_timer_property_is_exact(grpc_broker):
    """A 4.x remoting client (the C++ wheel) sets TIMER_DELAY_MS, as 5.x brokers accept on remoting too."""
    broker, endpoint = grpc_broker
    topic = unique("G5TIMER4")
    create_topic(broker, topic, "DELAY")
    with cpp_producer(broker.namesrv_addr) as producer:
        before = time.time()
        result = producer.send_sync(make_message(topic, b"timed-4x", props={"TIMER_DELAY_MS": "2500"}))
        after = time.time()
        assert result.status == 0
    got = run_client(endpoint, "consume", {"topic": topic, "group": unique("G5TIMER4G"), "count": 1, "timeout_s": 25})
    (r,) = got.of("received")
    assert r["body"] == "timed-4x", got.describe()
    # due 2.5 s after the broker took it: not before, and well before the 5 s level
    assert r["at"] >= before + 2.45 and r["at"] - after < 3.5, (before, after, got.describe())


def test_in_flight_messages_survive_a_broker_restart(tmp_path, grpc_client):
    """popCheckpoint.json: after a restart the acked messages do not come back, the unacked ones come back
    once their invisible time is over (not at once), with their delivery attempt counted on."""
    factory = BrokerFactory(tmp_path)
    try:
        broker, endpoint = start_grpc_broker(factory)
        topic, group = unique("G5RS"), unique("G5RSG")
        run_client(endpoint, "produce", {"topic": topic, "count": 4, "body": "rs-{i}"})
        first = run_client(
            endpoint,
            "consume",
            {"topic": topic, "group": group, "count": 2, "skip_ack": 2, "batch": 1, "invisible_s": 8, "timeout_s": 20},
        )
        popped_at = min(r["at"] for r in first.of("received"))
        acked_ids = {a["message_id"] for a in first.of("acked")}
        unacked = {r["body"] for r in first.of("received") if r["message_id"] not in acked_ids}
        assert len(unacked) == 2 and len(acked_ids) == 2, first.describe()
        broker.restart()
        second = run_client(endpoint, "consume", {"topic": topic, "group": group, "count": 2, "timeout_s": 30})
        received = second.of("received")
        assert {r["body"] for r in received} == unacked, second.describe()
        assert {r["attempt"] for r in received} == {2}, second.describe()
        assert min(r["at"] for r in received) >= popped_at + 7.5, (popped_at, second.describe())
    finally:
        factory.close()
