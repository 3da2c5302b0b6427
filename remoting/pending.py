"""``Pending``: the rest of a request whose processing had to wait, for the synchronous processor entries.

A processor's synchronous entry (``process_request_now``, ``process_requests_now``) answers at once when it can:
the pull processor always does (it parks a long poll by answering None and writes the answer later), and a send
the store appends at once does too. Such a request then costs no coroutine, no task and no awaitable on the
server's side: the executor calls the entry and writes what it returns. A request that has to wait (a send under
SYNC_FLUSH, a dispatch wait) returns a ``Pending`` instead: its coroutine, stopped at its first wait, with what it
awaits there; the executor drives the rest as a task (``finish``), as it drives a request that started as a
coroutine.

``start(coro)`` turns a coroutine into that shape: it runs it up to its first wait on the caller's stack and gives
its value when it did not wait at all. A layer that has to act on the answer once it is there (the metrics wrapper
timing it) wraps a ``Pending`` in a coroutine of its own that awaits ``finish`` and ``start``s that.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any


class Pending:
    """A coroutine stopped at its first wait, and what it yielded there (a future, or None for a bare yield)."""

    __slots__ = ("coro", "yielded")

    def __init__(self, coro: Coroutine[Any, Any, Any], yielded: Any) -> None:
        self.coro = coro
        self.yielded = yielded

    def close(self) -> None:
        """Drop the rest unrun (nobody will drive it): the coroutine's ``finally`` blocks run now."""
        self.coro.close()


def start(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run ``coro`` up to its first wait: its value when it finished without one (an exception it raised
    propagates), else the ``Pending`` rest of it."""
    try:
        yielded = coro.send(None)
    except StopIteration as stop:
        return stop.value
    return Pending(coro, yielded)


async def finish(pending: Pending) -> Any:
    """Drive the rest of ``pending`` to its end and give its value (or raise its exception): await what it
    awaited, hand it back, repeat, as an asyncio task steps a coroutine. Cancelling the awaiting task passes the
    cancellation into the pending coroutine, as cancelling a task that awaits a coroutine does."""
    coro = pending.coro
    yielded = pending.yielded
    try:
        while True:
            if yielded is None:  # a bare yield (asyncio.sleep(0)): give the loop one turn
                try:
                    await asyncio.sleep(0)
                except asyncio.CancelledError:
                    yielded = coro.throw(asyncio.CancelledError())
                    continue
            else:
                yielded._asyncio_future_blocking = False
                try:
                    await yielded
                except asyncio.CancelledError:
                    if not yielded.cancelled():  # we were cancelled, not what it awaited: pass it on
                        yielded = coro.throw(asyncio.CancelledError())
                        continue
                except Exception:  # noqa: BLE001, S110 - the coroutine reads the outcome itself below
                    pass
            yielded = coro.send(None)
    except StopIteration as stop:
        return stop.value
    finally:
        coro.close()
