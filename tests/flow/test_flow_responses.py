"""The five busy answers, through our own client over loopback, against a real broker subprocess.

Each test produces one answer on purpose with the fault-injection switches the issue describes
(the ``brokerSleepMs`` / ``brokerStallAppendMs`` message properties, the FAULT_INJECT admin request),
and checks the code and remark to the letter, when it arrives, and what the broker counted.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
from datetime import datetime

import pytest
from flow_support import (
    OVERLOAD,
    PC_SYNCHRONIZED,
    PCBUSY_RE,
    REJECTREQUEST,
    TIMEOUT_RE,
    Answer,
    broker_starvation,
    end_transaction_request,
    fault,
    heartbeat_request,
    pull_request,
    query_request,
    runtime_info,
    send_request,
    settle,
    spawn,
    timed_invoke,
    unique,
    update_config,
    warm_topic,
)

pytestmark = pytest.mark.compat

#: "answered within 30 ms of its deadline" (issue 4, item 6); the sweeper ticks every 10 ms. Upper bounds add
#: the time the kernel kept the processes involved from a CPU meanwhile (``broker_starvation``, ~0 on a quiet machine).
DEADLINE_SLACK_MS = 30


@pytest.fixture
def one_worker(brokers):
    return brokers.ready("one_worker")


@pytest.fixture
def two_workers(brokers):
    return brokers.ready("two_workers")


def match_all(answers: list[Answer], pattern: str) -> list[re.Match]:
    matches = [re.fullmatch(pattern, a.remark or "") if a.code == 2 else None for a in answers]
    assert all(matches), "\n".join(a.text for a in answers)
    return matches  # type: ignore[return-value]


def late_ms(answers: list[Answer], limit_ms: int) -> list[float]:
    return [round(a.latency_ms - limit_ms, 1) for a in answers]


def ended_after_ms(answer: Answer, since: float) -> float:
    """When `answer` arrived, in ms after the loop time `since` (taken before a fault was requested: the
    broker arms it later, so a request held by it for D ms cannot be answered before since + D, however
    late a loaded machine sent the request)."""
    return (answer.sent_at - since) * 1000 + answer.latency_ms


# ------------------------------------------------------------------------------ [TIMEOUT_CLEAN_QUEUE]


async def test_sends_queued_behind_a_sleeping_send_time_out_after_200ms(one_worker, client):
    """The issue's story: sendMessageThreadPoolNums=1, one message with brokerSleepMs stalls the worker,
    the sends queued behind it are answered [TIMEOUT_CLEAN_QUEUE] ~200 ms after they arrived."""
    addr, topic = one_worker.broker_addr, unique("T_sleep")
    await warm_topic(client, addr, topic)
    starved = broker_starvation(one_worker)
    try:
        stall = spawn(timed_invoke(client, addr, send_request(topic, props={"brokerSleepMs": "800"})))
        await asyncio.sleep(0.05)
        queued = await asyncio.gather(*(timed_invoke(client, addr, send_request(topic)) for _ in range(5)))
        matches = match_all(queued, TIMEOUT_RE)
        # FIFO: the head goes first, each answer names the queue left behind it
        assert [int(m.group(2)) for m in matches] == [4, 3, 2, 1, 0]
        limit = 200 + DEADLINE_SLACK_MS + starved.ms
        assert all(200 <= int(m.group(1)) <= limit for m in matches), ([a.remark for a in queued], limit)
        assert all(195 <= a.latency_ms for a in queued), late_ms(queued, 200)
        slept = await stall
        assert slept.code == 0 and slept.latency_ms >= 790, slept
    finally:
        await settle(client, addr)


async def test_queued_request_is_answered_within_30ms_of_its_deadline(one_worker, client):
    """Client-side latency of requests stuck in the send queue (workers stalled by FAULT_INJECT):
    deadline 200 ms, answered by 230 ms, plus whatever time the kernel kept the broker or this test from a
    CPU meanwhile (so a loaded machine does not fail it, while a sweeper that ticks too slowly still does);
    the broker's own figure (the remark's period in queue) is held to the same bound."""
    addr, topic = one_worker.broker_addr, unique("T_deadline")
    await warm_topic(client, addr, topic)
    try:
        assert (await fault(client, addr, "stall_queue", 1500, target="send")).code == 0
        starved = broker_starvation(one_worker, with_self=True)
        answers = []
        for _ in range(4):  # staggered arrivals: each has its own deadline
            answers.append(spawn(timed_invoke(client, addr, send_request(topic))))
            await asyncio.sleep(0.037)
        answers = list(await asyncio.gather(*answers))
        allowed = DEADLINE_SLACK_MS + starved.ms
        periods = [int(m.group(1)) for m in match_all(answers, TIMEOUT_RE)]
        lateness = late_ms(answers, 200)
        assert all(200 <= p <= 200 + allowed for p in periods), (periods, allowed)
        assert all(-5 <= x <= allowed for x in lateness), f"ms past the deadline: {lateness}, allowed {allowed}"
    finally:
        await settle(client, addr)


async def test_each_swept_queue_times_out_on_its_own_limit_and_query_is_not_swept(one_worker, client):
    """Pull, heartbeat and end-transaction queues (limits set to 300 ms on this broker) are swept like send;
    the query queue is not swept by upstream's BrokerFastFailure, so its request waits for the worker."""
    addr, topic = one_worker.broker_addr, unique("T_queues")
    await warm_topic(client, addr, topic)
    try:
        for target in ("pull", "heartbeat", "end_transaction", "query"):
            stalled_at = asyncio.get_running_loop().time()
            assert (await fault(client, addr, "stall_queue", 700, target=target)).code == 0
        starved = broker_starvation(one_worker, with_self=True)
        pull, hb, etx, query = await asyncio.gather(
            timed_invoke(client, addr, pull_request(topic)),
            timed_invoke(client, addr, heartbeat_request()),
            timed_invoke(client, addr, end_transaction_request()),
            timed_invoke(client, addr, query_request(topic)),
        )
        late = starved.ms
        for answer in (pull, hb, etx):
            (m,) = match_all([answer], TIMEOUT_RE)
            assert 300 <= int(m.group(1)) <= 300 + DEADLINE_SLACK_MS + late and m.group(2) == "0", (answer, late)
            assert 295 <= answer.latency_ms <= 300 + 5 * DEADLINE_SLACK_MS + late, (answer, late)
        assert query.code != 2 and ended_after_ms(query, stalled_at) >= 700, query  # served after the stall, not swept
        info = await runtime_info(client, addr)
        assert int(info["pullThreadPoolQueueExpired"]) >= 1 and int(info["heartbeatThreadPoolQueueExpired"]) >= 1
        assert int(info["endTransactionThreadPoolQueueExpired"]) >= 1
        assert info["queryThreadPoolQueueExpired"] == "0"
    finally:
        await settle(client, addr)


# ---------------------------------------------------- [PCBUSY_CLEAN_QUEUE], [REJECTREQUEST], lock time


async def test_stalled_append_gives_pcbusy_to_queued_sends_then_rejectrequest(one_worker, client):
    """brokerStallAppendMs holds the append lock; sends queued before the page cache turns busy (100 ms
    here) are answered [PCBUSY_CLEAN_QUEUE] by the sweeper; sends arriving later are refused before
    queueing with [REJECTREQUEST]. The lock's age is visible in runtime info while it is held, and the
    sweeper keeps its beat meanwhile (a stalled pull request still times out at its 300 ms limit)."""
    addr, topic = one_worker.broker_addr, unique("T_pcbusy")
    await warm_topic(client, addr, topic)
    starved = broker_starvation(one_worker, with_self=True)
    try:
        stall = spawn(timed_invoke(client, addr, send_request(topic, props={"brokerStallAppendMs": "1500"})))
        await asyncio.sleep(0.03)
        assert (await fault(client, addr, "stall_queue", 1000, target="pull")).code == 0
        pull = spawn(timed_invoke(client, addr, pull_request(topic)))
        queued = await asyncio.gather(*(timed_invoke(client, addr, send_request(topic)) for _ in range(4)))
        matches = match_all(queued, PCBUSY_RE)
        assert [int(m.group(2)) for m in matches] == [3, 2, 1, 0]
        await asyncio.sleep(0.2)
        info = await runtime_info(client, addr)
        assert int(info["pageCacheLockTimeMills"]) >= 250 and info["osPageCacheBusy"] == "true", info
        starved_before_refusals = starved.ms
        refused = await asyncio.gather(*(timed_invoke(client, addr, send_request(topic)) for _ in range(3)))
        assert [(a.code, a.remark) for a in refused] == [(2, REJECTREQUEST)] * 3
        late = starved.ms - starved_before_refusals
        assert all(a.latency_ms < 100 + late for a in refused), (refused, late)  # refused before queueing
        (m,) = match_all([await pull], TIMEOUT_RE)
        assert 300 <= int(m.group(1)) <= 300 + DEADLINE_SLACK_MS + starved.ms, (m.group(0), starved.ms)
        held = await stall
        assert held.code == 0 and held.latency_ms >= 1490, held
        info = await runtime_info(client, addr)
        assert info["osPageCacheBusy"] == "false" and info["pageCacheLockTimeMills"] == "0"
        assert int(info["putMessageLockTimeMax"]) >= 1490
        assert int(info["busyPCBUSY_CLEAN_QUEUE"]) >= 4 and int(info["busyREJECTREQUEST"]) >= 3
        ok = await timed_invoke(client, addr, send_request(topic))
        assert ok.code == 0, ok
    finally:
        await settle(client, addr)


async def test_put_that_reaches_a_busy_store_gets_pc_synchronized(two_workers, client):
    """Two send workers: the first holds the append lock (brokerStallAppendMs); the second took a send
    before the page cache turned busy, sleeps (brokerSleepMs), then reaches the store while it is busy:
    SYSTEM_ERROR [PC_SYNCHRONIZED]."""
    addr, topic = two_workers.broker_addr, unique("T_pcsync")
    await warm_topic(client, addr, topic)
    try:
        stall = spawn(timed_invoke(client, addr, send_request(topic, props={"brokerStallAppendMs": "1200"})))
        await asyncio.sleep(0.03)
        late = await timed_invoke(client, addr, send_request(topic, props={"brokerSleepMs": "400"}))
        assert (late.code, late.remark) == (1, PC_SYNCHRONIZED), late
        assert 390 <= late.latency_ms < 1000, late
        assert (await stall).code == 0
        info = await runtime_info(client, addr)
        assert int(info["busyPC_SYNCHRONIZED"]) >= 1
    finally:
        await settle(client, addr)


# -------------------------------------------------------------------------------------------- [OVERLOAD]


async def test_full_send_queue_answers_overload(one_worker, client):
    """sendThreadPoolQueueCapacity=8 on this broker: with the worker stalled, the 9th queued send is refused
    at once with [OVERLOAD]; the 8 queued ones time out of the queue."""
    addr, topic = one_worker.broker_addr, unique("T_overload")
    await warm_topic(client, addr, topic)
    before = await runtime_info(client, addr)
    try:
        assert (await fault(client, addr, "stall_queue", 1000, target="send")).code == 0
        starved = broker_starvation(one_worker, with_self=True)
        answers = await asyncio.gather(*(timed_invoke(client, addr, send_request(topic)) for _ in range(11)))
        overload = [a for a in answers if a.remark == OVERLOAD]
        late = starved.ms
        assert len(overload) == 3 and all(a.code == 2 and a.latency_ms < 100 + late for a in overload), (answers, late)
        match_all([a for a in answers if a.remark != OVERLOAD], TIMEOUT_RE)
        info = await runtime_info(client, addr)
        assert int(info["sendThreadPoolQueueRejected"]) - int(before["sendThreadPoolQueueRejected"]) == 3
        assert int(info["busyOVERLOAD"]) - int(before["busyOVERLOAD"]) == 3
        assert info["sendThreadPoolQueuePeak"] == "8" and info["sendThreadPoolQueueCapacity"] == "8"
    finally:
        await settle(client, addr)


# --------------------------------------------------------------------------------------- fast failure off


async def test_without_fast_failure_a_queued_send_waits_for_the_stalled_worker(one_worker, client):
    """brokerFastFailureEnable=false (changed live): nothing sweeps the queue, the send waits out the stall."""
    addr, topic = one_worker.broker_addr, unique("T_noff")
    await warm_topic(client, addr, topic)
    try:
        await update_config(client, addr, brokerFastFailureEnable="false")
        stalled_at = asyncio.get_running_loop().time()
        assert (await fault(client, addr, "stall_queue", 600, target="send")).code == 0
        waited = await timed_invoke(client, addr, send_request(topic))
        assert waited.code == 0 and ended_after_ms(waited, stalled_at) >= 600, waited
    finally:
        await update_config(client, addr, brokerFastFailureEnable="true")
        await settle(client, addr)


# ------------------------------------------------------------------------------------------ counters, logs


UPSTREAM_RUNTIME_KEYS = (
    "sendThreadPoolQueueSize",
    "sendThreadPoolQueueCapacity",
    "pullThreadPoolQueueSize",
    "pullThreadPoolQueueCapacity",
    "queryThreadPoolQueueSize",
    "queryThreadPoolQueueCapacity",
    "EndTransactionQueueSize",
    "EndTransactionThreadPoolQueueCapacity",
    "pageCacheLockTimeMills",
    "sendThreadPoolQueueHeadWaitTimeMills",
    "pullThreadPoolQueueHeadWaitTimeMills",
    "queryThreadPoolQueueHeadWaitTimeMills",
    "remainTransientStoreBufferNumbs",
    "startAcceptSendRequestTimeStamp",
)


async def test_runtime_info_uses_upstream_names_and_counts_every_queue_and_busy_kind(one_worker, client):
    info = await runtime_info(client, one_worker.broker_addr)
    missing = [k for k in UPSTREAM_RUNTIME_KEYS if k not in info]
    assert not missing, f"upstream GET_BROKER_RUNTIME_INFO keys missing: {missing}"
    assert info["pullThreadPoolQueueCapacity"] == "100000" and info["EndTransactionThreadPoolQueueCapacity"] == "100000"
    for queue in ("send", "pull", "query", "heartbeat", "clientManager", "consumerManager", "adminBroker"):
        for counter in ("Size", "Capacity", "Peak", "Rejected", "Expired"):
            assert f"{queue}ThreadPoolQueue{counter}" in info, (queue, counter)
    for counter in ("Peak", "Rejected", "Expired"):
        assert f"endTransactionThreadPoolQueue{counter}" in info
    for kind in ("OVERLOAD", "REJECTREQUEST", "PCBUSY_CLEAN_QUEUE", "TIMEOUT_CLEAN_QUEUE", "PC_SYNCHRONIZED"):
        assert f"busy{kind}" in info, kind


async def test_load_shedding_is_logged_as_one_summary_line_per_second(one_worker, client):
    """A flood of refused sends over ~1.5 s: at most one summary line per second, their counts add up
    to what the client saw (the last window included), and no line per request."""
    addr, topic = one_worker.broker_addr, unique("T_log")
    await warm_topic(client, addr, topic)
    await asyncio.sleep(1.1)  # let the previous test's window be reported before marking the log
    mark = one_worker.log_size()
    loop = asyncio.get_running_loop()
    try:
        t0 = loop.time()
        assert (await fault(client, addr, "stall_queue", 3000, target="send")).code == 0
        answers: list[Answer] = []
        while loop.time() - t0 < 1.4:
            answers += await asyncio.gather(*(timed_invoke(client, addr, send_request(topic)) for _ in range(12)))
        elapsed = loop.time() - t0
        busy = [a for a in answers if a.code == 2]
        assert len(busy) == len(answers) >= 24, [a.text for a in answers if a.code != 2]
        assert (await fault(client, addr, "clear")).code == 0
        await asyncio.sleep(1.3)  # the reporter's next beat writes the last window
        lines = [ln for ln in one_worker.log_text(mark).splitlines() if '"shedding load"' in ln]
        assert 1 <= len(lines) <= int(elapsed + 1.3) + 1, lines
        events = [json.loads(ln) for ln in lines]
        stamps = [datetime.fromisoformat(e["timestamp"]).timestamp() for e in events]
        assert all(b - a >= 0.9 for a, b in itertools.pairwise(stamps)), stamps  # one line a second at most
        total = sum(e["total"] for e in events)
        assert total == len(busy), (total, len(busy), lines)
        assert len(one_worker.log_text(mark).splitlines()) < 20, "per-request log lines while shedding"
    finally:
        await settle(client, addr)


async def test_queue_peak_and_head_wait_are_reported(one_worker, client):
    addr, topic = one_worker.broker_addr, unique("T_peak")
    await warm_topic(client, addr, topic)
    try:
        # a stall far longer than the look at 250 ms needs, so a loaded machine's late look still sees the queue
        stalled_at = asyncio.get_running_loop().time()
        assert (await fault(client, addr, "stall_queue", 2000, target="query")).code == 0
        starved = broker_starvation(one_worker)  # a broker kept off the CPU reads (and stamps) the queries late
        waiting = [spawn(timed_invoke(client, addr, query_request(topic))) for _ in range(3)]
        await asyncio.sleep(0.25)
        info = await runtime_info(client, addr)
        assert info["queryThreadPoolQueueSize"] == "3" and int(info["queryThreadPoolQueuePeak"]) >= 3
        assert 200 - starved.ms <= int(info["queryThreadPoolQueueHeadWaitTimeMills"]) < 2000, (info, starved.ms)
        answers = await asyncio.gather(*waiting)
        assert min(ended_after_ms(a, stalled_at) for a in answers) >= 2000, answers
    finally:
        await settle(client, addr)
