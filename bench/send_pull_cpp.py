"""Benchmark: sync sends and pulls through the real C++ client (the `rocketmq` 0.4.4 wheel) against mini-rocketmq.

Sends `--count` messages of `--size` bytes one at a time with `Producer.send_sync` (each waits for the broker's
reply), printing msgs/s and the latency distribution, then drains the topic with `PullConsumer.pull` and prints
msgs/s and MB/s. Starts its own broker on free loopback ports unless `--namesrv` points at a running one.

    python -m bench.send_pull_cpp [--count 5000] [--size 1024] [--namesrv 127.0.0.1:9876]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path

from broker.testing.process import BrokerProcess

# The wheel helpers are shared with the compat tests.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "compat"))
from compat_support import cpp_producer, make_message, nul_free_body, unique  # noqa: E402


def percentile(sorted_values: list[float], p: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    rank = max(1, round(p / 100 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def start_broker(stack: ExitStack) -> str:
    root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-cpp-")))
    broker = BrokerProcess(root / "store", log_path=root / "broker.log")
    broker.start()
    stack.callback(broker.kill)
    stack.callback(broker.stop, check=False)
    print(f"broker: started {broker.broker_addr}, name server {broker.namesrv_addr}, store {broker.store_dir}")
    return broker.namesrv_addr


def bench_send(namesrv: str, topic: str, count: int, size: int, warmup: int) -> None:
    body = nul_free_body(size)
    latencies_ms: list[float] = []
    with cpp_producer(namesrv, timeout_ms=10_000) as producer:
        for _ in range(warmup):  # creates the topic and warms connections; not measured
            producer.send_sync(make_message(topic, body))
        begin = time.perf_counter()
        for _ in range(count):
            msg = make_message(topic, body)
            t0 = time.perf_counter_ns()
            producer.send_sync(msg)
            latencies_ms.append((time.perf_counter_ns() - t0) / 1e6)
        elapsed = time.perf_counter() - begin
    latencies_ms.sort()
    print(
        f"send_sync {size} B x {count}: {count / elapsed:,.0f} msgs/s ({elapsed:.2f} s); latency ms "
        f"p50 {percentile(latencies_ms, 50):.2f}  p95 {percentile(latencies_ms, 95):.2f}  "
        f"p99 {percentile(latencies_ms, 99):.2f}  max {latencies_ms[-1]:.2f}"
    )


def bench_pull(namesrv: str, topic: str, expected: int, timeout_s: float) -> None:
    from rocketmq.client import PullConsumer

    # The wheel's generator spins forever while pulls fail; a watchdog ends the process instead of hanging.
    watchdog = threading.Timer(
        timeout_s, lambda: (print(f"pull: no end after {timeout_s:.0f} s", flush=True), os._exit(1))
    )
    watchdog.daemon = True
    watchdog.start()
    consumer = PullConsumer(unique("BENCH_PULL"))
    consumer.offset_table = {}  # the wheel's default is a class attribute shared by all instances
    consumer.set_namesrv_addr(namesrv)
    consumer.start()
    try:
        begin = time.perf_counter()
        count = nbytes = 0
        for msg in consumer.pull(topic, "*", 32):
            count += 1
            nbytes += len(msg.body)
        elapsed = time.perf_counter() - begin
    finally:
        consumer.shutdown()
        watchdog.cancel()
    note = "" if count == expected else f"  (expected {expected}!)"
    print(f"pull {count} msgs (32/request): {count / elapsed:,.0f} msgs/s, {nbytes / elapsed / 1e6:.1f} MB/s{note}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=5000, help="measured sync sends (default 5000)")
    parser.add_argument("--size", type=int, default=1024, help="body bytes (default 1024)")
    parser.add_argument("--warmup", type=int, default=200, help="unmeasured sends first (default 200)")
    parser.add_argument("--namesrv", help="use a running broker's name server instead of starting one")
    parser.add_argument("--pull-timeout", type=float, default=300.0, help="abort the pull phase after this many s")
    args = parser.parse_args(argv)
    if args.count < 1 or args.size < 1 or args.warmup < 1:
        parser.error("--count, --size and --warmup must be >= 1")

    with ExitStack() as stack:
        namesrv = args.namesrv or start_broker(stack)
        topic = unique("BENCH_CPP")
        bench_send(namesrv, topic, args.count, args.size, args.warmup)
        bench_pull(namesrv, topic, args.count + args.warmup, args.pull_timeout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
