"""IndexFile / QUERY_MESSAGE: by key, by unique key, time ranges, collisions, roll-over, upstream layout,
and VIEW_MESSAGE_BY_ID through the offset message id."""

from __future__ import annotations

import os
import struct
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from store_helpers import make_msg

from store import decode_offset_msg_id, decode_records
from store.java_hash import index_key_hash


async def test_query_by_keys_and_unique_key(store_factory):
    s = await store_factory()
    for i in range(20):
        await s.put_message(make_msg(keys=f"order{i} user{i % 2}", uniq=f"U{i:04d}"))
    await s.put_message(make_msg(topic="Other", keys="order3"))
    got = decode_records(s.query_message("T", "order3", 32, 0, 2**62).body)
    assert [m.properties["UNIQ_KEY"] for m in got] == ["U0003"]
    got = decode_records(s.query_message("T", "user1", 32, 0, 2**62).body)
    assert sorted(m.properties["UNIQ_KEY"] for m in got) == [f"U{i:04d}" for i in range(1, 20, 2)]
    got = decode_records(s.query_message("T", "U0011", 32, 0, 2**62).body)
    assert [m.properties["KEYS"] for m in got] == ["order11 user1"]
    assert s.query_message("T", "nope", 32, 0, 2**62).buffers == []
    q = s.query_message("T", "user0", 3, 0, 2**62)
    assert len(q.buffers) == 3
    assert q.index_last_update_phyoffset > 0 and q.index_last_update_timestamp > 0


async def test_time_range_filters(store_factory):
    now = [1_800_000_000_000]
    s = await store_factory(now_ms=lambda: now[0])
    for _i in range(5):
        now[0] += 10_000
        await s.put_message(make_msg(keys="same"))
    got = decode_records(s.query_message("T", "same", 32, 1_800_000_020_000, 1_800_000_040_000).body)
    assert sorted(m.store_timestamp for m in got) == [1_800_000_020_000, 1_800_000_030_000, 1_800_000_040_000]


async def test_collisions_are_resolved_against_the_record(store_factory, config_factory):
    s = await store_factory(config_factory(max_hash_slot_num=1))  # every key in one chain
    for i in range(30):
        await s.put_message(make_msg(keys=f"k{i}"))
    for i in (0, 17, 29):
        got = decode_records(s.query_message("T", f"k{i}", 32, 0, 2**62).body)
        assert [m.properties["KEYS"] for m in got] == [f"k{i}"]


async def test_index_files_roll_and_keep_upstream_layout(store_factory, config_factory):
    s = await store_factory(config_factory(max_index_num=16, max_hash_slot_num=8))
    for i in range(40):
        await s.put_message(make_msg(uniq=f"R{i}"))
    files = sorted(os.listdir(s.config.store_path_index))
    assert len(files) >= 3
    assert all(len(n) == 17 and n.isdigit() for n in files)  # yyyyMMddHHmmssSSS
    got = decode_records(s.query_message("T", "R1", 32, 0, 2**62).body)  # in the oldest file
    assert [m.properties["UNIQ_KEY"] for m in got] == ["R1"]
    size = 40 + 8 * 4 + 16 * 20
    first = os.path.join(s.config.store_path_index, files[0])
    assert os.path.getsize(first) == size
    raw = Path(first).read_bytes()
    begin_ts, end_ts, begin_phy, _end_phy, _slot_count, index_count = struct.unpack_from(">qqqqii", raw, 0)
    assert index_count == 16 and begin_phy == 0 and end_ts >= begin_ts > 0
    # entry #1 is the first key: hash of "T#R0", its CommitLog offset, previous entry 0
    key_hash, phy, _tdiff, prev = struct.unpack_from(">iqii", raw, 40 + 8 * 4 + 1 * 20)
    assert (key_hash, phy, prev) == (index_key_hash("T#R0"), 0, 0)
    slot = struct.unpack_from(">i", raw, 40 + (key_hash % 8) * 4)[0]
    assert slot >= 1


def test_index_key_hash_is_abs_java_hash():
    assert index_key_hash("polygenelubricants") == 0  # Math.abs(Integer.MIN_VALUE) < 0 → 0
    assert index_key_hash("TagA") == 2598919


async def test_view_message_by_offset_msg_id(store_factory):
    s = await store_factory()
    await s.put_message(make_msg(body=b"first"))
    r = await s.put_message(make_msg(body=b"by-id"))
    _ip, _port, offset = decode_offset_msg_id(r.append_result.msg_id)
    assert s.look_message_by_offset(offset).body == b"by-id"
    assert bytes(s.select_one_message_by_offset(offset))[88:93] == b"by-id"


def _index_file(tmp_path, name: str, slots: int, entries: int):
    from store.index_service import IndexFile
    from store.mapped_file import MappedFile

    mf = MappedFile.create(str(tmp_path / name), IndexFile.file_size(slots, entries))
    f = IndexFile(mf, slots, entries)
    f.init_new(0, 0)
    return f


def test_vectorised_insert_writes_what_the_scalar_insert_writes(tmp_path):
    """put_many (one numpy pass per batch) must leave byte-identical files to put_hashed in a loop:
    chains through colliding slots inside one batch and across batches, the first entry setting the
    begin timestamp, time diffs clamped, a corrupt slot value ignored, and the file filling up."""
    import random

    import numpy as np

    from store.java_hash import JavaHasher

    rnd = random.Random(7)
    scalar = _index_file(tmp_path, "a", 7, 300)
    vector = _index_file(tmp_path, "b", 7, 300)
    for f in (scalar, vector):  # a slot pointing past index_count (torn file): treated as empty
        struct.pack_into(">i", f.mapped_file.view, 40 + 3 * 4, 9999)
    hasher = JavaHasher()
    ts = 1_700_000_000_000
    phy = 0
    fitted = 0
    for batch in (1, 5, 40, 17, 64, 200):
        keys = [f"T#k{rnd.randrange(50)}-{'x' * rnd.randrange(30)}" for _ in range(batch)]
        phys, times = [], []
        for _ in keys:
            phy += rnd.randrange(100, 5000)
            ts += rnd.choice((0, 999, 1000, 2500, -3000))  # a clock step back → diff clamped to 0
            phys.append(phy)
            times.append(ts)
        for k, p, t in zip(keys, phys, times):
            if scalar.put_hashed(index_key_hash(k), p, t):
                fitted += 1
        vector.put_many(hasher.abs_hashes(keys), np.array(phys), np.array(times))
    for f in (scalar, vector):
        f.write_header()
    assert fitted == 299  # the file filled up (entry numbers start at 1)
    assert bytes(scalar.mapped_file.view) == bytes(vector.mapped_file.view)


def test_vectorised_java_hash_matches_string_hash_code():
    from store.java_hash import JavaHasher
    from store.message import java_string_hash

    keys = ["", "a", "TagA", "polygenelubricants", "ключ", "键-€", "emoji-\U0001f600", "x" * 300] * 3
    assert JavaHasher().hash_many(keys) == [java_string_hash(k) for k in keys]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(alphabet=st.characters(exclude_categories=()), max_size=60), min_size=8, max_size=80))
def test_vectorised_java_hash_any_text(keys):
    """Any text, NUL, lone surrogates and characters outside the BMP included, hashes as Java's
    String.hashCode over UTF-16 code units (the scalar reference)."""
    from store.java_hash import JavaHasher
    from store.message import java_string_hash

    assert JavaHasher().hash_many(keys) == [java_string_hash(k) for k in keys]


def test_vectorised_java_hash_in_chunks_and_with_nul_in_keys():
    """Keys beyond one pass's worth of code units are hashed in parts; a key holding NUL (the
    separator the ends are found by) still gets its own hash; a lone surrogate is one code unit."""
    from store.java_hash import JavaHasher
    from store.message import java_string_hash

    hasher = JavaHasher()
    hasher.CHUNK_UNITS = 100
    keys = [f"T#k{i:05d}-" + "x" * (i % 70) for i in range(500)] + [
        "a\0b",
        "\0",
        "\0\0x",
        "lone-\udc80",
        "pair-\ud83d\ude00",
    ] * 4
    assert hasher.hash_many(keys) == [java_string_hash(k) for k in keys]
    assert hasher.hash_many(["", "", "", "", "", "", "", "a"]) == [0] * 7 + [97]


async def test_keys_waiting_for_more_than_one_new_file_are_all_indexed(store_factory, config_factory):
    """Keys that arrived while no index file had room (a replay, 256 entries a file here) take as many
    new files as they fill, not one: none is left waiting."""
    s = await store_factory(config_factory(max_index_num=256))
    idx = s.index_service
    full = idx.index_files[-1] if idx.index_files else None
    if full is not None:
        full.index_count = full.index_num  # no room left in the current file
    keys = [f"T#K{i}" for i in range(700)]
    idx.build_keys(keys, list(range(1000, 1700)), [1_700_000_000_000] * 700)
    assert idx.has_pending()
    await idx.ensure_file()
    assert not idx.has_pending()
    for i in (0, 255, 256, 511, 699):
        offsets, _, _ = idx.query_offset("T", f"K{i}", 32, 0, 2**62)
        assert offsets == [1000 + i]
