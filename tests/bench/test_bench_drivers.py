"""The load workers without Spark: tasks as threads with a local barrier, against our broker."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest
from bench_threads import run_plan_threaded

from bench.broker_proc import SMALL_STORE, BrokerProcess
from bench.outcomes import OutcomeBuffer
from bench.run import plan_run, prepare_topics
from bench.scenario import parse_scenario


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("driver-broker"), config=SMALL_STORE) as b:
        yield b


def run_inprocess(broker, scen_dict: dict, run_id: str, tasks: int = 2) -> OutcomeBuffer:
    scen = parse_scenario(scen_dict)
    plan = plan_run(scen, run_id=run_id, namesrv=broker.namesrv, tasks=tasks, progress_addr=None)
    asyncio.run(prepare_topics(broker.namesrv, plan.topics, scen.queues_per_topic))
    return run_plan_threaded(plan)


def rows(buf: OutcomeBuffer, event: str) -> list[dict]:
    names = list(buf.cols)
    return [dict(zip(names, vals)) for vals in zip(*buf.cols.values()) if vals[0] == event]


def test_batch_mode_records_every_message(broker):
    buf = run_inprocess(
        broker,
        {
            "name": "b",
            "send_mode": "batch",
            "producer_rate": 400,
            "duration_s": 1.0,
            "message_size": 64,
            "drain_timeout_s": 15,
            "client": {"batch_size": 8, "suspend_timeout_ms": 1000},
        },
        "drv-batch",
    )
    sends = rows(buf, "send")
    consumed = Counter(r["seq"] for r in rows(buf, "consume"))
    assert sends and all(r["status"] == "SEND_OK" for r in sends)
    assert sorted(consumed) == sorted(r["seq"] for r in sends) and max(consumed.values()) == 1
    # one batch = consecutive offsets on one queue
    by_seq = {r["seq"]: r for r in sends}
    assert by_seq[1]["queue_offset"] == by_seq[0]["queue_offset"] + 1
    assert by_seq[1]["queue_id"] == by_seq[0]["queue_id"]
    assert [r["status"] for r in rows(buf, "drain")] == ["complete"]


def test_slow_broker_message_fault_causes_retries_and_duplicates(broker):
    """Every 10th message makes the broker sleep 0.8 s; attempts are capped at 0.4 s with one retry:
    both attempts time out, and both are stored — the incident in miniature."""
    buf = run_inprocess(
        broker,
        {
            "name": "f",
            "send_mode": "sync",
            "producer_rate": 50,
            "duration_s": 1.0,
            "message_size": 32,
            "drain_timeout_s": 15,
            "client": {"send_timeout_ms": 3000, "attempt_timeout_ms": 400, "retries": 1, "suspend_timeout_ms": 1000},
            "message_faults": [{"property": "brokerSleepMs", "value": 800, "every": 10}],
        },
        "drv-fault",
    )
    sends = {r["seq"]: r for r in rows(buf, "send")}
    faulty = [s for s in sends if s % 10 == 0]
    assert faulty
    for s in faulty:
        assert sends[s]["status"] == "FAILED" and sends[s]["error_kind"] == "CLIENT_TIMEOUT"
        assert sends[s]["attempts"] == 2
    assert {r["seq"] for r in rows(buf, "attempt")} == set(faulty)
    copies = Counter(r["seq"] for r in rows(buf, "consume"))
    assert all(copies[s] == 2 for s in faulty)  # stored twice, though the producer saw a failure
    assert all(copies[s] == 1 for s in sends if s % 10)


def test_cpp_driver_runs_the_same_scenario(broker, monkeypatch):
    pytest.importorskip("rocketmq.client")
    from cpp_lifecycle_probe import LifecycleProbe

    # The tasks start their producer and consumer at one barrier: unserialized, the two native starts overlap
    # and corrupt librocketmq's factory table (a SIGSEGV at a later start; see bench/cpp_lifecycle.py).
    probe = LifecycleProbe(stretch_s=0.1).install(monkeypatch)
    buf = run_inprocess(
        broker,
        {
            "name": "c",
            "driver": "cpp",
            "send_mode": "sync",
            "producer_rate": 100,
            "duration_s": 1.5,
            "message_size": 100,
            "drain_timeout_s": 20,
        },
        "drv-cpp",
    )
    sends = rows(buf, "send")
    assert sends and all(r["status"] == "SEND_OK" and r["uniq_key"] for r in sends)
    consumed = rows(buf, "consume")
    assert sorted(r["seq"] for r in consumed) == sorted(r["seq"] for r in sends)
    assert {r["uniq_key"] for r in consumed} == {r["uniq_key"] for r in sends}
    assert [r["status"] for r in rows(buf, "drain")] == ["complete"]
    assert probe.calls.count("StartProducer") >= 1 and probe.calls.count("StartPushConsumer") >= 1
    assert probe.max_active == 1, probe.calls


def test_grpc_driver_records_every_message_through_the_5x_endpoint(broker):
    """--protocol grpc: SendMessage / ReceiveMessage / AckMessage on the same scenario and outcome table."""
    scen = parse_scenario(
        {
            "name": "g",
            "driver": "grpc",
            "send_mode": "async",
            "producer_rate": 200,
            "duration_s": 1.0,
            "message_size": 64,
            "drain_timeout_s": 20,
        }
    )
    plan = plan_run(
        scen, run_id="drv-grpc", namesrv=broker.namesrv, tasks=2, progress_addr=None, grpc_endpoint=broker.grpc_endpoint
    )
    asyncio.run(prepare_topics(broker.namesrv, plan.topics, scen.queues_per_topic))
    merged = run_plan_threaded(plan)
    sends = rows(merged, "send")
    consumed = Counter(r["seq"] for r in rows(merged, "consume"))
    assert len(sends) > 50 and all(r["status"] == "SEND_OK" for r in sends), sends[:3]
    assert sorted(consumed) == sorted(r["seq"] for r in sends) and max(consumed.values()) == 1
    assert [r["status"] for r in rows(merged, "drain")] == ["complete"]


def test_grpc_driver_refuses_send_modes_5x_does_not_have():
    from bench.scenario import ScenarioError

    with pytest.raises(ScenarioError, match="driver grpc supports send_mode sync and async"):
        parse_scenario({"name": "g", "driver": "grpc", "send_mode": "oneway"})
