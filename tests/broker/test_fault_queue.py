"""FAULT_INJECT waits in a queue of its own, so a stalled admin queue can still be cleared."""

from __future__ import annotations

import asyncio

from broker_helpers import start_broker

from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand


def fault(kind, duration_ms=0, target=None):
    ext = {"kind": kind, "durationMs": str(duration_ms)}
    if target:
        ext["target"] = target
    return RemotingCommand.request(RequestCode.FAULT_INJECT, ext)


async def test_stalled_admin_queue_is_cleared(tmp_path):
    broker = await start_broker(tmp_path, faultInjectionEnable="true")
    client = RemotingClient()
    addr = broker.config.broker_addr
    try:
        resp = await client.invoke(addr, fault("stall_queue", 60_000, "admin"), 5)
        assert resp.code == ResponseCode.SUCCESS
        runtime = asyncio.ensure_future(
            client.invoke(addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO, {}), 10)
        )
        await asyncio.sleep(0.3)
        assert not runtime.done()  # the admin queue is stalled
        resp = await client.invoke(addr, fault("clear"), 5)
        assert resp.code == ResponseCode.SUCCESS
        assert (await asyncio.wait_for(runtime, 5)).code == ResponseCode.SUCCESS
    finally:
        await client.close()
        await broker.shutdown()
