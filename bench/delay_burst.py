"""Benchmark: a burst of delayed messages to one delay level, and how late the schedule service delivers them.

An in-process store (a temporary directory) and a `ScheduleMessageService` on it, wired as the broker wires
them (the store's arrival notice wakes the level). `--count` messages with `DELAY=<level>` are put as fast
as one producer loop can (`MessageStore.put_message`, what the send processor calls); they land in
`SCHEDULE_TOPIC_XXXX` queue level-1 and fall due `delay` after their store time, at the rate they arrived.
Once every one is back in its real topic, the figures come from the records themselves: lateness of a
message = store time of the delivered copy - (store time of the parked copy + the level's delay), paired
by the KEYS of each message (the bench also checks that each real queue got its messages in order).

`delivered/s` = messages over the span from the first to the last delivery; `burst/s` = the rate the burst
was put at (the rate the level falls due at). A service that keeps up shows a lateness of a few ms and a
delivered/s close to burst/s; one that cannot shows a lateness growing through the burst.

On a shared machine wall-clock lateness also shows the process not running: `loop_stall_max` is the longest
the event loop went without running a 5 ms ticker (a stall of the whole process, not of the service), and
`cpu/wall` the share of a core the process got. `--cost` measures what is robust to that: CPU microseconds per
put and per delivery (N messages parked, then the service started with a clock past their due time, so it
delivers them back to back), the two trees alternating `--repeat` times.

The same run measures the current `broker/schedule.py` and, for comparison, the one at `--baseline-rev`
(loaded from git; the version before batched delivery by default), each with a fresh store.

`--broker` sends the burst through a real broker instead: `python -m broker.main` on free loopback ports (this
tree), Apache RocketMQ's benchmark Producer (`rmqjava org.apache.rocketmq.example.benchmark.Producer -d true
-e LEVEL -q COUNT`, 16 threads by default) as the client, then, once the broker's runtime info says the level
delivered everything, the broker is stopped and the same figures are read from its store (paired by UNIQ_KEY).
`--baseline-root DIR` runs the same burst first through a broker from another checkout (e.g. main). It needs
`rmqjava` (`--rmq-bin`, else PATH, else where `../shared/apache-rocketmq-4.9.7/setup.sh` puts it) and skips
otherwise.

    python -m bench.delay_burst [--count 100000] [--level 1] [--body 128] [--baseline-rev REV | --no-baseline]
    python -m bench.delay_burst --cost [--count 50000] [--repeat 3] [--baseline-rev REV]
    python -m bench.delay_burst --broker [--count 100000] [--threads 16] [--baseline-root /work/main]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import importlib.util
import logging
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict, deque
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import numpy as np
import structlog

from broker.topic import SCHEDULE_TOPIC
from remoting import loop as loop_choice
from store import GetMessageStatus, MessageExtBrokerInner, MessageStore, MessageStoreConfig, decode_records

DEFAULT_BASELINE_REV = "0e83efd"  # broker/schedule.py delivering one message at a time
LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
TOPIC = "DelayBurst"


@dataclass(slots=True)
class BurstResult:
    name: str
    count: int
    burst_per_s: float
    delivered_per_s: float
    p50_ms: float
    p99_ms: float
    max_ms: float
    early: int
    cpu_share: float  # process CPU seconds / wall seconds from the first put to the last delivery (-1: unknown)
    stall_ms: float  # the longest the event loop did not run a 5 ms ticker (-1: unknown)
    by_tenth: list[float]  # median lateness of each tenth of the burst, in put order
    #: sends the Java Producer saw acknowledged (-1: not sent by it). Under load the broker's flow control answers
    #: some with an error ("Response Failed"): those are never stored, so only these must all arrive.
    acknowledged: int = -1

    def line(self) -> str:
        return (
            f"{self.name:<10} count={self.count} burst/s={self.burst_per_s:,.0f} "
            f"delivered/s={self.delivered_per_s:,.0f} lateness_ms p50={self.p50_ms:.0f} "
            f"p99={self.p99_ms:.0f} max={self.max_ms:.0f} early={self.early}"
            + (f" cpu/wall={self.cpu_share:.2f} loop_stall_max_ms={self.stall_ms:.0f}" if self.cpu_share >= 0 else "")
            + "\n"
            f"{'':<10} median lateness ms per tenth of the burst: {' '.join(f'{x:.0f}' for x in self.by_tenth)}"
        )


def load_baseline(rev: str) -> ModuleType:
    """broker/schedule.py as of git `rev`, imported as a module of its own."""
    root = Path(__file__).resolve().parent.parent
    source = subprocess.run(
        ["git", "show", f"{rev}:broker/schedule.py"], cwd=root, check=True, capture_output=True, text=True
    ).stdout
    path = Path(tempfile.mkdtemp(prefix="schedule-baseline-")) / "schedule_baseline.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("schedule_baseline", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _records(store: MessageStore, topic: str, queue_id: int) -> list:
    out, offset = [], 0
    while True:
        r = store.get_message("bench", topic, queue_id, offset, 32, None)
        if r.status != GetMessageStatus.FOUND:
            return out
        out += decode_records(b"".join(r.buffers))
        offset = r.next_begin_offset


def _key(msg) -> str:  # noqa: ANN001 - a decoded record
    """What pairs a delivered copy with its parked record: the client's UNIQ_KEY, else the bench's KEYS."""
    return msg.properties.get("UNIQ_KEY") or msg.properties["KEYS"]


def burst_figures(
    store: MessageStore,
    name: str,
    *,
    topic: str,
    queues: int,
    level: int,
    burst_per_s: float | None,
    cpu_share: float = -1.0,
    stall_ms: float = -1.0,
) -> BurstResult:
    """The figures from the records of `store`: the parked copies in the level's queue, the delivered ones
    in `topic`'s queues (each in the order of the parked ones, checked). `burst_per_s` None: from the parked
    copies' store times."""
    delay_ms = store.config.delay_levels_ms()[level - 1]
    parked = _records(store, SCHEDULE_TOPIC, level - 1)
    # a client that resends after a timeout parks one key twice (perhaps for another queue): the copies of
    # a key in a queue pair with its parked records for that queue in order
    waiting: dict[tuple[str, int], deque[int]] = defaultdict(deque)
    for i, m in enumerate(parked):
        waiting[(_key(m), int(m.properties.get("REAL_QID", "0")))].append(i)
    got = np.full(len(parked), -1, dtype=np.int64)
    for q in range(queues):
        order = []
        for m in _records(store, topic, q):
            pending = waiting.get((_key(m), q))
            assert pending, f"{name}: a copy in queue {q} without its parked record: {_key(m)}"
            i = pending.popleft()
            order.append(i)
            got[i] = m.store_timestamp
        assert order == sorted(order), f"{name}: queue {q} out of order"
    missing = int((got < 0).sum())
    assert missing == 0, f"{name}: {missing} of {len(parked)} parked messages not delivered"
    count = len(parked)
    put_at = np.array([m.store_timestamp for m in parked], dtype=np.int64)
    due = put_at + delay_ms
    lateness = got - due
    span_s = max(1, int(got.max() - got.min())) / 1000
    if burst_per_s is None:
        burst_per_s = count / (max(1, int(put_at.max() - put_at.min())) / 1000)
    return BurstResult(
        name,
        count,
        burst_per_s,
        count / span_s,
        float(np.percentile(lateness, 50)),
        float(np.percentile(lateness, 99)),
        float(lateness.max()),
        int((lateness < 0).sum()),
        cpu_share,
        stall_ms,
        [float(np.median(part)) for part in np.array_split(lateness, min(10, count))],
    )


def _store_config(root: Path) -> MessageStoreConfig:
    return MessageStoreConfig(
        store_path_root_dir=str(root),
        mapped_file_size_commit_log=256 * 1024 * 1024,
        message_delay_level=LEVELS,
        message_index_enable=False,
    )


async def _started_service(service_cls: type, store: MessageStore, root: Path, now_ms) -> object:  # noqa: ANN001
    """The service on `store`, wired as the broker wires it (the store's arrival notice wakes a level)."""
    service = service_cls(
        store=store, delay_levels_ms=store.config.delay_levels_ms(), store_path_root_dir=str(root), now_ms=now_ms
    )

    def arrived(topic, queue_id, *_):
        if topic == SCHEDULE_TOPIC:
            service.on_message_arriving(queue_id)

    store.message_arriving_listener = arrived
    service.load()
    service.start()
    return service


def _burst_message(i: int, body: bytes, level: int, queues: int) -> MessageExtBrokerInner:
    return MessageExtBrokerInner.create(
        TOPIC,
        body,
        queue_id=i % queues,
        properties={"KEYS": str(i), "DELAY": str(level)},
        born_host=("127.0.0.1", 5000),
        store_host=("127.0.0.1", 10911),
    )


class StallWatch:
    """The longest gap between runs of a 5 ms ticker on the event loop: how long the process did not run."""

    def __init__(self) -> None:
        self.max_gap_ms = 0.0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._tick())

    async def _tick(self) -> None:
        last = time.perf_counter()
        while True:
            await asyncio.sleep(0.005)
            now = time.perf_counter()
            self.max_gap_ms = max(self.max_gap_ms, (now - last) * 1000 - 5)
            last = now

    def stop(self) -> float:
        if self._task is not None:
            self._task.cancel()
        return self.max_gap_ms


async def run_burst(
    service_cls: type, name: str, count: int, level: int, body: bytes, timeout_s: float, queues: int = 1
) -> BurstResult:
    root = Path(tempfile.mkdtemp(prefix="delay-burst-"))
    store = MessageStore(_store_config(root))
    try:
        assert await store.load()
        await store.start()
        service = await _started_service(service_cls, store, root, lambda: time.time_ns() // 1_000_000)
        watch = StallWatch()
        watch.start()
        t0 = time.perf_counter()
        cpu0 = time.process_time()
        for i in range(count):
            put = await store.put_message(_burst_message(i, body, level, queues))
            assert put.is_ok(), put
        burst_s = time.perf_counter() - t0
        deadline = time.monotonic() + timeout_s

        def delivered_count() -> int:
            return sum(store.get_max_offset_in_queue(TOPIC, q) for q in range(queues))

        while delivered_count() < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name}: {delivered_count()} of {count} delivered")
            await asyncio.sleep(0.05)
        cpu_share = (time.process_time() - cpu0) / (time.perf_counter() - t0)
        stall_ms = watch.stop()
        await service.stop()
        return burst_figures(
            store,
            name,
            topic=TOPIC,
            queues=queues,
            level=level,
            burst_per_s=count / burst_s,
            cpu_share=cpu_share,
            stall_ms=stall_ms,
        )
    finally:
        await store.shutdown()
        shutil.rmtree(root, ignore_errors=True)


async def run_cost(service_cls: type, count: int, level: int, body: bytes, timeout_s: float) -> tuple[float, float]:
    """CPU microseconds per put of a DELAY message and per delivery: `count` messages parked first, then
    the service started with a clock past their due time delivers them back to back."""
    root = Path(tempfile.mkdtemp(prefix="delay-cost-"))
    store = MessageStore(_store_config(root))
    try:
        assert await store.load()
        await store.start()
        cpu0 = time.process_time()
        for i in range(count):
            put = await store.put_message(_burst_message(i, body, level, 1))
            assert put.is_ok(), put
        put_cpu = time.process_time() - cpu0
        later = time.time_ns() // 1_000_000 + 10 * store.config.delay_levels_ms()[level - 1] + 60_000
        cpu0 = time.process_time()
        service = await _started_service(service_cls, store, root, lambda: later)
        deadline = time.monotonic() + timeout_s
        while store.get_max_offset_in_queue(TOPIC, 0) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{store.get_max_offset_in_queue(TOPIC, 0)} of {count} delivered")
            await asyncio.sleep(0)
        deliver_cpu = time.process_time() - cpu0
        await service.stop()
        return put_cpu / count * 1e6, deliver_cpu / count * 1e6
    finally:
        await store.shutdown()
        shutil.rmtree(root, ignore_errors=True)


def producer_acknowledged(complete_line: str) -> int:
    """Sends acknowledged by the broker, from the benchmark Producer's ``[Complete]`` line (-1: no such line).

    Its "Send Total" counts the sends that succeeded plus those that failed on the client's side ("Send
    Failed"); error answers from the broker ("Response Failed") are outside it.
    """
    total = re.search(r"Send Total: (\d+)", complete_line)
    failed = re.search(r"Send Failed: (\d+)", complete_line)
    if total is None or failed is None:
        return -1
    return int(total.group(1)) - int(failed.group(1))


async def run_broker_burst(args: argparse.Namespace, name: str, tree: Path) -> BurstResult | None:
    """The burst through a broker process running the source `tree`, sent by the Java benchmark Producer;
    figures from its store once it delivered everything and stopped. None when rmqjava is not installed."""
    from bench.broker_proc import BrokerProcess
    from bench.vs_java import find_reference_bin
    from mqclient.admin import AdminClient

    folder = find_reference_bin(getattr(args, "rmq_bin", None))
    if folder is None:
        print("broker mode skipped: no rmqjava (../shared/apache-rocketmq-4.9.7/setup.sh, or --rmq-bin)")
        return None
    rmqjava = str(folder / "rmqjava")
    root = Path(tempfile.mkdtemp(prefix="delay-burst-broker-"))
    broker = BrokerProcess(
        store_dir=root,
        config={"mappedFileSizeCommitLog": str(256 * 1024 * 1024), "messageDelayLevel": LEVELS},
        fault_injection=False,
        grpc_port=None,
        root=tree,
    )
    try:
        broker.start()
        async with AdminClient(broker.namesrv) as admin:
            await admin.create_topic_everywhere(TOPIC, args.queues)
            command = [rmqjava, "org.apache.rocketmq.example.benchmark.Producer", "-n", broker.namesrv]
            command += ["-t", TOPIC, "-w", str(args.threads), "-s", str(args.body)]
            command += ["-d", "true", "-e", str(args.level), "-q", str(args.count)]
            t0 = time.monotonic()
            sent = await asyncio.to_thread(
                subprocess.run, command, capture_output=True, text=True, timeout=args.timeout
            )
            complete = [line for line in sent.stdout.splitlines() if "[Complete]" in line]
            print(f"producer: {complete[-1] if complete else sent.stdout[-400:]} ({time.monotonic() - t0:.1f} s)")
            key = f"scheduleMessageOffset_{args.level}"
            deadline = time.monotonic() + args.timeout
            while True:
                delivered, parked = map(int, (await admin.runtime_info(broker.broker_addr))[key].split(","))
                if parked and delivered >= parked:
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"broker: {delivered} of {parked} delivered")
                await asyncio.sleep(0.2)
        broker.stop()
        store = MessageStore(_store_config(root))
        try:
            assert await store.load()
            await store.start()
            result = burst_figures(store, name, topic=TOPIC, queues=args.queues, level=args.level, burst_per_s=None)
            return dataclasses.replace(result, acknowledged=producer_acknowledged(complete[-1] if complete else ""))
        finally:
            await store.shutdown()
    finally:
        broker.stop()
        shutil.rmtree(root, ignore_errors=True)


def _cases(args: argparse.Namespace) -> list[tuple[str, type]]:
    from broker.schedule import ScheduleMessageService

    cases: list[tuple[str, type]] = []
    if not args.no_baseline:
        try:
            cases.append((f"before@{args.baseline_rev}", load_baseline(args.baseline_rev).ScheduleMessageService))
        except (subprocess.CalledProcessError, OSError) as exc:
            print(f"baseline skipped: cannot load broker/schedule.py at {args.baseline_rev}: {exc}")
    cases.append(("after", ScheduleMessageService))
    return cases


async def main_cost(args: argparse.Namespace) -> None:
    body = b"x" * args.body
    cases = _cases(args)
    print(f"CPU per message, {args.count} messages of {args.body} B parked to level {args.level}, then delivered")
    figures: dict[str, list[tuple[float, float]]] = {name: [] for name, _ in cases}
    for _ in range(args.repeat):  # the trees alternate: a busy spell of the machine hits both
        for name, cls in cases:
            figures[name].append(await run_cost(cls, args.count, args.level, body, args.timeout))
    medians = {}
    for name, runs in figures.items():
        put = float(np.median([p for p, _ in runs]))
        deliver = float(np.median([d for _, d in runs]))
        medians[name] = (put, deliver)
        each = " ".join(f"{d:.1f}" for _, d in runs)
        print(
            f"{name:<16} put {put:.1f} us  delivery {deliver:.1f} us (runs: {each})  delivery/put {deliver / put:.2f}"
        )
    if len(medians) == 2:
        (_, before), (_, after) = medians.items()
        print(f"after/before: delivery CPU per message x{after[1] / before[1]:.2f}")


async def main_async(args: argparse.Namespace) -> None:
    body = b"x" * args.body
    cases = _cases(args)
    print(
        f"burst of {args.count} messages of {args.body} B over {args.queues} queue(s) to delay level {args.level} "
        f"({LEVELS.split()[args.level - 1]}), in-process store"
    )
    results = []
    for name, cls in cases:
        result = await run_burst(cls, name, args.count, args.level, body, args.timeout, args.queues)
        print(result.line(), flush=True)
        results.append(result)
    if len(results) == 2:
        before, after = results
        print(
            f"after/before: delivered/s x{after.delivered_per_s / before.delivered_per_s:.1f}, "
            f"p99 lateness {before.p99_ms:.0f} -> {after.p99_ms:.0f} ms"
        )


async def main_broker(args: argparse.Namespace) -> None:
    print(
        f"burst of {args.count} messages of {args.body} B to delay level {args.level} "
        f"({LEVELS.split()[args.level - 1]}) through a broker process, {args.threads} Java Producer threads, "
        f"{args.queues} queue(s)"
    )
    trees = [("after", Path(__file__).resolve().parent.parent)]
    if args.baseline_root:
        trees.insert(0, ("before", Path(args.baseline_root).resolve()))
    results = []
    for name, tree in trees:
        result = await run_broker_burst(args, name, tree)
        if result is None:
            return
        print(f"{name}: {tree}")
        print(result.line(), flush=True)
        results.append(result)
    if len(results) == 2:
        before, after = results
        print(f"after/before: p99 lateness {before.p99_ms:.0f} -> {after.p99_ms:.0f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--level", type=int, default=1, help="delay level (1 = 1s)")
    parser.add_argument("--body", type=int, default=128, help="body bytes")
    parser.add_argument("--baseline-rev", default=DEFAULT_BASELINE_REV)
    parser.add_argument(
        "--queues",
        type=int,
        default=None,
        help="real queues the burst's messages go to in turn (a producer spreads over them); "
        "default 1 in process, 8 with --broker",
    )
    parser.add_argument("--no-baseline", action="store_true")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for the deliveries")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--cost", action="store_true", help="CPU per put and per delivery, the trees alternating")
    mode.add_argument("--broker", action="store_true", help="through a broker process and the Java Producer")
    parser.add_argument("--repeat", type=int, default=3, help="--cost: runs of each tree")
    parser.add_argument("--threads", type=int, default=16, help="--broker: Java Producer threads")
    parser.add_argument("--rmq-bin", help="--broker: the folder holding rmqjava (default: PATH, then setup.sh's)")
    parser.add_argument(
        "--baseline-root", help="--broker: first the same burst through a broker running this source tree"
    )
    args = parser.parse_args()
    if args.queues is None:
        args.queues = 8 if args.broker else 1
    logging.basicConfig(level=logging.WARNING)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    loop_choice.install()  # uvloop when installed, as the broker runs (remoting.loop)
    asyncio.run(main_cost(args) if args.cost else main_broker(args) if args.broker else main_async(args))
    sys.exit(0)


if __name__ == "__main__":
    main()
