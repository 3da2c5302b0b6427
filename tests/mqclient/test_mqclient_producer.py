"""Producer retry/timeout rules against a scripted broker (no network)."""

from __future__ import annotations

import pytest
from mq_fakes import BROKERS, NAMESRV, FakeClient, ok, route_body, stall

from mqclient import Message, Producer, ProducerConfig, SendFailedError
from mqclient.message import decode_properties
from remoting.codes import RequestCode


def producer(broker, **cfg) -> tuple[Producer, FakeClient]:
    client = FakeClient(broker)
    return Producer(NAMESRV, ProducerConfig(group="pg", **cfg), client=client), client  # type: ignore[arg-type]


async def test_success_sets_uniq_key_and_v2_header():
    p, client = producer(lambda addr, req, t: ok(req, queue_id=1, offset=42))
    res = await p.send(Message("T", b"hello", tags="A", properties={"k": "v"}))
    assert res.status == "SEND_OK" and res.attempts == 1 and res.queue_offset == 42 and res.queue.queue_id == 1
    addr, req, timeout = client.calls[0]
    assert req.code == RequestCode.SEND_MESSAGE_V2
    assert req.ext_fields["b"] == "T" and req.ext_fields["a"] == "pg" and req.ext_fields["c"] == "TBW102"
    props = decode_properties(req.ext_fields["i"])
    assert props["UNIQ_KEY"] == res.msg_id and len(res.msg_id) == 32
    assert props["TAGS"] == "A" and props["k"] == "v"
    assert timeout == pytest.approx(3.0, abs=0.1)


async def test_retryable_codes_move_to_another_broker_then_succeed():
    answers = iter([1, 14])

    def broker(addr, req, t):
        code = next(answers, 0)
        return ok(req) if code == 0 else req.response(code, "nope")

    p, client = producer(broker)
    res = await p.send(Message("T", b"x"))
    assert res.attempts == 3
    assert [e.kind for e in res.attempt_errors] == ["SYSTEM_ERROR", "SERVICE_NOT_AVAILABLE"]
    brokers = [a for a, _, _ in client.calls]
    assert brokers[0] != brokers[1] and brokers[1] != brokers[2]  # J avoids the broker that just failed
    # the same message (same UNIQ_KEY) on every attempt
    keys = {decode_properties(r.ext_fields["i"])["UNIQ_KEY"] for _, r, _ in client.calls}
    assert len(keys) == 1


async def test_busy_answer_is_final_in_sync_mode():
    p, client = producer(
        lambda addr, req, t: req.response(
            2,
            "[TIMEOUT_CLEAN_QUEUE]broker busy, start flow control for a while, period in queue: 201ms, size of queue: 5",
        )
    )
    with pytest.raises(SendFailedError) as ei:
        await p.send(Message("T", b"x"))
    assert len(client.calls) == 1
    assert ei.value.last.kind == "TIMEOUT_CLEAN_QUEUE" and ei.value.last.code == 2


async def test_timeouts_retried_within_budget_with_attempt_cap():
    """Total 4 s, at most 3 s per attempt: the second attempt only gets what is left."""
    clock = [0.0]

    async def broker(addr, req, timeout):
        if len(client.calls) == 1:
            clock[0] += timeout  # the first attempt eats its whole 3 s
            return await stall(timeout)
        return ok(req)

    client = FakeClient(broker)
    p = Producer(
        NAMESRV,
        ProducerConfig(send_timeout_ms=4000, attempt_timeout_ms=3000, retries=2),
        client=client,
        clock=lambda: clock[0],
    )  # type: ignore[arg-type]
    res = await p.send(Message("T", b"x"))
    assert res.attempts == 2 and res.attempt_errors[0].kind == "CLIENT_TIMEOUT"
    assert client.calls[0][2] == pytest.approx(3.0)
    assert client.calls[1][2] == pytest.approx(1.0)


async def test_single_attempt_timeout_fails_and_spent_budget_stops_retries():
    clock = [0.0]

    async def broker(addr, req, timeout):
        clock[0] += timeout
        return await stall(timeout)

    client = FakeClient(broker)
    p = Producer(NAMESRV, ProducerConfig(send_timeout_ms=3000, retries=2), client=client, clock=lambda: clock[0])  # type: ignore[arg-type]
    with pytest.raises(SendFailedError) as ei:
        await p.send(Message("T", b"x"))
    assert len(client.calls) == 1  # the budget is gone after one 3 s attempt
    assert [a.kind for a in ei.value.attempts] == ["CLIENT_TIMEOUT", "TIMEOUT_BUDGET"]


async def test_no_retry_on_timeout_when_disabled():
    client = FakeClient(lambda addr, req, t: stall(t))
    p = Producer(NAMESRV, ProducerConfig(retry_on_timeout=False), client=client)  # type: ignore[arg-type]
    with pytest.raises(SendFailedError):
        await p.send(Message("T", b"x"))
    assert len(client.calls) == 1


async def test_async_mode_does_not_retry_broker_errors():
    p, client = producer(lambda addr, req, t: req.response(1, "boom"))
    with pytest.raises(SendFailedError):
        await p.send_async(Message("T", b"x"))
    assert len(client.calls) == 1
    p2, client2 = producer(lambda addr, req, t: req.response(1, "boom"))
    with pytest.raises(SendFailedError):
        await p2.send(Message("T", b"x"))
    assert len(client2.calls) == 3


async def test_unknown_topic_published_through_tbw102():
    client = FakeClient(lambda addr, req, t: ok(req), routes={"TBW102": route_body("TBW102", queues=8)})
    p = Producer(NAMESRV, client=client)  # type: ignore[arg-type]
    res = await p.send(Message("NEW", b"x"))
    assert res.status == "SEND_OK"
    assert int(client.calls[0][1].ext_fields["e"]) < 4  # queues = min(4, TBW102's 8)


async def test_no_route_at_all_is_a_clear_failure():
    p = Producer(NAMESRV, client=FakeClient(lambda a, r, t: ok(r), routes={}))  # type: ignore[arg-type]
    with pytest.raises(SendFailedError, match="no route for topic NOPE"):
        await p.send(Message("NOPE", b"x"))


async def test_large_body_compressed_and_flagged():
    p, client = producer(lambda addr, req, t: ok(req))
    await p.send(Message("T", b"a" * 10_000))
    req = client.calls[0][1]
    assert int(req.ext_fields["f"]) & 1 and len(req.body) < 10_000


async def test_batch_uses_320_with_per_message_keys():
    p, client = producer(
        lambda addr, req, t: req.response(0, ext_fields={"msgId": "A,B,C", "queueId": "0", "queueOffset": "10"})
    )
    res = await p.send_batch([Message("T", b"1"), Message("T", b"22"), Message("T", b"333")])
    req = client.calls[0][1]
    assert req.code == RequestCode.SEND_BATCH_MESSAGE and req.ext_fields["m"] == "true"
    assert len(res.msg_id.split(",")) == 3 and res.offset_msg_id == "A,B,C"
    with pytest.raises(Exception, match="one topic"):
        await p.send_batch([Message("T", b"1"), Message("U", b"1")])


async def test_oneway_sets_the_flag_and_needs_no_answer():
    p, client = producer(lambda addr, req, t: ok(req))
    mq = await p.send_oneway(Message("T", b"x"))
    addr, req = client.oneway[0]
    assert req.flag & 0x2 and addr == BROKERS[mq.broker_name]


async def test_bad_messages_rejected_before_the_wire():
    p, client = producer(lambda addr, req, t: ok(req))
    with pytest.raises(Exception, match="empty"):
        await p.send(Message("T", b""))
    with pytest.raises(Exception, match="limit"):
        await p.send(Message("T", b"x" * (4 * 1024 * 1024 + 1)))
    assert client.calls == []
