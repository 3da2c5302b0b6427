"""Issue 13 item 5: a boot maps consume queues without paging them in. Each queue file is 6 MB (upstream's
300,000 entries); recovering a queue that holds a few entries must not read the whole file."""

from __future__ import annotations

import re

from store_helpers import make_msg

from store import MessageStore

MiB = 1024 * 1024


def queue_mapping_rss(marker: str) -> int:
    """Resident bytes of this process's mappings of files under `marker` (from /proc/self/smaps)."""
    total = 0
    counting = False
    with open("/proc/self/smaps") as f:
        for line in f:
            if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
                counting = marker in line
            elif counting and line.startswith("Rss:"):
                total += int(line.split()[1]) * 1024
    return total


async def test_a_boot_touches_only_the_pages_queues_use(store_factory, config_factory):
    config = config_factory(mapped_file_size_consume_queue=300_000 * 20, mapped_file_size_commit_log=4 * MiB)
    store = await store_factory(config)
    for i in range(200):
        assert (await store.put_message(make_msg(f"T{i % 20}", b"m%d" % i))).status.name == "PUT_OK"
    await store.shutdown()

    reopened = MessageStore(config)
    assert await reopened.load()
    await reopened.start()
    try:
        assert all(reopened.get_max_offset_in_queue(f"T{t}", 0) == 10 for t in range(20))
        rss = queue_mapping_rss(config.store_path_consume_queue + "/")
        assert rss < 20 * 512 * 1024, f"{rss / MiB:.1f} MiB of consume queue pages resident after the boot"
        assert reopened.get_message("G", "T3", 0, 0, 32).message_count == 10
    finally:
        await reopened.shutdown()
