"""A scripted stand-in for ``RemotingClient``: name-server routes plus a per-test broker answer."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable

from remoting.codes import RequestCode
from remoting.command import RemotingCommand
from remoting.errors import RemotingTimeoutError

NAMESRV = "127.0.0.1:9876"
BROKERS = {"broker-a": "10.0.0.1:10911", "broker-b": "10.0.0.2:10911"}


def route_body(topic: str, queues: int = 2, brokers: dict[str, str] = BROKERS) -> bytes:
    return json.dumps(
        {
            "brokerDatas": [{"brokerName": n, "cluster": "C", "brokerAddrs": {"0": a}} for n, a in brokers.items()],
            "queueDatas": [
                {"brokerName": n, "readQueueNums": queues, "writeQueueNums": queues, "perm": 6, "topicSysFlag": 0}
                for n in brokers
            ],
            "filterServerTable": {},
        }
    ).encode()


Handler = Callable[[str, RemotingCommand, float], Awaitable[RemotingCommand] | RemotingCommand]


class FakeClient:
    def __init__(self, broker: Handler, *, routes: dict[str, bytes] | None = None) -> None:
        self.broker = broker
        self.routes = routes if routes is not None else {"T": route_body("T")}
        self.calls: list[tuple[str, RemotingCommand, float]] = []
        self.oneway: list[tuple[str, RemotingCommand]] = []

    async def invoke(self, addr: str, request: RemotingCommand, timeout_s: float) -> RemotingCommand:
        if request.code == RequestCode.GET_ROUTEINFO_BY_TOPIC:
            body = self.routes.get(request.ext_fields["topic"])
            if body is None:
                return request.response(17, "No topic route info in name server for the topic")
            return request.response(0, body=body)
        self.calls.append((addr, request, timeout_s))
        result = self.broker(addr, request, timeout_s)
        if asyncio.iscoroutine(result):
            result = await result
        return result  # type: ignore[return-value]

    async def invoke_oneway(self, addr: str, request: RemotingCommand) -> None:
        self.oneway.append((addr, request))

    def set_request_handler(self, code, handler) -> None:  # noqa: ANN001
        pass

    async def close(self) -> None:
        pass


def ok(request: RemotingCommand, queue_id: int = 0, offset: int = 7) -> RemotingCommand:
    return request.response(
        0,
        ext_fields={
            "msgId": "0A00000100002A9F0000000000000001",
            "queueId": str(queue_id),
            "queueOffset": str(offset),
            "MSG_REGION": "DefaultRegion",
            "TRACE_ON": "true",
        },
    )


async def stall(timeout_s: float) -> RemotingCommand:
    await asyncio.sleep(0)
    raise RemotingTimeoutError(f"no answer within {timeout_s}s")
