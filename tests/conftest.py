"""Suite-wide isolation: a test that reconfigures logging (CLIs run in-process do) must not leak it.

structlog's configuration and the root logger's handlers are process globals; a CLI run in-process
binds them to pytest's capture stream of that test, which is closed afterwards, and every later log
call would then fail with "I/O operation on closed file".
"""

from __future__ import annotations

import logging

import pytest
import structlog


@pytest.fixture(autouse=True)
def _restore_logging_config():
    config = structlog.get_config()
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    structlog.configure(**config)
    root.handlers[:] = handlers
    root.setLevel(level)
