"""Shared fixtures for the remoting tests: uvloop loops, a server factory, raw-socket helpers."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from remoting.executor import RequestExecutor
from remoting.server import RemotingServer

try:
    import uvloop
except ImportError:  # pragma: no cover - uvloop is a hard dependency, keep tests runnable anyway
    uvloop = None


def pytest_asyncio_loop_factories(config, item):
    # The server runs on uvloop in production; its transports differ from asyncio's (no
    # asyncio.Transport subclass, different write-buffer behaviour), so test on it.
    # REMOTING_TEST_LOOP=asyncio runs the same tests on the standard loop.
    if uvloop is not None and os.environ.get("REMOTING_TEST_LOOP", "uvloop") == "uvloop":
        return {"uvloop": uvloop.new_event_loop}
    return {"asyncio": asyncio.new_event_loop}


@pytest.fixture
async def make_server() -> AsyncIterator[Callable[..., Awaitable[RemotingServer]]]:
    servers: list[RemotingServer] = []

    async def factory(
        routes: dict[int, tuple[object, RequestExecutor]] | None = None,
        default: tuple[object, RequestExecutor] | None = None,
        **kwargs,
    ) -> RemotingServer:
        server = RemotingServer("127.0.0.1", 0, **kwargs)
        for code, (processor, executor) in (routes or {}).items():
            server.register_processor(code, processor, executor)
        if default is not None:
            server.register_default_processor(*default)
        await server.start()
        servers.append(server)
        return server

    yield factory
    for server in servers:
        await server.stop(1.0)
