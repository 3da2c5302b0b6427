"""Boot time and idle private memory of ``python -m broker.main``, median of N boots, printed as figures.

    python -m bench.boot_figures [--boots 5] [--idle 3] [--baseline-rev REV] [--default-store-size]

Each boot (``broker.testing.process.BrokerProcess`` with ``ready="ports"``) gets free loopback ports (name
server, remoting, the gRPC endpoint with TLS, as by default) and a fresh temporary store, except that boots after
the first of a tree reuse one store (a restart, as in production: the self-signed certificate under
``<store>/grpc-tls`` is there). Boot seconds run from exec to
both the remoting and the gRPC port accepting a connection (also as CPU seconds of the broker by then,
less noisy on a shared machine); memory is read from /proc/PID/smaps_rollup after
``--idle`` seconds (private = Private_Clean + Private_Dirty; anon = Anonymous). ``--baseline-rev`` extracts that
revision with ``git archive`` into a temp dir and measures it in the same run, boots interleaved.
Runs only on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path

from broker.testing.process import BrokerProcess

MiB = 1024 * 1024
REPO = Path(__file__).resolve().parent.parent


def smaps_figures(pid: int) -> tuple[int, int]:
    """(Private_Clean + Private_Dirty, Anonymous) bytes of ``pid``."""
    private = anon = 0
    with open(f"/proc/{pid}/smaps_rollup", encoding="ascii") as f:
        for line in f:
            if line.startswith(("Private_Clean:", "Private_Dirty:")):
                private += int(line.split()[1]) * 1024
            elif line.startswith("Anonymous:"):
                anon += int(line.split()[1]) * 1024
    return private, anon


def cpu_seconds(pid: int) -> float:
    """user + system CPU seconds of ``pid`` so far (/proc/PID/stat): less noisy than wall time on a busy machine."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one_boot(tree: Path, store: Path, idle_s: float, small_store: bool) -> tuple[float, float, int, int]:
    broker = BrokerProcess(
        store,
        config={"mappedFileSizeCommitLog": 64 * MiB} if small_store else {},
        grpc_port=0,
        grpc_tls=True,
        ready="ports",
        root=tree,
    )
    broker.start()
    try:
        assert broker.proc is not None and broker.boot_seconds is not None
        boot_cpu = cpu_seconds(broker.proc.pid)
        time.sleep(idle_s)
        private, anon = smaps_figures(broker.proc.pid)
    finally:
        broker.stop()
    return broker.boot_seconds, boot_cpu, private, anon


def extract(rev: str, into: Path) -> Path:
    data = subprocess.run(["git", "archive", rev], cwd=REPO, check=True, capture_output=True).stdout
    with tarfile.open(fileobj=BytesIO(data)) as tar:
        tar.extractall(into, filter="data")
    return into


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--boots", type=int, default=5)
    parser.add_argument("--idle", type=float, default=3.0, help="seconds after boot before memory is read")
    parser.add_argument("--baseline-rev", help="a git revision to measure in the same run, e.g. main")
    parser.add_argument(
        "--default-store-size",
        action="store_true",
        help="keep the 1 GiB commit-log file (default: 64 MiB, as in tests)",
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="boot-figures-") as tmp:
        trees = {"this tree": REPO}
        if args.baseline_rev:
            trees = {f"baseline {args.baseline_rev}": extract(args.baseline_rev, Path(tmp) / "baseline"), **trees}
        samples: dict[str, list[tuple[float, float, int, int]]] = {name: [] for name in trees}
        firsts: dict[str, float] = {}
        for i in range(args.boots):
            for name, tree in trees.items():
                store = Path(tmp) / f"store-{list(trees).index(name)}"
                figures = one_boot(tree, store, args.idle, not args.default_store_size)
                if i == 0:
                    firsts[name] = figures[0]
                samples[name].append(figures)
        print(
            f"{'tree':<24} {'first boot s':>12} {'boot s':>7} {'boot cpu s':>10} {'private MiB':>12} {'anon MiB':>9}"
            f"   (medians of {args.boots} boots; memory after {args.idle:g} s idle)"
        )
        for name, rows in samples.items():
            med = [statistics.median(r[i] for r in rows) for i in range(4)]
            print(
                f"{name:<24} {firsts[name]:12.3f} {med[0]:7.3f} {med[1]:10.3f} {med[2] / MiB:12.1f} "
                f"{med[3] / MiB:9.1f}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
