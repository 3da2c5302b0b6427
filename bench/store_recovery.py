"""Benchmark: store recovery time per GiB of CommitLog.

Writes a CommitLog (1 KiB and 4 KiB bodies, 128 MiB files, keys indexed), then times `MessageStore.load()`:
- clean: after a clean shutdown (checkpoint says where the log ends: no scan);
- crash, full scan: abort file present and a checkpoint that forces the scan to start at the first file
  (worst case), magic + CRC of every record verified, consume queues already complete;
- crash, rebuild: as above with the consume queues, the index and the queue manifest deleted, so every
  record is also dispatched again (consume queue entries and index keys rebuilt).
The data was just written, so it is in the page cache: the figures are the CPU cost of recovery, not
disk reads. Target: <= 2 s per GiB.

    python -m bench.store_recovery [--mib 256] [--dir DIR] [--repeat 3]

Each case is loaded `--repeat` times; the row shows the median load, the range of all of them (s/GiB),
the records the scan checked and how many of them the pre-dispatch (store/predispatch.py) rebuilt while
the scan went on.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import shutil
import struct
import tempfile
import time

import structlog

from remoting import loop as loop_choice
from store import MessageExtBrokerInner, MessageStore, MessageStoreConfig


def _config(root: str) -> MessageStoreConfig:
    return MessageStoreConfig(store_path_root_dir=root, mapped_file_size_commit_log=128 * 1024 * 1024)


async def _write(root: str, body_size: int, nbytes: int) -> int:
    store = MessageStore(_config(root))
    assert await store.load()
    await store.start()
    body = os.urandom(body_size)
    seq = 0
    while store.get_max_phy_offset() < nbytes:
        batch = [
            MessageExtBrokerInner.create(
                "RecoveryTopic",
                body,
                queue_id=q % 8,
                properties={"TAGS": "TagA", "KEYS": f"order-{seq + i}", "UNIQ_KEY": f"7F000001{seq + i:024X}"},
                born_timestamp=1,
            )
            for i, q in enumerate([seq // 32] * 32)
        ]
        await store.put_messages(batch)
        seq += 32
    size = store.get_max_phy_offset()
    await store.shutdown()
    return size


async def _timed_load(root: str) -> tuple[float, dict]:
    store = MessageStore(_config(root))
    t0 = time.perf_counter()
    assert await store.load()
    elapsed = time.perf_counter() - t0
    info = dict(store.last_recovery)
    await store.start()
    await store.shutdown()
    return elapsed, info


def _force_crash(root: str, rebuild: bool) -> None:
    cfg = _config(root)
    open(cfg.abort_file, "w").close()
    with open(cfg.store_checkpoint, "r+b") as f:
        f.write(struct.pack(">qqq", 1, 1, 1))  # older than every record: scan from the first file
    if rebuild:
        shutil.rmtree(cfg.store_path_consume_queue, ignore_errors=True)
        shutil.rmtree(cfg.store_path_index, ignore_errors=True)
        os.unlink(cfg.queue_manifest_file)


async def main_async(args: argparse.Namespace) -> None:
    print(f"store recovery benchmark in {args.dir} (load average {os.getloadavg()[0]:.1f}; warm page cache)")
    print(
        f"{'body':>6} {'MiB':>6} {'case':<18} {'seconds':>8} {'s / GiB':>8} {'range':>11} {'records':>9} "
        f"{'pre-disp.':>9}"
    )
    for body_size in (1024, 4096):
        root = tempfile.mkdtemp(prefix="recovery-bench-", dir=args.dir)
        try:
            size = await _write(root, body_size, args.mib * 1024 * 1024)
            gib = size / 1024**3
            for case in ("clean", "crash, full scan", "crash, rebuild"):
                runs = []
                for _ in range(args.repeat):
                    if case != "clean":
                        _force_crash(root, rebuild=case == "crash, rebuild")
                    runs.append(await _timed_load(root))
                runs.sort(key=lambda r: r[0])
                secs, info = runs[len(runs) // 2]
                print(
                    f"{body_size:>6} {size / 2**20:>6.0f} {case:<18} {secs:>8.2f} {secs / gib:>8.2f} "
                    f"{runs[0][0] / gib:>5.2f}-{runs[-1][0] / gib:<5.2f} {info.get('records', 0):>9} "
                    f"{info.get('preDispatched', 0):>9}",
                    flush=True,
                )
        finally:
            shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=256, help="CommitLog size to write per body size")
    parser.add_argument("--dir", default=os.environ.get("STORE_BENCH_DIR", os.getcwd()))
    parser.add_argument("--repeat", type=int, default=3, help="loads per case; the median one is shown")
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    loop_choice.install()  # uvloop when installed, as the broker runs (remoting.loop)
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
