"""The consume path, A against B in one run: drain and consume-while-producing TPS of two checkouts.

Each ``--roots`` entry is a checkout of this repository (e.g. a clone of main and a branch's worktree); a broker
runs each one's code. Every broker first gets the same backlog (``--backlog`` 1 KiB messages on a 4-queue topic,
sent in batches by our own client, which is quicker than the Java Producer), then the phases alternate between
the brokers, round by round, so a noisy machine hurts both alike:

- **drain**: RocketMQ 4.9.7's ``benchmark.Consumer`` (20 threads) in a fresh group reads the backlog from offset 0;
  the best 10-second line counts (as in ``bench.vs_java``).
- **mixed**: ``benchmark.Producer`` (16 threads, 1 KiB, sync) and ``benchmark.Consumer`` together on a fresh
  topic (created beforehand); the consumer's median TPS after the first line, and its send-to-consume latency.

Each of our brokers runs with its Prometheus exporter on (``metricsExporterType=PROM``, a free port), read at the
start and end of each phase's recorded window: the PULL_MESSAGE requests it got (those parked among them) and the
messages pulled, so each phase also reports pulls per second and messages per pull (the effect of the wake-up rounds,
docs/design.md "Speed: consume path", seen rather than inferred; Java's broker has no such exporter: "-").
``--profile DIR`` also records each phase with py-spy (raw collapsed stacks). The broker's CPU share is printed for
each phase, and for the drain its CPU per drained message (between two reads of the group's offsets on the broker):
the figure a busy machine moves least, since the drain itself is bound by the consumer. Each drain round also
splits its window's CPU a drained message into the broker's user and system time and the Consumer JVM's, with the
cores each took and the machine's busy share, and says how far a broker of no CPU could have lifted it (the consumer
given the broker's cores as well, at its own cost a message): where CPU decides (the machine saturated), that factor
of Java's rounds is the best drain ratio any broker could reach on this machine under this consumer. For the mixed
phase each of the three processes' CPU per consumed message (broker, Producer JVM, Consumer JVM; utime + stime from
/proc over the window, messages from the group's offsets, so Java's broker gets it too) and the machine's busy share
of all its cores: saturated, the three's CPU per message decides the TPS; idle, their turn-taking does.
Skips (exit 0) when the Java tools are missing, like ``bench.vs_java``. A root named ``java`` is Apache RocketMQ
4.9.7 (``rmq-anchor`` on free ports, one at a time): ``--roots .,java`` interleaves ours with the reference.

    python -m bench.consume_ab --roots ../main-clone,. [--rounds 2] [--drain-s 22] [--mixed-s 32]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from bench.backlog import create_topic, drain_ran_dry, fill_backlog
from bench.broker_proc import BrokerProcess
from bench.java_broker import JavaBroker
from bench.vs_java import CONSUME_LINE, SEND_LINE, JavaTool, find_reference_bin
from broker.testing.ports import free_port
from mqclient.admin import AdminClient

BACKLOG_TOPIC = "ConsumeBacklog"


@dataclass
class Target:
    label: str
    broker: BrokerProcess | JavaBroker
    drain: list[float] = field(default_factory=list)
    mixed: list[float] = field(default_factory=list)
    mixed_s2c: list[float] = field(default_factory=list)
    mixed_send: list[float] = field(default_factory=list)  # the producer's TPS meanwhile (consume keeps up?)
    mixed_send_rt: list[float] = field(default_factory=list)  # the producer's average send RT (ms), median of its lines
    cpu: dict[str, list[float]] = field(default_factory=dict)
    # per drain round: where the recorded window's CPU went (broker, Consumer JVM, the machine), per drained message
    drain_split: list[DrainCpu] = field(default_factory=list)
    metrics_port: int | None = None  # our broker's Prometheus exporter (None: Java's)
    # per phase, per round: (pull requests, of which parked, messages pulled, seconds, broker CPU seconds) over the
    # recorded window
    pulls: dict[str, list[tuple[float, float, float, float, float]]] = field(default_factory=dict)
    # per mixed round: CPU µs per consumed message of the broker, the Producer JVM and the Consumer JVM, and the
    # machine's busy share of all its cores, over the recorded window (messages: the group's offsets' growth)
    mixed_cpu: list[MixedCpu] = field(default_factory=list)

    @property
    def pid(self) -> int:
        if isinstance(self.broker, JavaBroker):
            return self.broker.pid
        assert self.broker.proc is not None
        return self.broker.proc.pid


@dataclass
class MixedCpu:
    """Where a consume-while-producing window's CPU went: each process's µs per consumed message, and whether the
    machine had CPU to spare (the busy share of all its cores), which says whether CPU or turn-taking decides."""

    messages: float
    seconds: float
    broker_us: float
    producer_us: float
    consumer_us: float
    machine_busy: float  # 0..1 of all cores
    msg_per_pull: float | None  # from our exporter (None: Java's broker)

    def line(self) -> str:
        per_pull = "-" if self.msg_per_pull is None else f"{self.msg_per_pull:.2f}"
        return (
            f"CPU us/consumed msg broker {self.broker_us:.0f}, producer {self.producer_us:.0f},"
            f" consumer {self.consumer_us:.0f} (sum {self.broker_us + self.producer_us + self.consumer_us:.0f});"
            f" machine {self.machine_busy:.0%} busy; {self.messages / self.seconds:,.0f} msg/s; msg/pull {per_pull}"
        )


@dataclass
class DrainCpu:
    """Where a drain window's CPU went. The drain is bound by the benchmark Consumer (one pull in flight a queue, its
    20 threads decoding and counting every message), so what a broker can change is mostly the cores it leaves to
    the consumer: ``bound`` says how far a broker that took no CPU at all could lift this round, if the consumer
    got the broker's cores too at its own cost a message."""

    messages: float
    seconds: float
    broker_user_us: float
    broker_sys_us: float
    consumer_us: float
    machine_busy: float  # 0..1 of all cores

    @property
    def broker_us(self) -> float:
        return self.broker_user_us + self.broker_sys_us

    @property
    def rate(self) -> float:
        return self.messages / self.seconds

    def cores(self, us_per_message: float) -> float:
        """The cores a process used over the window, from its CPU a message."""
        return us_per_message * self.rate / 1e6

    @property
    def bound(self) -> float:
        """(consumer + broker cores) / consumer cores: the factor a broker of no CPU could give this round. An upper
        bound only where CPU decides (the machine near saturation, `SATURATED`); on a machine with cores to spare the
        consumer waits on its own threads and a cheaper broker gives it nothing."""
        consumer = self.cores(self.consumer_us)
        return (consumer + self.cores(self.broker_us)) / consumer if consumer > 0 else 0.0

    def line(self) -> str:
        return (
            f"CPU us/drained msg broker {self.broker_us:.1f} (user {self.broker_user_us:.1f},"
            f" sys {self.broker_sys_us:.1f}), consumer {self.consumer_us:.1f}; cores broker"
            f" {self.cores(self.broker_us):.2f}, consumer {self.cores(self.consumer_us):.2f};"
            f" machine {self.machine_busy:.0%} busy; {self.rate:,.0f} msg/s; a broker of no CPU: x{self.bound:.2f}"
        )


def machine_cpu() -> tuple[float, float]:
    """(busy, total) jiffies of all cores since boot, from /proc/stat (idle and iowait are not busy)."""
    with open("/proc/stat", encoding="ascii") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    total = sum(values[:8])  # (guest time is already in user)
    return total - values[3] - values[4], total


def busy_share(first: tuple[float, float], last: tuple[float, float]) -> float:
    """The machine's busy share of all its cores between two `machine_cpu` readings (0..1)."""
    return (last[0] - first[0]) / max(1, last[1] - first[1])


def pull_counts(port: int | None) -> tuple[float, float, float] | None:
    """(PULL_MESSAGE requests answered or parked, of which parked, messages pulled) since the broker started, from its
    Prometheus exporter; None without one."""
    if port is None:
        return None
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:  # noqa: S310 (loopback)
        text = reply.read().decode()
    pulls = parked = messages = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            code = sample.labels.get("request_code", "").upper()  # (the exporter writes "pull_message")
            if sample.name == "rocketmq_rpc_latency_count" and code in ("PULL_MESSAGE", "11"):
                pulls += sample.value
                if sample.labels.get("is_long_polling") == "true":
                    parked += sample.value
            elif sample.name == "rocketmq_messages_out_total" and sample.labels.get("is_system") != "true":
                messages += sample.value
    return pulls, parked, messages


def cpu_times(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of a process, from /proc/PID/stat."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def cpu_seconds(pid: int) -> float:
    return sum(cpu_times(pid))


class Recorder:
    """py-spy over a phase (when profiling) and the broker's CPU share over it."""

    def __init__(self, target: Target, phase: str, profile: Path | None, seconds: float) -> None:
        self.pid = target.pid
        self.target, self.phase = target, phase
        self.started = time.monotonic()
        self.cpu0 = cpu_seconds(self.pid)
        self.pulls0 = pull_counts(target.metrics_port)
        self.spy = None
        if profile is not None and not isinstance(target.broker, JavaBroker):
            out = profile / f"{target.label}-{phase}-{int(time.time())}.txt"
            cmd = ["py-spy", "record", "-f", "raw", "-r", "100", "-d", str(int(seconds)), "-o", str(out)]
            self.spy = subprocess.Popen(
                [*cmd, "--pid", str(self.pid)], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
            )

    def stop(self) -> None:
        seconds = time.monotonic() - self.started
        cpu = cpu_seconds(self.pid) - self.cpu0
        share = cpu / seconds
        self.target.cpu.setdefault(self.phase, []).append(share)
        pulls1 = pull_counts(self.target.metrics_port)
        if self.pulls0 is not None and pulls1 is not None:
            delta = tuple(b - a for a, b in zip(self.pulls0, pulls1, strict=True))
            self.target.pulls.setdefault(self.phase, []).append((*delta, seconds, cpu))  # type: ignore[arg-type]
        if self.spy is not None:
            try:
                self.spy.wait(30)
            except subprocess.TimeoutExpired:  # (a loaded machine: py-spy behind its -d; its profile may be cut)
                self.spy.kill()
                self.spy.wait()
                print(f"py-spy over {self.target.label} {self.phase} did not finish in time: killed", file=sys.stderr)


async def consumed(namesrv: str, group: str, topic: str = BACKLOG_TOPIC) -> int:
    """The group's offsets on ``topic``, summed over the queues: the broker takes each pull's commit offset, so
    this trails what the consumer holds by at most a pull per queue."""
    async with AdminClient(namesrv) as admin:
        addr = next(iter((await admin.route_masters(topic)).values()))
        offsets = [await admin.consumer_offset(addr, group, topic, q) for q in range(4)]
    return sum(o for o in offsets if o is not None and o > 0)


def run_drain(rmqjava: Path, target: Target, seconds: float, profile: Path | None, n: int) -> None:
    group = f"drain_{target.label}_{n}_{int(time.time())}"
    tool = JavaTool(rmqjava, "Consumer", ["-n", target.broker.namesrv, "-t", BACKLOG_TOPIC, "-g", group])
    try:  # (the tool stopped whatever fails here: a Java consumer left running would load the next rounds)
        time.sleep(2)
        rec = Recorder(target, "drain", profile, seconds - 4)
        first = asyncio.run(consumed(target.broker.namesrv, group))
        broker_first, consumer_first = cpu_times(target.pid), cpu_seconds(tool.proc.pid)
        machine_first, t0 = machine_cpu(), time.monotonic()
        time.sleep(seconds - 2)
        broker_last, consumer_last = cpu_times(target.pid), cpu_seconds(tool.proc.pid)
        machine_last, t1 = machine_cpu(), time.monotonic()
        last = asyncio.run(consumed(target.broker.namesrv, group))
        rec.stop()
    finally:
        lines = tool.stop()
    tps = [float(m.group(1)) for m in map(CONSUME_LINE.search, lines) if m]
    target.drain.append(max(tps, default=0.0))
    if last > first:  # the CPU between the two offset reads, per message drained between them
        n = last - first
        user, system = ((b - a) / n * 1e6 for a, b in zip(broker_first, broker_last, strict=True))
        busy = busy_share(machine_first, machine_last)
        consumer_us = (consumer_last - consumer_first) / n * 1e6
        target.drain_split.append(DrainCpu(n, t1 - t0, user, system, consumer_us, busy))


def run_mixed(rmqjava: Path, target: Target, seconds: float, profile: Path | None, n: int) -> None:
    topic = f"Mix{target.label}{n}T{int(time.time())}"
    ns = target.broker.namesrv
    # created first, so neither tool's start-up races the other's for the topic (a consumer that asked for
    # the route before the topic existed would wait for its next route poll, 30 s later)
    asyncio.run(create_topic(ns, topic))
    group = f"mixed_{target.label}_{n}"
    consumer = JavaTool(rmqjava, "Consumer", ["-n", ns, "-t", topic, "-g", group])
    producer = JavaTool(rmqjava, "Producer", ["-n", ns, "-t", topic, "-w", "16", "-s", "1024"])
    pids = (target.pid, producer.proc.pid, consumer.proc.pid)  # (rmqjava execs its JVM: the pid is the JVM's)
    try:  # (both tools stopped whatever fails here)
        time.sleep(5)
        rec = Recorder(target, "mixed", profile, seconds - 7)
        first = asyncio.run(consumed(ns, group, topic))
        cpu_first, machine_first, t0 = [cpu_seconds(p) for p in pids], machine_cpu(), time.monotonic()
        time.sleep(seconds - 5)
        cpu_last, machine_last, t1 = [cpu_seconds(p) for p in pids], machine_cpu(), time.monotonic()
        last = asyncio.run(consumed(ns, group, topic))
        rec.stop()
        if last - first >= 1000:  # (a round whose Consumer never got going: no per-message figure)
            per = [(b - a) / (last - first) * 1e6 for a, b in zip(cpu_first, cpu_last, strict=True)]
            busy = busy_share(machine_first, machine_last)
            row = target.pulls.get("mixed", [None])[-1] if target.metrics_port is not None else None
            per_pull = row[2] / row[0] if row and row[0] else None
            target.mixed_cpu.append(MixedCpu(last - first, t1 - t0, *per, busy, per_pull))
    finally:
        sent_lines, consumed_lines = producer.stop(), consumer.stop()
    sent_rows = [m for m in map(SEND_LINE.search, sent_lines) if m]
    sent_rows = sent_rows[1:] or sent_rows
    target.mixed_send.append(statistics.median(float(m.group(1)) for m in sent_rows) if sent_rows else 0.0)
    target.mixed_send_rt.append(statistics.median(float(m.group(3)) for m in sent_rows) if sent_rows else 0.0)
    rows = [m for m in map(CONSUME_LINE.search, consumed_lines) if m]
    steady = rows[1:] or rows
    target.mixed.append(statistics.median(float(m.group(1)) for m in steady) if steady else 0.0)
    target.mixed_s2c.append(statistics.median(float(m.group(4)) for m in steady) if steady else 0.0)


def _label(root: str, used: set[str]) -> str:
    name = Path(root).resolve().name
    while name in used:
        name += "'"
    used.add(name)
    return name


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--roots",
        default=".",
        help="comma-separated checkouts to compare (first is the baseline); 'java' is Apache RocketMQ 4.9.7",
    )
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--backlog", type=int, default=1_200_000, help="1 KiB messages in each broker's backlog (≥ 10 s of drain)"
    )
    parser.add_argument("--drain-s", type=float, default=22.0)
    parser.add_argument("--mixed-s", type=float, default=32.0)
    parser.add_argument("--phases", default="drain,mixed")
    parser.add_argument("--profile", type=Path, help="folder for py-spy raw profiles of each phase")
    parser.add_argument("--rmq-bin", help="folder with rmqjava (default: PATH, then ~/.cache)")
    args = parser.parse_args(argv)
    bin_dir = find_reference_bin(args.rmq_bin)
    if bin_dir is None:
        print("skipped: Apache RocketMQ 4.9.7 tools (rmqjava) not found; see bench/vs_java.py")
        return 0
    rmqjava = bin_dir / "rmqjava"
    phases = [p.strip() for p in args.phases.split(",") if p.strip()]
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
    used: set[str] = set()
    targets: list[Target] = []
    with tempfile.TemporaryDirectory(prefix="consume-ab-") as tmp:
        try:
            for i, root in enumerate(r.strip() for r in args.roots.split(",") if r.strip()):
                if root == "java":
                    label, broker = _label("java", used), JavaBroker(bin_dir).start()
                else:
                    label = _label(root, used)
                    port = free_port()
                    prom = {
                        "metricsExporterType": "PROM",
                        "metricsPromExporterHost": "127.0.0.1",
                        "metricsPromExporterPort": str(port),
                    }
                    broker = BrokerProcess(
                        store_dir=Path(tmp) / f"store{i}", fault_injection=False, root=Path(root).resolve(), config=prom
                    ).start()
                targets.append(Target(label, broker, metrics_port=None if root == "java" else port))
                started = time.monotonic()
                if "drain" in phases:
                    asyncio.run(fill_backlog(broker.namesrv, BACKLOG_TOPIC, args.backlog, 1024))
                print(f"{label}: backlog of {args.backlog:,} in {time.monotonic() - started:.1f} s", flush=True)
            for n in range(args.rounds):
                for phase in phases:
                    for target in targets:
                        if phase == "drain":
                            splits = len(target.drain_split)
                            run_drain(rmqjava, target, args.drain_s, args.profile, n)
                            print(f"round {n} drain {target.label}: {target.drain[-1]:,.0f}", flush=True)
                            if len(target.drain_split) > splits:
                                print(f"    {target.drain_split[-1].line()}", flush=True)
                        else:
                            cpu_rows = len(target.mixed_cpu)
                            run_mixed(rmqjava, target, args.mixed_s, args.profile, n)
                            rows = target.pulls.get("mixed")
                            print(
                                f"round {n} mixed {target.label}: {target.mixed[-1]:,.0f} "
                                f"(producer {target.mixed_send[-1]:,.0f})"
                                + (f"; {pull_line(rows[-1])}" if rows else ""),
                                flush=True,
                            )
                            if len(target.mixed_cpu) > cpu_rows:
                                print(f"    {target.mixed_cpu[-1].line()}", flush=True)
        finally:
            for target in targets:
                target.broker.stop()
    print(report(targets, args.backlog))
    return 0


def pull_line(row: tuple[float, float, float, float, float]) -> str:
    """One round's pulls: requests a second, messages per request, the share parked, broker CPU per message pulled."""
    pulls, parked, messages, seconds, cpu = row
    if not pulls or not messages:
        return f"{pulls / seconds:,.0f} pulls/s, no messages"
    return (
        f"{pulls / seconds:,.0f} pulls/s, {messages / pulls:.2f} msg/pull, {parked / pulls:.0%} parked,"
        f" {cpu / messages * 1e6:.0f} us CPU/msg"
    )


def report(targets: list[Target], backlog: int) -> str:
    base = targets[0]
    out = [f"{'':10} {'drain TPS (each round)':>34} {'mixed consume TPS (each round)':>34} {'S2C ms':>8}"]
    for t in targets:
        drain = ", ".join(f"{v:,.0f}" for v in t.drain)
        mixed = ", ".join(f"{v:,.0f}" for v in t.mixed)
        s2c = f"{statistics.median(t.mixed_s2c):.1f}" if t.mixed_s2c else "-"
        out.append(f"{t.label:10} {drain:>34} {mixed:>34} {s2c:>8}")
        if t.mixed_send:
            out.append(f"{'':10} producer TPS in the mixed rounds: {', '.join(f'{v:,.0f}' for v in t.mixed_send)}")
            rts = ", ".join(f"{v:.2f}" for v in t.mixed_send_rt)
            out.append(f"{'':10} producer average send RT, ms (median of its lines, each round): {rts}")
        cpu = ", ".join(f"{k} {statistics.median(v):.0%}" for k, v in t.cpu.items())
        out.append(f"{'':10} broker CPU (median): {cpu}")
        for phase, rows in t.pulls.items():
            out.append(f"{'':10} {phase} pulls (each round): {'; '.join(map(pull_line, rows))}")
        for mixed_cpu in t.mixed_cpu:
            out.append(f"{'':10} mixed: {mixed_cpu.line()}")
        if t.drain_split:
            per = ", ".join(f"{split.broker_us:.2f}" for split in t.drain_split)
            out.append(f"{'':10} broker CPU per drained message, us (each round): {per}")
        for split in t.drain_split:
            out.append(f"{'':10} drain: {split.line()}")
        if t.drain and drain_ran_dry(max(t.drain), backlog):
            out.append(f"{'':10} the backlog may have run dry inside a line: raise --backlog")
    out.extend(drain_bounds(targets))
    for t in targets[1:]:
        for name in ("drain", "mixed"):
            a, b = getattr(base, name), getattr(t, name)
            if a and b and statistics.median(a):
                out.append(
                    f"{name}: {t.label}/{base.label} = {statistics.median(b) / statistics.median(a):.2f}x (medians)"
                )
    return "\n".join(out)


# the machine's busy share (of all cores) from which a drain counts as CPU-bound: below it the consumer had cores to
# spare and waited on its own threads (its flow control, its consume pool's hand-offs), which a broker cannot change
SATURATED = 0.9


def drain_bounds(targets: list[Target]) -> list[str]:
    """For each target with drain figures: the median factor a broker of no CPU could have given its rounds
    (`DrainCpu.bound`), and what that makes of its median drain. Against a reference (Java's broker), the best ratio
    any broker could reach on this machine under this consumer is that factor of the reference's rounds where CPU
    decides, unless the consumer spends less a message beside it; where the machine was not saturated, the line says
    so."""
    out = []
    for t in targets:
        if not t.drain_split or not t.drain:
            continue
        bound = statistics.median(s.bound for s in t.drain_split)
        consumer = statistics.median(s.consumer_us for s in t.drain_split)
        busy = statistics.median(s.machine_busy for s in t.drain_split)
        window = statistics.median(s.rate for s in t.drain_split)
        out.append(
            f"drain bound, {t.label}: a broker of no CPU x{bound:.2f} (median), {statistics.median(t.drain) * bound:,.0f}"
            f" msg/s; the consumer's CPU {consumer:.1f} us a drained message; {window:,.0f} msg/s over the windows"
            + (
                ""
                if busy >= SATURATED
                else f"; the machine {busy:.0%} busy: not CPU-bound, the consumer waits on itself, and no broker's CPU"
                " lifts that"
            )
        )
    return out


if __name__ == "__main__":
    raise SystemExit(main())
