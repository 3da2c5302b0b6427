"""Shutdown finishes even when a background task swallows its first cancellation (found by the fuzzer)."""

from __future__ import annotations

import asyncio

from broker_helpers import start_broker

from remoting.errors import RemotingConnectError


async def test_shutdown_finishes_when_the_registration_loop_swallows_a_cancel(tmp_path):
    """Python 3.11's ``asyncio.wait_for`` raises the inner future's exception instead of CancelledError when the
    cancel meets a connect that has just failed (gh-86296). A fuzz run set namesrvAddr=1e9 at run time; the
    registration loop's connect failed at once, the shutdown's cancel landed on it, the loop logged "register
    broker failed", went round again, and SIGTERM hung until the process was killed. Here the name server
    client does exactly what 3.11 does, deterministically."""
    controller = await start_broker(tmp_path)
    entered = asyncio.Event()
    calls = 0

    async def invoke_like_311(addr, request, timeout_s):  # noqa: ANN001, ANN202
        nonlocal calls
        calls += 1
        if calls > 1:
            raise RemotingConnectError(f"bad address {addr!r}")  # the next rounds, and the unregistration
        entered.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            raise RemotingConnectError(f"bad address {addr!r}") from None  # the swallowed cancellation

    controller.client.invoke = invoke_like_311
    controller.config.namesrv_addr = "127.0.0.1:1"
    controller._register_pending.set()
    await asyncio.wait_for(entered.wait(), 5)
    loop = asyncio.get_running_loop()
    began = loop.time()
    await asyncio.wait_for(controller.shutdown(), 15)
    assert loop.time() - began < 10
    assert calls >= 1
