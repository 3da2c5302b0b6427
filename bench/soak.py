"""A soak run: mixed load plus malformed frames against a broker subprocess, private memory sampled each minute.

    python -m bench.soak --minutes 30 [--rate 300] [--fuzz-rate 100] [--seed 1] [--keep DIR]

For ``--minutes`` the broker gets, at the same time:

* sends from our client (``mqclient``): sync sends at ``--rate`` messages/s over three topics, a batch of
  ten now and then, oneway sends (not counted for loss: nothing acknowledges them);
* pulls from two clustering push consumers per topic (long polling, offset commits, heartbeats, rebalance);
* admin requests every two seconds: runtime info, cluster info, routes, max offsets, consumer offsets,
  topic creation;
* ``--fuzz-rate`` malformed and mutated frames per second from ``bench.fuzz_frames`` on fresh connections
  to the broker and its name server.

Once a minute it prints the broker's private memory (USS = Private_Clean + Private_Dirty, its Anonymous
part, and Pss, from /proc/PID/smaps_rollup), RSS, counts so far and tracebacks in the log so far. USS
includes the store's mapped file pages (they come and go with the flush); the anonymous part is the heap. At the end it drains the
consumers and prints: messages acknowledged and consumed (lost = acknowledged but never consumed),
memory growth over the second half of the run, tracebacks, liveness, and the exit code after SIGTERM.
Exit status 0 when nothing was lost, no traceback was logged, the broker lived and exited 0.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import random
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from bench.fuzz_campaign import FUZZ_BROKER_SETTINGS, LogFindings, private_memory, scan_log
from bench.fuzz_driver import FuzzStats, run_fuzz
from bench.fuzz_frames import CORPUS_DIR, load_corpus
from broker.testing.process import BrokerProcess, set_args
from mqclient import AdminClient, ConsumerConfig, Message, Producer, ProducerConfig
from mqclient.consumer import PushConsumer

TOPICS = ("SoakT0", "SoakT1", "SoakT2")


@dataclass
class SoakCounters:
    acknowledged: set[str] = field(default_factory=set)
    consumed: dict[str, int] = field(default_factory=dict)
    oneway: int = 0
    send_errors: int = 0
    admin_calls: int = 0
    admin_errors: int = 0
    fuzz: FuzzStats = field(default_factory=FuzzStats)
    samples: list[dict[str, float]] = field(default_factory=list)

    @property
    def lost(self) -> set[str]:
        return self.acknowledged - self.consumed.keys()


class Soak:
    def __init__(
        self, broker: BrokerProcess, *, minutes: float, rate: int, fuzz_rate: int, seed: int, sample_s: float = 60.0
    ) -> None:
        self.broker = broker
        self.minutes, self.rate, self.fuzz_rate, self.seed, self.sample_s = minutes, rate, fuzz_rate, seed, sample_s
        self.counters = SoakCounters()
        self.stop = asyncio.Event()
        self.rng = random.Random(seed)
        self.log_offset = 0
        self.log = LogFindings()
        self.fuzz_frames_at_last_sample = 0
        self.log_silent_since: float | None = None
        self.corpus = {target: load_corpus(CORPUS_DIR, target) for target in ("broker", "namesrv")}

    async def run(self) -> SoakCounters:
        ns = self.broker.namesrv_addr
        async with AdminClient(ns) as admin:
            for topic in TOPICS:
                await admin.create_topic_everywhere(topic, 4)
        consumers = []
        for topic in TOPICS:
            for _ in range(2):
                c = PushConsumer(
                    ns,
                    topic,
                    ConsumerConfig(
                        group=f"SoakG_{topic}",
                        consume_from="first",
                        heartbeat_interval_s=5,
                        rebalance_interval_s=5,
                        commit_interval_s=2,
                        suspend_timeout_ms=5000,
                    ),
                    self._on_message,
                )
                await c.start()
                consumers.append(c)
        began = time.monotonic()
        self._sample(began)
        tasks = [asyncio.create_task(coro) for coro in (self._produce(), self._admin(), self._fuzz())]
        next_sample = began + self.sample_s
        deadline = began + self.minutes * 60
        while time.monotonic() < deadline:
            await asyncio.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
            if not self.broker.running:
                print("the broker process died", flush=True)
                break
            if time.monotonic() >= next_sample:
                next_sample += self.sample_s
                self._sample(began)
        self.stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        drain_until = time.monotonic() + 60
        while self.counters.lost and time.monotonic() < drain_until and self.broker.running:
            await asyncio.sleep(1)
        self._sample(began)
        for c in consumers:
            await c.close()
        return self.counters

    def _on_message(self, msg, mq) -> None:  # type: ignore[no-untyped-def]
        key = msg.msg_id
        self.counters.consumed[key] = self.counters.consumed.get(key, 0) + 1

    async def _produce(self) -> None:
        rng = random.Random(f"{self.seed}/produce")
        async with Producer(self.broker.namesrv_addr, ProducerConfig(group="SoakPG", send_timeout_ms=10_000)) as p:
            period = 1.0 / self.rate
            next_at = time.monotonic()
            n = 0
            while not self.stop.is_set():
                n += 1
                topic = TOPICS[n % len(TOPICS)]
                body = rng.randbytes(rng.choice((100, 500, 1000, 4000)))
                try:
                    if n % 50 == 0:
                        r = await p.send_batch([Message(topic, body[:200], keys=f"b{n}-{i}") for i in range(10)])
                        self.counters.acknowledged.update(r.msg_id.split(","))
                    elif n % 20 == 0:
                        await p.send_oneway(Message(topic, body, tags="Oneway"))
                        self.counters.oneway += 1
                    else:
                        r = await p.send(Message(topic, body, tags="TagA", keys=f"k{n}"))
                        self.counters.acknowledged.add(r.msg_id)
                except Exception as exc:  # noqa: BLE001 - counted and reported; a soak keeps going
                    self.counters.send_errors += 1
                    if self.counters.send_errors <= 5:
                        print(f"send error: {type(exc).__name__}: {exc}", flush=True)
                next_at += period
                delay = next_at - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                elif delay < -1:
                    next_at = time.monotonic()  # behind by more than a second: do not burst to catch up

    async def _admin(self) -> None:
        async with AdminClient(self.broker.namesrv_addr) as admin:
            n = 0
            while not self.stop.is_set():
                n += 1
                addr = self.broker.broker_addr
                topic = TOPICS[n % len(TOPICS)]
                calls = [
                    admin.runtime_info(addr),
                    admin.brokers(),
                    admin.route(topic),
                    admin.max_offset(addr, topic, n % 4),
                    admin.consumer_offset(addr, f"SoakG_{topic}", topic, 0),
                ]
                if n % 30 == 0:
                    calls.append(admin.create_topic(addr, f"SoakAdmin{n % 7}", 2))
                for call in calls:
                    self.counters.admin_calls += 1
                    try:
                        await asyncio.wait_for(call, 10)
                    except Exception as exc:  # noqa: BLE001 - counted and reported
                        self.counters.admin_errors += 1
                        if self.counters.admin_errors <= 5:
                            print(f"admin error: {type(exc).__name__}: {exc}", flush=True)
                await _sleep_or_stop(self.stop, 2.0)

    async def _fuzz(self) -> None:
        if self.fuzz_rate <= 0:
            return
        i = 0
        while not self.stop.is_set():
            i += 1
            started = time.monotonic()
            stats = await run_fuzz(
                "127.0.0.1",
                self.broker.listen_port,
                self.broker.namesrv_port,
                seed=f"{self.seed}/soak/{i}",
                frames=self.fuzz_rate,
                connections=2,
                namesrv_connections=1,
                corpus=self.corpus,
                burst=16,
            )
            self.counters.fuzz.merge(stats)
            await _sleep_or_stop(self.stop, max(0.0, 1.0 - (time.monotonic() - started)))

    def _sample(self, began: float) -> None:
        proc = self.broker.proc
        mem = private_memory(proc.pid) if proc is not None else {}
        text = self.broker.log_text(self.log_offset)
        self.log_offset += len(text.encode("utf-8", "replace"))
        found = scan_log(text)
        if self.counters.fuzz.frames > self.fuzz_frames_at_last_sample and not found.warnings:
            # malformed frames were sent this minute, each worth a warning: the log has gone silent
            self.log_silent_since = self.log_silent_since or (time.monotonic() - began) / 60
        self.fuzz_frames_at_last_sample = self.counters.fuzz.frames
        self.log.tracebacks += found.tracebacks
        self.log.warnings += found.warnings
        self.log.errors += found.errors
        c = self.counters
        sample = {
            "minute": (time.monotonic() - began) / 60,
            "uss_mb": mem.get("uss_kb", 0) / 1024,
            "anon_mb": mem.get("anon_kb", 0) / 1024,
            "pss_mb": mem.get("pss_kb", 0) / 1024,
            "rss_mb": mem.get("rss_kb", 0) / 1024,
        }
        c.samples.append(sample)
        print(
            f"[{sample['minute']:5.1f} min] broker USS {sample['uss_mb']:6.1f} MiB (anonymous {sample['anon_mb']:6.1f})"
            f"  Pss {sample['pss_mb']:6.1f}  RSS {sample['rss_mb']:6.1f} | acked {len(c.acknowledged):8d} consumed {len(c.consumed):8d}"
            f" oneway {c.oneway:6d} send errors {c.send_errors} | admin {c.admin_calls} ({c.admin_errors} errors)"
            f" | fuzz frames {c.fuzz.frames:8d} hangs {len(c.fuzz.hangs)} | tracebacks {len(self.log.tracebacks)}"
            f" warnings {self.log.warnings}",
            flush=True,
        )


async def _sleep_or_stop(stop: asyncio.Event, seconds: float) -> None:
    try:
        await asyncio.wait_for(stop.wait(), seconds)
    except TimeoutError:
        pass


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--rate", type=int, default=300, help="acknowledged sends per second")
    ap.add_argument("--fuzz-rate", type=int, default=100, help="malformed frames per second")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--sample-s", type=float, default=60.0, help="seconds between memory samples")
    ap.add_argument("--keep", type=Path, help="run in this directory and keep the store and broker log")
    args = ap.parse_args(argv)
    # Our client's debug lines (late answers to timed-out requests under load) would drown the samples.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    with tempfile.TemporaryDirectory(prefix="soak-") as tmp:
        root = args.keep or Path(tmp)
        broker = BrokerProcess(root / "store", log_path=root / "broker.log", extra_args=set_args(*FUZZ_BROKER_SETTINGS))
        broker.start()
        print(
            f"soak: {args.minutes} min, {args.rate} sends/s, {args.fuzz_rate} fuzz frames/s, seed {args.seed}; "
            f"broker pid {broker.proc.pid if broker.proc else '?'}, log {broker.log_path}",
            flush=True,
        )
        try:
            soak = Soak(
                broker,
                minutes=args.minutes,
                rate=args.rate,
                fuzz_rate=args.fuzz_rate,
                seed=args.seed,
                sample_s=args.sample_s,
            )
            counters = asyncio.run(soak.run())
            alive = broker.running
        finally:
            exit_code = broker.stop(check=False) if broker.running else None
            broker.kill()
        ok = _report(soak, counters, alive, exit_code)
    return 0 if ok else 1


def _report(soak: Soak, c: SoakCounters, alive: bool, exit_code: int | None) -> bool:
    lost = c.lost
    dups = sum(1 for n in c.consumed.values() if n > 1)
    uss = [s["uss_mb"] for s in c.samples]
    anon = [s["anon_mb"] for s in c.samples]
    half = [s for s in c.samples if s["minute"] >= c.samples[-1]["minute"] / 2] if c.samples else []
    growth = (half[-1]["uss_mb"] - half[0]["uss_mb"]) if len(half) >= 2 else 0.0
    anon_growth = (half[-1]["anon_mb"] - half[0]["anon_mb"]) if len(half) >= 2 else 0.0
    span = (half[-1]["minute"] - half[0]["minute"]) if len(half) >= 2 else 0.0
    print("soak summary:")
    print(
        f"  acknowledged sends {len(c.acknowledged)}, consumed {len(c.consumed)} distinct ({dups} redelivered), "
        f"lost {len(lost)} {sorted(lost)[:5]}; oneway {c.oneway}; send errors {c.send_errors}"
    )
    print(f"  admin calls {c.admin_calls}, errors {c.admin_errors}")
    print(c.fuzz.summary())
    if uss:
        print(
            f"  broker USS MiB: first {uss[0]:.1f}, last {uss[-1]:.1f}, max {max(uss):.1f}; "
            f"second half {growth:+.1f} MiB over {span:.1f} min"
        )
        print(
            f"  broker anonymous (heap) MiB: first {anon[0]:.1f}, last {anon[-1]:.1f}, max {max(anon):.1f}; "
            f"second half {anon_growth:+.1f} MiB over {span:.1f} min"
        )
    print(soak.log.summary())
    if soak.log_silent_since is not None:
        print(
            f"  LOG SILENT from minute {soak.log_silent_since:.1f}: malformed frames were sent, no warning logged "
            f"(tracebacks after that point cannot be seen)"
        )
    print(f"  alive at the end: {alive}; exit code after SIGTERM: {exit_code}")
    return (
        alive
        and exit_code == 0
        and not lost
        and not soak.log.tracebacks
        and not c.fuzz.hangs
        and soak.log_silent_since is None
    )


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
