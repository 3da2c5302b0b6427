"""``SendMessageProcessor._message``'s common path: the Java client's message without tags or keys (the benchmark
Producer's ``UNIQ_KEY\\x01<id>\\x02WAIT\\x01true\\x02``, no transaction type, no IPv6 host flag, a queue it named on a
topic that is not a retry topic) built straight into its row, without ``sent_properties``. Pinned against
``_message_general`` (the path every other send takes, which builds the same row through ``sent_properties``) over
hypothesis sends near that shape: the same row, message or refusal. The first test fails without the common path
(it forbids ``sent_properties``); the rows' rules (``store.send_rows.SendRow``: a masked sys flag, no transaction
type, no DELAY) fail the differential one when broken."""

from __future__ import annotations

import asyncio
import random

import pytest
from broker_helpers import FakeChannel, send_request, start_broker
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import broker.processor.send as send_module
from broker.processor.send import SendError
from remoting.codes import ResponseCode
from store.message import IPV4_HOSTS_MASK, TRANSACTION_ROLLBACK_TYPE

PRODUCER_TEXT = "UNIQ_KEY\x017F0000014E2A18B4AAC27D2F6B9E0000\x02WAIT\x01true\x02"


def _send(topic: str, body: bytes, queue_id: int, text: str, sys_flag: int = 0):
    request = send_request(topic, body, queue_id=queue_id)
    request.ext_fields["i"] = text  # (V2: i = properties, f = sysFlag)
    request.ext_fields["f"] = str(sys_flag)
    return request


def _outcome(processor, channel, request, *, general: bool):
    """What `_message` makes of the send (its row or message, queue id, properties), or its refusal; `general`:
    through `_message_general` (the send's checks run first, as `_message` runs them)."""
    hdr = processor._header(request)
    try:
        if not general:
            return processor._message(channel, request, hdr, {})
        checked: dict = {}
        processor._msg_check(channel, hdr, checked)
        _, max_body, cluster, _, tc, _ = checked[hdr.topic]
        body = request.body or b""
        text = hdr.properties or ""
        if len(body) > max_body or len(text.encode()) > send_module.MAX_PROPERTIES_LENGTH:
            processor._check_size(len(body), len(text.encode()))
        return processor._message_general(channel, request, hdr, tc, hdr.queue_id, body, text, cluster)
    except SendError as exc:
        return ("refused", exc.code, exc.remark)


async def test_the_producer_s_send_is_built_without_sent_properties(tmp_path, monkeypatch) -> None:
    broker = await start_broker(tmp_path)
    try:
        processor = broker.send_processor
        channel = FakeChannel()
        request = _send("RowT", b"x" * 1024, 2, PRODUCER_TEXT)
        want = _outcome(processor, channel, request, general=True)

        def forbidden(*_args):
            raise AssertionError("sent_properties called for the Producer's send")

        monkeypatch.setattr(send_module, "sent_properties", forbidden)
        got = _outcome(processor, channel, request, general=False)
        assert got == want
        row, queue_id, props = got
        assert row.__class__ is tuple and queue_id == 2
        assert props == {"UNIQ_KEY": "7F0000014E2A18B4AAC27D2F6B9E0000", "CLUSTER": broker.config.broker_cluster_name}
        assert (
            row[4] == f"UNIQ_KEY\x017F0000014E2A18B4AAC27D2F6B9E0000\x02CLUSTER\x01{broker.config.broker_cluster_name}"
        )
    finally:
        await broker.shutdown()


_PIECES = ["UNIQ_KEY\x01", "\x02WAIT\x01true\x02", "\x02", "\x01", "TAGS\x01a\x02", "KEYS\x01k\x02", "DELAY\x012\x02"]


@st.composite
def _sends(draw):
    """Sends near the Producer's: its text with odd ids (separators, non-ASCII, empty, long) or extra pieces, texts
    cut or joined from pieces; sys flags with a transaction type, IPv6 hosts or compression; queue ids in range
    and out; a retry topic."""
    uniq = draw(st.one_of(st.just("7F0000014E2A18B4AAC27D2F6B9E0000"), st.text("0AF\x01\x02é", max_size=12)))
    text = draw(
        st.one_of(
            st.just(f"UNIQ_KEY\x01{uniq}\x02WAIT\x01true\x02"),
            st.builds("".join, st.lists(st.sampled_from([*_PIECES, uniq]), max_size=6)),
            st.just(f"TAGS\x01t\x02UNIQ_KEY\x01{uniq}\x02WAIT\x01true\x02"),
            st.just(f"UNIQ_KEY\x01{uniq}\x02WAIT\x01false\x02"),
            st.just(f"UNIQ_KEY\x01{'u' * 33_000}\x02WAIT\x01true\x02"),
        )
    )
    sys_flag = draw(st.sampled_from([0, 0, 0, 0x1, 0x4, 0x8, 0xC, 0x10, 0x20, 0x31]))
    topic = draw(st.sampled_from(["DiffRowT", "DiffRowT", "%RETRY%DiffRowG"]))
    queue_id = draw(st.sampled_from([0, 1, 3, 7, -1] if topic == "DiffRowT" else [0]))
    body = draw(st.sampled_from([b"", b"b", b"x" * 70_000]))
    return topic, body, queue_id, text, sys_flag


@pytest.fixture(scope="module")
def rig(tmp_path_factory):
    """One broker for the examples (its loop run by hand: the calls under test are synchronous)."""
    import asyncio

    loop = asyncio.new_event_loop()
    broker = loop.run_until_complete(start_broker(tmp_path_factory.mktemp("rows"), maxMessageSize=65536))
    broker.subscription_group_manager.find_subscription_group_config("DiffRowG")  # (auto-created, retries)
    yield broker
    loop.run_until_complete(broker.shutdown())
    loop.close()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(send=_sends())
def test_the_common_path_builds_what_the_general_one_builds(rig, send) -> None:
    topic, body, queue_id, text, sys_flag = send
    processor = rig.send_processor
    channel = FakeChannel()
    request = _send(topic, body, queue_id, text, sys_flag)
    random.seed(queue_id)  # (a queue id of -1: the broker picks one at random, the same for both)
    got = _outcome(processor, channel, request, general=False)
    random.seed(queue_id)
    want = _outcome(processor, channel, request, general=True)
    assert got == want
    item = got[0]
    if item.__class__ is tuple:  # a row is what `SendRow` allows
        assert len(item) == 10
        assert not item[7] & TRANSACTION_ROLLBACK_TYPE and item[7] == item[7] & IPV4_HOSTS_MASK
        assert "DELAY" not in item[3] and item[2].__class__ is bytes


async def test_the_broker_takes_a_group_s_arrivals_in_one_call(broker, client) -> None:
    """The store's one pass announces a group in one call (`rows_arriving_listener`): with nothing waiting the broker
    does nothing more; a parked pull, a waiting POP receive or a timer topic among them gets each arrival as
    `_on_message_arriving` gets it alone, parked pulls alone in the hold service's one pass over the group (without
    the one-call listener the notices go past `_on_rows_arriving` to the message listener and the assertions on what
    it saw fail)."""
    from broker_helpers import pull_request

    addr = broker.config.broker_addr
    seen: list[tuple] = []
    real = broker._on_message_arriving
    broker._on_message_arriving = lambda *a: (seen.append(a[:4]), real(*a))
    hold = broker.pull_hold_service
    real_rows = hold.notify_rows_arriving
    hold.notify_rows_arriving = lambda rows, results: (
        seen.extend((row[0], row[1], result[1] + 1, row[5]) for row, result in zip(rows, results)),
        real_rows(rows, results),
    )
    await client.invoke(addr, send_request("ArriveT", b"a", queue_id=0), 5)
    assert seen == []  # nobody waits: not one notice
    parked = asyncio.ensure_future(client.invoke(addr, pull_request("G", "ArriveT", 0, 1, suspend_ms=10_000), 15))
    await asyncio.sleep(0.3)
    assert not parked.done()
    await client.invoke(addr, send_request("ArriveT", b"b", queue_id=0), 5)
    assert (await parked).code == ResponseCode.SUCCESS
    assert seen == [("ArriveT", 0, 2, 0)]
    waiting = asyncio.ensure_future(broker.pop_service.wait("PopG", "ArriveT", 10_000))
    await asyncio.sleep(0.05)
    assert not waiting.done() and broker.pop_service.has_waiters()
    await client.invoke(addr, send_request("ArriveT", b"c", queue_id=0), 5)
    await asyncio.wait_for(waiting, 2)  # (woken by the arrival, not its 10 s timeout)
    assert seen == [("ArriveT", 0, 2, 0), ("ArriveT", 0, 3, 0)]
    seen.clear()
    broker._on_rows_arriving([("rmq_sys_wheel_timer", 0, b"", {}, "", 0, 0, 0, 0, 0)], [("id", 4, 99)], 1, {"T"})
    assert seen == [] and broker.pull_hold_service.table == {}
    broker._on_rows_arriving(
        [("rmq_sys_wheel_timer", 0, b"", {}, "", 0, 0, 0, 0, 0)], [("id", 4, 99)], 1, {"rmq_sys_wheel_timer"}
    )
    assert seen == [("rmq_sys_wheel_timer", 0, 5, 0)]
