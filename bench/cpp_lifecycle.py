"""Start and shut down C++ wheel clients one at a time per process.

The ``rocketmq`` 0.4.4 wheel bundles rocketmq-client-cpp 1.2.x. Its ``MQClientManager`` keeps every client
factory of the process in a plain ``std::map`` with no lock: ``Start*`` inserts the new client's factory
(``getMQClientFactory``) and the ``Shutdown*`` of a factory's last client erases it
(``removeClientFactory``). Two threads doing either at the same moment corrupt the tree. Nothing fails
then: an entry is silently lost (its factory is never destroyed), and the *next* start in the process,
possibly minutes and hundreds of tests later, dies with SIGSEGV inside ``getMQClientFactory``, taking the
whole pytest run with it. The bench cpp driver's tasks start their producer and consumer at one barrier,
and several compat tests start producers from threads, so both meet that race.

Every start and shutdown of a wheel client therefore goes through `start_client` / `shutdown_client`,
which hold one process-wide lock (process-wide because the table it guards is). Sends, pulls and
callbacks are not serialized: they do not touch the table.

A start also reads the table first (`read_factory_table`) and refuses with `FactoryTableCorrupted` when it
is already broken (by a start or shutdown that bypassed this module): the test that starts then fails with
that message instead of the whole process dying. The known crash: a lost insert leaves the map's size one
above its tree; once the tree is empty, the next insert compares the new key with the "key" of the map's
header node, which is the size field read as a string pointer, and faults.
"""

from __future__ import annotations

import ctypes
import threading
import time
from dataclasses import dataclass
from typing import Any, Protocol

#: Guards the wheel's process-wide client factory table (see the module docstring). Module-level on purpose:
#: the native table it protects is one per process, so one lock per process is the only correct scope.
_LIFECYCLE_LOCK = threading.Lock()

#: How long a start waits for another thread's start or shutdown; a wheel shutdown has been seen to hang.
DEFAULT_WAIT_S = 60.0


class WheelClient(Protocol):
    """A ``rocketmq.client`` Producer, PushConsumer or PullConsumer."""

    def start(self) -> Any: ...

    def shutdown(self) -> Any: ...


class LifecycleBusy(RuntimeError):
    """Another wheel client's start or shutdown in this process did not finish in time."""


class FactoryTableCorrupted(RuntimeError):
    """librocketmq's client factory table is inconsistent: the next start in this process would crash it."""


@dataclass(frozen=True)
class FactoryTable:
    """What MQClientManager's std::map<string, MQClientFactory*> holds, read from the process's memory."""

    size: int  #: the map's own element count
    nodes: int  #: nodes reachable in its red-black tree
    ends_ok: bool  #: the header's leftmost/rightmost links point at the tree's ends (at itself when empty)

    def problem(self) -> str | None:
        if self.size == self.nodes and self.ends_ok:
            return None
        return (
            f"librocketmq's client factory table is corrupted (the map says {self.size} factories, its tree holds "
            f"{self.nodes}, end links {'ok' if self.ends_ok else 'wrong'}): the next C++ client start in this "
            "process would die with SIGSEGV. An earlier start or shutdown ran beside another one without "
            "bench.cpp_lifecycle.start_client/shutdown_client."
        )


# Layout of the 0.4.4 wheel's librocketmq (GCC, libstdc++): MQClientManager is {vptr; std::map}; the map is
# {less<>; header node {int color; parent; left; right}; size_t count}; a tree node starts with the same base.
_MAP_HEADER, _MAP_COUNT = 0x10, 0x30
_NODE_PARENT, _NODE_LEFT, _NODE_RIGHT = 0x08, 0x10, 0x18
_MAX_NODES = 100_000


def _word(address: int) -> int:
    return ctypes.c_size_t.from_address(address).value


def read_factory_table() -> FactoryTable | None:
    """The table's state, or None when the loaded librocketmq is not the build whose layout is known here."""
    try:
        from rocketmq.ffi import dll

        get_instance = dll._ZN8rocketmq15MQClientManager11getInstanceEv
        vtable = ctypes.addressof(ctypes.c_char.in_dll(dll, "_ZTVN8rocketmq15MQClientManagerE"))
    except (ImportError, AttributeError, ValueError):
        return None
    get_instance.restype, get_instance.argtypes = ctypes.c_void_p, []
    manager = get_instance()
    if not manager or _word(manager) != vtable + 0x10:  # not an MQClientManager laid out as expected
        return None
    header = manager + _MAP_HEADER
    root, leftmost, rightmost = _word(header + _NODE_PARENT), _word(header + _NODE_LEFT), _word(header + _NODE_RIGHT)
    size = _word(manager + _MAP_COUNT)
    if not root:
        return FactoryTable(size=size, nodes=0, ends_ok=leftmost == header and rightmost == header)
    nodes, stack, ok = 0, [(root, header)], True
    lowest = highest = root
    while stack and nodes <= _MAX_NODES:
        node, parent = stack.pop()
        if node % 8 or _word(node + _NODE_PARENT) != parent:
            ok = False
            break
        nodes += 1
        for child in (_word(node + _NODE_LEFT), _word(node + _NODE_RIGHT)):
            if child:
                stack.append((child, node))
    while ok and _word(lowest + _NODE_LEFT):
        lowest = _word(lowest + _NODE_LEFT)
    while ok and _word(highest + _NODE_RIGHT):
        highest = _word(highest + _NODE_RIGHT)
    return FactoryTable(size=size, nodes=nodes, ends_ok=ok and leftmost == lowest and rightmost == highest)


@dataclass
class _Holder:
    """Which call holds the lock since when, so that waiters name it and stop waiting on a call hung for long."""

    what: str = ""
    since: float = 0.0


_HOLDER = _Holder()


def _locked(call: Any, what: str, wait_s: float, *, check_table: bool = False) -> None:
    # A call that already holds the lock longer than wait_s is hung: fail at once instead of making every
    # later start of the run wait wait_s again (a hung shutdown would otherwise cost wait_s per test).
    held_s = time.monotonic() - _HOLDER.since if _HOLDER.what else 0.0
    if not _LIFECYCLE_LOCK.acquire(timeout=max(0.0, wait_s - held_s)):
        held_s = time.monotonic() - _HOLDER.since
        raise LifecycleBusy(
            f"{what}: {_HOLDER.what or 'another C++ client call'} in this process has held the wheel for "
            f"{held_s:.0f} s (hung?); not running beside it, which corrupts librocketmq's factory table"
        )
    _HOLDER.what, _HOLDER.since = what, time.monotonic()
    try:
        table = read_factory_table() if check_table else None
        problem = table.problem() if table is not None else None
        if problem:
            raise FactoryTableCorrupted(f"{what} refused: {problem}")
        call()
    finally:
        _HOLDER.what = ""
        _LIFECYCLE_LOCK.release()


def start_client(client: WheelClient, wait_s: float = DEFAULT_WAIT_S) -> None:
    """``client.start()`` while no other wheel client of this process starts or shuts down; refused with
    `FactoryTableCorrupted` when librocketmq's factory table is already broken (the start would crash)."""
    _locked(client.start, f"{type(client).__name__}.start()", wait_s, check_table=True)


def shutdown_client(client: WheelClient, wait_s: float = DEFAULT_WAIT_S) -> None:
    """``client.shutdown()`` while no other wheel client of this process starts or shuts down."""
    _locked(client.shutdown, f"{type(client).__name__}.shutdown()", wait_s)
