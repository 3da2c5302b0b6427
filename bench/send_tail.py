"""What puts a send in the tail: our broker under issue 15's load with its loop-stall monitor on, one report.

``bench.send_latency`` gives the percentiles; this says where the slow sends' time went. It starts a broker of a
tree (this one, or ``--tree`` another checkout) with ``MQ_LOOP_STALL_MS`` set (``broker.loop_stall``), runs
``SendLatency`` against it (closed load, or ``--rate`` for an open one), optionally samples which thread holds the
GIL meanwhile (``--gil``: ``py-spy record --gil --threads``), and prints:

- the latency figures (p50/p99/p99.9/max, TPS);
- the stalls: how many, their summed gap, how much of it the loop thread was runnable but not on a CPU (run
  delay: the machine) and how much it was held (gap minus run delay: our own work, a GIL held elsewhere, or no
  input), the collections seen in them per generation with their summed time, and the stacks of the held ones;
- with ``--gil``: each thread's share of the samples that held the GIL (another thread's share is time the loop
  could not run Python).

    python -m bench.send_tail [--tree PATH] [--stall-ms 3] [--seconds 15] [--rate 0] [--gil] [--set KEY=VALUE]

Without Java, javac or the reference folder it says so and exits 0.
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import orjson

STALL_EVENT = "event loop stalled"


@dataclass
class StallSummary:
    """The stall warnings of one broker log, added up (milliseconds)."""

    count: int = 0
    gap_ms: float = 0.0
    run_delay_ms: float = 0.0
    on_cpu_ms: float = 0.0
    #: gap - run delay - on CPU, summed: the loop thread asleep (the GIL, a blocking call, or idle with its tick late)
    asleep_ms: float = 0.0
    #: stalls whose gap exceeds their run delay by more than ``held_over_ms``: the loop was not waiting for a CPU
    held: int = 0
    held_ms: float = 0.0
    max_gap_ms: float = 0.0
    #: generation -> [collections, summed ms] of the collections seen inside stalls
    gc: dict[int, list[float]] = field(default_factory=dict)
    #: (busy/asleep, innermost line of a held stall's most seen stack) -> how many held stalls showed it
    held_stacks: collections.Counter[tuple[str, str]] = field(default_factory=collections.Counter)


def summarise_stalls(lines: Iterable[str | bytes], held_over_ms: float = 3.0) -> StallSummary:
    """Add up the ``broker.loop_stall`` warnings among a broker log's JSON lines (other lines are skipped)."""
    summary = StallSummary()
    for line in lines:
        if STALL_EVENT not in (line if isinstance(line, str) else line.decode("utf-8", "replace")):
            continue
        try:
            row = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if row.get("event") != STALL_EVENT:
            continue
        gap = float(row.get("gap_ms", 0.0))
        delay = float(row.get("run_delay_ms", 0.0))
        on_cpu = float(row.get("on_cpu_ms", 0.0))
        summary.count += 1
        summary.gap_ms += gap
        summary.run_delay_ms += delay
        summary.on_cpu_ms += on_cpu
        asleep = max(0.0, gap - delay - on_cpu)
        summary.asleep_ms += asleep
        summary.max_gap_ms = max(summary.max_gap_ms, gap)
        for generation, ms in row.get("gc", []):
            seen = summary.gc.setdefault(int(generation), [0, 0.0])
            seen[0] += 1
            seen[1] += float(ms)
        if gap - delay > held_over_ms:
            summary.held += 1
            summary.held_ms += gap - delay
            stacks = row.get("stacks") or [""]
            innermost = stacks[0].strip().splitlines()[-1].strip() if stacks[0].strip() else "(no stack)"
            summary.held_stacks["asleep" if asleep > on_cpu else "busy", innermost] += 1
    return summary


def gil_shares(raw_lines: Iterable[str]) -> dict[str, float]:
    """Each thread's share of the samples of a ``py-spy record --gil --threads -f raw`` file (``stack count``
    lines whose first frame names the thread)."""
    counts: collections.Counter[str] = collections.Counter()
    for line in raw_lines:
        stack, _, n = line.rstrip().rpartition(" ")
        if not stack or not n.isdigit():
            continue
        thread = stack.split(";", 1)[0]
        counts[thread.split(": ", 1)[-1]] += int(n)
    total = sum(counts.values())
    return {name: n / total for name, n in counts.most_common()} if total else {}


def report_lines(figures: dict, stalls: StallSummary, gil: dict[str, float] | None, seconds: float) -> list[str]:
    lines = [
        f"send p50/p99/p99.9/max ms: {figures['p50_ms']:.3f} / {figures['p99_ms']:.3f} / {figures['p999_ms']:.3f}"
        f" / {figures['max_ms']:.1f}; TPS {figures['tps']:,.0f}; failed {figures['failed']}",
        f"loop stalls: {stalls.count} (max {stalls.max_gap_ms:.1f} ms), summed gap {stalls.gap_ms:.0f} ms"
        f" ({stalls.gap_ms / (seconds * 10):.1f} % of the run incl. warm-up), run delay {stalls.run_delay_ms:.0f} ms,"
        f" on a CPU {stalls.on_cpu_ms:.0f} ms, asleep {stalls.asleep_ms:.0f} ms; held (gap - run delay)"
        f" {stalls.held_ms:.0f} ms in {stalls.held} stalls",
    ]
    gcs = ", ".join(f"gen{g}: {int(n)} ({ms:.1f} ms)" for g, (n, ms) in sorted(stalls.gc.items())) or "none"
    lines.append(f"collections inside stalls: {gcs}")
    for (kind, stack), n in stalls.held_stacks.most_common(8):
        lines.append(f"  held stall, {kind}, x{n}: {stack[:100]}")
    if gil is not None:
        lines.append("GIL held by: " + ", ".join(f"{name} {share:.1%}" for name, share in gil.items()))
    return lines


def main(argv: list[str] | None = None) -> int:
    from bench.broker_proc import BrokerProcess
    from bench.send_latency import prepare_reference

    parser = argparse.ArgumentParser(description="Where the slow sends' time goes: loop stalls, GC, GIL holders.")
    parser.add_argument("--tree", type=Path, default=None, help="checkout whose broker to run (default: this one)")
    parser.add_argument("--stall-ms", type=float, default=3.0, help="MQ_LOOP_STALL_MS for the broker")
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--rate", type=float, default=0.0, help="open load: sends/s in all (default: closed load)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="broker.conf key (repeat)")
    parser.add_argument("--gil", action="store_true", help="also sample the GIL holder with py-spy for 8 s")
    parser.add_argument("--rmq-bin", help="folder with rmq-anchor and rmqjava (default: PATH, then ~/.cache)")
    args = parser.parse_args(argv)
    prepared = prepare_reference(args.rmq_bin)
    if prepared is None:
        return 0
    tool, _ = prepared
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    with tempfile.TemporaryDirectory(prefix="send-tail-") as tmp:
        store = Path(tmp) / "store"
        extra = {"root": args.tree.resolve()} if args.tree else {}
        os.environ["MQ_LOOP_STALL_MS"] = str(args.stall_ms)  # (the broker child inherits it)
        try:
            config = dict(item.split("=", 1) for item in args.set)
            broker = BrokerProcess(store_dir=store, config=config, fault_injection=False, **extra).start()
        finally:
            del os.environ["MQ_LOOP_STALL_MS"]
        gil: dict[str, float] | None = None
        sampler = None
        raw = Path(tmp) / "gil.txt"
        try:
            if args.gil and Path(py_spy).exists():
                assert broker.proc is not None
                spy = [py_spy, "record", "-p", str(broker.proc.pid), "-r", "250", "-d", "8"]
                spy += ["--threads", "--gil", "-f", "raw", "-o", str(raw)]
                delay = args.warmup + 3.0  # (the JVM's start, then the warm-up)
                sampler = threading.Timer(delay, subprocess.run, (spy,), {"capture_output": True, "check": False})
                sampler.start()
            figures = tool.run(
                broker.namesrv,
                "SendTailTopic",
                threads=args.threads,
                seconds=args.seconds,
                warmup=args.warmup,
                rate=args.rate,
            )
        finally:
            if sampler is not None:
                sampler.join()
            broker.stop()
        if raw.exists():
            gil = gil_shares(raw.read_text().splitlines())
        assert broker.log_path is not None
        stalls = summarise_stalls(broker.log_path.read_bytes().splitlines())
    print("\n".join(report_lines(orjson.loads(orjson.dumps(figures)), stalls, gil, args.seconds + args.warmup)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
