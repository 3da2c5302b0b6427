"""Fixtures: an in-process broker on free loopback ports, and a remoting client."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from broker_helpers import start_broker

from broker.controller import BrokerController
from remoting.client import RemotingClient


@pytest.fixture
async def broker(tmp_path) -> AsyncIterator[BrokerController]:
    controller = await start_broker(tmp_path)
    yield controller
    await controller.shutdown()


@pytest.fixture
async def client() -> AsyncIterator[RemotingClient]:
    c = RemotingClient()
    yield c
    await c.close()
