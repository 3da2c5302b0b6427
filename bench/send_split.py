"""Where a send's bytecodes go, function by function, for one or two checkouts: ``bench.send_path_cost``'s wire
measure (``--wire --bytecodes``, the Producer's ROCKETMQ headers to 4 queues) traced by code object.

    python -m bench.send_split [--a TREE] [--b TREE] [--window 1] [--messages 2000] [--top 45]

Prints each tree's bytecodes a send, the part spent building the index (``store/java_hash.py``,
``store/index_service.py``, the dispatcher's index build) and the rest. The inline index keys wait for a 20 ms
timer, so under the tracer the keys a pass holds, and with them the index part, move with the machine's load by
hundreds of bytecodes a send; the rest does not, so it is the figure to compare. Each tree runs in its own
process (its own modules); run the store on a file system that is not nearly full (``TMPDIR=/dev/shm``): a store
above its disk ratio refuses sends and the refusals are counted instead.
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import tempfile
from pathlib import Path

_INDEX_FILES = ("store/java_hash.py", "store/index_service.py")
_INDEX_FUNCTIONS = ("build_index_keys", "deferred_index_build")


def _child(tree: str, messages: int, window: int, top: int) -> None:
    """Runs in the tree's own process: its bench.send_path_cost, traced."""
    sys.path.insert(0, tree)
    import uvloop

    import bench.opcode_counter as oc
    import bench.send_path_cost as spc

    counts: collections.Counter = collections.Counter()
    prefix = tree.rstrip("/") + "/"

    class Counter(oc.OpcodeCounter):
        def trace(self, frame, event, arg):
            frame.f_trace_opcodes = True
            if event == "opcode":
                self.count += 1
                co = frame.f_code
                counts[(co.co_filename.replace(prefix, ""), co.co_qualname)] += 1
            return self.trace

    spc.OpcodeCounter = Counter
    with tempfile.TemporaryDirectory() as tmp:
        per_send = uvloop.run(spc.measure(messages, window, Path(tmp), False, "rocketmq", True, True))
    index = sum(
        c
        for (f, q), c in counts.items()
        if f.endswith(_INDEX_FILES) or any(q.endswith(name) for name in _INDEX_FUNCTIONS)
    )
    print(
        f"{tree}: {per_send:.1f} bytecodes a send; index build {index / messages:.1f}; rest {per_send - index / messages:.1f}"
    )
    for (f, q), c in counts.most_common(top):
        print(f"{c / messages:9.1f} {f}:{q}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--a", help="side A's repo root (optional)")
    ap.add_argument("--b", default=".", help="side B (default: here)")
    ap.add_argument("--window", type=int, default=1, help="sends a read")
    ap.add_argument("--messages", type=int, default=2000)
    ap.add_argument("--top", type=int, default=45)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _child(args.child, args.messages, args.window, args.top)
        return
    for tree in [t for t in (args.a, args.b) if t]:
        root = str(Path(tree).resolve())
        # (this file run by path from the tree's root: the tree's own packages, this checkout's script)
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", root, "--window", str(args.window)]
        cmd += ["--messages", str(args.messages), "--top", str(args.top)]
        out = subprocess.run(cmd, cwd=root, capture_output=True, text=True, env=os.environ.copy(), check=False)
        print("\n".join(line for line in out.stdout.splitlines() if not line.startswith("20")))
        if out.returncode:
            print(out.stderr[-2000:])


if __name__ == "__main__":
    main()
