"""bench.delay_burst's pieces on a small burst: the figures come out of the records (every message paired,
none early), and the baseline loads from git as a module of its own. No figure is asserted."""

from __future__ import annotations

import argparse
import asyncio
import subprocess
from pathlib import Path

import pytest

from bench import delay_burst
from broker.schedule import ScheduleMessageService


async def test_a_small_burst_is_measured_from_the_records() -> None:
    result = await delay_burst.run_burst(ScheduleMessageService, "after", 300, 1, b"x" * 32, 30.0, queues=3)
    assert result.count == 300 and result.early == 0
    assert 0 <= result.p50_ms <= result.p99_ms <= result.max_ms
    line = result.line()
    assert line.startswith("after") and "delivered/s=" in line and "p99=" in line


async def test_the_baseline_is_the_schedule_service_at_a_git_revision() -> None:
    try:
        module = delay_burst.load_baseline(delay_burst.DEFAULT_BASELINE_REV)
    except subprocess.CalledProcessError:
        pytest.skip("the baseline revision is not in this checkout's history")
    assert module.ScheduleMessageService is not ScheduleMessageService
    result = await delay_burst.run_burst(module.ScheduleMessageService, "before", 100, 1, b"y", 30.0)
    assert result.count == 100 and result.early == 0


async def test_the_cost_mode_gives_cpu_per_put_and_per_delivery() -> None:
    put_us, deliver_us = await delay_burst.run_cost(ScheduleMessageService, 200, 1, b"z" * 16, 30.0)
    assert put_us > 0 and deliver_us > 0


async def test_the_broker_mode_measures_a_burst_sent_by_the_java_producer(tmp_path) -> None:
    from bench.vs_java import find_reference_bin

    if find_reference_bin(None) is None:
        pytest.skip("no rmqjava (the Apache RocketMQ 4.9.7 reference)")
    args = argparse.Namespace(count=200, level=1, body=32, queues=2, threads=4, timeout=120.0, rmq_bin=None)
    result = await delay_burst.run_broker_burst(args, "after", Path(delay_burst.__file__).resolve().parents[1])
    assert result is not None and result.name == "after"
    # Every send the Producer saw acknowledged is delivered, none early. Paired by the Java client's UNIQ_KEY: a
    # send it retried after a timeout is parked (and delivered) twice. On a loaded machine flow control may answer
    # a few sends with an error ("Response Failed"); those were never stored (a CI run once saw 198 of 200).
    assert 0 < result.acknowledged <= 200, result
    assert result.count >= result.acknowledged and result.early == 0, result


def test_the_producers_complete_line_gives_the_acknowledged_sends() -> None:
    line = (
        "[Complete] Send Total: 198 Send TPS: 20 Max RT(ms): 2304 Average RT(ms):  62.340 Send Failed: 3 "
        "Response Failed: 2"
    )
    assert delay_burst.producer_acknowledged(line) == 195
    assert delay_burst.producer_acknowledged("[Complete] Send Total: 200 Send Failed: 0 Response Failed: 0") == 200
    assert delay_burst.producer_acknowledged("") == -1


async def test_a_key_parked_twice_pairs_each_copy_with_its_own_parked_record(tmp_path) -> None:
    """A client's resend parks one UNIQ_KEY twice, perhaps for another queue: both are measured."""
    from store import MessageExtBrokerInner, MessageStore

    store = MessageStore(delay_burst._store_config(tmp_path))
    assert await store.load()
    await store.start()
    try:
        service = await delay_burst._started_service(ScheduleMessageService, store, tmp_path, lambda: 1 << 50)
        for key, queue_id in [("a", 0), ("b", 1), ("b", 0), ("b", 1)]:
            msg = MessageExtBrokerInner.create(
                delay_burst.TOPIC, b"m", queue_id=queue_id, properties={"UNIQ_KEY": key, "DELAY": "1"}
            )
            assert (await store.put_message(msg)).is_ok()
        for _ in range(500):
            if (
                store.get_max_offset_in_queue(delay_burst.TOPIC, 0)
                + store.get_max_offset_in_queue(delay_burst.TOPIC, 1)
                == 4
            ):
                break
            await asyncio.sleep(0.01)
        await service.stop()
        result = delay_burst.burst_figures(store, "dup", topic=delay_burst.TOPIC, queues=2, level=1, burst_per_s=None)
        assert result.count == 4
    finally:
        await store.shutdown()
