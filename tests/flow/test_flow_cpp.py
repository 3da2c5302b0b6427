"""The five busy answers as the real C++ client (PyPI `rocketmq` 0.4.4, code 10 sends) sees them.

The wheel's exceptions do not carry the broker's remark: a sync send retries without back-off (its loop
counts "times" 1, 3, 5, so 3 attempts reach a single broker), then raises its own "No route info of this
topic". The client logs every refused attempt as ``processSendResponse error remark:<remark>, error
code:<code>``, so the exact text is read there.
Incidents are made the way the issue's users would: ``Message.set_property('brokerSleepMs', ...)``,
``brokerStallAppendMs`` and FAULT_INJECT.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator

import pytest
from flow_support import (
    OVERLOAD,
    PC_SYNCHRONIZED,
    PCBUSY_RE,
    REJECTREQUEST,
    TIMEOUT_RE,
    blocking,
    broker_starvation,
    settle,
    unique,
    update_config,
    wait_append_locked,
    wait_queue_size,
    wait_sweeper_started,
)

from mqclient.fault import inject_fault

pytestmark = pytest.mark.compat

rocketmq = pytest.importorskip("rocketmq.client", reason="the rocketmq==0.4.4 wheel is part of the test extra")
from compat_support import CppClientLog, cpp_producer, make_message  # noqa: E402 (after the importorskip)
from rocketmq.client import SendStatus  # noqa: E402 (after the importorskip)
from rocketmq.exceptions import ProducerSendSyncFailed  # noqa: E402 (after the importorskip)

#: attempts of one sync send against one broker (retryTimes 2 → "times" 1, 3, 5 in the client's log)
CPP_ATTEMPTS = 3
#: the producers' send timeout: longer than any stall here, so a stalling send succeeds however slowly a loaded
#: machine runs it; the victims' fast failures are what is timed, and they never come near it
SEND_TIMEOUT_MS = 10_000
#: the sweeper's tick (10 ms) plus scheduling slack on a quiet machine, as in test_flow_responses
DEADLINE_SLACK_MS = 30
ANSWER_RE = re.compile(r"processSendResponse error remark:(.*?), error code:(-?\d+)\[processSendResponse")


@pytest.fixture(scope="module")
def producers(brokers) -> Iterator[dict]:
    """One started producer per broker configuration (starting one costs a route lookup and a heartbeat)."""
    opened: dict = {}
    stack = []
    try:
        for name in ("one_worker", "two_workers"):
            b = brokers.get(name)
            cm = cpp_producer(b.namesrv_addr, timeout_ms=SEND_TIMEOUT_MS)
            opened[name] = (b, cm.__enter__())
            stack.append(cm)
        for b, p in opened.values():
            wait_sweeper_started(b)
            assert p.send_sync(make_message(unique("T_cpp_warm"), b"warm")).status == SendStatus.OK
        yield opened
    finally:
        for cm in reversed(stack):
            cm.__exit__(None, None, None)


def answers_since(log: CppClientLog) -> list[tuple[str, int]]:
    return [(remark, int(code)) for remark, code in ANSWER_RE.findall(log.since_mark())]


def in_background(fn) -> tuple[threading.Thread, dict]:
    out: dict = {}

    def run() -> None:
        t0 = time.monotonic()
        try:
            out["result"] = fn()
        except Exception as exc:  # noqa: BLE001 - reported to the test
            out["error"] = exc
        out["seconds"] = time.monotonic() - t0

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def failed_send(producer, msg) -> tuple[Exception, float]:
    t0 = time.monotonic()
    with pytest.raises(ProducerSendSyncFailed) as refused:
        producer.send_sync(msg)
    return refused.value, time.monotonic() - t0


def _victim_of(
    producer,
    topic: str,
    stall_props: dict[str, str],
    delay_s: float,
    victim_props: dict[str, str] | None = None,
    locked_on: str | None = None,
) -> tuple[list[tuple[str, int]], float]:
    """Send a message carrying `stall_props` in the background and, `delay_s` later, a victim that must
    fail: the broker's answers to the victim's attempts (from the client's log) and how long it took.

    With `locked_on` (a broker address) the victim goes when that broker reports its append lock held, not
    after a fixed delay: on a loaded machine the stalling send can reach the broker after the victim does. The
    stall is waited out either way, so a failed test leaves the broker as it found it."""
    log = CppClientLog()
    log.mark()
    stall, out = in_background(lambda: producer.send_sync(make_message(topic, b"stall", props=stall_props)))
    try:
        time.sleep(delay_s)
        if locked_on is not None:
            blocking(wait_append_locked, locked_on)
        _, seconds = failed_send(producer, make_message(topic, b"victim", props=victim_props))
    finally:
        stall.join(10)
    assert out["result"].status == SendStatus.OK, out
    return answers_since(log), seconds


def test_cpp_send_behind_a_sleeping_send_gets_timeout_clean_queue(producers):
    """sendMessageThreadPoolNums=1; brokerSleepMs=3000 holds the worker; each of the victim's attempts
    waits ~200 ms in the queue and is answered [TIMEOUT_CLEAN_QUEUE]: the client has been through all its
    retries after ~0.6 s instead of spending its timeout on one attempt.

    The stall is five times what the three attempts need, so a loaded machine that runs the client's
    retries slowly still sees all of them refused (an attempt that outlived the stall would be served);
    each attempt's period in queue is bounded by the sweeper's slack plus the time the kernel kept the
    broker from a CPU meanwhile (``broker_starvation``)."""
    b, producer = producers["one_worker"]
    stall_s, delay_s = 3.0, 0.3  # the stall's send must reach the worker first; the stall leaves room for both
    starved = broker_starvation(b)
    answers, seconds = _victim_of(
        producer, unique("T_cpp_timeout"), {"brokerSleepMs": str(int(stall_s * 1000))}, delay_s
    )
    late = starved.ms
    assert len(answers) == CPP_ATTEMPTS, answers
    assert all(code == 2 and re.fullmatch(TIMEOUT_RE, r) for r, code in answers), answers
    periods = [int(re.fullmatch(TIMEOUT_RE, r).group(1)) for r, _ in answers]
    assert all(200 <= p <= 200 + DEADLINE_SLACK_MS + late for p in periods), (periods, late)
    assert 0.2 * CPP_ATTEMPTS - 0.02 <= seconds < stall_s - delay_s, seconds  # answered before the stall ended


def test_cpp_send_during_a_stalled_append_gets_pcbusy_then_rejectrequest(producers):
    """brokerStallAppendMs=1500 holds the append lock; the victim's first attempt waits in the send queue
    when the page cache turns busy (100 ms) → [PCBUSY_CLEAN_QUEUE]; its retries are refused before
    queueing → [REJECTREQUEST]."""
    b, producer = producers["one_worker"]
    answers, seconds = _victim_of(
        producer, unique("T_cpp_pcbusy"), {"brokerStallAppendMs": "1500"}, 0.0, locked_on=b.broker_addr
    )
    assert len(answers) == CPP_ATTEMPTS, answers
    first, rest = answers[0], answers[1:]
    assert first[1] == 2 and re.fullmatch(PCBUSY_RE, first[0]), first
    assert rest == [(REJECTREQUEST, 2)] * (CPP_ATTEMPTS - 1), rest
    assert seconds < 1.0, seconds


def test_cpp_send_reaching_a_busy_store_gets_pc_synchronized(producers):
    """Two send workers: the first holds the append lock; the victim (brokerSleepMs=400) was taken by the
    second before the page cache turned busy and reaches the store after: SYSTEM_ERROR [PC_SYNCHRONIZED]."""
    _, producer = producers["two_workers"]
    answers, _ = _victim_of(
        producer, unique("T_cpp_pcsync"), {"brokerStallAppendMs": "1200"}, 0.03, victim_props={"brokerSleepMs": "400"}
    )
    assert answers == [(PC_SYNCHRONIZED, 1)] + [(REJECTREQUEST, 2)] * (CPP_ATTEMPTS - 1), answers


def test_cpp_send_to_a_full_queue_gets_overload(producers):
    """sendThreadPoolQueueCapacity=8 and the send workers stalled by FAULT_INJECT; eight oneway sends fill
    the queue; every attempt of the next sync send is refused at once with [OVERLOAD].

    The queued sends are kept past the victim's retries (waitTimeMillsInSendQueue raised for this test) so
    that a loaded machine running the retries slowly still finds the queue full; an attempt that was queued
    instead of refused would wait for the sweeper and be answered [TIMEOUT_CLEAN_QUEUE], which fails."""
    b, producer = producers["one_worker"]
    topic = unique("T_cpp_overload")
    blocking(update_config, b.broker_addr, waitTimeMillsInSendQueue="3000")
    inject_fault(b.broker_addr, "stall_queue", duration_ms=4000, target="send")
    try:
        for i in range(8):
            producer.send_oneway(make_message(topic, f"fill-{i}".encode()))
        blocking(wait_queue_size, b.broker_addr, "send", 8)
        starved = broker_starvation(b, with_self=True)
        log = CppClientLog()
        log.mark()
        _, seconds = failed_send(producer, make_message(topic, b"victim"))
        answers = answers_since(log)
        assert answers == [(OVERLOAD, 2)] * CPP_ATTEMPTS, answers
        assert seconds < 0.15 + starved.ms / 1000, (seconds, starved.ms)
    finally:
        blocking(update_config, b.broker_addr, waitTimeMillsInSendQueue="200")
        blocking(settle, b.broker_addr)  # clears the fault and waits until the queue is empty
