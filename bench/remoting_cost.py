"""Event-loop CPU per SEND_MESSAGE_V2 spent in remoting/ alone: two trees, interleaved.

``bench.send_path_cost`` measures a whole send (remoting, processor, store): a change of a few per cent in
remoting drowns in its run-to-run spread. This one keeps only the remoting layer: the sends as bytes (16 frames a
read, 1 KiB bodies, a V2 header of the Java Producer's sizes) through ``RemotingProtocol.data_received`` (frame
split, decode, grouping, dispatch, request group) to a processor that answers each with a ready SEND_OK-shaped
answer at once, and the answers' encode and write (to a transport that drops them). The figure is the best of
``--reps`` repetitions of ``--reads`` reads (``time.thread_time``), per request::

    python -m bench.remoting_cost --a /work/main --b . --rounds 3 --serialize json
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

from bench.interleave import add_side_arguments, enter_tree, interleaved_rounds, sides
from bench.null_transport import NullTransport

_SERIALIZE = {"json": 0, "rocketmq": 1}
_WINDOW = 16
#: value lengths of the Java benchmark Producer's V2 header fields a..n
_V2_LENGTHS = (18, 13, 6, 1, 1, 1, 13, 1, 60, 1, 5, 2, 5, 8)
_SEND_OK = {
    "msgId": "7F00000100002A9F0000000000001234",
    "queueId": "3",
    "queueOffset": "123456",
    "MSG_REGION": "DefaultRegion",
    "TRACE_ON": "true",
}


class _SendOk:
    """A processor that answers every send at once, alone or grouped, as the send processor's SUCCESS does."""

    def reject_request(self) -> bool:
        return False

    def groupable(self, request) -> bool:  # noqa: ANN001
        return True

    async def process_request(self, channel, request):  # noqa: ANN001, ANN201
        return request.response(0, None, dict(_SEND_OK))

    async def process_requests(self, channel, requests):  # noqa: ANN001, ANN201
        return [request.response(0, None, dict(_SEND_OK)) for request in requests]


async def measure(serialize: int, reads: int, reps: int) -> float:
    from remoting.command import RemotingCommand
    from remoting.executor import RequestExecutor
    from remoting.protocol import RemotingProtocol
    from remoting.server import RemotingServer

    server = RemotingServer("127.0.0.1", 0)
    executor = RequestExecutor("send", 4, 1000)
    server.register_processor(310, _SendOk(), executor)
    executor.start()
    ext = {key: "x" * n for key, n in zip("abcdefghijklmn", _V2_LENGTHS)}
    read = RemotingCommand.request(310, ext, b"x" * 1024, serialize_type=serialize).to_bytes() * _WINDOW
    protocol = RemotingProtocol(server, 1)
    protocol.connection_made(NullTransport())
    best = float("inf")
    for _ in range(reps):
        t0 = time.thread_time()
        for _ in range(reads):
            protocol.data_received(read)
            await asyncio.sleep(0)
        best = min(best, (time.thread_time() - t0) * 1e6 / (reads * _WINDOW))
    await executor.stop(1.0)
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Event-loop CPU per SEND in remoting/ alone, two trees.")
    add_side_arguments(parser, rounds=3, a_help="repo root of side A (e.g. the base commit)")
    parser.add_argument("--reads", type=int, default=300, help="reads of 16 sends a repetition")
    parser.add_argument("--reps", type=int, default=15, help="repetitions a round; the best is kept")
    parser.add_argument("--serialize", choices=sorted(_SERIALIZE), default="json")
    args = parser.parse_args(argv)
    if args.root is not None:
        enter_tree(args.root)
        print(f"{asyncio.run(measure(_SERIALIZE[args.serialize], args.reads, args.reps)):.3f}")
        return 0
    trees = sides(args.a, args.b)
    flags = ["--reads", str(args.reads), "--reps", str(args.reps), "--serialize", args.serialize]
    figures = interleaved_rounds(
        trees,
        args.rounds,
        lambda root: [sys.executable, "-m", "bench.remoting_cost", "--root", str(root), *flags],
        "us/request",
        cwd=Path(__file__).resolve().parents[1],
    )
    med = {side: statistics.median(values) for side, values in figures.items()}
    for side, root in trees.items():
        print(f"{side} {root}: median {med[side]:.2f} us of event-loop CPU per request in remoting/")
    if "A" in med:
        print(f"B/A = {med['B'] / med['A']:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
