"""pytest plugin (entry point ``pytest11``: ``mini_rocketmq``): a real RocketMQ broker as a fixture.

Fixtures
- ``rocketmq_broker``: an ``EmbeddedBroker`` (broker + name server in this process, free loopback
  ports, temporary store, fault injection on), started in about a tenth of a second. Use
  ``rocketmq_broker.namesrv_addr`` / ``.broker_addr`` with any RocketMQ client, and its helpers
  ``create_topic(name, queues)``, ``inject_fault(kind, duration_ms, target=, value=)``,
  ``clear_faults()``, ``update_config(**keys)``, ``request(code, ext_fields)``, ``stop()``.
- ``rocketmq_broker_factory``: ``make(**broker_conf_keys)`` → another started broker, stopped after the test.

Settings
- scope of ``rocketmq_broker``: ini ``rocketmq_broker_scope`` or ``--rocketmq-broker-scope``
  (function — the default —, class, module, package or session);
- broker.conf keys for every ``rocketmq_broker``: ini ``rocketmq_broker_config`` (one ``key=value`` a line);
- per test: ``@pytest.mark.rocketmq_broker_config(autoCreateTopicEnable=False)`` (function scope).

The broker's modules are imported on first use only, so merely having the plugin installed costs a
test run nothing. If the suite has not configured structlog, the first broker routes structlog to
stdlib logging, so the broker's log lines land in pytest's log capture, not in the tests' stdout.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from broker.testing.embedded import EmbeddedBroker

SCOPES = ("function", "class", "module", "package", "session")
MARKER = "rocketmq_broker_config"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("mini-rocketmq", "rocketmq_broker fixture (mini-rocketmq)")
    group.addoption(
        "--rocketmq-broker-scope",
        dest="rocketmq_broker_scope",
        default=None,
        choices=SCOPES,
        help="scope of the rocketmq_broker fixture (default: ini rocketmq_broker_scope or function)",
    )
    parser.addini("rocketmq_broker_scope", "scope of the rocketmq_broker fixture", default="function")
    parser.addini(
        "rocketmq_broker_config", "broker.conf keys (key=value lines) for rocketmq_broker", type="linelist", default=[]
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{MARKER}(**keys): broker.conf keys for this test's rocketmq_broker (function scope)"
    )


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker(MARKER) is None or "rocketmq_broker" not in getattr(item, "fixturenames", ()):
        return
    scope = _scope("rocketmq_broker", item.config)
    if scope != "function":  # the broker was started for a wider scope: the marker's keys would be ignored
        pytest.fail(
            f"@pytest.mark.{MARKER} needs the function-scoped rocketmq_broker (this run uses scope "
            f"{scope!r}); use rocketmq_broker_factory(**keys) instead",
            pytrace=False,
        )


def _scope(fixture_name: str, config: pytest.Config) -> str:
    scope = config.getoption("rocketmq_broker_scope", None) or config.getini("rocketmq_broker_scope") or "function"
    scope = str(scope).strip().lower()
    if scope not in SCOPES:
        raise pytest.UsageError(f"rocketmq_broker_scope must be one of {', '.join(SCOPES)}, got {scope!r}")
    return scope


def _ini_config(config: pytest.Config) -> dict[str, str]:
    out = {}
    for line in config.getini("rocketmq_broker_config"):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise pytest.UsageError(f"rocketmq_broker_config: expected key=value, got {line!r}")
        out[key.strip()] = value.strip()
    return out


def _route_structlog_to_logging() -> None:
    """If the suite left structlog unconfigured (its default prints every level to stdout), send the
    broker's events to stdlib logging instead, so pytest's log capture shows them with failures and
    test stdout stays the tests' own."""
    import structlog

    factory = structlog.get_config()["logger_factory"]
    printing_to_stdout = isinstance(factory, structlog.PrintLoggerFactory) and getattr(factory, "_file", None) in (
        None,
        sys.stdout,
        sys.__stdout__,
    )
    # capture_logs() leaves structlog "configured" with the defaults again: still the stdout default.
    if structlog.is_configured() and not printing_to_stdout:
        return
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.stdlib.filter_by_level,
            structlog.stdlib.add_log_level,
            structlog.processors.format_exc_info,
            structlog.dev.ConsoleRenderer(colors=False),
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )


def _start(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, keys: dict[str, Any]
) -> EmbeddedBroker:
    from broker.testing.embedded import EmbeddedBroker

    _route_structlog_to_logging()

    store = tmp_path_factory.mktemp("rocketmq-store")
    return EmbeddedBroker(config=keys, store_dir=store).start()


@pytest.fixture(scope=_scope)
def rocketmq_broker(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[EmbeddedBroker]:
    """A started in-process broker with its name server; stopped when the fixture's scope ends."""
    keys: dict[str, Any] = _ini_config(request.config)
    marker = request.node.get_closest_marker(MARKER) if request.scope == "function" else None
    if marker is not None:
        if marker.args:
            raise pytest.UsageError(f"@pytest.mark.{MARKER} takes keyword arguments only (key=value)")
        keys.update(marker.kwargs)
    broker = _start(request, tmp_path_factory, keys)
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def rocketmq_broker_factory(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[..., EmbeddedBroker]]:
    """``make(**broker_conf_keys)`` starts one more broker (its own name server); all stop after the test."""
    started: list[EmbeddedBroker] = []
    base = _ini_config(request.config)

    def make(**keys: Any) -> EmbeddedBroker:
        broker = _start(request, tmp_path_factory, {**base, **keys})
        started.append(broker)
        return broker

    try:
        yield make
    finally:
        for broker in reversed(started):
            broker.stop()
