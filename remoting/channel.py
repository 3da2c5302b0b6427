"""``Channel``: one TCP connection as the rest of the code sees it — send, close, and invoke the peer.

Used on both sides: the server hands a Channel to processors (and invokes clients through it:
CHECK_TRANSACTION_STATE, NOTIFY_CONSUMER_IDS_CHANGED, ...), the client invokes servers through
one. Requests we send carry opaques from this channel's own counter; the peer's responses
(flag bit0) complete them.
"""

from __future__ import annotations

import asyncio
from itertools import chain
from typing import TYPE_CHECKING, Any

import structlog

from remoting.command import FLAG_ONEWAY, FLAG_RESPONSE, RemotingCommand
from remoting.errors import (
    RemotingConnectError,
    RemotingSendRequestError,
    RemotingTimeoutError,
)

if TYPE_CHECKING:
    from remoting.protocol import RemotingProtocol

log = structlog.get_logger(__name__)

_OPAQUE_MAX = 0x7FFFFFFF  # opaques are int32 in the binary header
#: answers buffered in one loop iteration past this many bytes are written at once (see Channel.send). A drain's
#: pull answer (32 x 1 KiB, ~38 KB) is past it: it leaves as soon as it is made, so the consumer decodes it while the
#: loop answers the read's other pulls, as the Java broker's Netty writes each answer when its pull thread is done.
#: Held to the turn's end with the read's other answers (the bound was 256 KiB), a read of four such pulls answered
#: all four at once, and the consumer and the broker took turns instead of overlapping (`bench/pull_trace.py`: the
#: broker's share of a drain round trip, p10, 0.34-0.52 ms against 0.18-0.22 ms). Small answers (a send's ~100
#: bytes, a caught-up pull's one message) still share one write per turn; one more syscall per ~38 KB is noise.
FLUSH_EARLY_BYTES = 16 * 1024
_flatten = chain.from_iterable


def _format_addr(peer: Any) -> str:
    if isinstance(peer, tuple) and len(peer) >= 2:
        return f"{peer[0]}:{peer[1]}"
    return str(peer) if peer is not None else "?"


class Channel:
    __slots__ = (
        "__weakref__",
        "_closed",
        "_loop",
        "_next_opaque",
        "_out",
        "_out_bytes",
        "_pending",
        "_protocol",
        "_transport",
        "attrs",
        "id",
        "local_addr",
        "remote_addr",
        "request_finished",
        "request_started",
        "requests_finished",
        "requests_started",
    )

    def __init__(self, transport: asyncio.Transport, protocol: RemotingProtocol, channel_id: int) -> None:
        self.id = channel_id
        self.remote_addr = _format_addr(transport.get_extra_info("peername"))
        self.local_addr = _format_addr(transport.get_extra_info("sockname"))
        self.attrs: dict[str, Any] = {}
        self._transport = transport
        self._protocol = protocol
        self._pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        self._next_opaque = 0
        self._closed = False
        self._loop = asyncio.get_running_loop()
        # Commands written during one loop iteration, flushed together (see send()).
        self._out: list[bytes | memoryview] = []
        self._out_bytes = 0
        # The in-flight count (RequestTask, answer_now, request groups): the protocol's own methods, bound here
        # rather than wrapped, so that counting a request costs one call, not two (twice for every request).
        self.request_started = protocol.request_started
        self.request_finished = protocol.request_finished
        self.requests_started = protocol.requests_started
        self.requests_finished = protocol.requests_finished

    def __repr__(self) -> str:
        return f"Channel(id={self.id}, remote={self.remote_addr}, active={self.is_active})"

    @property
    def is_active(self) -> bool:
        return not self._closed and not self._transport.is_closing()

    @property
    def write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size()

    @property
    def pending_invokes(self) -> int:
        return len(self._pending)

    def send(self, cmd: RemotingCommand) -> None:
        """Write a command. Never blocks; a closed channel drops it (the peer is gone anyway).

        Commands sent in the same loop iteration leave in one ``writelines`` at its end: under
        pipelined load that is one syscall for many responses instead of one each. Past
        ``FLUSH_EARLY_BYTES`` they leave at once, so the transport's write buffer (and with it the
        pause of reading, see ``FlowControl``) sees them even while one read's requests are all
        answered on the reader's stack.
        """
        if self._closed or self._transport.is_closing():
            log.debug("dropping write on a closed channel", remote=self.remote_addr, code=cmd.code, opaque=cmd.opaque)
            return
        out = self._out
        if not out:
            self._loop.call_soon(self.flush)
        parts = cmd.encode()
        out += parts
        size = self._out_bytes + len(parts[0])
        if len(parts) > 1:
            size += len(parts[1])
        self._out_bytes = size
        if size >= FLUSH_EARLY_BYTES:
            self.flush()

    def send_many(self, cmds: list[RemotingCommand]) -> list[tuple[int, Exception]]:
        """Write several commands (a request group's answers) as ``send`` writes each, with one closed check,
        one scheduled flush and one size update for all (past ``FLUSH_EARLY_BYTES`` they leave at once, after
        the last). A command that cannot be encoded is left out and returned with its index and the error (the
        caller logs it); the others are written."""
        if self._closed or self._transport.is_closing():
            log.debug("dropping writes on a closed channel", remote=self.remote_addr, commands=len(cmds))
            return []
        failed: list[tuple[int, Exception]] = []
        try:
            encoded = [cmd.encode() for cmd in cmds]
        except Exception:  # noqa: BLE001 - one unencodable answer must not cost the others: encode one by one
            encoded = []
            for i, cmd in enumerate(cmds):
                try:
                    encoded.append(cmd.encode())
                except Exception as exc:  # noqa: BLE001
                    failed.append((i, exc))
        parts = list(_flatten(encoded))
        if parts:
            self._queue(parts, sum(map(len, parts)))
        return failed

    def send_encoded(self, data: bytes, count: int) -> None:
        """Write ``count`` commands already encoded into ``data`` (a request group's answers, see
        ``remoting.send_answer.encode_answers``) as ``send_many`` writes them."""
        if self._closed or self._transport.is_closing():
            log.debug("dropping writes on a closed channel", remote=self.remote_addr, commands=count)
            return
        self._queue((data,), len(data))

    def _queue(self, parts: list[bytes] | tuple[bytes, ...], size: int) -> None:
        """Queue a group's encoded ``parts`` (``size`` bytes in all) for the flush at the loop turn's end, scheduled
        by the first write of the turn; past ``FLUSH_EARLY_BYTES`` queued they leave at once. (``send``, once per
        answer, does the same inline.)"""
        out = self._out
        if not out:
            self._loop.call_soon(self.flush)
        out += parts
        size += self._out_bytes
        self._out_bytes = size
        if size >= FLUSH_EARLY_BYTES:
            self.flush()

    def flush(self) -> None:
        out = self._out
        if out:
            self._out = []
            self._out_bytes = 0
            if not self._transport.is_closing():
                self._transport.writelines(out)

    def close(self) -> None:
        if not self._transport.is_closing():
            self.flush()
            self._transport.close()

    # ---- requests to the peer -------------------------------------------------------------
    def _assign_opaque(self, request: RemotingCommand) -> int:
        # Start at 1: N treats a decoded opaque 0 as missing.
        self._next_opaque = self._next_opaque % _OPAQUE_MAX + 1
        request.opaque = self._next_opaque
        return request.opaque

    async def invoke(self, request: RemotingCommand, timeout_s: float) -> RemotingCommand:
        """Send a request and await the peer's response (matched by opaque)."""
        if not self.is_active:
            raise RemotingSendRequestError(f"channel to {self.remote_addr} is closed")
        request.flag &= ~(FLAG_RESPONSE | FLAG_ONEWAY)
        opaque = self._assign_opaque(request)
        fut: asyncio.Future[RemotingCommand] = self._loop.create_future()
        self._pending[opaque] = fut
        timer = self._loop.call_later(timeout_s, self._expire, opaque, fut, timeout_s)
        try:
            self.send(request)
            return await fut
        finally:
            timer.cancel()
            self._pending.pop(opaque, None)

    def invoke_oneway(self, request: RemotingCommand) -> None:
        """Send a request flagged oneway; no response is expected."""
        if not self.is_active:
            raise RemotingSendRequestError(f"channel to {self.remote_addr} is closed")
        request.flag = (request.flag | FLAG_ONEWAY) & ~FLAG_RESPONSE
        self._assign_opaque(request)
        self.send(request)

    def _expire(self, opaque: int, fut: asyncio.Future[RemotingCommand], timeout_s: float) -> None:
        if not fut.done():
            fut.set_exception(
                RemotingTimeoutError(
                    f"wait response on the channel <{self.remote_addr}> timeout, {int(timeout_s * 1000)}(ms), "
                    f"opaque {opaque}"
                )
            )

    # ---- called by the protocol -------------------------------------------------------------
    def response_received(self, response: RemotingCommand) -> None:
        fut = self._pending.pop(response.opaque, None)
        if fut is None or fut.done():
            # Late (timed out) or unsolicited; J logs and drops it too.
            log.debug(
                "response for an unknown opaque", remote=self.remote_addr, opaque=response.opaque, code=response.code
            )
            return
        fut.set_result(response)

    def connection_lost(self, exc: BaseException | None) -> None:
        self._closed = True
        self._out = []
        self._out_bytes = 0
        pending, self._pending = self._pending, {}
        for opaque, fut in pending.items():
            if not fut.done():
                fut.set_exception(
                    RemotingConnectError(
                        f"connection to {self.remote_addr} closed before the response to opaque {opaque}"
                        + (f": {exc}" if exc else "")
                    )
                )
