"""Send TPS of two checkouts of our broker, interleaved in one run, under RocketMQ's own benchmark Producer.

The machine is shared and noisy, so a before/after figure is only worth quoting when both sides ran under
the same noise: this script alternates A and B (A, B, B, A, A, B, ...) for ``--rounds`` rounds, each a fresh
broker (a fresh store) and ``benchmark.Producer -w 16 -s 1024`` for ``--send-s`` seconds, and prints every
round's TPS, the median per side and B/A. Typical use: A = a plain export of the commit before a change,
B = the working tree::

    git archive <base> | tar -x -C /tmp/base
    python -m bench.send_ab --a /tmp/base --b . --rounds 3 --send-s 30

Exits 0 with a note when the reference tools (``rmqjava``) are missing, like ``bench.vs_java``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import structlog

from bench.broker_proc import BrokerProcess
from bench.vs_java import Figures, find_reference_bin, run_send
from mqclient.admin import AdminClient


def cpu_seconds(pid: int, *, main_thread: bool = False) -> float:
    """User + system CPU time of a process, all threads (``/proc/PID/stat`` fields 14 and 15), or of its main
    thread only (the event loop: the part that bounds a Python broker's throughput)."""
    path = f"/proc/{pid}/task/{pid}/stat" if main_thread else f"/proc/{pid}/stat"
    with open(path, encoding="ascii") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def messages_put(namesrv: str, broker_addr: str) -> int:
    """The broker's msgPutTotalTodayNow (every message it stored since boot)."""

    async def ask() -> int:
        async with AdminClient(namesrv) as admin:
            return int((await admin.runtime_info(broker_addr))["msgPutTotalTodayNow"])

    return asyncio.run(ask())


def one_round(
    rmqjava: Path, root: Path, work: Path, seconds: float, profile: Path | None
) -> tuple[Figures, float, float]:
    """One broker, one send phase: the Producer's figures and the broker's CPU microseconds per stored message,
    whole process and event-loop thread (steadier figures than TPS on a shared machine)."""
    fig = Figures(str(root))
    broker = BrokerProcess(store_dir=work, fault_injection=False, repo_root=root)
    broker.start()
    spy = None
    assert broker.proc is not None
    cpu0 = cpu_seconds(broker.proc.pid)
    loop0 = cpu_seconds(broker.proc.pid, main_thread=True)
    try:
        time.sleep(1)
        if profile is not None:
            assert broker.proc is not None
            spy = subprocess.Popen(
                [
                    "py-spy",
                    "record",
                    "-o",
                    str(profile),
                    "-f",
                    "raw",
                    "-d",
                    str(int(seconds)),
                    "--pid",
                    str(broker.proc.pid),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        run_send(rmqjava, broker.namesrv, f"AbT{int(time.time())}", seconds, fig)
        cpu = cpu_seconds(broker.proc.pid) - cpu0
        loop_cpu = cpu_seconds(broker.proc.pid, main_thread=True) - loop0
        stored = messages_put(broker.namesrv, broker.broker_addr)
    finally:
        if spy is not None:
            spy.wait(60)
        broker.stop()
    return fig, (cpu * 1e6 / stored if stored else 0.0), (loop_cpu * 1e6 / stored if stored else 0.0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Send TPS of two broker checkouts, interleaved in one run.")
    parser.add_argument("--a", type=Path, required=True, help="repo root of side A (e.g. the base commit)")
    parser.add_argument("--b", type=Path, required=True, help="repo root of side B (e.g. this tree)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--send-s", type=float, default=30.0)
    parser.add_argument("--rmq-bin", help="folder with rmqjava (default: PATH, then ~/.cache)")
    parser.add_argument("--profile", type=Path, help="py-spy raw profile of each B round, into this folder")
    args = parser.parse_args(argv)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))  # no client chatter
    bin_dir = find_reference_bin(args.rmq_bin)
    if bin_dir is None:
        print("skipped: Apache RocketMQ 4.9.7 tools (rmqjava) not found")
        return 0
    sides = {"A": args.a.resolve(), "B": args.b.resolve()}
    tps: dict[str, list[float]] = {"A": [], "B": []}
    cpu_us: dict[str, list[float]] = {"A": [], "B": []}
    loop_us: dict[str, list[float]] = {"A": [], "B": []}
    with tempfile.TemporaryDirectory(prefix="send-ab-") as tmp:
        for i in range(args.rounds):
            order = ("A", "B") if i % 2 == 0 else ("B", "A")
            for side in order:
                profile = None
                if args.profile is not None and side == "B":
                    args.profile.mkdir(parents=True, exist_ok=True)
                    profile = args.profile / f"round{i}.txt"
                fig, us, lus = one_round(
                    bin_dir / "rmqjava", sides[side], Path(tmp) / f"{side}{i}", args.send_s, profile
                )
                print(
                    f"round {i} {side}: send TPS {fig.send_tps or 0:,.0f}  avg RT {fig.send_avg_rt_ms or 0:.3f} ms"
                    f"  broker CPU {us:.1f} us/msg (event loop {lus:.1f})  failed {fig.send_failed}",
                    flush=True,
                )
                if fig.send_tps:
                    tps[side].append(fig.send_tps)
                    cpu_us[side].append(us)
                    loop_us[side].append(lus)
    med = {side: statistics.median(v) if v else 0.0 for side, v in tps.items()}
    cpu = {side: statistics.median(v) if v else 0.0 for side, v in cpu_us.items()}
    lcpu = {side: statistics.median(v) if v else 0.0 for side, v in loop_us.items()}
    for side in ("A", "B"):
        print(
            f"{side} {sides[side]}: median send TPS {med[side]:,.0f}, broker CPU {cpu[side]:.1f} us/msg,"
            f" event loop {lcpu[side]:.1f} us/msg"
        )
    if med["A"] and cpu["A"] and lcpu["A"]:
        print(
            f"B/A: send TPS {med['B'] / med['A']:.2f}x, CPU per message {cpu['B'] / cpu['A']:.2f}x,"
            f" event-loop CPU per message {lcpu['B'] / lcpu['A']:.2f}x"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
