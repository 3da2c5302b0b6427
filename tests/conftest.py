"""Suite-wide isolation: a test that reconfigures logging (CLIs run in-process do) must not leak it; gRPC's fork
handlers stay off (below); under pytest-xdist, which tests share a worker (``pytest_collection_modifyitems``).

structlog's configuration and the root logger's handlers are process globals; a CLI run in-process
binds them to pytest's capture stream of that test, which is closed afterwards, and every later log
call would then fail with "I/O operation on closed file".
"""

from __future__ import annotations

import logging
import os
import tempfile

import pytest
import structlog

# Before any test imports gRPC (it reads this once, at import): with its fork handlers on, a broker child forked
# after an in-process gRPC test can abort before exec (broker.testing.process.child_preexec says how).
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")


@pytest.fixture(autouse=True)
def _restore_logging_config():
    config = structlog.get_config()
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    structlog.configure(**config)
    root.handlers[:] = handlers
    root.setLevel(level)


def pytest_report_header(config: pytest.Config) -> list[str]:
    """The temp folder's disk use, and a warning when it is past the store's disk-full mark: every broker a test
    starts there then refuses puts ("service not available now ... disk is full", as RocketMQ's does above
    ``diskSpaceWarningLevelRatio``), and the send tests fail for the machine's disk, not for the code."""
    from store.clean import disk_used_ratio
    from store.config import MessageStoreConfig

    folder = tempfile.gettempdir()
    used = disk_used_ratio(folder)
    mark = MessageStoreConfig().disk_space_warning_level_ratio
    lines = [f"disk: {folder} {used:.0%} used (the store refuses puts above {mark:.0%})"]
    if used > mark:
        lines.append(
            f"WARNING: {folder} is past the store's disk-full mark: free space there before trusting a failure"
        )
    return lines


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist (``scripts/dev.sh test``: ``--dist loadgroup``) a module's tests run on one worker in their
    order, so its module fixtures start once, as in a serial run. All of tests/flow is one group: its modules share
    session-scoped brokers whose queues and faults each test sets and settles, timed to the sweeper's 10 ms, so they
    run in the serial order. So are the Spark tests: one JVM of ~1 GB and ~10 s to start serves them all."""
    for item in items:
        if item.get_closest_marker("xdist_group") is not None:
            continue
        path = item.nodeid.split("::", 1)[0]
        if "spark" in getattr(item, "fixturenames", ()):
            group = "spark"
        elif path.startswith("tests/flow/"):
            group = "flow"
        else:
            group = path
        item.add_marker(pytest.mark.xdist_group(group))
