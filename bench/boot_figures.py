"""Boot time and idle private memory of ``python -m broker.main``, median of N boots, printed as figures.

    python -m bench.boot_figures [--boots 5] [--idle 3] [--baseline-rev REV] [--default-store-size]

Each boot (``broker.testing.process.BrokerProcess`` with ``ready="ports"``) gets free loopback ports (name
server, remoting, the gRPC endpoint with TLS, as by default) and a fresh temporary store, except that boots after
the first of a tree reuse one store (a restart, as in production: the self-signed certificate under
``<store>/grpc-tls`` is there). Boot seconds run from exec to
both the remoting and the gRPC port accepting a connection (also as CPU seconds of the broker by then,
less noisy on a shared machine, and as the main thread's blocked milliseconds: boot wall time less its time on a
CPU and waiting for one, from /proc/PID/schedstat; what a disk sync, a sleep or a wait for another thread
costs, which the machine's CPU load barely moves); memory is read from /proc/PID/smaps_rollup after
``--idle`` seconds (private = Private_Clean + Private_Dirty; anon = Anonymous). ``--baseline-rev`` extracts that
revision with ``git archive`` into a temp dir and measures it in the same run, boots interleaved.
Memory is split (``/proc/PID/smaps``, per mapping) into: anon (Anonymous: heap, arenas, stacks, the copied-on-write
data pages of shared libraries), store (private pages of files under the store root: the CommitLog, consume
queues, index; page cache the kernel writes back and reclaims, counted as private only because no other process
maps them) and libs (the rest of Private_Clean + Private_Dirty: mostly the text of shared libraries that no other
running process maps; a second broker would share them). ``private`` is the sum, as vs_java reads it.

Each tree's modules are byte-compiled first (``compileall``, as ``pip install`` and the Docker image do), so that
a session with PYTHONDONTWRITEBYTECODE does not time the compiler; ``--no-compile`` keeps that cost in.
Runs only on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import compileall
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
PACKAGES = ("broker", "store", "remoting", "proxy", "mqclient")


def smaps_figures(pid: int, store: Path | None = None) -> tuple[int, int, int]:
    """(Private_Clean + Private_Dirty, Anonymous, private bytes of files under ``store``) of ``pid``."""
    private = anon = in_store = 0
    root = f"{store}/" if store is not None else None
    path = ""
    with open(f"/proc/{pid}/smaps", encoding="utf-8", errors="replace") as f:
        for line in f:
            head = line.split(maxsplit=6)
            if not head[0].endswith(":"):  # a mapping's first line: range perms offset dev inode [path]
                path = head[5].rstrip("\n") if len(head) > 5 else ""
            elif head[0] in ("Private_Clean:", "Private_Dirty:"):
                n = int(head[1]) * 1024
                private += n
                if root is not None and path.startswith(root):
                    in_store += n
            elif head[0] == "Anonymous:":
                anon += int(head[1]) * 1024
    return private, anon, in_store


def cpu_seconds(pid: int) -> float:
    """user + system CPU seconds of ``pid`` so far (/proc/PID/stat): less noisy than wall time on a busy machine."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main_thread_blocked(pid: int, wall_s: float) -> float:
    """Seconds of ``wall_s`` the main thread of ``pid`` was neither on a CPU nor waiting for one (schedstat:
    run time and run-queue wait in ns); includes the fork and exec before the interpreter ran."""
    with open(f"/proc/{pid}/schedstat", encoding="ascii") as f:
        ran_ns, waited_ns, _ = (int(x) for x in f.read().split())
    return wall_s - (ran_ns + waited_ns) / 1e9


def one_boot(tree: Path, store: Path, idle_s: float, small_store: bool) -> tuple[float, float, int, int, int, float]:
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
        blocked = main_thread_blocked(broker.proc.pid, broker.boot_seconds)
        time.sleep(idle_s)
        private, anon, in_store = smaps_figures(broker.proc.pid, store.resolve())
    finally:
        broker.stop()
    return broker.boot_seconds, boot_cpu, private, anon, in_store, blocked


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
    parser.add_argument("--no-compile", action="store_true", help="do not byte-compile the trees first")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="boot-figures-") as tmp:
        trees = {"this tree": REPO}
        if args.baseline_rev:
            trees = {f"baseline {args.baseline_rev}": extract(args.baseline_rev, Path(tmp) / "baseline"), **trees}
        if not args.no_compile:
            for tree in trees.values():
                for package in PACKAGES:
                    if (tree / package).is_dir():
                        compileall.compile_dir(tree / package, quiet=1, workers=0)
        samples: dict[str, list[tuple[float, float, int, int, int, float]]] = {name: [] for name in trees}
        firsts: dict[str, float] = {}
        for i in range(args.boots):
            for name, tree in trees.items():
                store = Path(tmp) / f"store-{list(trees).index(name)}"
                figures = one_boot(tree, store, args.idle, not args.default_store_size)
                if i == 0:
                    firsts[name] = figures[0]
                samples[name].append(figures)
        print(
            f"{'tree':<24} {'first boot s':>12} {'boot s':>7} {'boot cpu s':>10} {'blocked ms':>10} {'private MiB':>12}"
            f" {'anon MiB':>9} {'store MiB':>9} {'libs MiB':>8}   (medians of {args.boots} boots; memory after {args.idle:g} s idle)"
        )
        for name, rows in samples.items():
            med = [statistics.median(r[i] for r in rows) for i in range(6)]
            libs = statistics.median(r[2] - r[3] - r[4] for r in rows)
            print(
                f"{name:<24} {firsts[name]:12.3f} {med[0]:7.3f} {med[1]:10.3f} {med[5] * 1000:10.1f} {med[2] / MiB:12.1f} "
                f"{med[3] / MiB:9.1f} {med[4] / MiB:9.1f} {libs / MiB:8.1f}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
