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

The same run measures the current `broker/schedule.py` and, for comparison, the one at `--baseline-rev`
(loaded from git; the version before batched delivery by default), each with a fresh store.

    python -m bench.delay_burst [--count 100000] [--level 1] [--body 128] [--baseline-rev REV | --no-baseline]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import logging
import shutil
import subprocess
import sys
import tempfile
import time
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

    def line(self) -> str:
        return (
            f"{self.name:<10} count={self.count} burst/s={self.burst_per_s:,.0f} "
            f"delivered/s={self.delivered_per_s:,.0f} lateness_ms p50={self.p50_ms:.0f} "
            f"p99={self.p99_ms:.0f} max={self.max_ms:.0f} early={self.early}"
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


async def run_burst(
    service_cls: type, name: str, count: int, level: int, body: bytes, timeout_s: float, queues: int = 1
) -> BurstResult:
    root = Path(tempfile.mkdtemp(prefix="delay-burst-"))
    cfg = MessageStoreConfig(
        store_path_root_dir=str(root),
        mapped_file_size_commit_log=256 * 1024 * 1024,
        message_delay_level=LEVELS,
        message_index_enable=False,
    )
    store = MessageStore(cfg)
    try:
        assert await store.load()
        await store.start()
        service = service_cls(
            store=store,
            delay_levels_ms=cfg.delay_levels_ms(),
            store_path_root_dir=str(root),
            now_ms=lambda: time.time_ns() // 1_000_000,
        )

        def arrived(topic, queue_id, *_):
            if topic == SCHEDULE_TOPIC:
                service.on_message_arriving(queue_id)

        store.message_arriving_listener = arrived
        service.load()
        service.start()
        t0 = time.perf_counter()
        for i in range(count):
            msg = MessageExtBrokerInner.create(
                TOPIC,
                body,
                queue_id=i % queues,
                properties={"KEYS": str(i), "DELAY": str(level)},
                born_host=("127.0.0.1", 5000),
                store_host=("127.0.0.1", 10911),
            )
            put = await store.put_message(msg)
            assert put.is_ok(), put
        burst_s = time.perf_counter() - t0
        deadline = time.monotonic() + timeout_s

        def delivered_count() -> int:
            return sum(store.get_max_offset_in_queue(TOPIC, q) for q in range(queues))

        while delivered_count() < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name}: {delivered_count()} of {count} delivered")
            await asyncio.sleep(0.05)
        await service.stop()
        delay_ms = cfg.delay_levels_ms()[level - 1]
        parked = _records(store, SCHEDULE_TOPIC, level - 1)
        stored_at: dict[str, int] = {}
        for q in range(queues):
            keys = []
            for m in _records(store, TOPIC, q):
                keys.append(int(m.properties["KEYS"]))
                stored_at[m.properties["KEYS"]] = m.store_timestamp
            assert keys == sorted(keys), f"{name}: queue {q} out of order"
        assert len(stored_at) == count == len(parked), (name, len(stored_at), len(parked))
        due = np.array([m.store_timestamp for m in parked], dtype=np.int64) + delay_ms
        got = np.array([stored_at[m.properties["KEYS"]] for m in parked], dtype=np.int64)
        lateness = got - due
        span_s = max(1, int(got.max() - got.min())) / 1000
        return BurstResult(
            name,
            count,
            count / burst_s,
            count / span_s,
            float(np.percentile(lateness, 50)),
            float(np.percentile(lateness, 99)),
            float(lateness.max()),
            int((lateness < 0).sum()),
        )
    finally:
        await store.shutdown()
        shutil.rmtree(root, ignore_errors=True)


async def main_async(args: argparse.Namespace) -> None:
    from broker.schedule import ScheduleMessageService

    body = b"x" * args.body
    cases: list[tuple[str, type]] = []
    if not args.no_baseline:
        try:
            cases.append((f"before@{args.baseline_rev}", load_baseline(args.baseline_rev).ScheduleMessageService))
        except (subprocess.CalledProcessError, OSError) as exc:
            print(f"baseline skipped: cannot load broker/schedule.py at {args.baseline_rev}: {exc}")
    cases.append(("after", ScheduleMessageService))
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--level", type=int, default=1, help="delay level (1 = 1s)")
    parser.add_argument("--body", type=int, default=128, help="body bytes")
    parser.add_argument("--baseline-rev", default=DEFAULT_BASELINE_REV)
    parser.add_argument(
        "--queues",
        type=int,
        default=1,
        help="real queues the burst's messages go to in turn (a producer spreads over them)",
    )
    parser.add_argument("--no-baseline", action="store_true")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for the deliveries")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    loop_choice.install()  # uvloop when installed, as the broker runs (remoting.loop)
    asyncio.run(main_async(args))
    sys.exit(0)


if __name__ == "__main__":
    main()
