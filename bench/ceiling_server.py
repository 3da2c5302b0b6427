"""The protocol ceiling: a bare uvloop server that answers every SEND with a pre-encoded SEND_OK.

It is a name server and a broker on one port, and does nothing a broker must do: no store, no
queues, no flow control. A load tool pointed at it measures what the client, the loopback and one
Python event loop can carry, so a broker's figure can be read as a share of that ceiling
(``bench/vs_java.py`` reports it so). Requests it does not know get SUCCESS with no body, which is
what the benchmark producer needs for heartbeats and unregistering.

    python -m bench.ceiling_server --port 19876      # then point a producer's name server at it
"""

from __future__ import annotations

import argparse
import asyncio
import struct
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import orjson

from remoting.codes import RequestCode, ResponseCode
from remoting.command import FLAG_RESPONSE, RemotingCommand
from remoting.frame import FrameDecoder
from remoting.loop import new_event_loop

# ROCKETMQ (binary) header: the opaque sits at a fixed place, so a pre-encoded answer only needs it patched.
# frame = length(4) headerLenAndType(4) code(2) language(1) version(2) opaque(4) ...
_OPAQUE_AT = 13
_OPAQUE = struct.Struct(">i")
_SENDS = frozenset({RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE})
QUEUE_NUMS = 8


def _pre_encoded(code: int, ext_fields: dict[str, str] | None = None, body: bytes | None = None) -> bytes:
    return RemotingCommand(
        code=code, flag=FLAG_RESPONSE, ext_fields=ext_fields or {}, body=body, serialize_type=1
    ).to_bytes()


def route_body(addr: str, broker_name: str = "ceiling") -> bytes:
    """A TopicRouteData naming this server as the only master of every topic."""
    return orjson.dumps(
        {
            "brokerDatas": [{"brokerAddrs": {"0": addr}, "brokerName": broker_name, "cluster": "DefaultCluster"}],
            "filterServerTable": {},
            "queueDatas": [
                {
                    "brokerName": broker_name,
                    "perm": 6,
                    "readQueueNums": QUEUE_NUMS,
                    "topicSysFlag": 0,
                    "writeQueueNums": QUEUE_NUMS,
                }
            ],
        }
    )


class CeilingProtocol(asyncio.Protocol):
    """Decode every complete frame of a read, answer all of them in one write."""

    def __init__(self, answers: dict[int, bytes], default: bytes) -> None:
        self._answers = answers
        self._default = default
        self._decoder = FrameDecoder()
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        out: list[bytes] = []
        for frame in self._decoder.feed(data):
            code, opaque, oneway = _code_and_opaque(frame)
            if oneway:
                continue
            answer = bytearray(self._answers.get(code, self._default))
            _OPAQUE.pack_into(answer, _OPAQUE_AT, opaque)
            out.append(answer)
        if out and self._transport is not None:
            self._transport.writelines(out)


def _code_and_opaque(frame: memoryview) -> tuple[int, int, bool]:
    word = int.from_bytes(frame[:4], "big")
    stype, hlen = word >> 24, word & 0xFFFFFF
    if stype == 1:
        code, _lang, _ver, opaque, flag = struct.unpack_from(">hbhii", frame, 4)
    else:
        header = orjson.loads(bytes(frame[4 : 4 + hlen]))
        code, opaque, flag = header["code"], header["opaque"], header.get("flag", 0)
    return code, opaque, bool(flag & 2)


async def serve(host: str, port: int, advertised: str | None = None) -> asyncio.Server:
    """Listen on host:port (0 picks a free port); routes name ``advertised`` or the address bound."""
    send_ok = _pre_encoded(
        ResponseCode.SUCCESS,
        {
            "msgId": "7F00000100002A9F0000000000000000",
            "queueId": "0",
            "queueOffset": "0",
            "MSG_REGION": "DefaultRegion",
            "TRACE_ON": "true",
        },
    )
    answers = {int(code): send_ok for code in _SENDS}
    default = _pre_encoded(ResponseCode.SUCCESS)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: CeilingProtocol(answers, default), host, port)
    addr = advertised or f"{host}:{server.sockets[0].getsockname()[1]}"
    answers[int(RequestCode.GET_ROUTEINFO_BY_TOPIC)] = _pre_encoded(ResponseCode.SUCCESS, body=route_body(addr))
    return server


@contextmanager
def ceiling_process(port: int) -> Iterator[subprocess.Popen[str]]:
    """This server as a child process on ``port``, listening when the block starts, stopped when it ends (the
    benchmarks drive it with the Java tools, which need it in a process of its own)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.ceiling_server", "--port", str(port)],
        cwd=Path(__file__).resolve().parents[1],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        proc.stdout.readline()  # "listening"
        yield proc
    finally:
        proc.terminate()
        proc.wait(10)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=19876)
    args = parser.parse_args(argv)
    loop = new_event_loop()
    asyncio.set_event_loop(loop)
    server = loop.run_until_complete(serve(args.host, args.port))
    print(f"ceiling server listening on {args.host}:{args.port}", flush=True)
    try:
        loop.run_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
        loop.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
