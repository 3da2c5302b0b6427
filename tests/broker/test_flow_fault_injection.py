"""FaultInjector (the broker side of FAULT_INJECT) and inject_fault (the client side, for mqadmin)."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field

import pytest

from broker.fault_injection import KINDS, FaultInjector
from mqclient.fault import FaultInjectionError, inject_fault, inject_fault_async
from remoting.codes import RequestCode, ResponseCode
from remoting.executor import RequestExecutor
from remoting.server import RemotingServer
from store.fault import StoreFault


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


@dataclass
class FakeStore:
    fault: StoreFault
    pool: object | None = None


@dataclass
class Rig:
    clock: Clock
    store: FakeStore
    executors: dict[str, RequestExecutor]
    injector: FaultInjector = field(init=False)

    def __post_init__(self) -> None:
        self.injector = FaultInjector(executors=lambda: self.executors, store=self.store, now_ms=self.clock)


def rig(pool: object | None = None) -> Rig:
    clock = Clock()
    return Rig(
        clock,
        FakeStore(StoreFault(clock), pool),
        {name: RequestExecutor(name, 1, 10) for name in ("send", "pull", "heartbeat")},
    )


@pytest.mark.parametrize(
    ("kind", "target", "duration", "value", "message"),
    [
        ("explode", None, 100, None, "unknown fault kind 'explode'; expected one of stall_send_workers, stall_queue"),
        ("stall_queue", None, 0, None, "durationMs must be a positive number of milliseconds, got 0"),
        ("stall_append", None, -5, None, "durationMs must be a positive number of milliseconds, got -5"),
        ("stall_append", None, 3_600_001, None, "durationMs 3600001 is over the limit of 3600000 ms"),
        ("stall_queue", "nosuch", 100, None, "unknown queue 'nosuch'; expected one of heartbeat, pull, send"),
        ("drain_transient_pool", None, 100, None, "drain_transient_pool needs a transient store pool"),
        ("slow_fsync", None, 100, "fast", "slow_fsync value (ms per fsync) must be an integer, got 'fast'"),
        ("slow_fsync", None, 100, "-1", "slow_fsync value (ms per fsync) must not be negative, got -1"),
    ],
)
async def test_bad_requests_are_refused_with_a_clear_reason(kind, target, duration, value, message):
    r = rig()
    with pytest.raises(ValueError) as refused:
        r.injector.inject(kind, target, duration, value)
    assert str(refused.value).startswith(message)
    assert r.injector.active == {} and r.store.fault.snapshot() == StoreFault(r.clock).snapshot()


async def test_stall_queue_pauses_only_its_target_and_clear_resumes_it():
    r = rig()
    r.injector.inject("stall_queue", "pull", 500, None)
    assert r.executors["pull"].paused and not r.executors["send"].paused
    r.injector.inject("stall_send_workers", None, 500, None)  # alias; target defaults to send
    assert r.executors["send"].paused
    assert r.injector.active_faults() == {"stall_queue:pull": 500, "stall_queue:send": 500}
    r.clock.now += 200
    assert r.injector.active_faults() == {"stall_queue:pull": 300, "stall_queue:send": 300}
    r.injector.inject("clear", None, 0, None)
    assert not r.executors["pull"].paused and not r.executors["send"].paused
    assert r.injector.active_faults() == {}


async def test_store_faults_are_armed_for_their_window():
    r = rig(pool=object())
    r.injector.inject("stall_append", None, 300, None)
    r.injector.inject("drain_transient_pool", None, 400, None)
    f = r.store.fault
    assert f.stall_append_until_ms == r.clock.now + 300 and f.pool_drained()
    r.clock.now += 400
    assert not f.pool_drained() and f.stall_append_remaining_ms(r.clock.now) == 0
    assert r.injector.active_faults() == {}


async def test_slow_fsync_ends_with_its_window_and_a_newer_window_replaces_the_older():
    r = rig()
    r.injector.inject("slow_fsync", None, 80, None)
    assert r.store.fault.slow_fsync_ms == 100  # default per-fsync delay
    await asyncio.sleep(0.04)
    r.injector.inject("slow_fsync", None, 150, "30")
    assert r.store.fault.slow_fsync_ms == 30
    await asyncio.sleep(0.08)  # the first window's end has passed: the second one still holds
    assert r.store.fault.slow_fsync_ms == 30
    await asyncio.sleep(0.12)
    assert r.store.fault.slow_fsync_ms == 0


async def test_clear_ends_store_faults_too():
    r = rig(pool=object())
    for kind in ("stall_append", "drain_transient_pool", "slow_fsync"):
        r.injector.inject(kind, None, 10_000, None)
    r.injector.inject("clear", None, 0, None)
    assert r.store.fault.snapshot() == {"stallAppendUntilMs": 0, "slowFsyncMs": 0, "drainPoolUntilMs": 0}
    await asyncio.sleep(0)


def test_kinds_are_the_documented_ones():
    assert KINDS == ("stall_send_workers", "stall_queue", "stall_append", "drain_transient_pool", "slow_fsync", "clear")


# ------------------------------------------------------------------------------------------ client side


class RecordingAdmin:
    """Answers FAULT_INJECT like the admin processor: NO_PERMISSION when disabled, else records it."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.seen: list[dict[str, str]] = []

    def reject_request(self) -> bool:
        return False

    async def process_request(self, channel, request):
        assert request.code == RequestCode.FAULT_INJECT
        if not self.enabled:
            return request.response(
                ResponseCode.NO_PERMISSION,
                "fault injection is disabled; start the broker with faultInjectionEnable=true",
            )
        self.seen.append(dict(request.ext_fields))
        return request.response(ResponseCode.SUCCESS)


async def _server(admin: RecordingAdmin) -> RemotingServer:
    server = RemotingServer("127.0.0.1", 0)
    server.register_default_processor(admin, RequestExecutor("admin", 1, 10))
    await server.start()
    return server


async def test_inject_fault_async_sends_the_wire_header():
    admin = RecordingAdmin(enabled=True)
    server = await _server(admin)
    try:
        await inject_fault_async(server.address, "stall_queue", duration_ms=1500, target="pull")
        await inject_fault_async(server.address, "slow_fsync", duration_ms=200, value="50")
        await inject_fault_async(server.address, "clear")
    finally:
        await server.stop(1.0)
    assert admin.seen == [
        {"kind": "stall_queue", "target": "pull", "durationMs": "1500"},
        {"kind": "slow_fsync", "durationMs": "200", "value": "50"},
        {"kind": "clear", "durationMs": "0"},
    ]


async def test_inject_fault_async_raises_with_the_brokers_remark():
    server = await _server(RecordingAdmin(enabled=False))
    try:
        with pytest.raises(FaultInjectionError) as refused:
            await inject_fault_async(server.address, "stall_append", duration_ms=100)
    finally:
        await server.stop(1.0)
    assert refused.value.code == ResponseCode.NO_PERMISSION
    assert "fault injection is disabled; start the broker with faultInjectionEnable=true" in str(refused.value)


async def test_inject_fault_async_unreachable_broker_is_a_fault_injection_error(unused_tcp_port):
    with pytest.raises(FaultInjectionError, match=f"FAULT_INJECT to 127.0.0.1:{unused_tcp_port} failed"):
        await inject_fault_async(f"127.0.0.1:{unused_tcp_port}", "clear", timeout_s=2.0)


def test_blocking_inject_fault_for_command_line_tools():
    """The blocking form runs its own loop; the server here runs on another thread's loop."""
    admin = RecordingAdmin(enabled=True)
    ready, stop = threading.Event(), None
    holder: dict[str, object] = {}

    def serve() -> None:
        async def main() -> None:
            nonlocal stop
            server = await _server(admin)
            holder["addr"] = server.address
            stop = asyncio.Event()
            ready.set()
            await stop.wait()
            await server.stop(1.0)

        loop = asyncio.new_event_loop()
        holder["loop"] = loop
        loop.run_until_complete(main())
        loop.close()

    t = threading.Thread(target=serve)
    t.start()
    try:
        assert ready.wait(5)
        inject_fault(str(holder["addr"]), "stall_append", duration_ms=250)
    finally:
        loop = holder["loop"]
        loop.call_soon_threadsafe(lambda: stop.set())  # type: ignore[union-attr]
        t.join(5)
    assert admin.seen == [{"kind": "stall_append", "durationMs": "250"}]
