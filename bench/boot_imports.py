"""CPU seconds of what ``mqbroker`` imports before its ports open, this tree against a baseline, runs interleaved.

    python -m bench.boot_imports [--runs 12] [--baseline-rev main]

Each run is a fresh interpreter that does what ``broker.main.main`` does before the start (its deferrals, the
collector off when that tree's main turns it off) and then imports the modules the start needs (``mqclient``'s
command-line manners, the config, the controller, the gRPC endpoint), and prints its CPU seconds
(``time.process_time``). The imports are ~3/4 of a start's CPU; ``bench.boot_figures`` times whole boots, whose
CPU figure comes from /proc in 10 ms ticks, too coarse for a change of a few milliseconds. Both trees are
byte-compiled first. Prints the median and the minimum of each tree.
"""

from __future__ import annotations

import argparse
import compileall
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.boot_figures import PACKAGES, REPO, extract

# run in the tree given as argv[1]: what broker.main.main does first, then the start's imports
CHILD = """
import gc, sys, time
sys.path.insert(0, sys.argv[1])
began = time.process_time()
from broker import main
if "gc.disable()" in open(main.__file__, encoding="utf-8").read():
    gc.disable()
for name in getattr(main, "DEFERRED_IMPORTS", ()):
    main.defer(name)
import mqclient.cli_support, broker.config, broker.logging_setup, remoting.loop, broker.controller, proxy.server
print(time.process_time() - began)
"""


def one_run(tree: Path) -> float:
    # cwd outside both trees: the tree comes first on sys.path only through argv[1]
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(tree)], cwd=tempfile.gettempdir(), check=True, capture_output=True, text=True
    )
    return float(out.stdout.split()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=12)
    parser.add_argument("--baseline-rev", default="main", help="a git revision measured in the same run")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="boot-imports-") as tmp:
        trees = {f"baseline {args.baseline_rev}": extract(args.baseline_rev, Path(tmp) / "baseline"), "this tree": REPO}
        for tree in trees.values():
            for package in PACKAGES:
                if (tree / package).is_dir():
                    compileall.compile_dir(tree / package, quiet=1, workers=0)
        samples: dict[str, list[float]] = {name: [] for name in trees}
        for _ in range(args.runs):
            for name, tree in trees.items():
                samples[name].append(one_run(tree))
        print(f"{'tree':<24} {'median CPU ms':>13} {'min CPU ms':>10}   ({args.runs} runs each, interleaved)")
        for name, values in samples.items():
            print(f"{name:<24} {statistics.median(values) * 1000:13.1f} {min(values) * 1000:10.1f}")
        base, this = (statistics.median(v) for v in samples.values())
        print(f"this tree / baseline: {this / base:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
