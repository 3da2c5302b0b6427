"""Fault injection's switches at the process boundary: every busy answer from FAULT_INJECT alone (plain
messages), the transient-pool drain, oneway requests never answered, and injection off doing nothing."""

from __future__ import annotations

import asyncio
import re

import pytest
from flow_support import (
    OVERLOAD,
    PC_SYNCHRONIZED,
    PCBUSY_RE,
    REJECTREQUEST,
    TIMEOUT_RE,
    RawConnection,
    fault,
    runtime_info,
    send_request,
    settle,
    spawn,
    timed_invoke,
    unique,
    update_config,
    warm_topic,
)

from mqclient.fault import FaultInjectionError, inject_fault_async
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from store.message import decode_offset_msg_id, decode_record

pytestmark = pytest.mark.compat


# ------------------------------------------------------------------- every answer without special messages


async def test_every_busy_answer_from_fault_inject_alone(brokers, client):
    """Plain messages only; the incidents are made with FAULT_INJECT (what `mqadmin` will call)."""
    b = brokers.ready("two_workers")
    addr, topic = b.broker_addr, unique("T_admin")
    await warm_topic(client, addr, topic)

    async def inject(kind: str, ms: int = 0, target: str | None = None) -> None:
        await inject_fault_async(addr, kind, duration_ms=ms, target=target, client=client)

    try:
        # [TIMEOUT_CLEAN_QUEUE]: the send workers are stuck
        await inject("stall_queue", 800, "send")
        a = await timed_invoke(client, addr, send_request(topic))
        assert a.code == 2 and re.fullmatch(TIMEOUT_RE, a.remark), a.text
        await settle(client, addr)

        # [PCBUSY_CLEAN_QUEUE] then [REJECTREQUEST]: appends stall; one send holds the lock while the
        # workers are stuck, so a burst waits in the queue when the page cache turns busy (200 ms)
        await inject("stall_append", 1000)
        holder = spawn(timed_invoke(client, addr, send_request(topic)))
        await asyncio.sleep(0.03)
        await inject("stall_queue", 600, "send")
        burst = await asyncio.gather(*(timed_invoke(client, addr, send_request(topic)) for _ in range(3)))
        assert all(x.code == 2 and re.fullmatch(PCBUSY_RE, x.remark) for x in burst), [x.text for x in burst]
        refused = await timed_invoke(client, addr, send_request(topic))
        assert (refused.code, refused.remark) == (2, REJECTREQUEST)
        assert (await holder).code == 0
        await settle(client, addr)

        # ([OVERLOAD] needs a small queue: see test_overload_from_fault_inject_alone)

        # [PC_SYNCHRONIZED]: without the sweeper, a send queued before the page cache turned busy is
        # taken by the second worker after it did, and the store refuses the put
        await update_config(client, addr, brokerFastFailureEnable="false")
        await inject("stall_append", 1000)
        holder = spawn(timed_invoke(client, addr, send_request(topic)))
        await asyncio.sleep(0.03)
        await inject("stall_queue", 400, "send")
        late = await timed_invoke(client, addr, send_request(topic))
        assert (late.code, late.remark) == (1, PC_SYNCHRONIZED), late.text
        assert (await holder).code == 0
    finally:
        await update_config(client, addr, brokerFastFailureEnable="true")
        await settle(client, addr)


async def test_overload_from_fault_inject_alone(brokers, client):
    b = brokers.ready("one_worker")  # sendThreadPoolQueueCapacity=8
    addr, topic = b.broker_addr, unique("T_admin_ovl")
    await warm_topic(client, addr, topic)
    try:
        await inject_fault_async(addr, "stall_queue", duration_ms=800, target="send", client=client)
        answers = await asyncio.gather(*(timed_invoke(client, addr, send_request(topic)) for _ in range(9)))
        assert [a.remark for a in answers].count(OVERLOAD) == 1
    finally:
        await settle(client, addr)


async def test_drained_transient_pool_rejects_sends_before_queueing(brokers, client):
    b = brokers.ready("pool")
    addr, topic = b.broker_addr, unique("T_pool")
    await warm_topic(client, addr, topic)
    try:
        info = await runtime_info(client, addr)
        assert int(info["remainTransientStoreBufferNumbs"]) >= 1
        await inject_fault_async(addr, "drain_transient_pool", duration_ms=600, client=client)
        info = await runtime_info(client, addr)
        assert info["remainTransientStoreBufferNumbs"] == "0"
        refused = await asyncio.gather(*(timed_invoke(client, addr, send_request(topic)) for _ in range(3)))
        assert [(a.code, a.remark) for a in refused] == [(2, REJECTREQUEST)] * 3
        await asyncio.sleep(0.7)
        ok = await timed_invoke(client, addr, send_request(topic))
        assert ok.code == 0, ok.text
    finally:
        await settle(client, addr)


async def test_broker_refuses_malformed_fault_requests_with_the_reason(brokers, client):
    addr = brokers.ready("one_worker").broker_addr
    cases = {
        ("explode", 100, None): "unknown fault kind 'explode'",
        ("stall_queue", 100, "nosuch"): "unknown queue 'nosuch'; expected one of admin, client_manage, "
        "consumer_manage, end_transaction, heartbeat, pull, query, send",
        ("stall_append", 0, None): "durationMs must be a positive number of milliseconds, got 0",
        ("drain_transient_pool", 100, None): "drain_transient_pool needs a transient store pool",
    }
    for (kind, ms, target), reason in cases.items():
        resp = await fault(client, addr, kind, ms, target=target)
        assert resp.code == ResponseCode.SYSTEM_ERROR and resp.remark.startswith(reason), (kind, resp.remark)
    missing = await client.invoke(addr, RemotingCommand.request(RequestCode.FAULT_INJECT, {"durationMs": "5"}), 5)
    assert missing.code == ResponseCode.SYSTEM_ERROR and "kind" in missing.remark
    bad_ms = await client.invoke(
        addr, RemotingCommand.request(RequestCode.FAULT_INJECT, {"kind": "stall_append", "durationMs": "soon"}), 5
    )
    assert bad_ms.code == ResponseCode.SYSTEM_ERROR and "durationMs" in bad_ms.remark


# -------------------------------------------------------------------------------------------- oneway


async def test_oneway_requests_are_never_answered_even_when_shed(brokers, client):
    """Oneway sends refused in every way the send path can refuse: no frame comes back for any of them."""
    b = brokers.ready("one_worker")
    addr, topic = b.broker_addr, unique("T_oneway")
    await warm_topic(client, addr, topic)
    raw = await RawConnection.open(addr)
    oneway_opaques: list[int] = []
    try:
        # [OVERLOAD] and [TIMEOUT_CLEAN_QUEUE]: 8 fill the stalled queue, 3 overflow it; all time out (after the
        # default 200 ms in the queue) long before the stall ends: `settle` ends it. The queue is polled, since on a
        # loaded machine the sends may reach the broker late.
        await inject_fault_async(addr, "stall_queue", duration_ms=4000, target="send", client=client)
        oneway_opaques += [raw.send(send_request(topic, oneway=True)) for _ in range(11)]
        await asyncio.sleep(0.25)
        for _ in range(60):
            info = await runtime_info(client, addr)
            if info["sendThreadPoolQueueSize"] == "0":
                break
            await asyncio.sleep(0.05)
        assert info["sendThreadPoolQueueSize"] == "0", "the queued oneway sends should have timed out"
        await settle(client, addr)
        # [PCBUSY_CLEAN_QUEUE] then [REJECTREQUEST]
        holder = spawn(timed_invoke(client, addr, send_request(topic, props={"brokerStallAppendMs": "700"})))
        await asyncio.sleep(0.02)
        oneway_opaques += [raw.send(send_request(topic, oneway=True)) for _ in range(3)]
        await asyncio.sleep(0.3)
        oneway_opaques += [raw.send(send_request(topic, oneway=True)) for _ in range(3)]
        assert (await holder).code == 0
        last = raw.send(send_request(topic))  # a normal request closes the window
        answer = await raw.read_until(last)
        assert answer.code == 0
    finally:
        await raw.close()
        await settle(client, addr)
    assert [c.opaque for c in raw.received] == [last], [(c.opaque, c.remark) for c in raw.received]
    info = await runtime_info(client, addr)
    assert int(info["busyOVERLOAD"]) >= 3 and int(info["busyPCBUSY_CLEAN_QUEUE"]) >= 3
    assert int(info["busyREJECTREQUEST"]) >= 3


# ---------------------------------------------------------------------------------------- injection off


async def test_with_injection_off_the_properties_are_stored_like_any_other(brokers, client):
    b = brokers.ready("injection_off")
    addr, topic = b.broker_addr, unique("T_off")
    await warm_topic(client, addr, topic)
    props = {"brokerSleepMs": "3000", "brokerStallAppendMs": "3000"}
    answers = await asyncio.gather(*(timed_invoke(client, addr, send_request(topic, b"body", props)) for _ in range(3)))
    assert all(a.code == 0 for a in answers), [a.text for a in answers]
    assert max(a.latency_ms for a in answers) < 1000, [a.latency_ms for a in answers]
    info = await runtime_info(client, addr)
    assert info["osPageCacheBusy"] == "false" and int(info["putMessageLockTimeMax"]) < 1000
    # stored with the two properties, as ordinary user properties
    resp = await client.invoke(addr, send_request(topic, b"stored", props), 5)
    _, _, offset = decode_offset_msg_id(resp.ext_fields["msgId"])
    view = await client.invoke(
        addr, RemotingCommand.request(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(offset)}), 5
    )
    assert view.code == 0, view.remark
    msg = decode_record(bytes(view.body), 0)
    assert msg.body == b"stored"
    assert msg.properties["brokerSleepMs"] == "3000" and msg.properties["brokerStallAppendMs"] == "3000"
    # and the admin request is refused
    with pytest.raises(FaultInjectionError) as refused:
        await inject_fault_async(addr, "stall_append", duration_ms=100, client=client)
    assert refused.value.code == ResponseCode.NO_PERMISSION
    assert "fault injection is disabled; start the broker with faultInjectionEnable=true" in str(refused.value)


def test_fault_injection_warns_once_at_boot_and_only_when_on(brokers):
    on, off = brokers.get("one_worker"), brokers.get("injection_off")
    warning = "fault injection is ENABLED"
    assert on.log_text().count(warning) == 1
    assert warning not in off.log_text()
