"""Side by side in one run: our broker against Apache RocketMQ 4.9.7, under RocketMQ's own benchmark tools.

Each target gets the same load, in turn, on this machine:
1. **send**: ``benchmark.Producer -w 16 -s 1024`` (16 threads, synchronous 1 KiB sends over the client's one
   connection) for ``--send-s`` seconds; TPS is the median of the 10-second lines after the first (warm-up).
2. **drain**: a fresh group's ``benchmark.Consumer`` (20 threads) drains a backlog of ``--drain-backlog`` 1 KiB
   messages, the same for every target (``bench/backlog.py``, sent in batches by our client); the best 10-second
   line counts. Not the send phase's leftover: that is send TPS x ``--send-s``, so a broker that sends slower
   gets a smaller backlog, which runs dry inside the line and caps its drain figure (it did: 365k messages, a
   "37k msg/s" line, against Java's 780k).
3. **mixed**: Producer and Consumer together on a fresh topic; the consumer's median TPS and send-to-consume
   latency, and the producer's TPS meanwhile (a consumer that keeps up consumes what is sent).
4. **latency**: ``bench/send_latency.py``'s own Java program, the send phase's load for ``--latency-s`` seconds after
   a 5 s warm-up, every send's latency recorded: p50/p99/p99.9/max (the benchmark Producer prints only average/max).
The protocol ceiling (``bench/ceiling_server.py``: pre-encoded SEND_OK, no store) gets phases 1 and 4, and each
broker's send TPS is printed as a share of it. Start time and idle private memory are read too.

The reference comes from ``../shared/apache-rocketmq-4.9.7/setup.sh`` (``rmq-anchor``, ``rmqjava``): the script
prints how to install it and exits 0 when it is missing, so it never fails on a machine without Java.

    python -m bench.vs_java [--send-s 40] [--drain-s 20] [--mixed-s 30] [--latency-s 30] [--targets ceiling,ours,java]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import re
import shutil
import signal
import statistics
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from bench.backlog import drain_ran_dry, fill_backlog
from bench.broker_proc import BrokerProcess, free_port
from bench.ceiling_server import ceiling_process
from bench.send_latency import LatencyFigures, ceiling_lines, report_lines
from bench.send_latency import measure as measure_latency
from mqclient.admin import AdminClient

SEND_LINE = re.compile(r"Send TPS: (\d+) Max RT\(ms\): (\d+) Average RT\(ms\):\s*([\d.]+) Send Failed: (\d+)")
CONSUME_LINE = re.compile(r" TPS: (\d+) FAIL: (\d+) AVG\(B2C\) RT\(ms\):\s*([\d.]+) AVG\(S2C\) RT\(ms\):\s*([\d.]+)")
ANCHOR_UP = re.compile(r"up in ([\d.]+) s")
REFERENCE_SETUP = Path(__file__).resolve().parents[2] / "shared" / "apache-rocketmq-4.9.7" / "setup.sh"


def find_reference_bin(explicit: str | None) -> Path | None:
    """The folder holding rmq-anchor and rmqjava: --rmq-bin, then PATH, then setup.sh's default prefix."""
    candidates = [Path(explicit)] if explicit else []
    on_path = shutil.which("rmq-anchor")
    if on_path:
        candidates.append(Path(on_path).parent)
    candidates.append(Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "apache-rocketmq-4.9.7" / "bin")
    for folder in candidates:
        if (folder / "rmq-anchor").exists() and (folder / "rmqjava").exists():
            return folder
    return None


def private_bytes(pid: int, fields: tuple[str, ...] = ("Private_Clean:", "Private_Dirty:")) -> int | None:
    """Private (unshared) memory of a process: Private_Clean + Private_Dirty from smaps_rollup. That counts file
    pages mapped by this process alone too (its store's page cache, library text no other process maps), so
    the report also gives ``fields=("Anonymous:",)``: the memory the process itself holds."""
    total = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup", encoding="ascii") as f:
            for line in f:
                if line.startswith(fields):
                    total += int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return None
    return total


class JavaTool:
    """One run of a benchmark class through rmqjava; its stdout lines are collected as they come."""

    def __init__(self, rmqjava: Path, cls: str, args: list[str]) -> None:
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            [str(rmqjava), f"org.apache.rocketmq.example.benchmark.{cls}", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self.lines.append(raw.decode("utf-8", "replace").rstrip())

    def stop(self) -> list[str]:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self._reader.join(5)
        return self.lines


@dataclass
class Figures:
    name: str
    send_tps: float | None = None
    send_avg_rt_ms: float | None = None
    send_failed: int = 0
    drain_tps: float | None = None
    drain_lines: list[float] = field(default_factory=list)
    mixed_consume_tps: float | None = None
    mixed_s2c_ms: float | None = None
    mixed_send_tps: float | None = None
    start_s: float | None = None
    idle_private_mb: float | None = None
    idle_anon_mb: float | None = None
    latency: LatencyFigures | None = None  # bench/send_latency.py's percentiles, when --latency-s > 0
    notes: list[str] = field(default_factory=list)


def _median_after_first(values: list[float]) -> float | None:
    steady = values[1:] or values
    return statistics.median(steady) if steady else None


def run_send(rmqjava: Path, namesrv: str, topic: str, seconds: float, fig: Figures) -> None:
    tool = JavaTool(rmqjava, "Producer", ["-n", namesrv, "-t", topic, "-w", "16", "-s", "1024"])
    time.sleep(seconds)
    rows = [SEND_LINE.search(line) for line in tool.stop()]
    rows = [m for m in rows if m]
    fig.send_tps = _median_after_first([float(m.group(1)) for m in rows])
    fig.send_avg_rt_ms = _median_after_first([float(m.group(3)) for m in rows])
    fig.send_failed = max((int(m.group(4)) for m in rows), default=0)
    if not rows:
        fig.notes.append("the producer printed no TPS line")


def run_drain(rmqjava: Path, namesrv: str, topic: str, args: argparse.Namespace, fig: Figures) -> None:
    asyncio.run(fill_backlog(namesrv, topic, args.drain_backlog))
    tool = JavaTool(rmqjava, "Consumer", ["-n", namesrv, "-t", topic, "-g", f"drain_{int(time.time())}"])
    time.sleep(args.drain_s)
    fig.drain_lines = [float(m.group(1)) for m in map(CONSUME_LINE.search, tool.stop()) if m]
    fig.drain_tps = max(fig.drain_lines, default=None)
    if fig.drain_tps and drain_ran_dry(fig.drain_tps, args.drain_backlog):
        fig.notes.append(f"the drain backlog may have run dry inside a line (lines {fig.drain_lines}): raise it")


def create_topic(namesrv: str, topic: str, queues: int = 4) -> None:
    """Create ``topic`` on every master before a tool subscribes to it: a consumer started on a topic that does not
    exist yet finds no route and retries only on its 30 s route refresh, which can eat a whole mixed phase (it
    did, on Java 4.9.7). 4 queues: what the Producer's auto-creation would have made."""

    async def create() -> None:
        async with AdminClient(namesrv) as admin:
            await admin.create_topic_everywhere(topic, queues)

    asyncio.run(create())


def run_mixed(rmqjava: Path, namesrv: str, topic: str, seconds: float, fig: Figures) -> None:
    try:
        create_topic(namesrv, topic)
    except Exception as exc:  # noqa: BLE001 - measure anyway; the note says why the figure may be missing
        fig.notes.append(f"could not create {topic} before the mixed phase: {exc}")
    consumer = JavaTool(rmqjava, "Consumer", ["-n", namesrv, "-t", topic, "-g", f"mixed_{int(time.time())}"])
    producer = JavaTool(rmqjava, "Producer", ["-n", namesrv, "-t", topic, "-w", "16", "-s", "1024"])
    time.sleep(seconds)
    sent = [float(m.group(1)) for m in map(SEND_LINE.search, producer.stop()) if m]
    fig.mixed_send_tps = _median_after_first(sent)
    rows = [m for m in map(CONSUME_LINE.search, consumer.stop()) if m]
    fig.mixed_consume_tps = _median_after_first([float(m.group(1)) for m in rows])
    fig.mixed_s2c_ms = _median_after_first([float(m.group(4)) for m in rows])


def measure_ceiling(rmqjava: Path, args: argparse.Namespace) -> Figures:
    fig = Figures("ceiling")
    port = free_port()
    with ceiling_process(port):
        if "send" in args.phases:
            run_send(rmqjava, f"127.0.0.1:{port}", "CeilingTopic", args.send_s, fig)
        if "latency" in args.phases:
            fig.latency = measure_latency(rmqjava, f"127.0.0.1:{port}", "CeilingTopic", args.latency_s, fig.notes)
    return fig


def measure_ours(rmqjava: Path, args: argparse.Namespace, work: Path) -> Figures:
    fig = Figures("mini-rocketmq")
    broker = BrokerProcess(store_dir=work / "ours-store", fault_injection=False)
    broker.start()
    try:
        fig.start_s = broker.boot_seconds
        time.sleep(2)
        assert broker.proc is not None
        mem = private_bytes(broker.proc.pid)
        fig.idle_private_mb = mem / 2**20 if mem is not None else None
        anon = private_bytes(broker.proc.pid, ("Anonymous:",))
        fig.idle_anon_mb = anon / 2**20 if anon is not None else None
        run_phases(rmqjava, broker.namesrv, args, fig)
    finally:
        broker.stop()
    return fig


def measure_java(bin_dir: Path, args: argparse.Namespace) -> Figures:
    fig = Figures("Apache RocketMQ 4.9.7")
    env = dict(os.environ, RMQ_NS_PORT=str(free_port()), RMQ_BROKER_PORT=str(free_port()))
    up = subprocess.run([str(bin_dir / "rmq-anchor"), "start"], env=env, capture_output=True, text=True, timeout=180)
    if up.returncode != 0:
        fig.notes.append(f"rmq-anchor start failed: {up.stdout.strip()} {up.stderr.strip()}")
        # a JVM that was only slow (a loaded machine) boots after the timeout: never leave it running
        subprocess.run([str(bin_dir / "rmq-anchor"), "stop"], env=env, capture_output=True, timeout=120)
        return fig
    try:
        m = ANCHOR_UP.search(up.stdout)
        fig.start_s = float(m.group(1)) if m else None
        time.sleep(2)
        run_dir = bin_dir.parent / "logs" / "run"
        pids = [
            int((run_dir / f"{n}.pid").read_text()) for n in ("namesrv", "broker") if (run_dir / f"{n}.pid").exists()
        ]
        mems = [private_bytes(pid) for pid in pids]
        fig.idle_private_mb = sum(m for m in mems if m) / 2**20 if any(mems) else None
        anons = [private_bytes(pid, ("Anonymous:",)) for pid in pids]
        fig.idle_anon_mb = sum(m for m in anons if m) / 2**20 if any(anons) else None
        run_phases(bin_dir / "rmqjava", f"127.0.0.1:{env['RMQ_NS_PORT']}", args, fig)
    finally:
        subprocess.run([str(bin_dir / "rmq-anchor"), "stop"], env=env, capture_output=True, timeout=120)
    return fig


def run_phases(rmqjava: Path, namesrv: str, args: argparse.Namespace, fig: Figures) -> None:
    stamp = int(time.time())
    if "send" in args.phases:
        run_send(rmqjava, namesrv, f"SendT{stamp}", args.send_s, fig)
    if "drain" in args.phases:
        run_drain(rmqjava, namesrv, f"DrainT{stamp}", args, fig)
    if "mixed" in args.phases:
        run_mixed(rmqjava, namesrv, f"MixT{stamp}", args.mixed_s, fig)
    if "latency" in args.phases:
        fig.latency = measure_latency(rmqjava, namesrv, f"LatT{stamp}", args.latency_s, fig.notes)


def _fmt(value: float | None, spec: str = ",.0f") -> str:
    return "-" if value is None else format(value, spec)


def _ratio(ours: float | None, theirs: float | None) -> str:
    return "-" if not ours or not theirs else f"{ours / theirs:.2f}x"


def report(figs: dict[str, Figures]) -> str:
    ours, java, ceiling = figs.get("ours"), figs.get("java"), figs.get("ceiling")
    rows = [
        ("send TPS (16 threads, 1 KiB, sync)", "send_tps", ",.0f"),
        ("send average RT ms", "send_avg_rt_ms", ".3f"),
        ("drain TPS (fresh group, best 10 s)", "drain_tps", ",.0f"),
        ("consume TPS while producing", "mixed_consume_tps", ",.0f"),
        ("send-to-consume ms while producing", "mixed_s2c_ms", ".1f"),
        ("  producer TPS meanwhile", "mixed_send_tps", ",.0f"),
        ("start to ports open s", "start_s", ".2f"),
        ("idle private memory MB", "idle_private_mb", ".0f"),
        ("  of which anonymous MB", "idle_anon_mb", ".0f"),
    ]
    out = [f"{'':38} {'Java 4.9.7':>14} {'mini-rocketmq':>14} {'ours/Java':>10}"]
    for label, attr, spec in rows:
        j = getattr(java, attr) if java else None
        o = getattr(ours, attr) if ours else None
        out.append(f"{label:38} {_fmt(j, spec):>14} {_fmt(o, spec):>14} {_ratio(o, j):>10}")
    out.extend(report_lines(java.latency if java else None, ours.latency if ours else None))
    if ceiling and ceiling.send_tps:
        out.append(f"\nprotocol ceiling (pre-encoded SEND_OK, no store): {ceiling.send_tps:,.0f} send TPS")
        for fig in (java, ours):
            if fig and fig.send_tps:
                out.append(f"  {fig.name}: {fig.send_tps / ceiling.send_tps:.0%} of the ceiling")
        out.extend(ceiling_lines(ceiling.latency))
    for fig in figs.values():
        for note in fig.notes:
            out.append(f"note ({fig.name}): {note}")
        if fig.send_failed:
            out.append(f"note ({fig.name}): {fig.send_failed} sends failed")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Our broker against Apache RocketMQ 4.9.7 under its own benchmark tools, side by side in one run."
    )
    parser.add_argument("--send-s", type=float, default=40.0, help="seconds of the send phase (lines every 10 s)")
    parser.add_argument("--drain-s", type=float, default=25.0)
    parser.add_argument("--mixed-s", type=float, default=35.0)
    parser.add_argument(
        "--drain-backlog",
        type=int,
        default=4_000_000,
        help="1 KiB messages to drain (≥ 10 s at the drain rate; 2.5M ran dry inside a line at 225k msg/s)",
    )
    parser.add_argument("--latency-s", type=float, default=30.0, help="latency phase (SendLatency.java); 0: off")
    parser.add_argument(
        "--phases", default="send,drain,mixed,latency", help="comma-separated: send, drain, mixed, latency"
    )
    parser.add_argument("--targets", default="ceiling,ours,java", help="comma-separated: ceiling, ours, java")
    parser.add_argument("--rmq-bin", help="folder with rmq-anchor and rmqjava (default: PATH, then ~/.cache)")
    args = parser.parse_args(argv)
    # the admin client's debug lines (topic creation) would interleave with the figures
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    bin_dir = find_reference_bin(args.rmq_bin)
    if bin_dir is None:
        print(
            f"skipped: Apache RocketMQ 4.9.7 tools not found; install them with {REFERENCE_SETUP} "
            f"(needs Java 17), then run again"
        )
        return 0
    args.phases = {p.strip() for p in args.phases.split(",") if p.strip()}
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    unknown = set(targets) - {"ceiling", "ours", "java"}
    if unknown:
        parser.error(f"unknown targets: {', '.join(sorted(unknown))}")
    figs: dict[str, Figures] = {}
    with tempfile.TemporaryDirectory(prefix="vs-java-") as tmp:
        for target in targets:
            print(f"measuring {target} ...", flush=True)
            if target == "ceiling":
                figs[target] = measure_ceiling(bin_dir / "rmqjava", args)
            elif target == "ours":
                figs[target] = measure_ours(bin_dir / "rmqjava", args, Path(tmp))
            else:
                figs[target] = measure_java(bin_dir, args)
    print(report(figs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
