"""``OfflineChannel``: what the server, the executors and the processors call on a connection, without a socket.

Tests and in-process benchmarks drive dispatch, executors and processors with a stand-in for ``Channel``. They
subclass this one so that every stand-in has the whole interface the request path uses (a request group's
``send_many`` and ``requests_started/finished`` included): the server then calls those methods unconditionally,
with no fallback for a stand-in that lacks one.
"""

from __future__ import annotations

from typing import Any

from remoting.command import RemotingCommand


class OfflineChannel:
    """Counts the requests in flight and hands every answer to ``send``, which a subclass overrides to keep,
    encode or drop it."""

    remote_addr = "127.0.0.1:1"
    is_active = True

    def __init__(self) -> None:
        self.attrs: dict[str, Any] = {}
        self.in_flight = 0
        self.finished = 0

    def send(self, cmd: RemotingCommand) -> None:
        """The answer leaves here; the base drops it."""

    def send_many(self, cmds: list[RemotingCommand]) -> list[tuple[int, Exception]]:
        for cmd in cmds:
            self.send(cmd)
        return []

    def request_started(self) -> None:
        self.in_flight += 1

    def requests_started(self, count: int) -> None:
        self.in_flight += count

    def request_finished(self) -> None:
        self.in_flight -= 1
        self.finished += 1

    def requests_finished(self, count: int) -> None:
        self.in_flight -= count
        self.finished += count
