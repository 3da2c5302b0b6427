"""Broker message filters against the real store: tag codes with collision re-checks, SQL92 on properties."""

from __future__ import annotations

import pytest

from broker.filter import ExpressionCompiler, ExpressionMessageFilter, TagMessageFilter, record_properties, record_tags
from broker.filter_sql import SqlParseError
from broker.heartbeat import build_subscription
from store import GetMessageStatus, MessageExtBrokerInner, MessageStore, MessageStoreConfig, decode_records, tags_hash
from store.message import encode_record

# Java's String.hashCode collides for these two (both 2112): the consume queue cannot tell them apart.
COLLIDING = ("Aa", "BB")


def _msg(topic: str, body: bytes, props: dict[str, str]) -> MessageExtBrokerInner:
    return MessageExtBrokerInner.create(
        topic, body, properties=props, born_host=("10.0.0.9", 5000), store_host=("127.0.0.1", 10911)
    )


@pytest.fixture
async def store(tmp_path):
    s = MessageStore(
        MessageStoreConfig(
            store_path_root_dir=str(tmp_path / "store"),
            mapped_file_size_commit_log=256 * 1024,
            mapped_file_size_consume_queue=1000 * 20,
            max_hash_slot_num=64,
            max_index_num=256,
        )
    )
    assert await s.load()
    await s.start()
    yield s
    await s.shutdown()


async def _wait_dispatched(store, topic: str, n: int) -> None:
    import asyncio

    for _ in range(200):
        if store.get_max_offset_in_queue(topic, 0) >= n:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{topic} has {store.get_max_offset_in_queue(topic, 0)} entries, expected {n}")


def test_colliding_tags_really_collide():
    assert tags_hash(COLLIDING[0]) == tags_hash(COLLIDING[1])


def test_record_property_readers():
    rec = bytes(encode_record(_msg("T", b"body\x02TAGS\x01fake", {"KEYS": "k", "TAGS": "TagA", "x": "y"})))
    assert record_tags(rec) == b"TagA"
    assert record_properties(rec) == {"KEYS": "k", "TAGS": "TagA", "x": "y"}
    assert record_tags(bytes(encode_record(_msg("T", b"b", {"XTAGS": "no"})))) is None
    assert record_tags(bytes(encode_record(_msg("T", b"b", {"XTAGS": "no", "TAGS": "yes"})))) == b"yes"


async def test_tag_filter_rechecks_colliding_tags_on_the_record(store):
    for i in range(6):
        await store.put_message(_msg("T", f"m{i}".encode(), {"TAGS": COLLIDING[i % 2]}))
    await _wait_dispatched(store, "T", 6)
    flt = TagMessageFilter(build_subscription("T", COLLIDING[0]))
    assert flt.tags_code_set() == {tags_hash("Aa")}
    result = store.get_message("g", "T", 0, 0, 32, flt)
    assert result.status == GetMessageStatus.FOUND and result.next_begin_offset == 6
    got = decode_records(b"".join(result.buffers))
    assert [m.body for m in got] == [b"m0", b"m2", b"m4"]
    assert all(m.properties["TAGS"] == "Aa" for m in got)


async def test_star_and_multi_tag_subscriptions(store):
    for tags in ("A", "B", None, "C"):
        await store.put_message(_msg("T2", b"x", {"TAGS": tags} if tags else {}))
    await _wait_dispatched(store, "T2", 4)
    star = TagMessageFilter(build_subscription("T2", "*"))
    assert star.tags_code_set() is None and star.is_matched_by_commit_log(b"", None)
    assert store.get_message("g", "T2", 0, 0, 32, star).message_count == 4
    two = TagMessageFilter(build_subscription("T2", "A || C"))
    got = decode_records(b"".join(store.get_message("g", "T2", 0, 0, 32, two).buffers))
    assert [m.properties.get("TAGS") for m in got] == ["A", "C"]


async def test_sql_filter_scans_past_a_batch_of_non_matching_messages(store):
    # 100 non-matching messages then one match: the store must look past maxMsgNums entries to find it.
    for i in range(100):
        await store.put_message(_msg("T3", b"n", {"a": str(i)}))
    await store.put_message(_msg("T3", b"hit", {"a": "1000", "region": "eu"}))
    await _wait_dispatched(store, "T3", 101)
    compiler = ExpressionCompiler()
    flt = ExpressionMessageFilter(compiler("SQL92", "a > 500 AND region IN ('eu', 'us')"))
    result = store.get_message("g", "T3", 0, 0, 32, flt)
    assert result.status == GetMessageStatus.FOUND
    assert [m.body for m in decode_records(b"".join(result.buffers))] == [b"hit"]
    none = ExpressionMessageFilter(compiler("SQL92", "region = 'asia'"))
    result = store.get_message("g", "T3", 0, 0, 32, none)
    assert result.status == GetMessageStatus.NO_MATCHED_MESSAGE and result.next_begin_offset == 101


def test_long_polling_checks_use_properties():
    flt = TagMessageFilter(build_subscription("T", "A"))
    assert flt.is_matched_by_properties({"TAGS": "A"}) and not flt.is_matched_by_properties({"TAGS": "B"})
    assert flt.is_matched_by_properties(None)
    sql = ExpressionMessageFilter(ExpressionCompiler()("SQL92", "a = 1"))
    assert sql.is_matched_by_properties({"a": "1"}) and not sql.is_matched_by_properties({"a": "2"})
    assert sql.is_matched_by_consume_queue(12345)


def test_compiler_caches_results_and_failures():
    compiler = ExpressionCompiler(capacity=2)
    p1 = compiler("SQL92", "a = 1")
    assert compiler("sql92", "a = 1") is p1 and compiler.compiled == 1
    with pytest.raises(SqlParseError):
        compiler("SQL92", "a = ")
    with pytest.raises(SqlParseError):
        compiler("SQL92", "a = ")
    assert compiler.compiled == 2
    compiler("SQL92", "b = 1")  # evicts the oldest entry ("a = 1" was used last before the failure)
    assert compiler("SQL92", "a = 1") is not p1 and compiler.compiled == 4
    tag = compiler("TAG", "A || B")
    assert tag({"TAGS": "B"}) and not tag({"TAGS": "C"}) and compiler(None, "*")({})
    with pytest.raises(ValueError, match="not supported"):
        compiler("CLASS", "x")
