"""Benchmark: ConsumeQueue lookups and tag filtering, per million entries.

Builds a queue of `--entries` entries (300,000 per file, 20 B each, tags from 16 distinct tags) and
times: appending entries; reading it front to back in 32-entry pull windows; random single-entry
lookups; the vectorised tag filter (numpy isin on the tags column, one tag of 16 wanted) over the whole
queue; and, for comparison in the same run, the same filter done entry by entry in Python.
All figures are ms per million entries (lower is better).

    python -m bench.store_consume_queue [--entries 1000000] [--dir DIR]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import tempfile
import time

from store.consume_queue import ConsumeQueue, tags_to_int32
from store.message import tags_hash


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--dir", default=os.environ.get("STORE_BENCH_DIR", os.getcwd()))
    args = parser.parse_args()
    n = args.entries
    per_million = 1_000_000 / n
    root = tempfile.mkdtemp(prefix="cq-bench-", dir=args.dir)
    try:
        cq = ConsumeQueue("BenchTopic", 0, root, 300_000 * 20)
        codes = [tags_hash(f"Tag{i}") for i in range(16)]
        t0 = time.perf_counter()
        offset = 0
        for i in range(n):
            cq.put_message_position_info(offset, 1200, codes[i % 16], i)
            offset += 1200
        write_s = time.perf_counter() - t0

        t0 = time.perf_counter()
        pos = 0
        read = 0
        while pos < n:
            window = cq.get_entries(pos, 32)
            read += len(window)
            _ = window["offset"].tolist(), window["size"].tolist()
            pos += len(window)
        window_s = time.perf_counter() - t0
        assert read == n

        rng = random.Random(7)
        lookups = min(n, 200_000)
        picks = [rng.randrange(n) for _ in range(lookups)]
        t0 = time.perf_counter()
        for p in picks:
            cq.get_entry(p)
        random_s = (time.perf_counter() - t0) * (n / lookups)

        wanted = {codes[3]}
        t0 = time.perf_counter()
        hits = cq.filter_window(0, n, wanted)
        vector_s = time.perf_counter() - t0
        assert len(hits) == n // 16 + (1 if n % 16 > 3 else 0)

        t0 = time.perf_counter()
        count = 0
        pos = 0
        while pos < n:
            entries = cq.get_entries(pos, 800)  # the upstream pull window with a filter
            for code in tags_to_int32(entries["tags"]).tolist():
                if code in wanted:
                    count += 1
            pos += len(entries)
        scalar_s = time.perf_counter() - t0
        assert count == len(hits)

        print(
            f"consume queue benchmark: {n} entries, {len(cq.mapped_file_queue.mapped_files)} files "
            f"(load average {os.getloadavg()[0]:.1f})"
        )
        print(f"{'operation':<46} {'ms / million entries':>20}")
        rows = [
            ("append entries (put_message_position_info)", write_s),
            ("read in 32-entry pull windows", window_s),
            ("random single-entry lookups", random_s),
            ("tag filter, vectorised (numpy isin)", vector_s),
            ("tag filter, entry by entry (Python)", scalar_s),
        ]
        for name, secs in rows:
            print(f"{name:<46} {secs * per_million * 1000:>20.1f}")
        print(f"vectorised filter speed-up over per-entry: {scalar_s / vector_s:.1f}x")
        cq.shutdown()
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
