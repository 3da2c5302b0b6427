"""Loopback ports for tests and benchmarks: the one ``free_port``, and a check that a port accepts connections.

A port found free can be taken by someone else before our broker binds it; callers that start in-process
brokers retry on ``OSError`` (``EmbeddedBroker``), subprocess callers see the child exit with its bind error.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable


class NoFreePortError(RuntimeError):
    """No loopback port far enough from the ones to avoid was found."""


def free_port(avoid: Iterable[int] = ()) -> int:
    """A loopback TCP port free right now, at least 3 away from ``avoid`` (a broker also uses port + 1)."""
    avoid = tuple(avoid)
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if all(abs(port - other) > 2 for other in avoid):
            return port
    raise NoFreePortError("no free loopback port found")


def accepting(port: int, host: str = "127.0.0.1", timeout_s: float = 0.05) -> bool:
    """True when something accepts a TCP connection on ``host:port`` now."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False
