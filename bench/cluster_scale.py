"""One broker process against a local cluster of N, interleaved in one run, under RocketMQ's own benchmark tools.

Issue 15 asks whether a second process helps where one event loop tops out at one core. Each round starts
one layout, runs the three phases of ``bench.vs_java`` (send, drain, mixed) against its name server and stops
it; the layouts alternate (one, N, one, N, ...) so the machine's noise falls on both alike. For every phase
the CPU each process used (utime+stime from /proc, as a share of one core) is printed beside the TPS, so
the figures say where the cycles went: into the brokers or into the Java client that shares the cores.

The N-broker layout is N ``mqbroker`` processes (broker-a, broker-b, ...) that all register with the first
one's embedded name server (the recipe in docs/design.md, "Speed: one process or many"); the topic is created
on every master before the phases, 8 queues each, so real clients spread their sends over all of them.

    python -m bench.cluster_scale [--brokers 2] [--rounds 2] [--send-s 30] [--drain-s 20] [--mixed-s 20]

Skips (exit 0) when the Apache RocketMQ 4.9.7 tools are not installed, like ``bench.vs_java``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from bench.broker_proc import BrokerProcess, free_port
from bench.ceiling_server import ceiling_process
from bench.vs_java import CONSUME_LINE, REFERENCE_SETUP, SEND_LINE, JavaTool, _median_after_first, find_reference_bin
from mqclient.admin import AdminClient

CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float | None:
    """utime + stime of one process (all its threads), from /proc/PID/stat."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


class CpuMeter:
    """CPU used by named processes from construction to ``stop``, as a share of one core."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self._t0 = time.monotonic()
        self._c0 = {name: cpu_seconds(pid) for name, pid in pids.items()}

    def stop(self) -> dict[str, float]:
        wall = time.monotonic() - self._t0
        out = {}
        for name, pid in self.pids.items():
            c1, c0 = cpu_seconds(pid), self._c0[name]
            if c1 is not None and c0 is not None and wall > 0:
                out[name] = (c1 - c0) / wall
        return out


@dataclass
class Phase:
    tps: float | None = None
    rt_ms: float | None = None  # send: average RT; mixed: send-to-consume
    cpu: dict[str, float] = field(default_factory=dict)  # share of one core while metered
    messages: int = 0  # stored (send, mixed) or consumed (drain) while metered
    seconds: float = 0.0
    per_broker: dict[str, int] = field(default_factory=dict)  # messages each broker stored in this phase

    def cpu_us_per_message(self, who: str) -> float | None:
        """CPU microseconds the processes whose names start with ``who`` ("broker", "java") spent per message:
        the figure that survives a busy machine, where a share of the cores depends on who else wants them."""
        if not self.messages:
            return None
        share = sum(v for k, v in self.cpu.items() if k.startswith(who))
        return share * self.seconds / self.messages * 1e6


@dataclass
class Round:
    layout: str
    send: Phase = field(default_factory=Phase)
    drain: Phase = field(default_factory=Phase)
    mixed: Phase = field(default_factory=Phase)


@dataclass
class LocalCluster:
    """N broker processes, the first with the embedded name server; the others register with it."""

    root: Path
    size: int
    brokers: list[BrokerProcess] = field(default_factory=list)

    @property
    def namesrv(self) -> str:
        return self.brokers[0].namesrv

    def start(self) -> LocalCluster:
        namesrv_port = free_port()
        try:
            for i in range(self.size):
                name = f"broker-{chr(ord('a') + i)}"
                sets = {"namesrvListenPort": "-1", "namesrvAddr": f"127.0.0.1:{namesrv_port}"} if i else {}
                broker = BrokerProcess(
                    store_dir=self.root / name,
                    broker_name=name,
                    config=sets,
                    fault_injection=False,
                    namesrv_port=namesrv_port,
                )
                self.brokers.append(broker)
                broker.start()
        except BaseException:
            self.stop()  # the ones that did boot
            raise
        return self

    def pids(self) -> dict[str, int]:
        return {b.broker_name: b.proc.pid for b in self.brokers if b.proc is not None}

    def stop(self) -> None:
        for broker in self.brokers:
            broker.stop()


async def _prepare(namesrv: str, topics: list[str], brokers: int) -> None:
    async with AdminClient(namesrv) as admin:
        deadline = time.monotonic() + 30
        while len(await admin.brokers()) < brokers:  # the others register a moment after they boot
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {len(await admin.brokers())} of {brokers} brokers registered")
            await asyncio.sleep(0.2)
        for topic in topics:
            await admin.create_topic_everywhere(topic, 8)


async def _stored(namesrv: str, topic: str) -> dict[str, int]:
    """Messages stored per broker for ``topic`` (sum of its queues' max offsets)."""
    async with AdminClient(namesrv) as admin:
        out = {}
        for broker in await admin.brokers():
            stats = await admin.topic_stats(broker.master, topic)
            out[broker.broker_name] = sum(s.get("maxOffset", 0) for s in stats.values())
        return out


def _stored_total(namesrv: str, topic: str) -> Callable[[], int]:
    """A counter for ``_metered``: messages stored for ``topic`` over all brokers."""
    return lambda: sum(asyncio.run(_stored(namesrv, topic)).values())


async def _consumed(namesrv: str, group: str, topic: str) -> int:
    """Messages ``group`` committed on ``topic`` over all brokers."""
    async with AdminClient(namesrv) as admin:
        total = 0
        for broker in await admin.brokers():
            _, table = await admin.consume_stats(broker.master, group, topic)
            total += sum(max(s.get("consumerOffset", 0), 0) for s in table.values())
        return total


def _metered(
    tool: JavaTool, pids: dict[str, int], seconds: float, warm_s: float, count: Callable[[], int], phase: Phase
) -> list[str]:
    """Let the tool warm up, then meter CPU and messages (``count`` before and after) for the rest of
    ``seconds``; returns the tool's output lines."""
    try:
        time.sleep(warm_s)
        before = count()
        meter = CpuMeter(pids | {"java": tool.proc.pid})
        time.sleep(seconds - warm_s)
        phase.cpu = meter.stop()
        phase.seconds = seconds - warm_s
    finally:
        lines = tool.stop()
    phase.messages = count() - before
    return lines


def run_round(rmqjava: Path, layout: str, start: Callable[[], LocalCluster], args: argparse.Namespace) -> Round:
    result = Round(layout)
    cluster = start()
    try:
        stamp = int(time.time() * 1000)
        send_topic, mix_topic = f"ScaleS{stamp}", f"ScaleM{stamp}"
        ns = cluster.namesrv
        asyncio.run(_prepare(ns, [send_topic, mix_topic], cluster.size))
        pids = cluster.pids()
        warm = min(10.0, args.send_s / 3)  # the client's JIT and rebalance settle before anything is counted
        producer = JavaTool(rmqjava, "Producer", ["-n", ns, "-t", send_topic, "-w", "16", "-s", "1024"])
        lines = _metered(producer, pids, args.send_s, warm, _stored_total(ns, send_topic), result.send)
        rows = [m for m in map(SEND_LINE.search, lines) if m]
        # the metered window's own rate: short rounds print too few 10-second lines for a median
        result.send.tps = result.send.messages / result.send.seconds if result.send.seconds else None
        result.send.rt_ms = _median_after_first([float(m.group(3)) for m in rows])
        result.send.per_broker = asyncio.run(_stored(ns, send_topic))
        if "drain" in args.phases:
            _drain(rmqjava, ns, send_topic, f"drain{stamp}", pids, args, result.drain)
        if "mixed" in args.phases:
            _mixed(rmqjava, ns, mix_topic, f"mixed{stamp}", pids, args, warm, result.mixed)
    finally:
        cluster.stop()
    return result


def _drain(
    rmqjava: Path, ns: str, topic: str, group: str, pids: dict[str, int], args: argparse.Namespace, phase: Phase
) -> None:
    """A fresh group drains the send phase's backlog; the best 10-second line counts (a backlog drains
    fastest before it runs dry), the CPU is metered over the whole phase."""
    consumer = JavaTool(rmqjava, "Consumer", ["-n", ns, "-t", topic, "-g", group])
    lines = _metered(consumer, pids, args.drain_s, 0.0, lambda: asyncio.run(_consumed(ns, group, topic)), phase)
    phase.tps = max((float(m.group(1)) for m in map(CONSUME_LINE.search, lines) if m), default=None)


def _mixed(
    rmqjava: Path,
    ns: str,
    topic: str,
    group: str,
    pids: dict[str, int],
    args: argparse.Namespace,
    warm: float,
    phase: Phase,
) -> None:
    """Producer and consumer together on a fresh topic: the consumer's median TPS and send-to-consume ms."""
    consumer = JavaTool(rmqjava, "Consumer", ["-n", ns, "-t", topic, "-g", group])
    try:
        producer = JavaTool(rmqjava, "Producer", ["-n", ns, "-t", topic, "-w", "16", "-s", "1024"])
        counted = pids | {"java-consumer": consumer.proc.pid}
        _metered(producer, counted, args.mixed_s, warm, _stored_total(ns, topic), phase)
    finally:
        rows = [m for m in map(CONSUME_LINE.search, consumer.stop()) if m]
    phase.tps = _median_after_first([float(m.group(1)) for m in rows])
    phase.rt_ms = _median_after_first([float(m.group(4)) for m in rows])
    phase.per_broker = asyncio.run(_stored(ns, topic))


def client_cost(rmqjava: Path, seconds: float) -> Phase:
    """The Java producer against the protocol ceiling (``bench/ceiling_server.py``, no store): what the client
    costs per message when the server costs almost nothing, i.e. at the highest rate it reaches here."""
    phase = Phase()
    port = free_port()
    with ceiling_process(port) as server:
        tool = JavaTool(
            rmqjava, "Producer", ["-n", f"127.0.0.1:{port}", "-t", "CeilingTopic", "-w", "16", "-s", "1024"]
        )
        warm = min(10.0, seconds / 3)
        lines = _metered(tool, {"ceiling": server.pid}, seconds, warm, lambda: 0, phase)
    # the ceiling stores nothing to count: the 10-second lines inside the metered window give the messages
    rows = [float(m.group(1)) for m in map(SEND_LINE.search, lines) if m]
    phase.tps = _median_after_first(rows)
    phase.messages = int((phase.tps or 0) * phase.seconds)
    return phase


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _cpu(cpu: dict[str, float]) -> str:
    return " ".join(f"{name}={share:.0%}" for name, share in cpu.items())


def ceiling(phase: Phase, brokers: int, cores: int, client_us: float | None = None) -> float | None:
    """TPS a quiet machine of ``cores`` could reach at these CPU costs per message: every broker process is
    one event loop (at most one core, holding its share 1/brokers of the messages) and all processes
    together share ``cores``. ``client_us`` replaces the client's cost measured in this phase (inflated at low
    rates by the JVM's fixed costs: GC, JIT, timers) with the one it has at the ceiling's rate."""
    b, j = phase.cpu_us_per_message("broker"), client_us or phase.cpu_us_per_message("java")
    if not b:
        return None
    return min(brokers * 1e6 / b, cores * 1e6 / (b + (j or 0.0)))


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v]
    return statistics.median(present) if present else None


def phase_line(r: Round, phase: str) -> str:
    p: Phase = getattr(r, phase)
    b, j = p.cpu_us_per_message("broker"), p.cpu_us_per_message("java")
    cost = f"us/msg brokers {_fmt(b)} java {_fmt(j)}" if p.messages else "us/msg -"
    spread = f"  stored {p.per_broker}" if len(p.per_broker) > 1 else ""
    return f"{phase:5} TPS {_fmt(p.tps):>7}  {cost}  cpu {_cpu(p.cpu)}{spread}"


def _pair_ratios(rounds: list[Round], phase: str) -> list[float]:
    """N brokers over 1 broker for each adjacent pair of rounds: the noise of a busy machine moves slowly,
    so a pair shares more of it than two medians do."""
    out = []
    for one, many in zip(rounds[0::2], rounds[1::2]):
        a, b = getattr(one, phase).tps, getattr(many, phase).tps
        if a and b:
            out.append(b / a)
    return out


def report(rounds: list[Round], n: int, cores: int, client: Phase | None) -> str:
    out = []
    for i, r in enumerate(rounds):
        for phase in ("send", "drain", "mixed"):
            out.append(f"round {i // 2 + 1} {r.layout:>9} {phase_line(r, phase)}")
    client_us = client.cpu_us_per_message("java") if client else None
    if client is not None:
        out.append(
            f"protocol ceiling: {_fmt(client.tps)} send TPS; java client {_fmt(client_us)} us/msg, "
            f"ceiling server {_fmt(client.cpu_us_per_message('ceiling'))} us/msg"
        )
    out.append("")
    out.append(f"{'median over rounds':38} {'1 broker':>10} {f'{n} brokers':>10} {'ratio':>7}")
    one_rounds = [r for r in rounds if r.layout == "1 broker"]
    many_rounds = [r for r in rounds if r.layout != "1 broker"]
    for phase in ("send", "drain", "mixed"):
        rows = {
            "TPS measured": lambda p: p.tps,
            "broker CPU us/msg": lambda p: p.cpu_us_per_message("broker"),
            "java client CPU us/msg": lambda p: p.cpu_us_per_message("java"),
        }
        for label, get in rows.items():
            a = _median([get(getattr(r, phase)) for r in one_rounds])
            b = _median([get(getattr(r, phase)) for r in many_rounds])
            ratio = f"{b / a:.2f}x" if a and b else "-"
            out.append(f"{phase + ' ' + label:38} {_fmt(a):>10} {_fmt(b):>10} {ratio:>7}")
        pairs = _pair_ratios(rounds, phase)
        if pairs:
            listed = " ".join(f"{x:.2f}" for x in pairs)
            out.append(f"{phase + ' TPS ratio per pair':38} {listed}  (median {statistics.median(pairs):.2f}x)")
        # the model: the client's own cost at a high rate where one was measured (send), else this phase's
        us = client_us if phase == "send" else None
        a = _median([ceiling(getattr(r, phase), 1, cores, us) for r in one_rounds])
        b = _median([ceiling(getattr(r, phase), n, cores, us) for r in many_rounds])
        ratio = f"{b / a:.2f}x" if a and b else "-"
        out.append(f"{phase + f' TPS a quiet {cores}-core box allows':38} {_fmt(a):>10} {_fmt(b):>10} {ratio:>7}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="One broker process against a local cluster of N, interleaved.")
    parser.add_argument("--brokers", type=int, default=2, help="size of the cluster layout (default 2)")
    parser.add_argument("--rounds", type=int, default=2, help="pairs of (1 broker, N brokers) runs")
    parser.add_argument("--send-s", type=float, default=30.0)
    parser.add_argument("--drain-s", type=float, default=20.0)
    parser.add_argument("--mixed-s", type=float, default=20.0)
    parser.add_argument("--phases", default="send,drain,mixed", help="comma-separated: send, drain, mixed")
    parser.add_argument("--ceiling-s", type=float, default=30.0, help="client cost at the ceiling; 0 skips")
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 1, help="cores of the quiet-machine model")
    parser.add_argument("--rmq-bin", help="folder with rmqjava (default: PATH, then ~/.cache)")
    args = parser.parse_args(argv)
    args.phases = {p.strip() for p in args.phases.split(",") if p.strip()} | {"send"}  # drain needs its backlog
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # finally blocks stop the brokers and Java tools
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))  # the admin's chatter
    if args.brokers < 2:
        parser.error("--brokers must be at least 2")
    bin_dir = find_reference_bin(args.rmq_bin)
    if bin_dir is None:
        print(f"skipped: Apache RocketMQ 4.9.7 tools not found; install them with {REFERENCE_SETUP}")
        return 0
    rounds: list[Round] = []
    client = None
    if args.ceiling_s > 0:
        print("the Java client's own cost, against the protocol ceiling ...", flush=True)
        client = client_cost(bin_dir / "rmqjava", args.ceiling_s)
    with tempfile.TemporaryDirectory(prefix="cluster-scale-") as tmp:
        for i in range(args.rounds * 2):
            size = 1 if i % 2 == 0 else args.brokers
            layout = "1 broker" if size == 1 else f"{size} brokers"
            print(f"round {i // 2 + 1}: {layout} ...", flush=True)
            root = Path(tmp) / f"r{i}"
            r = run_round(
                bin_dir / "rmqjava", layout, lambda root=root, size=size: LocalCluster(root, size).start(), args
            )
            rounds.append(r)
            for phase in ("send", "drain", "mixed"):
                print(f"  {phase_line(r, phase)}", flush=True)
    print(report(rounds, args.brokers, args.cores, client))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
