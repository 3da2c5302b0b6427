"""Logging: structlog everywhere; JSON lines in a container or pipe, readable console output in a terminal.

``MINI_ROCKETMQ_LOG_FORMAT`` = ``json`` | ``console`` overrides the choice; ``MINI_ROCKETMQ_LOG_LEVEL``
sets the level (default INFO). The level can change at run time (``set_level``), which is how
request-level debug logging is switched on and off without a restart.
"""

from __future__ import annotations

import logging
import os
import sys

import structlog


def configure(fmt: str | None = None, level: str | None = None, stream=None) -> None:
    stream = stream or sys.stderr
    fmt = (fmt or os.environ.get("MINI_ROCKETMQ_LOG_FORMAT") or ("console" if stream.isatty() else "json")).lower()
    level_name = (level or os.environ.get("MINI_ROCKETMQ_LOG_LEVEL") or "INFO").upper()
    renderer = (structlog.processors.JSONRenderer() if fmt == "json"
                else structlog.dev.ConsoleRenderer(colors=stream.isatty()))
    handler = logging.StreamHandler(stream)
    handler.setFormatter(structlog.stdlib.ProcessorFormatter(
        processor=renderer,
        foreign_pre_chain=[structlog.stdlib.add_log_level, structlog.processors.TimeStamper(fmt="iso")]))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(getattr(logging, level_name, logging.INFO))
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.stdlib.filter_by_level,
            structlog.stdlib.add_logger_name,
            structlog.stdlib.add_log_level,
            structlog.processors.TimeStamper(fmt="iso"),
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )


def set_level(level: str) -> None:
    logging.getLogger().setLevel(getattr(logging, level.upper()))
