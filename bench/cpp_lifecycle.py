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
"""

from __future__ import annotations

import threading
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


def _locked(call: Any, what: str, wait_s: float) -> None:
    if not _LIFECYCLE_LOCK.acquire(timeout=wait_s):
        raise LifecycleBusy(
            f"{what}: another C++ client's start or shutdown in this process has held the wheel for {wait_s:.0f} s "
            "(a hung shutdown?); not starting a second one beside it, which corrupts librocketmq's factory table"
        )
    try:
        call()
    finally:
        _LIFECYCLE_LOCK.release()


def start_client(client: WheelClient, wait_s: float = DEFAULT_WAIT_S) -> None:
    """``client.start()`` while no other wheel client of this process starts or shuts down."""
    _locked(client.start, f"{type(client).__name__}.start()", wait_s)


def shutdown_client(client: WheelClient, wait_s: float = DEFAULT_WAIT_S) -> None:
    """``client.shutdown()`` while no other wheel client of this process starts or shuts down."""
    _locked(client.shutdown, f"{type(client).__name__}.shutdown()", wait_s)
