"""Logging: structlog everywhere; JSON lines in a container or pipe, readable console output in a terminal.

``MINI_ROCKETMQ_LOG_FORMAT`` = ``json`` | ``console`` overrides the choice; ``MINI_ROCKETMQ_LOG_LEVEL``
sets the level (default INFO); ``MINI_ROCKETMQ_REQUEST_LOG=true`` starts with request-level logging on.

Both switches also work while the broker runs (``updateBrokerConfig`` with the keys ``logLevel`` and
``requestLogEnable``, handled by the admin processor): ``set_level`` changes the root level,
``set_request_logging`` turns the one-line-per-request debug log (logger ``broker.requests``) on or off
without making every other module chatty.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import IO

import structlog

#: Logger of the one-line-per-request debug events (code, opaque, remote, answer code, elapsed time).
REQUEST_LOGGER = "broker.requests"

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def parse_level(level: str) -> int:
    """``"debug"``/``"WARN"``/``"20"`` → a logging level (numbers 0..50); ValueError with the accepted names
    otherwise."""
    text = level.strip().upper()
    if text == "WARN":
        text = "WARNING"
    if text in LEVELS:
        return getattr(logging, text)
    # A number above CRITICAL would silence the log for good (a fuzz run sent logLevel=99999999999999999999
    # through UPDATE_BROKER_CONFIG and the broker logged nothing more, not even its refusals).
    if text.isdigit() and int(text) <= logging.CRITICAL:
        return int(text)
    raise ValueError(f"unknown log level {level!r}; expected one of {', '.join(LEVELS)}")


def configure(
    fmt: str | None = None, level: str | None = None, stream: IO[str] | None = None, request_log: bool | None = None
) -> None:
    """Route stdlib logging and structlog through one handler on ``stream`` (default stderr)."""
    stream = stream or sys.stderr
    is_tty = bool(getattr(stream, "isatty", lambda: False)())
    fmt = (fmt or os.environ.get("MINI_ROCKETMQ_LOG_FORMAT") or ("console" if is_tty else "json")).lower()
    if fmt not in ("json", "console"):
        raise ValueError(f"unknown log format {fmt!r}; expected json or console")
    level_value = parse_level(level or os.environ.get("MINI_ROCKETMQ_LOG_LEVEL") or "INFO")
    renderer = structlog.processors.JSONRenderer() if fmt == "json" else structlog.dev.ConsoleRenderer(colors=is_tty)
    timestamper = structlog.processors.TimeStamper(fmt="iso", utc=True)
    handler = logging.StreamHandler(stream)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
            # Records from plain stdlib loggers (asyncio, third-party code) get the same keys as ours.
            foreign_pre_chain=[
                structlog.stdlib.add_logger_name,
                structlog.stdlib.add_log_level,
                timestamper,
                structlog.processors.format_exc_info,
            ],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level_value)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.stdlib.filter_by_level,
            structlog.stdlib.add_logger_name,
            structlog.stdlib.add_log_level,
            timestamper,
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,  # a cached logger would not see run-time level changes
    )
    if request_log is None:
        request_log = _truthy(os.environ.get("MINI_ROCKETMQ_REQUEST_LOG"))
    set_request_logging(request_log)


def set_level(level: str, logger: str | None = None) -> str:
    """Set the level of ``logger`` (the root when None) now; returns the level's name."""
    value = parse_level(level)
    logging.getLogger(logger).setLevel(value)
    return logging.getLevelName(value)


def get_level(logger: str | None = None) -> str:
    return logging.getLevelName(logging.getLogger(logger).getEffectiveLevel())


def set_request_logging(enabled: bool) -> None:
    """Turn the per-request debug lines on or off; off holds even when the root level is DEBUG, because
    one line per request drowns everything else."""
    logging.getLogger(REQUEST_LOGGER).setLevel(logging.DEBUG if enabled else logging.INFO)


def request_logging_enabled() -> bool:
    return logging.getLogger(REQUEST_LOGGER).isEnabledFor(logging.DEBUG)
