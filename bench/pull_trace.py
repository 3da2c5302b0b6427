"""Where a drain's pull round trip goes: a recording proxy between RocketMQ's benchmark Consumer and a broker.

A drain by a push consumer keeps one pull in flight per queue, so its rate is ``queues * messages per pull / round
trip``. This script splits that round trip, for our broker and (``--targets java``) Apache RocketMQ 4.9.7 alike:

- **broker**: pull request seen by the proxy → its response seen by the proxy (the broker's share plus one loopback
  hop each way through the proxy);
- **client**: response forwarded → the same queue's next pull seen (the consumer's share: decoding, handing the
  messages to its pool, its flow control, scheduling);

and records what each broker answered (messages per pull, status, nextBeginOffset against the pull's offset,
suggestWhichBrokerId) and every other request the consumer sent meanwhile (offset commits, heartbeats). The proxy
sits on both the name server (rewriting the broker address in route answers to its own) and the broker port, so the
consumer is unchanged. The proxy's own cost lands on both targets alike: compare the two, not the absolute figures.

    python -m bench.pull_trace [--targets ours,java] [--backlog 200000] [--seconds 12]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import struct
import tempfile
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from bench import consume_ab
from bench.backlog import fill_backlog
from bench.broker_proc import BrokerProcess, free_port
from bench.consume_ab import BACKLOG_TOPIC
from bench.java_broker import JavaBroker
from bench.vs_java import CONSUME_LINE, JavaTool, find_reference_bin
from remoting.codes import RequestCode
from remoting.command import RemotingCommand

_LEN = struct.Struct(">i")


@dataclass
class Trace:
    """What the broker proxy saw; times are ``time.perf_counter()``."""

    pulls: dict[int, tuple[float, dict[str, str]]] = field(default_factory=dict)  # opaque -> (sent, request header)
    answered: list[tuple[float, float, dict[str, str], RemotingCommand, int]] = field(default_factory=list)
    others: Counter = field(default_factory=Counter)


def count_messages(body: bytes | memoryview | None) -> int:
    """Messages in a pull body: each starts with its 4-byte total size."""
    if not body:
        return 0
    n = pos = 0
    while pos + 4 <= len(body):
        (size,) = _LEN.unpack_from(body, pos)
        if size <= 0:
            break
        pos += size
        n += 1
    return n


def frames(buf: bytearray) -> list[bytes]:
    """Cut every complete frame (with its length prefix) off the front of ``buf``."""
    out = []
    while len(buf) >= 4:
        (length,) = _LEN.unpack_from(buf, 0)
        if len(buf) < 4 + length:
            break
        out.append(bytes(buf[: 4 + length]))
        del buf[: 4 + length]
    return out


async def pump(reader, writer, on_frame) -> None:
    buf = bytearray()
    try:
        while data := await reader.read(1 << 18):
            buf += data
            out = [on_frame(frame) for frame in frames(buf)]
            writer.writelines(out)
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()


def rewrite_route(frame: bytes, real: bytes, proxy: bytes) -> bytes:
    """A name server answer with the broker's address replaced by the proxy's (the frame's length fixed)."""
    if real not in frame:
        return frame
    (hlen_type,) = _LEN.unpack_from(frame, 4)
    hlen = hlen_type & 0xFFFFFF
    head, body = frame[8 : 8 + hlen], frame[8 + hlen :].replace(real, proxy)
    return _LEN.pack(4 + hlen + len(body)) + frame[4:8] + head + body


class Proxy:
    def __init__(self, ns_real: int, broker_real: int) -> None:
        self.ns_real, self.broker_real = ns_real, broker_real
        self.ns_port, self.broker_port = free_port(), free_port()
        self.trace = Trace()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.ready = threading.Event()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self._serve())
        self.ready.set()
        self.loop.run_forever()

    async def _serve(self) -> None:
        self.servers = [
            await asyncio.start_server(self._ns, "127.0.0.1", self.ns_port),
            await asyncio.start_server(self._broker, "127.0.0.1", self.broker_port),
        ]

    def start(self) -> Proxy:
        self.thread.start()
        self.ready.wait(10)
        return self

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)

    async def _ns(self, reader, writer) -> None:
        up_r, up_w = await asyncio.open_connection("127.0.0.1", self.ns_real)
        real = f'"127.0.0.1:{self.broker_real}"'.encode()  # quoted: port 1091 must not match 10911
        mine = f'"127.0.0.1:{self.broker_port}"'.encode()
        await asyncio.gather(
            pump(reader, up_w, lambda f: f), pump(up_r, writer, lambda f: rewrite_route(f, real, mine))
        )

    async def _broker(self, reader, writer) -> None:
        up_r, up_w = await asyncio.open_connection("127.0.0.1", self.broker_real)
        trace = self.trace

        def request(frame: bytes) -> bytes:
            cmd = RemotingCommand.decode(memoryview(frame)[4:])
            if cmd.code == RequestCode.PULL_MESSAGE:
                trace.pulls[cmd.opaque] = (time.perf_counter(), cmd.ext_fields)
            else:
                trace.others[cmd.code] += 1
            return frame

        def response(frame: bytes) -> bytes:
            now = time.perf_counter()
            cmd = RemotingCommand.decode(memoryview(frame)[4:])
            sent = trace.pulls.pop(cmd.opaque, None)
            if sent is not None:
                trace.answered.append((sent[0], now, sent[1], cmd, count_messages(cmd.body)))
            return frame

        await asyncio.gather(pump(reader, up_w, request), pump(up_r, writer, response))


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def analyse(label: str, trace: Trace, window: tuple[float, float], tps: list[float]) -> str:
    lo, hi = window
    rows = [r for r in trace.answered if lo <= r[0] <= hi]
    by_queue: dict[str, list] = defaultdict(list)
    for r in trace.answered:
        by_queue[r[2].get("queueId", "?")].append(r)
    broker_ms = [(r[1] - r[0]) * 1e3 for r in rows]
    client_ms, in_flight = [], Counter()
    for queue_rows in by_queue.values():
        queue_rows.sort(key=lambda r: r[0])
        for prev, nxt in zip(queue_rows, queue_rows[1:]):
            if lo <= nxt[0] <= hi:
                client_ms.append((nxt[0] - prev[1]) * 1e3)
                in_flight["overlap" if nxt[0] < prev[1] else "serial"] += 1
    msgs = [r[4] for r in rows]
    codes = Counter(r[3].code for r in rows)
    nbo_ok = sum(
        1 for r in rows if r[4] and int(r[3].ext_fields.get("nextBeginOffset", -1)) == int(r[2]["queueOffset"]) + r[4]
    )
    suggest = Counter(r[3].ext_fields.get("suggestWhichBrokerId") for r in rows)
    span = hi - lo
    lines = [
        f"== {label}: {len(rows)} pulls in {span:.1f} s on {len(by_queue)} queues, "
        f"{sum(msgs) / span:,.0f} msg/s through the proxy; consumer's TPS lines {[round(t) for t in tps]}",
        f"  messages per pull: mean {statistics.fmean(msgs) if msgs else 0:.1f}, "
        f"distribution {sorted(Counter(msgs).items())[-6:]}; response codes {dict(codes)}",
        f"  nextBeginOffset == offset + count: {nbo_ok}/{sum(1 for m in msgs if m)}; "
        f"suggestWhichBrokerId {dict(suggest)}; maxMsgNums {Counter(r[2].get('maxMsgNums') for r in rows)}",
        "  broker share ms  p10 {:.2f} p50 {:.2f} p90 {:.2f} p99 {:.2f} mean {:.2f}".format(
            pct(broker_ms, 0.1),
            pct(broker_ms, 0.5),
            pct(broker_ms, 0.9),
            pct(broker_ms, 0.99),
            statistics.fmean(broker_ms) if broker_ms else float("nan"),
        ),
        "  client share ms  p10 {:.2f} p50 {:.2f} p90 {:.2f} p99 {:.2f} mean {:.2f} (next pull before answer: {})".format(
            pct(client_ms, 0.1),
            pct(client_ms, 0.5),
            pct(client_ms, 0.9),
            pct(client_ms, 0.99),
            statistics.fmean(client_ms) if client_ms else float("nan"),
            in_flight["overlap"],
        ),
        f"  client gaps > 40 ms: {sum(1 for c in client_ms if c > 40)}; other requests {dict(trace.others)}",
    ]
    return "\n".join(lines)


def cpu_seconds(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            total += consume_ab.cpu_seconds(pid)
        except OSError:
            pass
    return total


def run_direct(label: str, rmqjava: Path, ns_real: int, broker_pids: list[int], seconds: float) -> str:
    """The consumer straight on the broker: every TPS line, and the broker's and the consumer's CPU share."""
    tool = JavaTool(rmqjava, "Consumer", ["-n", f"127.0.0.1:{ns_real}", "-t", BACKLOG_TOPIC, "-g", f"d_{label}"])
    t0, b0, c0 = time.monotonic(), cpu_seconds(broker_pids), cpu_seconds([tool.proc.pid])
    time.sleep(seconds)
    span = time.monotonic() - t0
    b1, c1 = cpu_seconds(broker_pids), cpu_seconds([tool.proc.pid])
    tps = [float(m.group(1)) for m in map(CONSUME_LINE.search, tool.stop()) if m]
    return (
        f"== {label} direct: TPS lines {[round(t) for t in tps]}; CPU share over {span:.0f} s: "
        f"broker {(b1 - b0) / span:.2f}, consumer {(c1 - c0) / span:.2f}"
    )


def run_target(label: str, rmqjava: Path, ns_real: int, broker_real: int, seconds: float) -> str:
    proxy = Proxy(ns_real, broker_real).start()
    try:
        t0 = time.perf_counter()
        tool = JavaTool(
            rmqjava,
            "Consumer",
            ["-n", f"127.0.0.1:{proxy.ns_port}", "-t", BACKLOG_TOPIC, "-g", f"trace_{label}_{int(time.time())}"],
        )
        time.sleep(seconds)
        t1 = time.perf_counter()
        tps = [float(m.group(1)) for m in map(CONSUME_LINE.search, tool.stop()) if m]
    finally:
        proxy.stop()
    start = min((r[0] for r in proxy.trace.answered), default=t0)
    return analyse(label, proxy.trace, (start + 3.0, t1 - 0.5), tps)


def run_ours(rmqjava: Path, args: argparse.Namespace, tmp: Path) -> str:
    broker = BrokerProcess(store_dir=tmp / "ours", fault_injection=False, root=Path(args.root).resolve()).start()
    try:
        asyncio.run(fill_backlog(broker.namesrv, BACKLOG_TOPIC, args.backlog))
        if args.direct:
            return run_direct("ours", rmqjava, broker.namesrv_port, [broker.proc.pid], args.seconds)
        return run_target("ours", rmqjava, broker.namesrv_port, broker.listen_port, args.seconds)
    finally:
        broker.stop()


def run_java(bin_dir: Path, args: argparse.Namespace) -> str:
    broker = JavaBroker(bin_dir).start()
    try:
        asyncio.run(fill_backlog(broker.namesrv, BACKLOG_TOPIC, args.backlog))
        if args.direct:
            return run_direct("java", bin_dir / "rmqjava", broker.ns_port, [broker.pid], args.seconds)
        return run_target("java", bin_dir / "rmqjava", broker.ns_port, broker.broker_port, args.seconds)
    finally:
        broker.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", default="ours,java")
    parser.add_argument("--backlog", type=int, default=200_000)
    parser.add_argument("--seconds", type=float, default=12.0)
    parser.add_argument("--root", default=".", help="the checkout whose broker is 'ours'")
    parser.add_argument("--rmq-bin")
    parser.add_argument("--direct", action="store_true", help="no proxy: TPS lines and CPU shares only")
    args = parser.parse_args(argv)
    bin_dir = find_reference_bin(args.rmq_bin)
    if bin_dir is None:
        print("skipped: Apache RocketMQ 4.9.7 tools (rmqjava) not found; see bench/vs_java.py")
        return 0
    with tempfile.TemporaryDirectory(prefix="pull-trace-") as tmp:
        for target in (t.strip() for t in args.targets.split(",") if t.strip()):
            out = run_java(bin_dir, args) if target == "java" else run_ours(bin_dir / "rmqjava", args, Path(tmp))
            print(out, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
