"""``broker.warmup`` and ``broker.loop_stall``: a client's first request starts numpy's import and the store's
threads off the loop (issue 15: they stalled the loop at the first sends); the stall monitor names what held it."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from structlog.testing import capture_logs

from broker.loop_stall import LoopStallMonitor
from broker.testing.process import BrokerProcess
from broker.warmup import FirstClientWarmup, start_all_threads
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand

NUMPY_EXTENSION = "_multiarray_umath"  # numpy's core C extension: mapped once numpy is imported


def numpy_mapped(pid: int) -> bool:
    with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as f:
        return NUMPY_EXTENSION in f.read()


def test_start_all_threads_starts_every_worker_of_a_pool():
    with ThreadPoolExecutor(max_workers=4) as pool:
        start_all_threads(pool, 4)
        assert len(pool._threads) == 4


def test_the_warm_up_runs_once_on_its_own_thread():
    with ThreadPoolExecutor(max_workers=3) as pool:
        warmup = FirstClientWarmup(executors=((pool, 3),))
        assert warmup.join(0) and len(pool._threads) == 0  # nothing before a client
        before = threading.active_count()
        warmup.on_client()
        warmup.on_client()
        assert warmup.join(5)
        assert len(pool._threads) == 3
        assert threading.active_count() == before + 3  # the warm-up thread ended; a second call started none


async def ask_route(namesrv: str) -> int:
    client = RemotingClient()
    try:
        request = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TopicWarmup"})
        return (await client.invoke(namesrv, request, 5.0)).code
    finally:
        await client.close()


def test_a_port_probe_leaves_numpy_unloaded_and_a_route_request_loads_it(tmp_path):
    broker = BrokerProcess(tmp_path / "store", config={"mappedFileSizeCommitLog": 4 * 1024 * 1024})
    broker.start()
    try:
        assert broker.proc is not None
        for port in (broker.namesrv_port, broker.listen_port):  # a health check's connect, nothing sent
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
        time.sleep(0.5)
        assert not numpy_mapped(broker.proc.pid)  # idle and only probed: still small
        assert asyncio.run(ask_route(broker.namesrv_addr)) in (ResponseCode.SUCCESS, ResponseCode.TOPIC_NOT_EXIST)
        deadline = time.monotonic() + 20
        while not numpy_mapped(broker.proc.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert numpy_mapped(broker.proc.pid)  # before any message
    finally:
        broker.stop(check=True)


def test_the_stall_monitor_logs_the_gap_and_the_line_that_held_the_loop():
    async def hold_the_loop() -> None:
        monitor = LoopStallMonitor(threshold_ms=50)
        monitor.start()
        await asyncio.sleep(0.05)
        time.sleep(0.25)  # a blocking call on the loop
        await asyncio.sleep(0.05)
        monitor.stop()

    with capture_logs() as logs:
        asyncio.run(hold_the_loop())
    stalls = [e for e in logs if e["event"] == "event loop stalled"]
    assert len(stalls) == 1, logs
    assert 200 <= stalls[0]["gap_ms"] < 1000
    assert "time.sleep(0.25)" in stalls[0]["stacks"][0]
    # a sleeping loop thread is not runnable: little run delay over the gap, unlike a busy machine's stall
    assert 0 <= stalls[0]["run_delay_ms"] < stalls[0]["gap_ms"] / 2
    # nor on a CPU: the stall is the loop asleep in a call, not the loop busy
    assert 0 <= stalls[0]["on_cpu_ms"] < stalls[0]["gap_ms"] / 2


def test_the_stall_monitor_tells_a_busy_loop_from_a_sleeping_one():
    async def spin_the_loop() -> None:
        monitor = LoopStallMonitor(threshold_ms=50)
        monitor.start()
        await asyncio.sleep(0.05)
        end = time.perf_counter() + 0.25
        while time.perf_counter() < end:  # the loop's own work, no sleep
            pass
        await asyncio.sleep(0.05)
        monitor.stop()

    with capture_logs() as logs:
        asyncio.run(spin_the_loop())
    stalls = [e for e in logs if e["event"] == "event loop stalled"]
    assert len(stalls) == 1, logs
    # spinning, the loop thread is on a CPU or waiting for one for the whole gap (on_cpu + run delay ~ gap)
    assert stalls[0]["on_cpu_ms"] + stalls[0]["run_delay_ms"] >= 0.8 * stalls[0]["gap_ms"]
    assert stalls[0]["on_cpu_ms"] > 0
