"""The CommitLog flush drops the written pages from the mapping before its fdatasync (no TLB shootdown
per page at write-back), keeps every byte, and turns itself off if the kernel refuses."""

from __future__ import annotations

import ctypes
import os

from store_helpers import make_msg

from store import PutMessageStatus
from store.flush import WrittenPageReleaser
from store.mapped_file import MappedFile
from store.prefault import Madvise

MiB = 1024 * 1024


def _mapped_kib(mf: MappedFile) -> int:
    """Rss of `mf`'s mapping in /proc/self/smaps: the pages that have a page-table entry."""
    anchor = ctypes.c_char.from_buffer(mf.mm)
    try:
        base = ctypes.addressof(anchor)
    finally:
        del anchor
    with open("/proc/self/smaps") as f:
        inside = False
        for line in f:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo <= base < hi
            elif inside and head == "Rss:":
                return int(line.split()[1])
    raise AssertionError("mapping not found in /proc/self/smaps")


async def test_a_flush_unmaps_the_written_pages_and_keeps_their_bytes(store_factory, config_factory):
    # small records (copied through the mapping) and no pre-fault window (only written pages are mapped)
    cfg = config_factory(mapped_file_size_commit_log=4 * MiB, prefault_ahead_bytes=0, flush_interval_commit_log=600_000)
    store = await store_factory(cfg)
    bodies = [os.urandom(1000) for _ in range(1500)]
    results = [await store.put_message(make_msg(body=b)) for b in bodies]
    assert all(r.status == PutMessageStatus.PUT_OK for r in results)
    mf = store.commit_log.mapped_file_queue.last_mapped_file()
    written = mf.wrote_position
    assert _mapped_kib(mf) * 1024 >= written - 8192  # dirtied through the mapping: mapped

    await store._flusher.flush(0)

    assert mf.flushed_position == written
    assert mf.released_position == written - written % 4096
    assert _mapped_kib(mf) <= 8  # at most the page still being written
    assert store._flusher.release.released_bytes == mf.released_position
    # nothing was lost: the file holds every record, and reads through the mapping fault them back
    on_disk = os.pread(mf.fd, written, 0)
    assert on_disk == bytes(mf.view[:written])
    for b, r in zip(bodies, results):
        got = store.look_message_by_offset(r.append_result.wrote_offset)
        assert got is not None and got.body == b
    # the next flush starts where this one stopped
    more = [await store.put_message(make_msg(body=os.urandom(1000))) for _ in range(100)]
    assert all(r.status == PutMessageStatus.PUT_OK for r in more)
    await store._flusher.flush(0)
    assert mf.released_position == mf.wrote_position - mf.wrote_position % 4096


async def test_a_pool_buffer_file_is_left_alone(tmp_path):
    mf = MappedFile.create(str(tmp_path / "cl" / "00000000000000000000"), 1 * MiB)
    try:
        mf.attach_write_buffer(bytearray(1 * MiB), pool=None)  # type: ignore[arg-type]
        releaser = WrittenPageReleaser(Madvise(4))
        releaser(mf, 64 * 1024)
        assert mf.released_position == 0 and releaser.released_bytes == 0
    finally:
        mf.write_buffer = None
        mf.destroy()


async def test_a_refusing_kernel_turns_the_release_off_and_flushes_go_on(store_factory, config_factory, caplog):
    cfg = config_factory(mapped_file_size_commit_log=1 * MiB, prefault_ahead_bytes=0)
    store = await store_factory(cfg)
    store._flusher.release = WrittenPageReleaser(Madvise(advice=0x7FFF))  # EINVAL
    for _ in range(50):
        assert (await store.put_message(make_msg(body=os.urandom(500)))).status == PutMessageStatus.PUT_OK
    await store._flusher.flush(0)
    mf = store.commit_log.mapped_file_queue.last_mapped_file()
    assert mf.flushed_position == mf.wrote_position
    assert store._flusher.release.enabled is False and mf.released_position == 0


async def test_consume_queue_flushes_release_their_written_pages_too(store_factory, config_factory):
    cfg = config_factory(
        mapped_file_size_consume_queue=20_000 * 20, flush_interval_consume_queue=600_000, prefault_ahead_bytes=0
    )
    store = await store_factory(cfg)
    results = [await store.put_message(make_msg(body=b"x" * 100)) for _ in range(1000)]
    assert all(r.status == PutMessageStatus.PUT_OK for r in results)
    cq = store.find_consume_queue("T", 0)
    mf = cq.mapped_file_queue.last_mapped_file()
    assert mf.wrote_position == 1000 * 20

    await store._flush_cq_service.do_flush(thorough=True)

    assert mf.flushed_position == 1000 * 20
    assert mf.released_position == (1000 * 20) // 4096 * 4096
    assert _mapped_kib(mf) <= 8
    # every entry still reads back (the pages fault in again) and points at its record
    for i, r in enumerate(results):
        offset, size, _tags = cq.get_entry(i)
        assert offset == r.append_result.wrote_offset and size == r.append_result.wrote_bytes


def test_a_truncation_below_the_released_pages_releases_them_again_later(tmp_path):
    mf = MappedFile.create(str(tmp_path / "cq" / "00000000000000000000"), 64 * 1024)
    try:
        mf.released_position = 16 * 1024
        mf.set_positions(5000)  # recovery cut the file back: pages from 4096 on get rewritten
        assert mf.released_position == 4096
        mf.set_positions(60_000)
        assert mf.released_position == 4096
    finally:
        mf.destroy()
