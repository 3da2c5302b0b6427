"""Send-to-consume latency at a low rate, A against B: what a wake round (broker/pull_wake.py) adds to a message.

At a low rate every message arrives at a queue whose consumer is caught up: its pull is parked, the message wakes it,
and the answer waits for the end of the wake round; so this is where a round shows whole. Each ``--roots`` checkout's
broker gets, in turns (``--rounds``), one producer sending one message every ``--interval-ms`` for ``--seconds`` (our
asyncio client, round robin over 4 queues, the send time in the body) and one push consumer of ours in the same
process (long polling, 15 s suspend) that notes the time each message reaches its listener. Prints the median, p90 and
p99 of (listener time - send time) in ms per checkout and round: the client's own loop is in every figure alike.

    python -m bench.wake_latency --roots /work/main,. [--rounds 2] [--seconds 8] [--interval-ms 10]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import struct
import tempfile
import time
from pathlib import Path

from bench.backlog import create_topic
from bench.broker_proc import BrokerProcess
from mqclient.consumer import ConsumerConfig, PushConsumer
from mqclient.message import Message
from mqclient.producer import Producer

_NS = struct.Struct(">q")


async def one_round(namesrv: str, topic: str, seconds: float, interval_s: float) -> list[float]:
    await create_topic(namesrv, topic)
    latencies: list[float] = []

    def listener(msg, mq) -> None:  # noqa: ANN001
        latencies.append((time.perf_counter_ns() - _NS.unpack_from(msg.body)[0]) / 1e6)

    consumer = PushConsumer(namesrv, topic, ConsumerConfig(group=f"{topic}G", consume_from="last"), listener)
    producer = Producer(namesrv)
    await consumer.start()
    try:
        await asyncio.sleep(1.0)  # (the consumer's pulls parked on every queue)
        loop = asyncio.get_running_loop()
        end = loop.time() + seconds
        sent = 0
        while loop.time() < end:
            await producer.send(Message(topic, _NS.pack(time.perf_counter_ns()) + b"x" * 100))
            sent += 1
            await asyncio.sleep(interval_s)
        deadline = loop.time() + 5
        while len(latencies) < sent and loop.time() < deadline:
            await asyncio.sleep(0.01)
    finally:
        await producer.close()
        await consumer.close()
    return latencies


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--roots", default=".", help="comma-separated checkouts (first is the baseline)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--interval-ms", type=float, default=10.0)
    args = parser.parse_args(argv)
    roots = [r.strip() for r in args.roots.split(",") if r.strip()]
    results: dict[str, list[list[float]]] = {root: [] for root in roots}
    with tempfile.TemporaryDirectory(prefix="wake-latency-") as tmp:
        brokers = {
            root: BrokerProcess(store_dir=Path(tmp) / f"store{i}", fault_injection=False, root=Path(root).resolve())
            for i, root in enumerate(roots)
        }
        try:
            for broker in brokers.values():
                broker.start()
            for n in range(args.rounds):
                for i, root in enumerate(roots):
                    topic = f"WakeLat{i}R{n}T{int(time.time())}"
                    lat = asyncio.run(one_round(brokers[root].namesrv, topic, args.seconds, args.interval_ms / 1000))
                    results[root].append(lat)
                    print(
                        f"round {n} {root}: {len(lat)} messages, median {statistics.median(lat):.2f} ms,"
                        f" p90 {quantile(lat, 0.9):.2f}, p99 {quantile(lat, 0.99):.2f}",
                        flush=True,
                    )
        finally:
            for broker in brokers.values():
                broker.stop()
    for root, rounds in results.items():
        every = [v for lat in rounds for v in lat]
        if every:
            print(
                f"{root}: median {statistics.median(every):.2f} ms, p90 {quantile(every, 0.9):.2f},"
                f" p99 {quantile(every, 0.99):.2f} ({len(every)} messages)"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
