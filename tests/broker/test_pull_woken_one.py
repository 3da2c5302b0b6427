"""A woken pull of a match-all subscription answered from `MessageReader.get_woken_one` (one arrived message, no
result object: `PullMessageProcessor._rerun`) against the same pull run through the general path once the messages
are there: the same answer bytes in both serializations, for one arrival (the fast read) and for several (its
fallback to `get_message`), and a tag subscription (the filter's read)."""

from __future__ import annotations

import pytest
from broker_helpers import FakeChannel, pull_request, send_request, start_broker, woken_answers

from remoting.codes import ResponseCode


def _frame(cmd) -> bytes:  # noqa: ANN001
    return b"".join(bytes(part) for part in cmd.encode())


@pytest.mark.parametrize("serialize", [0, 1])
@pytest.mark.parametrize(("arrivals", "sub"), [(1, "*"), (3, "*"), (1, "a || b"), (2, "a")])
async def test_woken_answer_is_the_general_answer(tmp_path, serialize: int, arrivals: int, sub: str) -> None:
    broker = await start_broker(tmp_path)
    try:
        send = broker.send_processor
        pull = broker.pull_processor
        sink = FakeChannel()
        for i in range(5):
            await send.process_request(sink, send_request("WokenT", b"x" * (100 + i), props={"TAGS": "a"}))
        for offset in (5, 5 + arrivals):
            request = pull_request("WokenG", "WokenT", 0, offset, sub=sub, suspend_ms=10_000)
            request.serialize_type = serialize
            channel = FakeChannel()
            assert await pull.process_request(channel, request) is None  # parked at the end
            for i in range(arrivals):
                body = b"y" * (200 + offset + i)
                await send.process_request(sink, send_request("WokenT", body, props={"TAGS": "a"}))
            await woken_answers(channel)
            assert len(channel.sent) == 1
            woken = channel.sent[0]
            assert woken.code == ResponseCode.SUCCESS
            # the general path, the messages now there: no suspend, no commit (a woken pull's run)
            general = pull._process(channel, request, False)
            assert _frame(woken) == _frame(general), (offset, arrivals, sub)
    finally:
        await broker.shutdown()


async def test_one_arrival_takes_the_woken_read(tmp_path, monkeypatch) -> None:
    """The caught-up case reads through `get_woken_one` and not `get_message` (without the fast path the spy sees a
    `get_message` for the woken pull)."""
    broker = await start_broker(tmp_path)
    try:
        store = broker.store
        calls: list[str] = []
        get_message, get_woken_one = store.get_message, store.get_woken_one
        monkeypatch.setattr(store, "get_message", lambda *a: (calls.append("get_message"), get_message(*a))[1])
        monkeypatch.setattr(store, "get_woken_one", lambda *a: (calls.append("woken"), get_woken_one(*a))[1])
        sink = FakeChannel()
        await broker.send_processor.process_request(sink, send_request("WokenT", b"x"))
        channel = FakeChannel()
        assert await broker.pull_processor.process_request(channel, pull_request("WokenG", "WokenT", 0, 1)) is None
        calls.clear()
        await broker.send_processor.process_request(sink, send_request("WokenT", b"y"))
        await woken_answers(channel)
        assert calls == ["woken"] and channel.sent[0].code == ResponseCode.SUCCESS
        assert channel.sent[0].next_begin_offset == 2  # (one message: the arrived one)
    finally:
        await broker.shutdown()
