"""ConsumeQueue: 20-byte big-endian entries over mmap, vectorised reads, recovery and truncation."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

from store.consume_queue import CQ_DTYPE, ConsumeQueue
from store.message import tags_hash


def _cq(tmp_path, entries_per_file=10) -> ConsumeQueue:
    return ConsumeQueue("T", 1, str(tmp_path / "cq"), entries_per_file * 20)


def test_dtype_is_upstreams_20_byte_big_endian_entry():
    assert CQ_DTYPE.itemsize == 20
    arr = np.zeros(1, dtype=CQ_DTYPE)
    arr[0] = (0x0102030405060708, 0x0A0B0C0D, -2)
    assert arr.tobytes() == struct.pack(">qiq", 0x0102030405060708, 0x0A0B0C0D, -2)


def test_put_entries_roll_over_and_read(tmp_path):
    cq = _cq(tmp_path)
    for i in range(25):
        assert cq.put_message_position_info(1000 + i * 100, 100, i % 3, i)
    assert cq.get_max_offset_in_queue() == 25 and cq.get_min_offset_in_queue() == 0
    assert len(cq.mapped_file_queue.mapped_files) == 3
    entries = cq.get_entries(7)
    # a read never crosses a file: 7, 8, 9
    assert entries["offset"].tolist() == [1700, 1800, 1900]
    assert cq.get_entry(24) == (3400, 100, 0)
    raw = Path(cq.mapped_file_queue.mapped_files[0].file_name).read_bytes()[:20]
    assert raw == struct.pack(">qiq", 1000, 100, 0)
    assert cq.put_message_position_info(1000, 100, 0, 0)  # replay is a no-op
    assert cq.get_max_offset_in_queue() == 25


def test_filter_window_is_vectorised_over_files(tmp_path):
    cq = _cq(tmp_path)
    a, b = tags_hash("A"), tags_hash("B")
    for i in range(30):
        cq.put_message_position_info(i * 50, 50, a if i % 3 == 0 else b, i)
    assert cq.filter_window(0, 30, {a}).tolist() == list(range(0, 30, 3))
    assert cq.filter_window(5, 10, None).tolist() == list(range(5, 15))


def test_negative_tag_codes_match_as_int32(tmp_path):
    cq = _cq(tmp_path)
    code = tags_hash("polygenelubricants")
    assert code < 0
    cq.put_message_position_info(0, 10, code, 0)
    assert cq.filter_window(0, 1, {code}).tolist() == [0]


def test_recover_finds_the_end_and_truncates(tmp_path):
    cq = _cq(tmp_path)
    for i in range(15):
        cq.put_message_position_info(i * 100, 100, 0, i)
    cq.shutdown()
    cq2 = _cq(tmp_path)
    cq2.load()
    cq2.recover()
    assert cq2.get_max_offset_in_queue() == 15
    assert cq2.max_physic_offset == 1500
    cq2.truncate_dirty_logic_files(1000)
    assert cq2.get_max_offset_in_queue() == 10
    assert cq2.max_physic_offset == 1000
    # and the next entry goes right after
    assert cq2.put_message_position_info(1000, 77, 0, 10)
    assert cq2.get_entry(10) == (1000, 77, 0)


def test_late_start_fills_pre_blank_and_sets_min(tmp_path):
    cq = _cq(tmp_path)
    assert cq.put_message_position_info(5000, 10, 0, 13)
    assert cq.get_min_offset_in_queue() == 13
    assert cq.get_max_offset_in_queue() == 14
    assert cq.get_entries(12) is None  # below the min offset: unreadable
    arr = cq.array_of(cq.mapped_file_queue.mapped_files[0])
    assert cq.mapped_file_queue.mapped_files[0].file_from_offset == 200  # the file of entries 10..19
    assert arr["size"][0:3].tolist() == [0x7FFFFFFF] * 3
    assert arr["offset"][3] == 5000


def test_correct_min_offset_and_delete_expired(tmp_path):
    cq = _cq(tmp_path)
    for i in range(25):
        cq.put_message_position_info(i * 100, 100, 0, i)
    cq.correct_min_offset(1250)
    assert cq.get_min_offset_in_queue() == 10  # nothing of the first file is left in the CommitLog
    deleted = cq.delete_expired_file(1250)
    assert deleted == 1
    assert cq.get_min_offset_in_queue() == 13


def test_offset_by_time_binary_search(tmp_path):
    cq = _cq(tmp_path, 100)
    stamps = {i * 100: 1000 + i * 10 for i in range(50)}
    for i in range(50):
        cq.put_message_position_info(i * 100, 100, 0, i)

    def pick(off, size):
        return stamps[off]

    assert cq.get_offset_in_queue_by_time(1000 + 17 * 10, pick, 0) == 17
    assert cq.get_offset_in_queue_by_time(1000 + 17 * 10 + 4, pick, 0) == 17
    assert cq.get_offset_in_queue_by_time(1000 + 17 * 10 + 6, pick, 0) == 18
    assert cq.get_offset_in_queue_by_time(0, pick, 0) == 0
    assert cq.get_offset_in_queue_by_time(10**12, pick, 0) == 49
