"""ProxyChannel: a 5.x client as the broker's processors see it.

The gRPC service turns each call into the remoting request a 4.x client would send and hands it to
the broker's own dispatch table (``RemotingServer.dispatch``): same processors, same bounded queues,
same fast failure and metrics. The processors answer through ``Channel.send``; here that completes the
future the gRPC call awaits. Requests the broker sends *to* the client (CHECK_TRANSACTION_STATE) go to
``on_broker_request``, which the service turns into Telemetry commands.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from typing import Any

from remoting.codes import ResponseCode
from remoting.command import FLAG_RESPONSE, RemotingCommand


class ProxyChannel:
    """One per 5.x client id; duck-types ``remoting.channel.Channel`` for processors and managers."""

    #: every request on this channel comes from a 5.x call the service has put through ACL (proxy/auth.py)
    acl_checked_by_proxy = True

    def __init__(
        self, client_id: str, remote_addr: str, local_addr: str, dispatch: Callable[[Any, RemotingCommand], None]
    ) -> None:
        self.id = f"grpc:{client_id}"
        self.client_id = client_id
        self.remote_addr = remote_addr
        self.local_addr = local_addr
        self.attrs: dict[str, Any] = {}
        self._dispatch = dispatch
        self._opaques = itertools.count(1)
        self._pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        self._closed = False
        self.on_broker_request: Callable[[RemotingCommand], None] | None = None

    def __repr__(self) -> str:
        return f"ProxyChannel(client={self.client_id}, remote={self.remote_addr})"

    # -- what the gRPC service uses -------------------------------------------------------------------
    async def call(self, request: RemotingCommand, timeout_s: float) -> RemotingCommand:
        """Dispatch a request into the broker's table and await its answer."""
        request.opaque = next(self._opaques) & 0x7FFFFFFF
        future: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
        self._pending[request.opaque] = future
        try:
            self._dispatch(self, request)
            return await asyncio.wait_for(future, timeout_s)
        finally:
            self._pending.pop(request.opaque, None)

    # -- the Channel surface processors and executors use --------------------------------------------
    @property
    def is_active(self) -> bool:
        return not self._closed

    @property
    def write_buffer_size(self) -> int:
        return 0

    def send(self, cmd: RemotingCommand) -> None:
        if cmd.flag & FLAG_RESPONSE:
            future = self._pending.get(cmd.opaque)
            if future is not None and not future.done():
                future.set_result(cmd)
            return
        self.invoke_oneway(cmd)

    def invoke_oneway(self, request: RemotingCommand) -> None:
        if self.on_broker_request is not None:
            self.on_broker_request(request)

    async def invoke(self, request: RemotingCommand, timeout_s: float) -> RemotingCommand:
        """Broker → client calls that expect an answer (consumer running info, direct consumption) have
        no 5.x counterpart we serve: the admin asking gets a clear refusal, not an empty success."""
        return request.response(
            ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
            f"client {self.client_id} is a RocketMQ 5.x (gRPC) client: it does not answer request code {request.code}",
        )

    def request_started(self) -> None:
        pass

    def request_finished(self) -> None:
        pass

    def close(self) -> None:
        self._closed = True
