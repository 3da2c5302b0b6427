"""One way for tests/proxy to run the 5.x endpoint: an in-process broker, its plaintext gRPC server on a free
loopback port, and a channel to it, all closed together however the test ends."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc

from proxy.server import GrpcServer
from tests.broker.broker_helpers import free_port, start_broker


@asynccontextmanager
async def plaintext_endpoint(
    tmp_path: Path, *, prepare: Callable[[Any], None] | None = None, **config: str
) -> AsyncIterator[tuple[Any, grpc.aio.Channel]]:
    """``(broker, channel)``; ``config`` are extra broker.conf keys, ``prepare(broker)`` runs before serving."""
    port = free_port()
    broker = await start_broker(
        tmp_path, grpcServerPort=port, grpcTlsEnable="false", grpcListenHost="127.0.0.1", **config
    )
    server = GrpcServer(broker)
    try:
        if prepare is not None:
            prepare(broker)
        await server.start()
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield broker, channel
    finally:
        await server.stop(1.0)
        await broker.shutdown()
