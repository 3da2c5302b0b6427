"""Python bytecodes (or CPU) a request costs in the connection alone, two trees interleaved.

``RemotingProtocol.data_received`` into a ``RemotingServer`` whose ``dispatch`` and ``dispatch_many`` do nothing:
the frame split, the header decode, the grouping question and the run bookkeeping, without the executor, the
processor or the store that ``bench.send_path_cost --wire`` also counts (and whose timers make its one-send-a-read
figure move ±5 %). Frames carry a ROCKETMQ header with a learned layout, as the benchmark Producer's do. Shapes:
``send16`` (16 grouped sends a read, the Producer's usual read) and ``pull1`` (one request that never groups a
read, a consumer's pull).

    python -m bench.connection_cost --a /work/main --b . --shape send16
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time

from bench.interleave import add_side_arguments, enter_tree, interleaved_rounds, sides
from bench.null_transport import NullTransport

_SHAPES = {"send16": (310, 16), "pull1": (11, 1)}


async def measure(shape: str, reads: int, bytecodes: bool) -> float:
    """Bytecodes (or µs of CPU) a request over ``reads`` reads of ``shape``, after a warm-up that learns the
    layout."""
    from bench.opcode_counter import OpcodeCounter
    from remoting.command import RemotingCommand
    from remoting.executor import RequestExecutor
    from remoting.protocol import RemotingProtocol
    from remoting.server import RemotingServer

    class Server(RemotingServer):
        def dispatch(self, channel, request) -> None:  # noqa: ANN001
            pass

        def dispatch_many(self, channel, requests) -> None:  # noqa: ANN001
            pass

    class Sends:
        def groupable(self, request) -> bool:  # noqa: ANN001
            return request.ext_fields.get("m") is None

        async def process_requests(self, channel, requests):  # noqa: ANN001, ANN201
            return []

        async def process_request(self, channel, request):  # noqa: ANN001, ANN201
            return None

    class Pulls:
        async def process_request(self, channel, request):  # noqa: ANN001, ANN201
            return None

    server = Server()
    executor = RequestExecutor("bench", 1, 10)
    server.register_processor(310, Sends(), executor)
    server.register_processor(11, Pulls(), executor)
    protocol = RemotingProtocol(server, 1)
    protocol.connection_made(NullTransport())
    code, per_read = _SHAPES[shape]
    frames = []
    for n in range(per_read):
        ext = {"a": "group", "b": "Topic", "e": str(n % 4), "g": str(1764021600000 + n)}
        cmd = RemotingCommand(code, n, 0, None, ext, b"x" * 1024)
        cmd.serialize_type = 1
        frames.append(cmd.to_bytes())
    read = b"".join(frames)
    for _ in range(100):
        protocol.data_received(read)
    if bytecodes:
        ops = OpcodeCounter()
        sys.settrace(ops.trace)
        for _ in range(reads):
            protocol.data_received(read)
        sys.settrace(None)
        return ops.count / reads / per_read
    start = time.process_time()
    for _ in range(reads):
        protocol.data_received(read)
    return (time.process_time() - start) / reads / per_read * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_side_arguments(parser, rounds=3, a_help="repo root of side A (e.g. the base commit)")
    parser.add_argument("--shape", choices=sorted(_SHAPES), default="send16")
    parser.add_argument("--reads", type=int, default=2000)
    parser.add_argument("--cpu", action="store_true", help="µs of CPU a request instead of bytecodes")
    args = parser.parse_args(argv)
    if args.root is not None:
        enter_tree(args.root)
        print(f"{asyncio.run(measure(args.shape, args.reads, not args.cpu)):.3f}")
        return 0
    trees = sides(args.a, args.b)
    unit = "us" if args.cpu else "bytecodes"
    flags = ["--shape", args.shape, "--reads", str(args.reads)] + (["--cpu"] if args.cpu else [])
    figures = interleaved_rounds(
        trees,
        args.rounds,
        lambda root: [sys.executable, __file__, "--root", str(root), *flags],
        f"{unit}/request",
        digits=2 if args.cpu else 1,
    )
    med = {side: statistics.median(values) for side, values in figures.items()}
    for side, root in trees.items():
        print(f"{side} {root}: median {med[side]:.2f} {unit} a request ({args.shape})")
    if "A" in med:
        print(f"B/A = {med['B'] / med['A']:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
