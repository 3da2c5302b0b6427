"""Crash-test driver: run a MessageStore appending under load and print every acknowledged message.

Usage: python tests/store/crash_driver.py ROOT FLUSH_TYPE POOL QUEUES [SECONDS]
Prints "READY" once started, then one line per acknowledged put:
    ACK <queue_id> <queue_offset> <commit_log_offset> <status>
The parent SIGKILLs it at a random moment, restarts a store on ROOT and checks every acknowledged
message is still there, in order, byte-identical (`expected_body`).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import sys

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))

import structlog

from store import (
    MessageExtBrokerInner,
    MessageStore,
    MessageStoreConfig,
    PutMessageStatus,
)

TOPIC = "CrashTopic"


def expected_body(queue_id: int, seq: int) -> bytes:
    seed = hashlib.sha256(f"{queue_id}:{seq}".encode()).digest()
    return f"{queue_id}:{seq}:".encode() + seed * (1 + seq % 40)


def crash_config(root: str, flush: str, pool: bool) -> MessageStoreConfig:
    return MessageStoreConfig(
        store_path_root_dir=root,
        mapped_file_size_commit_log=256 * 1024,
        mapped_file_size_consume_queue=500 * 20,
        flush_disk_type=flush,
        flush_interval_commit_log=100,
        flush_interval_consume_queue=100,
        commit_interval_commit_log=50,
        transient_store_pool_enable=pool,
        transient_store_pool_size=3,
        max_hash_slot_num=512,
        max_index_num=2048,
    )


async def producer(store: MessageStore, queue_id: int, start: int, out) -> None:
    seq = start
    while True:
        msg = MessageExtBrokerInner.create(
            TOPIC,
            expected_body(queue_id, seq),
            queue_id=queue_id,
            properties={"TAGS": f"T{seq % 3}", "KEYS": f"k{queue_id}-{seq}", "UNIQ_KEY": f"U{queue_id}x{seq}"},
            born_timestamp=1,
        )
        r = await store.put_message(msg)
        if r.status == PutMessageStatus.PUT_OK:
            ar = r.append_result
            out.write(f"ACK {queue_id} {ar.logics_offset} {ar.wrote_offset} {r.status.value}\n")
            out.flush()
            seq += 1
        else:
            await asyncio.sleep(0.001)


async def main() -> None:
    root, flush, pool, queues = sys.argv[1], sys.argv[2], sys.argv[3] == "1", int(sys.argv[4])
    seconds = float(sys.argv[5]) if len(sys.argv) > 5 else 60.0
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))
    store = MessageStore(crash_config(root, flush, pool))
    if not await store.load():
        print("LOAD FAILED", flush=True)
        sys.exit(2)
    await store.start()
    starts = [store.get_max_offset_in_queue(TOPIC, q) for q in range(queues)]
    print("READY", flush=True)
    tasks = [asyncio.create_task(producer(store, q, starts[q], sys.stdout)) for q in range(queues)]
    await asyncio.sleep(seconds)
    for t in tasks:
        t.cancel()
    await store.shutdown()
    print("DONE", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
