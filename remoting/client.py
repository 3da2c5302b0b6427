"""``RemotingClient``: request/response over one multiplexed connection per address.

Used by tools, tests, benchmarks and the broker's name-server registration. ``invoke`` covers
connecting and waiting under one timeout; requests the server sends us (flag bit0 clear) go to
handlers registered with ``set_request_handler`` and are answered by opaque.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable

import structlog

from remoting.channel import Channel
from remoting.codes import ResponseCode
from remoting.command import FLAG_ONEWAY, FLAG_RESPONSE, RemotingCommand
from remoting.errors import RemotingConnectError, RemotingTimeoutError
from remoting.executor import exception_remark
from remoting.frame import DEFAULT_FRAME_MAX
from remoting.protocol import RemotingProtocol
from remoting.signature import SessionCredentials, sign_request_fields

log = structlog.get_logger(__name__)

RequestHandler = Callable[[Channel, RemotingCommand], Awaitable[RemotingCommand | None]]


def parse_addr(addr: str) -> tuple[str, int]:
    host, sep, port = addr.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise RemotingConnectError(f"bad address {addr!r}, expected host:port")
    return host.strip("[]"), int(port)


class RemotingClient:
    def __init__(
        self,
        *,
        connect_timeout_s: float = 3.0,
        frame_max: int = DEFAULT_FRAME_MAX,
        max_inflight: int = 1 << 30,
        credentials: SessionCredentials | None = None,
    ) -> None:
        self.connect_timeout_s = connect_timeout_s
        #: when set, every request is signed for ACL 1.0 (J ``AclClientRPCHook``) just before it goes out
        self.credentials = credentials
        self.frame_max = frame_max
        self.max_inflight = max_inflight
        self._channels: dict[str, Channel] = {}
        self._connecting: dict[str, asyncio.Future[Channel]] = {}
        self._handlers: dict[int, RequestHandler] = {}
        self._handler_tasks: set[asyncio.Task[None]] = set()
        self._channel_ids = itertools.count(1)
        self._closed = False

    def set_request_handler(self, code: int, handler: RequestHandler) -> None:
        """Handle server→client requests with ``code``; the handler's result is sent back (unless oneway)."""
        self._handlers[int(code)] = handler

    # ---- connections -------------------------------------------------------------------------
    async def get_channel(self, addr: str, timeout_s: float | None = None) -> Channel:
        channel = self._channels.get(addr)
        if channel is not None and channel.is_active:
            return channel
        if self._closed:
            raise RemotingConnectError("client is closed")
        fut = self._connecting.get(addr)
        if fut is None:
            fut = asyncio.ensure_future(self._connect(addr))
            self._connecting[addr] = fut
            fut.add_done_callback(lambda f, a=addr: self._connect_done(a, f))
        timeout = self.connect_timeout_s if timeout_s is None else min(timeout_s, self.connect_timeout_s)
        try:
            return await asyncio.wait_for(asyncio.shield(fut), timeout)
        except TimeoutError:
            raise RemotingConnectError(f"connect to {addr} timed out after {timeout:.3f}s") from None

    def _connect_done(self, addr: str, fut: asyncio.Future[Channel]) -> None:
        self._connecting.pop(addr, None)
        if not fut.cancelled():
            fut.exception()  # mark retrieved: every waiter may have timed out already

    async def _connect(self, addr: str) -> Channel:
        host, port = parse_addr(addr)
        loop = asyncio.get_running_loop()
        try:
            _, protocol = await asyncio.wait_for(
                loop.create_connection(
                    lambda: RemotingProtocol(
                        self, next(self._channel_ids), frame_max=self.frame_max, max_inflight=self.max_inflight
                    ),
                    host,
                    port,
                ),
                self.connect_timeout_s,
            )
        except TimeoutError:
            raise RemotingConnectError(f"connect to {addr} timed out after {self.connect_timeout_s}s") from None
        except OSError as exc:
            raise RemotingConnectError(f"connect to {addr} failed: {exc}") from exc
        channel = protocol.channel
        assert channel is not None
        channel.attrs["addr"] = addr
        if self._closed:
            channel.close()
            raise RemotingConnectError("client is closed")
        self._channels[addr] = channel
        return channel

    # ---- requests ----------------------------------------------------------------------------
    async def invoke(self, addr: str, request: RemotingCommand, timeout_s: float) -> RemotingCommand:
        """Send ``request`` to ``addr`` and await its response; the timeout covers connecting too."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        channel = await self.get_channel(addr, timeout_s)
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise RemotingTimeoutError(f"invoke to {addr} timed out while connecting ({timeout_s}s)")
        if self.credentials is not None:
            sign_request_fields(request.ext_fields, request.body, self.credentials)
        return await channel.invoke(request, remaining)

    async def invoke_oneway(self, addr: str, request: RemotingCommand) -> None:
        channel = await self.get_channel(addr)
        if self.credentials is not None:
            sign_request_fields(request.ext_fields, request.body, self.credentials)
        channel.invoke_oneway(request)

    async def close(self) -> None:
        self._closed = True
        for fut in list(self._connecting.values()):
            fut.cancel()
        for channel in list(self._channels.values()):
            channel.close()
        self._channels.clear()
        for task in list(self._handler_tasks):
            task.cancel()
        if self._handler_tasks:
            await asyncio.gather(*self._handler_tasks, return_exceptions=True)
        await asyncio.sleep(0)  # let the transports' connection_lost run

    # ---- Dispatcher (called by RemotingProtocol) ----------------------------------------------
    def channel_connected(self, channel: Channel) -> None:
        log.debug("connected", remote=channel.remote_addr)

    def channel_error(self, channel: Channel, exc: BaseException) -> None:
        log.debug("connection error", remote=channel.remote_addr, error=str(exc))

    def channel_closed(self, channel: Channel, exc: BaseException | None) -> None:
        addr = channel.attrs.get("addr")
        if addr is not None and self._channels.get(addr) is channel:
            del self._channels[addr]

    def dispatch(self, channel: Channel, request: RemotingCommand) -> None:
        handler = self._handlers.get(request.code)
        if handler is None:
            if not request.flag & FLAG_ONEWAY:
                channel.send(
                    request.response(
                        ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {request.code} not supported"
                    )
                )
            return
        task = asyncio.ensure_future(self._handle(handler, channel, request))
        self._handler_tasks.add(task)
        task.add_done_callback(self._handler_tasks.discard)

    async def _handle(self, handler: RequestHandler, channel: Channel, request: RemotingCommand) -> None:
        oneway = request.flag & FLAG_ONEWAY
        try:
            response = await handler(channel, request)
        except Exception as exc:  # noqa: BLE001 - a handler bug is answered, not propagated  # noqa: BLE001 - a handler bug is answered, not propagated
            log.warning("request handler failed", code=request.code, error=exception_remark(exc))
            response = None if oneway else request.response(ResponseCode.SYSTEM_ERROR, exception_remark(exc))
        if response is not None and not oneway:
            response.opaque = request.opaque
            response.flag |= FLAG_RESPONSE
            channel.send(response)
