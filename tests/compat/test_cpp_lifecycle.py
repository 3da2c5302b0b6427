"""Wheel clients start and shut down one at a time per process (bench/cpp_lifecycle.py says why).

No broker is needed: a start only registers the client in librocketmq's factory table and starts its
timers; the name server address points at a closed loopback port.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from compat_support import REPO_ROOT, unique
from cpp_lifecycle_probe import LifecycleProbe

from bench.cpp_lifecycle import LifecycleBusy, shutdown_client, start_client
from broker.testing.ports import free_port

pytestmark = pytest.mark.compat

rocketmq = pytest.importorskip("rocketmq.client", reason="the rocketmq==0.4.4 wheel is part of the test extra")


def new_producer(namesrv: str):
    from rocketmq.client import Producer
    from rocketmq.ffi import dll

    producer = Producer(unique("PG_life"))
    dll.SetProducerInstanceName(producer._handle, unique("p").encode())
    producer.set_namesrv_addr(namesrv)
    return producer


def new_consumer(namesrv: str):
    from rocketmq.client import PushConsumer

    consumer = PushConsumer(unique("CG_life"))
    consumer.set_instance_name(unique("c"))
    consumer.set_namesrv_addr(namesrv)
    consumer.subscribe("T_life", lambda msg: None)
    return consumer


def test_starts_and_shutdowns_from_many_threads_never_overlap(monkeypatch):
    probe = LifecycleProbe(stretch_s=0.1).install(monkeypatch)
    namesrv = f"127.0.0.1:{free_port()}"
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []
    clients: list = []  # alive until the end: the wheel's __del__ calls shutdown() once more, harmlessly

    def cycle(make) -> None:
        try:
            client = make(namesrv)
            clients.append(client)
            barrier.wait(10)  # line the starts up, as the bench driver's tasks do
            start_client(client)
            barrier.wait(10)
            shutdown_client(client)
        except BaseException as exc:  # noqa: BLE001 - asserted below
            errors.append(exc)

    threads = [threading.Thread(target=cycle, args=(new_producer if i % 2 else new_consumer,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert sorted(probe.calls) == sorted(
        ["StartProducer", "ShutdownProducer", "StartPushConsumer", "ShutdownPushConsumer"] * 2
    )
    assert probe.max_active == 1


def test_a_start_beside_a_hung_shutdown_fails_clearly_instead_of_racing_it(monkeypatch):
    probe = LifecycleProbe(stretch_s=0.0).install(monkeypatch)
    namesrv = f"127.0.0.1:{free_port()}"
    first, second = new_producer(namesrv), new_producer(namesrv)
    start_client(first)
    probe.hold_shutdown.set()
    hung = threading.Thread(target=shutdown_client, args=(first,), daemon=True)
    hung.start()
    try:
        while "ShutdownProducer" not in probe.calls:
            hung.join(0.01)
        with pytest.raises(LifecycleBusy, match=r"Producer.shutdown\(\) in this process has held the wheel"):
            start_client(second, wait_s=0.5)
        t0 = time.monotonic()
        with pytest.raises(LifecycleBusy):  # hung for longer than wait_s already: no second wait
            start_client(second, wait_s=0.5)
        assert time.monotonic() - t0 < 0.25
        assert probe.calls.count("StartProducer") == 1  # the second start never reached librocketmq
    finally:
        probe.release_shutdown.set()
        hung.join(20)
    start_client(second)  # the wheel is free again once the shutdown returned
    shutdown_client(second)
    assert probe.max_active == 1
    assert probe.calls == ["StartProducer", "ShutdownProducer", "StartProducer", "ShutdownProducer"]


TABLE_CHILD = Path(__file__).with_name("cpp_table_child.py")


def run_table_child(mode: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(TABLE_CHILD), mode],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT), "PYTHONFAULTHANDLER": ""},
        check=False,
    )


def test_a_start_into_a_table_that_lost_an_insert_kills_the_process(tmp_path):
    """The crash itself, as the lead's run met it (the state is made by hand, not by a race)."""
    run = run_table_child("raw", tmp_path)
    assert run.returncode == -signal.SIGSEGV, (run.returncode, run.stdout, run.stderr[-2000:])
    assert "started" not in run.stdout


def test_start_client_refuses_a_corrupted_table_instead_of_crashing(tmp_path):
    run = run_table_child("guarded", tmp_path)
    assert run.returncode == 0, (run.returncode, run.stdout, run.stderr[-2000:])
    events = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    assert "the map says 1 factories, its tree holds 0" in events[0]["refused"], events
    assert "would die with SIGSEGV" in events[0]["refused"]
    assert events[-1] == {"started_after_repair": True}
