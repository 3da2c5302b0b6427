"""Wake-ups in rounds through a broker (`broker.pull_wake`): a parked pull woken by the first of several arrivals in
one round answers all of them (before the rounds it answered the first alone: its re-run was one loop turn later),
an arrival after the round wakes the next parked pull in a round of its own, a deadline still answers on time while
a round waits, and the shutdown answers a pull waiting for its round; a round whose pulls answered several messages
each makes the next one longer (BUSY_ROUND_S) and one that answered a lone message the short one again. The round is
lengthened here so a loaded machine cannot end it between the test's sends; loop turns pass between them, as between
a connection's reads."""

from __future__ import annotations

import asyncio

from broker_helpers import FakeChannel, pull_request, send_request, start_broker, woken_answers

from broker.pull_wake import BUSY_MESSAGES_PER_PULL, BUSY_ROUND_S, WAKE_ROUND_S
from remoting.codes import ResponseCode

ROUND_S = 0.3


async def _send(broker, topic: str, queue_id: int = 0) -> None:  # noqa: ANN001
    response = await broker.send_processor.process_request(FakeChannel(), send_request(topic, queue_id=queue_id))
    assert response.code == ResponseCode.SUCCESS


async def test_arrivals_within_a_round_wake_once_and_are_answered_together(tmp_path) -> None:
    broker = await start_broker(tmp_path)
    try:
        broker.pull_wake.round_s = ROUND_S
        await _send(broker, "RoundT")
        pull = broker.pull_processor
        channel = FakeChannel()
        assert await pull.process_request(channel, pull_request("RoundG", "RoundT", 0, 1)) is None  # parked at the end
        rounds = broker.pull_wake.rounds
        for _ in range(4):
            await _send(broker, "RoundT")
            await asyncio.sleep(0)  # (a loop turn: the arrival's wake-up could have re-run the pull here)
        assert channel.sent == []  # still in its round
        [answer] = await woken_answers(channel)
        assert answer.code == ResponseCode.SUCCESS
        assert answer.next_begin_offset == 5  # all four arrivals, from offset 1
        assert broker.pull_wake.rounds == rounds + 1
        # the consumer's next pull parks again; an arrival after the round wakes it in a round of its own
        again = FakeChannel()
        assert await pull.process_request(again, pull_request("RoundG", "RoundT", 0, 5)) is None
        await _send(broker, "RoundT")
        [answer] = await woken_answers(again)
        assert (answer.code, answer.next_begin_offset) == (ResponseCode.SUCCESS, 6)
        assert broker.pull_wake.rounds == rounds + 2
    finally:
        await broker.shutdown()


async def test_one_round_answers_every_queue_it_woke_in_wake_order(tmp_path) -> None:
    broker = await start_broker(tmp_path)
    try:
        broker.pull_wake.round_s = ROUND_S
        pull = broker.pull_processor
        channel = FakeChannel()
        for queue_id in (2, 0, 1):  # queue q holds q + 1 messages: each answer's nextBeginOffset names its queue
            for _ in range(queue_id + 1):
                await _send(broker, "RoundQ", queue_id)
            assert await pull.process_request(channel, pull_request("RoundG", "RoundQ", queue_id, queue_id + 1)) is None
        rounds = broker.pull_wake.rounds
        for queue_id in (1, 2, 0, 2):
            await _send(broker, "RoundQ", queue_id)
            await asyncio.sleep(0)
        answers = await woken_answers(channel, 3)
        # in the order they woke: queue 1, then 2 (with both of its arrivals), then 0
        assert [a.next_begin_offset for a in answers] == [3, 5, 2]
        assert broker.pull_wake.rounds == rounds + 1
    finally:
        await broker.shutdown()


async def test_a_deadline_answers_on_time_while_a_round_waits(tmp_path) -> None:
    broker = await start_broker(tmp_path)
    try:
        broker.pull_wake.round_s = 60.0  # (a round that would outlast the test)
        loop = asyncio.get_running_loop()
        await _send(broker, "RoundD")
        pull = broker.pull_processor
        woken, expiring = FakeChannel(), FakeChannel()
        assert await pull.process_request(woken, pull_request("RoundG", "RoundD", 0, 1, suspend_ms=60_000)) is None
        started = loop.time()
        assert await pull.process_request(expiring, pull_request("RoundG", "RoundD", 1, 0, suspend_ms=200)) is None
        await _send(broker, "RoundD")  # wakes the first pull: its round would end in 60 s
        [late] = await woken_answers(expiring)
        assert late.code == ResponseCode.PULL_NOT_FOUND
        assert loop.time() - started < 5.0  # its deadline, not the round's end
        [early] = woken.sent  # the waiting round ran with the deadline's turn
        assert (early.code, early.next_begin_offset) == (ResponseCode.SUCCESS, 2)
    finally:
        await broker.shutdown()


async def test_the_shutdown_answers_a_pull_waiting_for_its_round(tmp_path) -> None:
    broker = await start_broker(tmp_path)
    stopped = False
    try:
        broker.pull_wake.round_s = 60.0
        await _send(broker, "RoundS")
        channel = FakeChannel()
        assert await broker.pull_processor.process_request(channel, pull_request("RoundG", "RoundS", 0, 1)) is None
        await _send(broker, "RoundS")
        assert channel.sent == [] and broker.pull_wake.waiting == 1
        await broker.shutdown()
        stopped = True
        assert [(a.code, a.next_begin_offset) for a in channel.sent] == [(ResponseCode.SUCCESS, 2)]
    finally:
        if not stopped:
            await broker.shutdown()


async def test_a_round_of_many_messages_a_pull_makes_the_next_round_longer(tmp_path) -> None:
    """Through the broker with its own round lengths: the processor counts what the woken pulls answered (the offsets
    they advanced), and the next round's timer is armed at the busy length, then at the short one again."""
    broker = await start_broker(tmp_path)
    try:
        wake = broker.pull_wake
        assert (wake.round_s, wake.busy_round_s) == (WAKE_ROUND_S, BUSY_ROUND_S)
        loop = asyncio.get_running_loop()
        pull = broker.pull_processor
        await _send(broker, "RoundB")
        offset = 1

        async def round_of(messages: int, length: float) -> None:
            """Park a pull at the queue's end, send ``messages``: its round was armed ``length`` after the first send
            (between the loop's times before and after the sends, within the timers' millisecond)."""
            nonlocal offset
            channel = FakeChannel()
            assert await pull.process_request(channel, pull_request("RoundG", "RoundB", 0, offset)) is None
            before = loop.time()
            for _ in range(messages):
                await _send(broker, "RoundB")
            after = loop.time()
            assert wake._handle is not None
            assert before + length - 0.001 <= wake._handle.when() <= after + length + 0.001
            [answer] = await woken_answers(channel)
            assert (answer.code, answer.next_begin_offset) == (ResponseCode.SUCCESS, offset + messages)
            offset += messages

        await round_of(BUSY_MESSAGES_PER_PULL, WAKE_ROUND_S)
        assert wake.busy
        await round_of(1, BUSY_ROUND_S)  # (a lone message, after a busy round: the long one)
        assert not wake.busy
        await round_of(1, WAKE_ROUND_S)
    finally:
        await broker.shutdown()
