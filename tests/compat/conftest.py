"""Fixtures for the real-client acceptance tests: a mini-rocketmq broker subprocess on free loopback ports.

`broker` is one broker per test module (tests there use their own topics and groups, so sharing is safe);
`broker_factory` starts function-scoped brokers with extra `--set` arguments, for restart and config tests.
When a test fails, its report gets the broker log and the C++ client log written during the test.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from compat_support import (
    BrokerFactory,
    BrokerProcess,
    CppClientLog,
    ensure_node_modules,
    node_missing_reason,
)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    factory = BrokerFactory(tmp_path_factory.mktemp("broker"))
    try:
        yield factory.start(name="shared")
    finally:
        factory.close()


@pytest.fixture
def broker_factory(tmp_path: Path) -> Iterator[BrokerFactory]:
    factory = BrokerFactory(tmp_path)
    try:
        yield factory
    finally:
        factory.close()


@pytest.fixture(scope="session")
def node_ready() -> None:
    reason = node_missing_reason()
    if reason:
        pytest.skip(reason)
    ensure_node_modules()


# ------------------------------------------------------------------------------ failure diagnostics

_BROKER_MARKS = pytest.StashKey[dict[int, int]]()
_CPP_LOG = pytest.StashKey[CppClientLog]()


def _brokers_of(item: pytest.Item) -> list[BrokerProcess]:
    found: list[BrokerProcess] = []
    for value in getattr(item, "funcargs", {}).values():
        if isinstance(value, BrokerProcess):
            found.append(value)
        elif isinstance(value, BrokerFactory):
            found.extend(value.brokers)
    return found


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    item.stash[_BROKER_MARKS] = {id(b): b.log_size() for b in _brokers_of(item)}
    cpp_log = CppClientLog()
    cpp_log.mark()
    item.stash[_CPP_LOG] = cpp_log
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if report.when != "call" or not report.failed or item.get_closest_marker("compat") is None:
        return
    marks = item.stash.get(_BROKER_MARKS, {})
    for b in _brokers_of(item):
        report.sections.append((f"broker {b.broker_addr} log during the test", b.tail(80, since=marks.get(id(b), 0))))
    cpp_log = item.stash.get(_CPP_LOG, None)
    if cpp_log is not None and cpp_log.files():
        report.sections.append(("C++ client log during the test", cpp_log.tail(60)))
