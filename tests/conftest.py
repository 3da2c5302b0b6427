"""Suite-wide isolation: a test that reconfigures logging (CLIs run in-process do) must not leak it; gRPC's fork
handlers stay off (below).

structlog's configuration and the root logger's handlers are process globals; a CLI run in-process
binds them to pytest's capture stream of that test, which is closed afterwards, and every later log
call would then fail with "I/O operation on closed file".
"""

from __future__ import annotations

import logging
import os

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
