"""Benchmark: why fast failure exists — send latency and outcomes during a stalled append, fast failure on
vs off — and what the sweeper costs per tick with 100,000 queued requests.

Part 1 (a broker subprocess, defaults except small commit-log files): ``--senders`` producers each send
one message every 20 ms, one at a time (client timeout ``--timeout-ms``, 3 s like the J/C++ clients;
50 ms back-off after a failure). After 1 s of normal traffic, FAULT_INJECT ``stall_append`` holds the
commit-log lock for ``--stall-ms`` (4 s: longer than the client timeout). The same run is done with
``brokerFastFailureEnable`` true and false (switched with UPDATE_BROKER_CONFIG). Printed per mode, for
the sends started during the stall: attempts, stored, each busy answer, client timeouts, latency
percentiles, and the share of the senders' time spent waiting for an answer. With fast failure on, a
request stuck in the queue behind the lock is answered in ~200 ms ([TIMEOUT_CLEAN_QUEUE]), later ones
are refused at once ([REJECTREQUEST]), so a client can retry another broker; off, it waits out the
stall or its own timeout (the two sends already inside the store wait either way).

Part 2 (in-process, the broker's own ``BrokerFastFailure`` and ``RequestExecutor``): one tick over a send
queue of 100,000 requests when none has expired (the common case: it looks at the head only), when all
have expired ([TIMEOUT_CLEAN_QUEUE] for each), and while the page cache is busy ([PCBUSY_CLEAN_QUEUE]).

    python -m bench.fast_failure_bench [--senders 16] [--stall-ms 4000] [--timeout-ms 3000] [--queued 100000]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from bench.broker_proc import BrokerProcess
from broker.fast_failure import BrokerFastFailure, SweptQueue
from mqclient.fault import inject_fault_async
from remoting.client import RemotingClient
from remoting.codes import RequestCode
from remoting.command import RemotingCommand
from remoting.errors import RemotingTimeoutError
from remoting.executor import RequestExecutor, RequestTask
from remoting.headers import SendMessageRequestHeaderV2, encode_header

BUSY_TAGS = ("TIMEOUT_CLEAN_QUEUE", "PCBUSY_CLEAN_QUEUE", "REJECTREQUEST", "OVERLOAD", "PC_SYNCHRONIZED")


def percentile(sorted_values: list[float], p: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    if not sorted_values:
        return float("nan")
    rank = max(1, round(p / 100 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


# ------------------------------------------------------------------------------- part 1: stalled append


@dataclass
class Attempt:
    sender: int
    start_s: float  # since the stall was injected
    latency_ms: float
    outcome: str

    @property
    def end_s(self) -> float:
        return self.start_s + self.latency_ms / 1000


@dataclass
class ModeResult:
    mode: str
    stall_ms: int
    senders: int
    attempts: list[Attempt] = field(default_factory=list)
    stall_at: float = 0.0

    def row(self) -> dict[str, object]:
        window = [a for a in self.attempts if 0 <= a.start_s < self.stall_ms / 1000]
        lat = sorted(a.latency_ms for a in window)
        o = Counter(a.outcome for a in window)
        waited = sum(lat) / (self.senders * self.stall_ms)
        told = sorted(self.first_answer_ms().values())
        return {
            "mode": self.mode,
            "attempts": len(lat),
            "stored": o["OK"],
            **{tag: o[tag] for tag in BUSY_TAGS},
            "client timeout": o["CLIENT_TIMEOUT"],
            "other": sum(n for k, n in o.items() if k not in ("OK", "CLIENT_TIMEOUT", *BUSY_TAGS)),
            "p50 ms": percentile(lat, 50),
            "p90 ms": percentile(lat, 90),
            "p99 ms": percentile(lat, 99),
            "max ms": lat[-1] if lat else float("nan"),
            "time waiting": f"{waited:.0%}",
            "first answer p50/max ms": f"{percentile(told, 50):.0f}/{told[-1]:.0f}" if told else "n/a",
        }

    def first_answer_ms(self) -> dict[int, float]:
        """Per sender: from the stall's start to the first answer (or client timeout) it got after it."""
        first: dict[int, float] = {}
        for a in sorted(self.attempts, key=lambda a: a.end_s):
            if a.end_s > 0 and a.sender not in first:
                first[a.sender] = a.end_s * 1000
        return first


def send_request(topic: str, seq: int) -> RemotingCommand:
    hdr = SendMessageRequestHeaderV2(
        a="PG_bench_ff",
        b=topic,
        c="TBW102",
        d=4,
        e=seq % 4,
        f=0,
        g=time.time_ns() // 1_000_000,
        h=0,
        i=f"KEYS\x01k{seq}",
    )
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, encode_header(hdr), b"x" * 256)


def outcome_of(resp: RemotingCommand) -> str:
    if resp.code == 0:
        return "OK"
    remark = resp.remark or ""
    for tag in BUSY_TAGS:
        if remark.startswith(f"[{tag}]"):
            return tag
    return f"code {resp.code}"


SEND_INTERVAL_S = 0.020
BACKOFF_S = 0.050


async def sender(addr: str, topic: str, stop_at: float, timeout_s: float, result: ModeResult, ident: int) -> None:
    client = RemotingClient()
    loop = asyncio.get_running_loop()
    seq = ident * 1_000_000
    try:
        while loop.time() < stop_at:
            seq += 1
            t0 = loop.time()
            try:
                resp = await client.invoke(addr, send_request(topic, seq), timeout_s)
                outcome = outcome_of(resp)
            except RemotingTimeoutError:
                outcome = "CLIENT_TIMEOUT"
            except Exception as exc:  # noqa: BLE001 - count it, keep sending
                outcome = type(exc).__name__
            t1 = loop.time()
            result.attempts.append(Attempt(ident, t0 - result.stall_at, (t1 - t0) * 1000, outcome))
            pause = SEND_INTERVAL_S - (t1 - t0) if outcome == "OK" else BACKOFF_S
            if pause > 0:
                await asyncio.sleep(pause)
    finally:
        await client.close()


async def admin(client: RemotingClient, addr: str, code: int, body: bytes | None = None) -> RemotingCommand:
    resp = await client.invoke(addr, RemotingCommand.request(code, {}, body), 5.0)
    if resp.code != 0:
        raise RuntimeError(f"admin request {code} refused: {resp.remark}")
    return resp


async def run_mode(addr: str, fast_failure: bool, args: argparse.Namespace) -> ModeResult:
    ctl = RemotingClient()
    try:
        body = f"brokerFastFailureEnable={'true' if fast_failure else 'false'}".encode()
        await admin(ctl, addr, RequestCode.UPDATE_BROKER_CONFIG, body)
        topic = f"T_ff_{'on' if fast_failure else 'off'}_{time.time_ns() % 10**9}"
        warm = await ctl.invoke(addr, send_request(topic, 0), 10.0)  # create the topic outside the measurement
        assert warm.code == 0, warm.remark
        result = ModeResult("fast failure ON" if fast_failure else "fast failure OFF", args.stall_ms, args.senders)
        loop = asyncio.get_running_loop()
        result.stall_at = loop.time() + 1.0
        stop_at = result.stall_at + args.stall_ms / 1000 + 0.5
        senders = [
            asyncio.create_task(sender(addr, topic, stop_at, args.timeout_ms / 1000, result, i))
            for i in range(args.senders)
        ]
        await asyncio.sleep(max(0.0, result.stall_at - loop.time()))
        await inject_fault_async(addr, "stall_append", duration_ms=args.stall_ms, client=ctl)
        await asyncio.gather(*senders)
        await inject_fault_async(addr, "clear", client=ctl)
        await asyncio.sleep(0.5)  # let the stalled sends drain before the next mode
        return result
    finally:
        await ctl.close()


def print_table(rows: list[dict[str, object]]) -> None:
    cols = list(rows[0])
    width = {c: max(len(c), *(len(_fmt(r[c])) for r in rows)) for c in cols}
    print("  ".join(c.rjust(width[c]) for c in cols))
    for r in rows:
        print("  ".join(_fmt(r[c]).rjust(width[c]) for c in cols))


def _fmt(v: object) -> str:
    return f"{v:.1f}" if isinstance(v, float) else str(v)


async def part1(addr: str, args: argparse.Namespace) -> list[ModeResult]:
    return [await run_mode(addr, True, args), await run_mode(addr, False, args)]


# ------------------------------------------------------------------------------- part 2: sweeper tick cost


class NullChannel:
    """A channel that accepts answers and drops them (the sweep itself is measured, not the socket)."""

    remote_addr = "127.0.0.1:1"

    def __init__(self) -> None:
        self.sent = 0

    def send(self, cmd: RemotingCommand) -> None:
        self.sent += 1

    def request_finished(self) -> None:
        pass


def tick_costs(queued: int) -> list[dict[str, object]]:
    now = [10_000_000]
    busy = [False]
    send = RequestExecutor("send", 1, queued * 2, now_ms=lambda: now[0])
    pull = RequestExecutor("pull", 1, 10, now_ms=lambda: now[0])
    ff = BrokerFastFailure(
        send_executor=send,
        queues=[SweptQueue(send, lambda: 200), SweptQueue(pull, lambda: 5000)],
        is_page_cache_busy=lambda: busy[0],
        now_ms=lambda: now[0],
        enabled=lambda: True,
    )
    channel = NullChannel()
    request = send_request("T", 1)

    def fill() -> None:
        send.queue.clear()
        send.queue.extend(RequestTask(channel, request, now[0]) for _ in range(queued))  # type: ignore[arg-type]

    rows = []
    fill()
    ticks = 2000
    t0 = time.perf_counter()
    for _ in range(ticks):
        ff.clean_expired_request()
    idle_us = (time.perf_counter() - t0) / ticks * 1e6
    assert len(send.queue) == queued
    rows.append(
        {
            "case": f"{queued:,} queued, none expired",
            "answered": 0,
            "tick µs": idle_us,
            "per answered request µs": float("nan"),
        }
    )
    for label, expire in (
        ("all expired → [TIMEOUT_CLEAN_QUEUE]", True),
        ("page cache busy → [PCBUSY_CLEAN_QUEUE]", False),
    ):
        fill()
        if expire:
            now[0] += 200
        busy[0] = not expire
        t0 = time.perf_counter()
        answered = ff.clean_expired_request()
        dt = time.perf_counter() - t0
        busy[0] = False
        assert answered == queued and not send.queue
        rows.append(
            {
                "case": f"{queued:,} queued, {label}",
                "answered": answered,
                "tick µs": dt * 1e6,
                "per answered request µs": dt / answered * 1e6,
            }
        )
    return rows


# ------------------------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--senders", type=int, default=16)
    p.add_argument("--stall-ms", type=int, default=4000)
    p.add_argument("--timeout-ms", type=int, default=3000)
    p.add_argument("--queued", type=int, default=100_000)
    p.add_argument("--skip-broker", action="store_true", help="only the in-process sweeper cost")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))

    if not args.skip_broker:
        with tempfile.TemporaryDirectory(prefix="bench-ff-") as tmp:
            broker = BrokerProcess(Path(tmp) / "store", config={"mappedFileSizeCommitLog": str(64 * 1024 * 1024)})
            with broker:
                time.sleep(1.2)  # the sweeper starts 1 s after boot
                results = asyncio.run(part1(broker.broker_addr, args))
        print(
            f"\n1) {args.senders} senders, one message at a time, client timeout {args.timeout_ms} ms; "
            f"the append lock held {args.stall_ms} ms (FAULT_INJECT stall_append) 1 s into the run; "
            "default osPageCacheBusyTimeOutMills 1000, waitTimeMillsInSendQueue 200, "
            "sendMessageThreadPoolNums min(cpus,4)"
        )
        print_table([r.row() for r in results])
        on, off = (sorted(r.first_answer_ms().values()) for r in results)
        print(
            f"   senders answered within 300 ms of the stall's start: ON {sum(x <= 300 for x in on)}/{len(on)}, "
            f"OFF {sum(x <= 300 for x in off)}/{len(off)}; median time to that first answer: "
            f"ON {statistics.median(on):.0f} ms, OFF {statistics.median(off):.0f} ms "
            f"({statistics.median(off) / statistics.median(on):.1f}x)"
        )
        print(
            "   'time waiting' = the senders' time spent waiting for answers during the stall; "
            "'first answer' = per sender, from the stall's start to its first answer (or its own timeout)"
        )

    print(
        f"\n2) sweeper tick cost (BrokerFastFailure.clean_expired_request, in-process, {sys.implementation.name} "
        f"{sys.version.split()[0]})"
    )
    print_table(tick_costs(args.queued))
    return 0


if __name__ == "__main__":
    sys.exit(main())
