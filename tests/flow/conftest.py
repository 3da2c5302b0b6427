"""Broker subprocesses for the flow-control tests, one per configuration, booted on first use.

Each configuration is shared by every test that needs it (tests use their own topics, and each test
waits for the queues it used to drain), which keeps the whole directory well under a minute.
Small commit-log files keep a fresh broker's first append from waiting on a 1 GiB preallocation.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from flow_support import BrokerProcess, start_broker, stop_brokers, wait_sweeper_started

from remoting.client import RemotingClient

pytestmark = pytest.mark.compat

COMMON = ("mappedFileSizeCommitLog=67108864", "brokerFastFailureEnable=true")

#: name → extra broker settings
CONFIGS: dict[str, tuple[str, ...]] = {
    # one send worker (the brokerSleepMs story); the page cache reads busy after 100 ms so that
    # a queued send sees [PCBUSY_CLEAN_QUEUE] before its 200 ms [TIMEOUT_CLEAN_QUEUE]; a small send queue
    # for [OVERLOAD]; short pull/heartbeat/transaction limits so every swept queue can be timed quickly.
    "one_worker": (
        "faultInjectionEnable=true",
        "sendMessageThreadPoolNums=1",
        "osPageCacheBusyTimeOutMills=100",
        "sendThreadPoolQueueCapacity=8",
        "waitTimeMillsInPullQueue=300",
        "waitTimeMillsInHeartbeatQueue=300",
        "waitTimeMillsInTransactionQueue=300",
    ),
    # two send workers: one can hold the append lock while the other reaches the store ([PC_SYNCHRONIZED])
    "two_workers": ("faultInjectionEnable=true", "sendMessageThreadPoolNums=2", "osPageCacheBusyTimeOutMills=200"),
    # a transient store pool to drain (small files: the pool holds transientStorePoolSize of them)
    "pool": (
        "faultInjectionEnable=true",
        "transientStorePoolEnable=true",
        "transientStorePoolSize=2",
        "mappedFileSizeCommitLog=8388608",
        "sendMessageThreadPoolNums=1",
    ),
    # injection off: the properties are ordinary properties, FAULT_INJECT is refused
    "injection_off": ("sendMessageThreadPoolNums=1", "osPageCacheBusyTimeOutMills=100"),
}


class Brokers:
    def __init__(self, root) -> None:
        self.root = root
        self.running: dict[str, BrokerProcess] = {}

    def get(self, name: str) -> BrokerProcess:
        broker = self.running.get(name)
        if broker is None:
            broker = start_broker(self.root, name, *COMMON, *CONFIGS[name])
            self.running[name] = broker
        return broker

    def ready(self, name: str) -> BrokerProcess:
        """The configuration's broker, once its fast-failure sweeper runs."""
        broker = self.get(name)
        wait_sweeper_started(broker)
        return broker

    def close(self) -> None:
        stop_brokers(self.running.values())


@pytest.fixture
async def client() -> AsyncIterator[RemotingClient]:
    """Our remoting client, for requests built by hand (flow_support)."""
    c = RemotingClient()
    try:
        yield c
    finally:
        await c.close()


@pytest.fixture(scope="session")
def brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Brokers]:
    b = Brokers(tmp_path_factory.mktemp("flow"))
    try:
        yield b
    finally:
        b.close()
