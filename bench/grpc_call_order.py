"""Do concurrent 5.x sends keep their order? Counts reorderings of ``--window`` unary SendMessage calls in flight.

    python -m bench.grpc_call_order [--calls 6000] [--window 64]

One client task issues the calls in sequence order, at most ``--window`` in flight on one channel (as
``mqbench --protocol grpc`` with ``send_mode: async``). Printed for two servers:

- a bare grpc.aio server (uvloop, as the broker) whose handler only records the order calls reach it;
- our broker with one queue per topic, where the order is the stored queue offsets.

A call counts as out of order when its sequence number is lower than one that reached the handler (or
the queue) before it: mqbench's out-of-order rule. The bare server shows that grpc itself starts
concurrent calls out of order (each is its own HTTP/2 stream; nothing orders them); 5.x promises an
order only for FIFO messages sent one at a time, as upstream.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

from bench.broker_proc import SMALL_STORE, BrokerProcess

BODY = b"x" * 1024


def count_out_of_order(order: list[int]) -> int:
    highest, late = -1, 0
    for seq in order:
        if seq < highest:
            late += 1
        highest = max(highest, seq)
    return late


async def serve() -> None:
    """The bare server: SendMessage records the sequence; QueryRoute answers the count out of order."""
    import grpc

    from proxy.protocol import definition_pb2 as pb
    from proxy.protocol import service_pb2 as spb

    order: list[int] = []

    async def send(request, context):
        order.append(int(request.messages[0].user_properties["seq"]))
        return spb.SendMessageResponse(status=pb.Status(code=pb.OK))

    async def report(request, context):
        return spb.QueryRouteResponse(status=pb.Status(code=count_out_of_order(order), message=str(len(order))))

    handlers = {
        "SendMessage": grpc.unary_unary_rpc_method_handler(
            send, spb.SendMessageRequest.FromString, spb.SendMessageResponse.SerializeToString
        ),
        "QueryRoute": grpc.unary_unary_rpc_method_handler(
            report, spb.QueryRouteRequest.FromString, spb.QueryRouteResponse.SerializeToString
        ),
    }
    server = grpc.aio.server()
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("apache.rocketmq.v2.MessagingService", handlers),)
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(port, flush=True)
    await server.wait_for_termination()


async def send_all(endpoint: str, topic: str, calls: int, window: int) -> dict[int, int]:
    """Issue the calls in order, ``window`` in flight; the queue offset each got (bare server: 0)."""
    import grpc

    from proxy.protocol import definition_pb2 as pb
    from proxy.protocol import service_pb2 as spb
    from proxy.protocol.service_pb2_grpc import MessagingServiceStub

    meta = (("x-mq-client-id", f"call-order-{uuid.uuid4().hex[:8]}"),)
    offsets: dict[int, int] = {}
    async with grpc.aio.insecure_channel(endpoint) as channel:
        stub = MessagingServiceStub(channel)
        slots = asyncio.Semaphore(window)

        async def one(seq: int) -> None:
            try:
                msg = pb.Message(topic=pb.Resource(name=topic), body=BODY)
                msg.system_properties.message_id = uuid.uuid4().hex.upper()
                msg.user_properties["seq"] = str(seq)
                response = await stub.SendMessage(spb.SendMessageRequest(messages=[msg]), metadata=meta, timeout=30)
                if response.entries:
                    offsets[seq] = response.entries[0].offset
            finally:
                slots.release()

        tasks = []
        for seq in range(calls):
            await slots.acquire()
            tasks.append(asyncio.ensure_future(one(seq)))
        await asyncio.gather(*tasks)
        if not offsets:  # the bare server
            report = await stub.QueryRoute(spb.QueryRouteRequest(), metadata=meta)
            return {-1: report.status.code}
    return offsets


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=6000)
    parser.add_argument("--window", type=int, default=64)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    import uvloop

    if args.serve:
        uvloop.run(serve())
        return 0
    bare = subprocess.Popen(
        [sys.executable, "-m", "bench.grpc_call_order", "--serve"], stdout=subprocess.PIPE, text=True
    )
    try:
        port = int(bare.stdout.readline())  # type: ignore[union-attr]
        late = asyncio.run(send_all(f"127.0.0.1:{port}", "t", args.calls, args.window))[-1]
    finally:
        bare.kill()
    print(f"bare grpc.aio server: {late:,} of {args.calls:,} calls reached the handler out of order")
    with tempfile.TemporaryDirectory(prefix="call-order-") as store:
        broker = BrokerProcess(Path(store), config={**SMALL_STORE, "defaultTopicQueueNums": "1"}).start()
        try:
            offsets = asyncio.run(send_all(broker.grpc_endpoint, "CallOrder", args.calls, args.window))
        finally:
            broker.stop()
    late = count_out_of_order([seq for seq, _ in sorted(offsets.items(), key=lambda kv: kv[1])])
    print(f"our broker, one queue: {late:,} of {len(offsets):,} messages stored out of order")
    return 0


if __name__ == "__main__":
    sys.exit(main())
