"""FAULT_INJECT (5001), mini-rocketmq's own admin request, from the client side: the one place its request
is built, for mqadmin, the embedded broker, mqclient's AdminClient, benchmarks and tests.

``inject_fault`` / ``inject_fault_async`` raise ``FaultInjectionError`` with the broker's remark when it
refuses (unknown kind, bad duration, ``faultInjectionEnable=false``). The kinds are described with the
broker side, ``broker.fault_injection``.
"""

from __future__ import annotations

import asyncio

from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.headers import FaultInjectRequestHeader, encode_header


class FaultInjectionError(Exception):
    """A FAULT_INJECT the broker refused (bad kind/target/duration, injection disabled) or could not reach."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


def fault_inject_request(
    kind: str, *, target: str | None = None, duration_ms: int = 0, value: str | None = None
) -> RemotingCommand:
    """The FAULT_INJECT (5001) request for one fault."""
    hdr = FaultInjectRequestHeader(kind=kind, target=target, duration_ms=duration_ms, value=value)
    return RemotingCommand.request(RequestCode.FAULT_INJECT, encode_header(hdr))


async def inject_fault_async(
    addr: str,
    kind: str,
    *,
    duration_ms: int = 0,
    target: str | None = None,
    value: str | None = None,
    client: RemotingClient | None = None,
    timeout_s: float = 5.0,
) -> None:
    """Arm ``kind`` on the broker at ``addr`` ("host:port"); FaultInjectionError if it refuses or is unreachable.

    ``client``: reuse a connected ``RemotingClient``; otherwise one is opened and closed for this call.
    """
    own = client is None
    rc = RemotingClient() if client is None else client
    try:
        resp = await rc.invoke(
            addr, fault_inject_request(kind, target=target, duration_ms=duration_ms, value=value), timeout_s
        )
    except Exception as exc:
        raise FaultInjectionError(f"FAULT_INJECT to {addr} failed: {exc}") from exc
    finally:
        if own:
            await rc.close()
    if resp.code != ResponseCode.SUCCESS:
        raise FaultInjectionError(
            f"broker {addr} refused FAULT_INJECT {kind}: {resp.remark} (code {resp.code})", resp.code
        )


def inject_fault(
    addr: str,
    kind: str,
    *,
    duration_ms: int = 0,
    target: str | None = None,
    value: str | None = None,
    timeout_s: float = 5.0,
) -> None:
    """Blocking ``inject_fault_async`` for command-line tools (must not be called from a running loop)."""
    asyncio.run(
        inject_fault_async(addr, kind, duration_ms=duration_ms, target=target, value=value, timeout_s=timeout_s)
    )
