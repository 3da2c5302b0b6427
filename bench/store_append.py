"""Benchmark: CommitLog append throughput of the store, next to the raw sequential write bandwidth of the
same disk measured in the same run.

For 128 B, 1 KiB and 4 KiB message bodies, ASYNC_FLUSH (pool off / on) and SYNC_FLUSH, producers call
`MessageStore.put_message` concurrently (as the broker's send executor does) and, for the batch rows,
`put_messages` with 32 messages. Each case runs for a fixed time, then the final fsync is included in
the elapsed time. The ASYNC_FLUSH flush service is woken by the puts (flushCommitLogTimed=false, as
before 4.9), so that write-back overlaps the appends as it does for the raw reference; with the 4.9
default (`--flush-commit-log-timed`, a flush every 500 ms) the final fsync took 18-20 % of the time
and the figures were about 10 % lower.

The raw bandwidth is 1 MiB writes in the same directory, measured after each case with as many bytes
as the case wrote and an fdatasync every 50 ms from a second thread, as the store's flush service does
(`raw MB/s`, the ratio's denominator); and, for reference, before it as 128 MiB of writes and one final
fsync (`burst MB/s`: mostly page cache, a small volume's fsync is short). The case and its raw write
each start right after a warm-up that writes and deletes 1.25 times what they can write (at least 2 GiB): for
the raw write, what the case wrote; for the case, the most of what it wrote before and of its seconds at the
burst rate measured just before it (it cannot write faster), so that both write into page cache memory the guest
has just freed (see `warm_page_cache`). Until the sixteenth session the case's first run had 2 GiB, and a case
writing 3-4 GB met cold memory for its second half: 424-579 MB/s in five runs against 830 after 6 GiB (the same
tree, separate runs), where its raw reference always had its whole volume warmed. These precautions matter on this VM,
where the same 2 GiB raw write measured 427-1673 MB/s depending on the memory under it, and a long
write with one fsync at the end stalls in write-back (470-482 MB/s where overlapped fdatasyncs gave
1300-1690 MB/s). The cause of the first: the guest reports freed pages to the host at once (Firecracker
free page reporting, /sys/module/page_reporting/parameters/min_free_ms = 0), and the first touch of a
reported page faults in the host; perf put 81 % of the pre-fault thread's time in that memset. The
warm-up gives each write fresh memory, but a case that runs longer than its raw reference meets more
reported memory: with min_free_ms = 60000 (a test only; the bench changes no system setting) the 4 KiB
batch case measured 550 MB/s instead of 444, its raw reference 1352 instead of 1394.

`--write-behind-compare` runs each case with the CommitLog write-behind (store/write_behind.py: the write-back
of every 8 MiB appended started at once, not left to the next flush) and without it, interleaved per repeat;
`--breakdown` prints, per thread group, the CPU and run-queue wait as shares of the elapsed time (on a shared
machine the loop waits for a core longer than it runs: that, not the disk, is the run-to-run spread), the
bytes the pre-fault thread populated per byte appended and the flushes per second; `--runs` each run's ratio.

`--index-compare` runs each case with the message index (messageIndexEnable=true, the default) and then
without it, interleaved per repeat. Upstream builds the index in the reput thread, beside the writer;
here the index keys are queued by the writer's inline dispatch and indexed in bulk on the event loop,
so the difference is what the index takes from the appends (4 KiB batches: about 1 us of the event
loop's ~5 us per message).

`cpu msg/s` = messages per second of CPU time of this process (all threads); `loop us/msg` = CPU time
of the event loop's thread per message, the bound on an idle machine (fsync, pre-faulting and file
preparation run in other threads); `fsync` = the share of the elapsed time spent in the final flush,
after the last put (large when the disk, not the store, sets the pace).

The messages (`MessageExtBrokerInner`, what the broker decodes from a request) are built before the
clock starts and reused in turn, so the figures are the store's own cost; `--build-messages` builds
each one inside the timed loop instead (the broker's decode cost on top).

    python -m bench.store_append [--seconds 2.5] [--dir /path/on/the/disk] [--sizes 128,1024,4096]
        [--repeat 3] [--build-messages] [--cases async,pool,sync,batch,poolbatch,syncbatch]
        [--prefault MiB] [--prefault-compare] [--index-compare] [--flush-commit-log-timed]
        [--write-behind-compare] [--breakdown] [--runs]

With `--repeat N` every case runs N times (fresh store, fresh raw measurements each time). A row shows
medians over the runs, with the range of the store's and of the raw MB/s; the ratios are median over
median (the raw bandwidth swings on its own from run to run, so pairing each run with its own raw
figure only adds that noise to the ratio): first against the raw write of the same volume, then
against the 128 MiB burst. `loop us` is the event loop's CPU time per message.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import shutil
import statistics
import tempfile
import threading
import time

import structlog

from remoting import loop as loop_choice
from store import (
    MessageExtBrokerInner,
    MessageStore,
    MessageStoreConfig,
    PutMessageStatus,
)

RAW_BYTES = 128 * 1024 * 1024
WARM_BYTES = 2 * 1024 * 1024 * 1024


def raw_write_bandwidth(directory: str, nbytes: int = RAW_BYTES, overlap: bool = False) -> float:
    """MB/s of 1 MiB sequential writes of `nbytes` followed by fsync, in `directory`. `overlap`: a second
    thread calls fdatasync every 50 ms meanwhile, as a flush service does (the write-back then runs
    alongside the writes instead of all at the end; for a gigabyte and more that is the disk's
    sustained bandwidth, where one final fsync measured a third of it here)."""
    path = os.path.join(directory, "raw-bandwidth.tmp")
    chunk = os.urandom(1024 * 1024)
    t0 = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    done = threading.Event()

    def syncer() -> None:
        while not done.wait(0.05):
            os.fdatasync(fd)

    thread = threading.Thread(target=syncer, daemon=True) if overlap else None
    try:
        if thread is not None:
            thread.start()
        for _ in range(nbytes // len(chunk)):
            os.write(fd, chunk)
        done.set()
        if thread is not None:
            thread.join()
        os.fsync(fd)
    finally:
        done.set()
        os.close(fd)
    elapsed = time.perf_counter() - t0
    os.unlink(path)
    return nbytes / elapsed / 1e6


def warm_page_cache(directory: str, nbytes: int) -> None:
    """Write `nbytes` to a file in `directory` and delete it unflushed: the pages it took come back free
    and "hot". On this VM, page cache writes into memory the guest has not used for ~15 s run at a
    third of the speed of writes into memory it just freed (seen: 427-452 MB/s against 1495-1673 MB/s
    for the same 2 GiB raw write, minutes apart). Every measured write (the store case and its raw
    reference) therefore starts right after this, with the same kind of memory under it."""
    path = os.path.join(directory, "warm-page-cache.tmp")
    chunk = bytes(1024 * 1024)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for _ in range(nbytes // len(chunk)):
            os.write(fd, chunk)
    finally:
        os.close(fd)
        os.unlink(path)


def _message(body: bytes, queue_id: int, seq: int) -> MessageExtBrokerInner:
    return MessageExtBrokerInner.create(
        "BenchTopic",
        body,
        queue_id=queue_id,
        properties={"TAGS": "TagA", "UNIQ_KEY": f"7F0000010B5C18B4AAC2{seq:012X}", "WAIT": "true"},
        born_timestamp=1_700_000_000_000,
        born_host=("127.0.0.1", 50000),
    )


async def run_case(
    directory: str,
    size: int,
    flush: str,
    pool: bool,
    batch: int,
    seconds: float,
    build: bool = False,
    preallocate: bool | None = None,
    prefault: int | None = None,
    flush_timed: bool = False,
    index: bool = True,
    write_behind: bool = True,
) -> dict:
    root = tempfile.mkdtemp(prefix="store-bench-", dir=directory)
    cfg = MessageStoreConfig(
        store_path_root_dir=root,
        mapped_file_size_commit_log=256 * 1024 * 1024,
        flush_disk_type=flush,
        transient_store_pool_enable=pool,
        transient_store_pool_size=3,
        flush_commit_log_timed=flush_timed,
        message_index_enable=index,
        commit_log_write_behind=write_behind,
    )
    if preallocate is not None:
        cfg.preallocate_mapped_file = preallocate
    if prefault is not None:
        cfg.prefault_ahead_bytes = prefault
    store = MessageStore(cfg)
    assert await store.load()
    await store.start()
    body = os.urandom(size)
    producers = 256 if flush == "SYNC_FLUSH" else 64
    stop = asyncio.Event()
    sent = [0]
    failed = [0]

    async def producer(k: int) -> None:
        seq = k * 10_000_000
        ready = [_message(body, k % 8, seq + i) for i in range(max(batch, 1) * 4)]
        turn = 0
        while not stop.is_set():
            if batch:
                if build:
                    msgs = [_message(body, k % 8, seq + i) for i in range(batch)]
                else:
                    msgs = ready[turn * batch : (turn + 1) * batch]
                r = await store.put_messages(msgs)
                n = batch
            else:
                r = await store.put_message(_message(body, k % 8, seq) if build else ready[turn])
                n = 1
            turn = (turn + 1) % 4
            seq += n
            if r.status == PutMessageStatus.PUT_OK:
                sent[0] += n
            else:
                failed[0] += n

    await asyncio.sleep(0.2)  # let the next file finish warming
    threads0 = thread_times()
    populated0 = store._prefault.populated_bytes if store._prefault is not None else 0
    flushes0 = store._flusher.flush_count
    c0, t0, l0 = time.process_time(), time.perf_counter(), time.thread_time()
    tasks = [asyncio.create_task(producer(k)) for k in range(producers if not batch else 16)]
    await asyncio.sleep(seconds)
    stop.set()
    await asyncio.gather(*tasks)
    # everything acknowledged is made durable before the clock stops
    if store._commit_service is not None:
        await store._commit_service.commit(0)
    t_fsync = time.perf_counter()
    await store._flusher.flush(0)
    elapsed = time.perf_counter() - t0
    final_fsync = time.perf_counter() - t_fsync
    cpu = time.process_time() - c0
    loop_cpu = time.thread_time() - l0  # the event loop's thread: appends are bound by it
    nbytes = store.commit_log.put_message_size_total
    threads1 = thread_times()
    populated = (store._prefault.populated_bytes if store._prefault is not None else 0) - populated0
    flushes = store._flusher.flush_count - flushes0
    await store.shutdown()
    disk = _allocated_bytes(cfg.store_path_commit_log)
    shutil.rmtree(root, ignore_errors=True)
    return {
        "msgs": sent[0],
        "failed": failed[0],
        "msg_s": sent[0] / elapsed,
        "fsync_share": final_fsync / elapsed,
        "mb_s": nbytes / elapsed / 1e6,
        "cpu_msg_s": sent[0] / cpu if cpu > 0 else 0.0,
        "loop_us": loop_cpu / max(1, sent[0]) * 1e6,
        "record": nbytes // max(1, sent[0]),
        "disk_mb": disk / 1e6,
        "data_mb": nbytes / 1e6,
        "threads": thread_deltas(threads0, threads1, elapsed),
        "populated": populated / max(1, nbytes),
        "flushes": flushes / elapsed,
    }


def thread_times() -> dict[int, tuple[str, float, float]]:
    """native thread id -> (thread name, CPU seconds, run-queue wait seconds) from /proc/self/task/*/schedstat
    (the wait: time the thread was runnable but another task had the core)."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    out: dict[int, tuple[str, float, float]] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                run, wait, _ = f.read().split()
        except OSError:
            continue
        out[int(tid)] = (names.get(int(tid), "?"), int(run) / 1e9, int(wait) / 1e9)
    return out


def thread_deltas(before: dict, after: dict, elapsed: float) -> dict[str, tuple[float, float]]:
    """Per thread group (the loop, pre-fault, write-behind, store-io workers): share of the elapsed time
    on a CPU and waiting for one."""
    groups: dict[str, list[float]] = {}
    for tid, (name, run, wait) in after.items():
        _, run0, wait0 = before.get(tid, (name, 0.0, 0.0))
        group = "loop" if name == "MainThread" else name.rstrip("_0123456789").removeprefix("commitlog-")
        g = groups.setdefault(group, [0.0, 0.0])
        g[0] += run - run0
        g[1] += wait - wait0
    return {k: (v[0] / elapsed, v[1] / elapsed) for k, v in groups.items()}


def _allocated_bytes(directory: str) -> int:
    """Blocks the CommitLog files really take (sparse files count only what was written or populated)."""
    total = 0
    for name in os.listdir(directory):
        total += os.stat(os.path.join(directory, name)).st_blocks * 512
    return total


async def main_async(args: argparse.Namespace) -> None:
    sizes = [int(s) for s in args.sizes.split(",")]
    cases = []
    kinds = {
        "async": ("ASYNC_FLUSH", False, 0),
        "pool": ("ASYNC_FLUSH", True, 0),
        "sync": ("SYNC_FLUSH", False, 0),
        "batch": ("ASYNC_FLUSH", False, 32),
        "poolbatch": ("ASYNC_FLUSH", True, 32),
        "syncbatch": ("SYNC_FLUSH", False, 32),
    }
    # --prefault-compare: each case without (0) then with the pre-fault window; --index-compare: with
    # the message index, then without it (messageIndexEnable=false); interleaved per repeat
    prefaults = [0, args.prefault] if args.prefault_compare else [args.prefault]
    indexes = [True, False] if args.index_compare else [True]
    behinds = [True, False] if args.write_behind_compare else [True]
    variants = [(p, i, w) for p in prefaults for i in indexes for w in behinds]
    for size in sizes:
        for kind in args.cases.split(","):
            cases.append((size, *kinds[kind]))
    os.makedirs(args.dir, exist_ok=True)  # (a --dir that does not exist yet is made, not a traceback)
    print(
        f"store append benchmark in {args.dir}  (load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} cpus, "
        f"{'preallocated' if args.preallocate else 'default (sparse)'} CommitLog files, "
        f"flushCommitLogTimed={'true' if args.flush_commit_log_timed else 'false'})"
    )
    print(
        f"{'body':>6} {'flush':>11} {'pool':>4} {'batch':>5} {'record':>6} {'msg/s':>9} {'MB/s':>7} {'range':>9} "
        f"{'raw MB/s':>8} {'range':>9} {'ratio':>6} {'burst':>6} {'ratio':>6} {'cpu msg/s':>9} {'loop us':>7} {'fsync':>5} "
        f"{'prefault':>8} {'index':>5} {'behind':>6} {'disk/data':>9}"
    )
    volume: dict[tuple, int] = {}  # the most a case wrote so far: its warm-up covers 1.25 times that
    for size, flush, pool, batch in cases:
        runs: dict[tuple[int | None, bool, bool], list[dict]] = {v: [] for v in variants}
        for _ in range(args.repeat):
            for v in variants:
                burst = raw_write_bandwidth(args.dir)
                # what the case can write at most: no more than the burst rate, nor less than it wrote before
                bound = max(volume.get((size, flush, pool, batch, v), 0), int(args.seconds * burst * 1e6))
                warm_page_cache(args.dir, max(WARM_BYTES, int(1.25 * bound)))
                r = await run_case(
                    args.dir,
                    size,
                    flush,
                    pool,
                    batch,
                    args.seconds,
                    args.build_messages,
                    args.preallocate or None,
                    v[0],
                    args.flush_commit_log_timed,
                    v[1],
                    v[2],
                )
                r["burst"] = burst
                wrote = int(r["data_mb"] * 1e6)
                volume[(size, flush, pool, batch, v)] = max(wrote, volume.get((size, flush, pool, batch, v), 0))
                # as many bytes as the case wrote (whole MiB, at least the burst's), write-back overlapped,
                # right after the same warm-up as the case (a raw write straight after the case's
                # gigabytes of I/O measured up to a third lower)
                warm_page_cache(args.dir, max(WARM_BYTES, int(1.25 * wrote)))
                r["raw"] = raw_write_bandwidth(args.dir, max(RAW_BYTES, wrote >> 20 << 20), overlap=True)
                runs[v].append(r)
        for v in variants:
            rs = runs[v]
            med = {
                k: statistics.median(r[k] for r in rs)
                for k in ("msg_s", "mb_s", "raw", "burst", "cpu_msg_s", "loop_us", "fsync_share")
            }
            lo_mb, hi_mb = min(r["mb_s"] for r in rs), max(r["mb_s"] for r in rs)
            lo_raw, hi_raw = min(r["raw"] for r in rs), max(r["raw"] for r in rs)
            disk = sum(r["disk_mb"] for r in rs) / max(sum(r["data_mb"] for r in rs), 1e-9)
            failed = sum(r["failed"] for r in rs)
            window = "default" if v[0] is None else f"{v[0] >> 20}M"
            print(
                f"{size:>6} {flush:>11} {'on' if pool else 'off':>4} {batch or '-':>5} {rs[0]['record']:>6} "
                f"{med['msg_s']:>9.0f} {med['mb_s']:>7.1f} {f'{lo_mb:.0f}-{hi_mb:.0f}':>9} "
                f"{med['raw']:>8.0f} {f'{lo_raw:.0f}-{hi_raw:.0f}':>9} {med['mb_s'] / med['raw']:>6.1%} "
                f"{med['burst']:>6.0f} {med['mb_s'] / med['burst']:>6.1%} {med['cpu_msg_s']:>9.0f} "
                f"{med['loop_us']:>7.2f} {med['fsync_share']:>5.0%} {window:>8} {'on' if v[1] else 'off':>5} "
                f"{'on' if v[2] else 'off':>6} {disk:>8.2f}x" + (f"  ({failed} not PUT_OK)" if failed else ""),
                flush=True,
            )
            if args.runs:
                for r in rs:
                    print(f"{'':>6} run: {r['mb_s']:.0f} MB/s of raw {r['raw']:.0f} = {r['mb_s'] / r['raw']:.1%}")
            if args.breakdown:
                print_breakdown(rs)


def print_breakdown(rs: list[dict]) -> None:
    """Where the time went, medians over the runs: each thread group's share of the elapsed time on a CPU and
    waiting for one (run queue), the bytes the pre-fault thread populated per byte appended (below 1: the
    writer took the rest itself, staged pwrites or faults on the loop), flushes per second."""
    groups = sorted({g for r in rs for g in r["threads"]}, key=lambda g: (g != "loop", g))
    parts = []
    for g in groups:
        cpu = statistics.median(r["threads"].get(g, (0.0, 0.0))[0] for r in rs)
        wait = statistics.median(r["threads"].get(g, (0.0, 0.0))[1] for r in rs)
        if cpu + wait >= 0.005:  # (threads that did nothing here: the default executor, uvloop's)
            parts.append(f"{g} {cpu:.0%}+{wait:.0%}w")
    populated = statistics.median(r["populated"] for r in rs)
    flushes = statistics.median(r["flushes"] for r in rs)
    print(
        f"{'':>6} cpu+wait of elapsed: {', '.join(parts)}; populated/appended {populated:.2f}; flushes/s {flushes:.1f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=2.5, help="duration of each case")
    parser.add_argument("--dir", default=os.environ.get("STORE_BENCH_DIR", os.getcwd()))
    parser.add_argument("--sizes", default="128,1024,4096")
    parser.add_argument("--repeat", type=int, default=1, help="runs per case; the median one is shown")
    parser.add_argument("--build-messages", action="store_true", help="build each message in the timed loop")
    parser.add_argument(
        "--cases", default="async,pool,sync,batch", help="which of async,pool,sync,batch,poolbatch,syncbatch to run"
    )
    parser.add_argument(
        "--preallocate", action="store_true", help="preallocate_mapped_file=true (default: the config's, sparse)"
    )
    parser.add_argument(
        "--flush-commit-log-timed",
        action="store_true",
        help="flushCommitLogTimed=true (the 4.9 default: flush every flushIntervalCommitLog ms); by default the "
        "flush service is woken by the puts, as the raw reference flushes while it writes",
    )
    parser.add_argument(
        "--prefault",
        type=lambda v: int(v) * 1024 * 1024,
        default=None,
        help="prefault_ahead_bytes in MiB (default: the config's)",
    )
    parser.add_argument(
        "--prefault-compare",
        action="store_true",
        help="run each case without pre-faulting, then with it (--prefault or the default), in the same run",
    )
    parser.add_argument(
        "--index-compare",
        action="store_true",
        help="run each case with the message index (messageIndexEnable=true, the default), then without it",
    )
    parser.add_argument(
        "--write-behind-compare",
        action="store_true",
        help="run each case with the CommitLog write-behind (commit_log_write_behind=true, the default), then "
        "without it",
    )
    parser.add_argument("--runs", action="store_true", help="print each run's MB/s and ratio, not only the median")
    parser.add_argument(
        "--breakdown",
        action="store_true",
        help="per thread group (loop, pre-fault, write-behind, store-io): CPU and run-queue wait as shares of the "
        "elapsed time; pre-fault coverage; flushes per second",
    )
    args = parser.parse_args()
    if args.prefault_compare and args.prefault is None:
        args.prefault = MessageStoreConfig.prefault_ahead_bytes
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    loop_choice.install()  # uvloop when installed, as the broker runs (remoting.loop)
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
