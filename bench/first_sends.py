"""The first sends to a fresh broker: how long they wait and how many fail (issue 15: the broker's first-use costs).

A fresh broker pays numpy's import and its store threads' start on the event loop at its first messages:
the loop stood still for 150-260 ms, sends waited up to seconds and some failed with ``TIMEOUT_CLEAN_QUEUE``.
``broker.warmup`` moved that work to a thread started at a client's first request. This starts a fresh broker
of each tree in turn (``--a``, ``--b``: two checkouts, interleaved rounds), connects a producer, then sends one
message (its latency: the first send; ``--lead-ms``: after asking the name server for the topic's route that long
before, as a client that starts ahead of its first message) and a burst of ``--burst`` messages from ``--tasks`` concurrent senders
(their max latency and failures), and prints the medians per tree and b/a.

    python -m bench.first_sends --a /work/main --b . [--rounds 5] [--burst 400] [--tasks 16] [--lead-ms 300]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from broker.testing.process import BrokerProcess
from mqclient import Message, Producer, ProducerConfig
from remoting.client import RemotingClient
from remoting.codes import RequestCode
from remoting.command import RemotingCommand


async def ask_route(namesrv: str) -> None:
    client = RemotingClient()
    try:
        request = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "FirstSendsTopic"})
        await client.invoke(namesrv, request, 5.0)
    finally:
        await client.close()


async def first_sends(namesrv: str, burst: int, tasks: int, lead_ms: float) -> dict[str, float]:
    if lead_ms:  # a client that asks for routes (or sends its heartbeat) this long before its first message
        await ask_route(namesrv)
        await asyncio.sleep(lead_ms / 1000)
    async with Producer(namesrv, ProducerConfig(group="PG_first_sends")) as producer:
        began = time.perf_counter()
        await producer.send(Message("FirstSendsTopic", b"x" * 1024))
        first_ms = (time.perf_counter() - began) * 1000
        latencies: list[float] = []
        failed = 0

        async def sender(n: int) -> None:
            nonlocal failed
            for _ in range(n):
                t0 = time.perf_counter()
                try:
                    result = await producer.send(Message("FirstSendsTopic", b"x" * 1024))
                    if result.status != "SEND_OK":
                        failed += 1
                except Exception:  # noqa: BLE001 - a failed send is what this counts
                    failed += 1
                latencies.append((time.perf_counter() - t0) * 1000)

        await asyncio.gather(*(sender(burst // tasks) for _ in range(tasks)))
    return {"first_ms": first_ms, "burst_max_ms": max(latencies), "failed": failed}


def one_round(root: Path, burst: int, tasks: int, lead_ms: float) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="first-sends-") as tmp:
        broker = BrokerProcess(Path(tmp) / "store", root=root, grpc_port=None)
        broker.start()
        try:
            return asyncio.run(first_sends(broker.namesrv_addr, burst, tasks, lead_ms))
        finally:
            broker.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.first_sends", description=__doc__.split("\n\n")[0])
    parser.add_argument("--a", type=Path, required=True, help="checkout A (e.g. /work/main)")
    parser.add_argument("--b", type=Path, default=Path("."), help="checkout B (default: this one)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--burst", type=int, default=400)
    parser.add_argument("--tasks", type=int, default=16)
    parser.add_argument("--lead-ms", type=float, default=0.0, help="a route request this long before the first send")
    args = parser.parse_args(argv)
    runs: dict[str, list[dict[str, float]]] = {"a": [], "b": []}
    for n in range(args.rounds):
        for name in ("a", "b"):
            fig = one_round(getattr(args, name).resolve(), args.burst, args.tasks, args.lead_ms)
            runs[name].append(fig)
            print(f"round {n + 1} {name}: " + ", ".join(f"{k} {v:.1f}" for k, v in fig.items()), flush=True)
    for key in ("first_ms", "burst_max_ms", "failed"):
        a = statistics.median(f[key] for f in runs["a"])
        b = statistics.median(f[key] for f in runs["b"])
        ratio = f"{b / a:.2f}" if a else "-"
        print(f"median {key}: a {a:.1f}  b {b:.1f}  b/a {ratio}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
