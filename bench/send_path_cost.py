"""CPU cost of one SEND_MESSAGE_V2 through the broker, in process: decode, dispatch, processor, store, encode.

No sockets and no client: a broker (``BrokerController``, default store settings) on this process's loop, and
its server fed decoded copies of one 1 KiB ROCKETMQ-serialized send, ``--window`` at a time before the loop gets
a turn (the 16 in flight of the benchmark Producer), as the connection hands them over: each window in one
``RemotingServer.dispatch_many`` call ("as one read", where the tree has it), else one ``dispatch`` per request
(also with ``--per-request``); every answer is encoded as the channel would. The figure is the event-loop thread's CPU time per message (``time.thread_time``), which another process
taking the core does not change much: the way to compare two checkouts on a busy machine. ``--a``/``--b`` run
each tree in its own interpreter, interleaved::

    python -m bench.send_path_cost --a /tmp/base --b . --rounds 5 --messages 20000
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.interleave import add_side_arguments, enter_tree, interleaved_rounds, sides
from bench.null_transport import NullTransport
from bench.opcode_counter import OpcodeCounter


async def measure(
    messages: int,
    window: int,
    store_dir: Path,
    per_request: bool = False,
    serialize: str = "rocketmq",
    bytecodes: bool = False,
    wire: bool = False,
    queues: int = 1,
) -> float:
    from broker.testing.in_loop import start_in_loop
    from remoting.command import RemotingCommand
    from remoting.headers import SendMessageRequestHeader, encode_header

    controller = await start_in_loop(store_dir, mappedFileSizeCommitLog=256 * 1024 * 1024)
    try:
        frames = []
        for queue_id in range(queues):  # (--queues: the sends of a read to queues 0.. in turn, as the Producer's)
            hdr = SendMessageRequestHeader(
                producer_group="benchmark_producer",
                topic="BenchmarkTest",
                default_topic="TBW102",
                default_topic_queue_nums=4,
                queue_id=queue_id,
                sys_flag=0,
                born_timestamp=int(time.time() * 1000),
                flag=0,
                properties="UNIQ_KEY\x017F0000014E2A18B4AAC27D2F6B9E0000\x02WAIT\x01true\x02",
                reconsume_times=0,
                max_reconsume_times=16,
                broker_name="broker-a",
            )
            request = RemotingCommand.request(
                310, encode_header(hdr.to_v2()), b"x" * 1024, serialize_type=_SERIALIZE[serialize]
            )
            frames.append(request.to_bytes()[4:])
        frame = frames[0]
        channel = _Channel()
        dispatch = controller.server.dispatch
        dispatch_many = None if per_request else getattr(controller.server, "dispatch_many", None)
        decode = RemotingCommand.decode
        for warm in range(2000):  # topic auto-creation, compiled header codecs, first mapped file
            dispatch(channel, decode(frame))
            if warm % window == 0:
                await asyncio.sleep(0)
        while channel.inflight:
            await asyncio.sleep(0.001)
        if wire:
            return await _measure_wire(controller.server, frames, messages, window, bytecodes)
        ops = OpcodeCounter() if bytecodes else None
        if ops is not None:
            sys.settrace(ops.trace)
        t0 = time.thread_time()
        if dispatch_many is None:
            for i in range(messages):
                cmd = decode(frame)
                cmd.opaque = i
                dispatch(channel, cmd)
                if i % window == window - 1:
                    await asyncio.sleep(0)
        else:
            for first in range(0, messages, window):
                read = []
                for i in range(first, min(first + window, messages)):
                    cmd = decode(frame)
                    cmd.opaque = i
                    read.append(cmd)
                dispatch_many(channel, read)
                await asyncio.sleep(0)
        while channel.inflight:
            await asyncio.sleep(0)
        if ops is not None:
            sys.settrace(None)
            return ops.count / messages
        return (time.thread_time() - t0) * 1e6 / messages
    finally:
        await controller.shutdown()


async def _measure_wire(server, frames: list[bytes], messages: int, window: int, bytecodes: bool) -> float:  # noqa: ANN001
    """``--wire``: the same sends as bytes through the connection's own code (``RemotingProtocol``: frame split,
    decode, grouping, dispatch, ``Channel.send`` and the flush at the loop turn's end) over a transport that
    drops what is written: each window of frames is one ``data_received``, as one read of the socket."""
    from remoting.protocol import RemotingProtocol

    transport = NullTransport()
    protocol = RemotingProtocol(server, 1_000_000)
    protocol.connection_made(transport)
    read = b"".join(len(frame).to_bytes(4, "big") + frame for frame in (frames * window)[:window])
    for _ in range(200):
        protocol.data_received(read)
        await asyncio.sleep(0)
    while protocol.inflight:
        await asyncio.sleep(0.001)
    ops = OpcodeCounter() if bytecodes else None
    if ops is not None:
        sys.settrace(ops.trace)
    t0 = time.thread_time()
    for _ in range(messages // window):
        protocol.data_received(read)
        await asyncio.sleep(0)
    while protocol.inflight:
        await asyncio.sleep(0)
    if ops is not None:
        sys.settrace(None)
        return ops.count / (messages // window * window)
    cost = (time.thread_time() - t0) * 1e6 / (messages // window * window)
    protocol.connection_lost(None)
    return cost


_SERIALIZE = {
    "json": 0,
    "rocketmq": 1,
}  # RocketMQ's benchmark Producer sends ROCKETMQ; the Java client's default is JSON


class _Channel:
    """What dispatch and the processors need of a connection; answers are encoded, as a real one would. (Not
    remoting.offline_channel's: this script measures other checkouts too, older ones without that module.)"""

    remote_addr = "127.0.0.1:40000"

    def __init__(self) -> None:
        self.attrs: dict[str, object] = {}
        self.inflight = 0
        self.answers = 0

    def send(self, cmd) -> None:  # noqa: ANN001
        cmd.encode()
        self.answers += 1

    def send_many(self, cmds) -> list:  # noqa: ANN001
        for cmd in cmds:
            cmd.encode()
        self.answers += len(cmds)
        return []

    def request_started(self) -> None:
        self.inflight += 1

    def request_finished(self) -> None:
        self.inflight -= 1

    def requests_started(self, count: int) -> None:
        self.inflight += count

    def requests_finished(self, count: int) -> None:
        self.inflight -= count


def child(args: argparse.Namespace) -> int:
    enter_tree(args.root)
    try:
        import uvloop

        runner = uvloop.run
    except ImportError:
        runner = asyncio.run
    with tempfile.TemporaryDirectory(prefix="send-cost-") as tmp:
        print(
            f"{runner(measure(args.messages, args.window, Path(tmp), args.per_request, args.serialize, args.bytecodes, args.wire, args.queues)):.2f}"
        )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Event-loop CPU per SEND_MESSAGE_V2, in process, two trees.")
    add_side_arguments(parser, rounds=5, a_help="repo root of side A (e.g. the base commit)")
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--window", type=int, default=16, help="sends dispatched before the loop gets a turn")
    parser.add_argument("--per-request", action="store_true", help="one dispatch per request on both sides")
    parser.add_argument(
        "--serialize",
        choices=sorted(_SERIALIZE),
        default="rocketmq",
        help="header encoding (benchmark Producer: rocketmq)",
    )
    parser.add_argument(
        "--bytecodes", action="store_true", help="count Python bytecodes per send instead of CPU time (slow)"
    )
    parser.add_argument(
        "--wire", action="store_true", help="feed bytes through the connection (frame split, grouping, write)"
    )
    parser.add_argument(
        "--queues", type=int, default=1, help="--wire: a read's sends to queues 0..N-1 in turn (the Producer's: 4)"
    )
    args = parser.parse_args(argv)
    if args.root is not None:
        return child(args)
    trees = sides(args.a, args.b)
    unit = "bytecodes" if args.bytecodes else "us"
    flags = ["--messages", str(args.messages), "--window", str(args.window), "--serialize", args.serialize]
    flags += (["--bytecodes"] if args.bytecodes else []) + (["--wire"] if args.wire else [])
    flags += ["--per-request"] if args.per_request else []
    flags += ["--queues", str(args.queues)] if args.queues != 1 else []
    figures = interleaved_rounds(
        trees,
        args.rounds,
        lambda root: [sys.executable, __file__, "--root", str(root), *flags],
        f"{unit}/msg",
        digits=1,
    )
    med = {side: statistics.median(values) for side, values in figures.items()}
    for side, root in trees.items():
        what = "Python bytecodes on the loop's thread" if args.bytecodes else "us of event-loop CPU"
        print(f"{side} {root}: median {med[side]:.1f} {what} per send")
    if "A" in med:
        print(f"B/A = {med['B'] / med['A']:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
