"""Fixtures for the mqadmin tests: the plugin's in-process broker, an AdminClient, message helpers."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from tools_helpers import BackgroundLoop

from mqclient.admin import AdminClient
from remoting.client import RemotingClient


def pytest_configure(config: pytest.Config) -> None:
    # The pytest11 entry point loads the plugin once the project is installed; a plain checkout loads it here.
    if not config.pluginmanager.has_plugin("mini_rocketmq"):
        import broker.testing.pytest_plugin as plugin

        if not config.pluginmanager.is_registered(plugin):
            config.pluginmanager.register(plugin, "mini_rocketmq")


@pytest.fixture
async def admin(rocketmq_broker) -> AsyncIterator[AdminClient]:
    async with AdminClient(rocketmq_broker.namesrv_addr, timeout_s=5.0) as client:
        yield client


@pytest.fixture
async def rclient() -> AsyncIterator[RemotingClient]:
    client = RemotingClient()
    yield client
    await client.close()


@pytest.fixture
def topic(rocketmq_broker, request) -> Iterator[str]:
    name = "T_" + request.node.name.replace("[", "_").replace("]", "_").replace("-", "_")[:60]
    rocketmq_broker.create_topic(name, 4)
    yield name


@pytest.fixture
def bg_loop() -> Iterator[BackgroundLoop]:
    loop = BackgroundLoop()
    yield loop
    loop.close()
