"""Event-loop work per message of a batch append (`MessageStore.put_messages`, 32 x 4 KiB by default), in process,
two checkouts interleaved: the figure a busy machine cannot move much, where `bench.store_append`'s MB/s swing 2-5x.

Each round runs a fresh store (in `--dir`, by default /dev/shm: no disk, so the figure is the store's own work and
not the kernel's page and write-back work) in a child interpreter of each tree, puts `--batches` batches of
`--batch` messages (prepared before the clock starts, as bench.store_append does) and builds the index keys they
queued, and prints the loop thread's CPU time per message (`time.thread_time`) or, with `--bytecodes`, the Python
bytecodes it executed per message (`sys.settrace` opcode events: C code such as the CRC or a struct pack counts as
the one call it is). Trust the bytecodes only between variants of the same kind of code: rewriting a batch's
per-message loops as `map(attrgetter(...))` columns cut them from 290 to 174 a message and made the append slower
(CPython 3.11 specialises attribute loads in a loop; attrgetter and methodcaller calls are not); `timeit` of the
function in question, old against new, settles it::

    python -m bench.batch_append_cost --a /work/main --b . --rounds 5 [--bytecodes] [--no-index]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time

from bench.interleave import add_side_arguments, enter_tree, interleaved_rounds, sides
from bench.opcode_counter import OpcodeCounter


async def measure(directory: str, batches: int, batch: int, size: int, index: bool, bytecodes: bool) -> float:
    from bench.store_append import _message
    from store import MessageStore, MessageStoreConfig, PutMessageStatus

    root = tempfile.mkdtemp(prefix="batch-cost-", dir=directory)
    cfg = MessageStoreConfig(
        store_path_root_dir=root,
        mapped_file_size_commit_log=max(64 << 20, (batches + 64) * batch * (size + 200)),
        message_index_enable=index,
    )
    store = MessageStore(cfg)
    try:
        assert await store.load()
        await store.start()
        body = os.urandom(size)
        ready = [[_message(body, k % 8, k * batch + i) for i in range(batch)] for k in range(16)]
        for k in range(32):  # warm: files, caches, the index file
            await store.put_messages(ready[k % 16])
        store.dispatcher.build_index_keys()
        await asyncio.sleep(0.3)
        ops = OpcodeCounter() if bytecodes else None
        if ops is not None:
            sys.settrace(ops.trace)
        t0 = time.thread_time()
        for k in range(batches):
            r = await store.put_messages(ready[k % 16])
            if r.status is not PutMessageStatus.PUT_OK:
                raise RuntimeError(f"put_messages: {r.status}")
        store.dispatcher.build_index_keys()  # the keys this round queued, built as the loop would soon after
        cpu = time.thread_time() - t0
        if ops is not None:
            sys.settrace(None)
            return ops.count / (batches * batch)
        return cpu * 1e6 / (batches * batch)
    finally:
        await store.shutdown()
        shutil.rmtree(root, ignore_errors=True)


def child(args: argparse.Namespace) -> int:
    enter_tree(args.root)
    from remoting import loop as loop_choice

    loop_choice.install()
    value = asyncio.run(measure(args.dir, args.batches, args.batch, args.size, not args.no_index, args.bytecodes))
    print(f"{value:.2f}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Event-loop work per message of put_messages, two trees.")
    add_side_arguments(parser, rounds=5, a_help="repo root of side A (e.g. /work/main)")
    parser.add_argument("--batches", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--size", type=int, default=4096, help="body bytes")
    parser.add_argument("--dir", default="/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir())
    parser.add_argument("--no-index", action="store_true", help="messageIndexEnable=false")
    parser.add_argument("--bytecodes", action="store_true", help="Python bytecodes per message instead of CPU time")
    args = parser.parse_args(argv)
    if args.root is not None:
        return child(args)
    trees = sides(args.a, args.b)
    unit = "bytecodes" if args.bytecodes else "us"
    flags = ["--batches", str(args.batches), "--batch", str(args.batch), "--size", str(args.size), "--dir", args.dir]
    flags += (["--no-index"] if args.no_index else []) + (["--bytecodes"] if args.bytecodes else [])
    figures = interleaved_rounds(
        trees, args.rounds, lambda root: [sys.executable, __file__, "--root", str(root), *flags], f"{unit}/msg"
    )
    med = {side: statistics.median(values) for side, values in figures.items()}
    for side, root in trees.items():
        low, high = min(figures[side]), max(figures[side])
        print(f"{side} {root}: median {med[side]:.2f} {unit} per message (range {low:.2f}-{high:.2f})")
    if "A" in med:
        print(f"B/A = {med['B'] / med['A']:.3f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
