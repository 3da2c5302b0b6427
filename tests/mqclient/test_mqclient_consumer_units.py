"""Queue allocation and the process queue's commit offset (no network)."""

from __future__ import annotations

from mqclient.consumer import ProcessQueue, allocate_averagely
from mqclient.message import MessageExt
from mqclient.route import MessageQueue
from store.java_hash import java_string_hash as _java_hash


def mqs(n: int) -> list[MessageQueue]:
    return [MessageQueue("T", "b", i) for i in range(n)]


def ids(qs: list[MessageQueue]) -> list[int]:
    return [q.queue_id for q in qs]


def test_allocate_averagely_matches_java():
    # J AllocateMessageQueueAveragely: 8 queues over 3 consumers → 3, 3, 2 contiguous
    cids = ["c1", "c2", "c3"]
    assert [ids(allocate_averagely(mqs(8), cids, c)) for c in cids] == [[0, 1, 2], [3, 4, 5], [6, 7]]
    # more consumers than queues: the extra ones get nothing
    assert [ids(allocate_averagely(mqs(2), cids, c)) for c in cids] == [[0], [1], []]
    assert allocate_averagely(mqs(4), ["a"], "stranger") == []
    # every queue exactly once, for many shapes
    for n in range(1, 17):
        for k in range(1, 6):
            cs = [f"c{i}" for i in range(k)]
            got = sorted(q for c in cs for q in ids(allocate_averagely(mqs(n), cs, c)))
            assert got == list(range(n))


def msg(offset: int, size: int = 10) -> MessageExt:
    return MessageExt("T", 0, offset, 0, 0, 0, 0, "", 0, "", 0, b"x" * size, {}, 0, 0)


def test_process_queue_commits_the_oldest_unconsumed_offset():
    pq = ProcessQueue()
    m = [msg(i) for i in range(5, 9)]
    pq.put(m)
    assert len(pq) == 4 and pq.cached_bytes == 40
    assert pq.remove(m[2]) == 5  # 7 done, 5 still pending
    assert pq.remove(m[0]) == 6
    assert pq.remove(m[1]) == 8
    assert pq.remove(m[3]) == 9  # empty: one past the newest seen
    assert pq.cached_bytes == 0


def test_java_string_hash():
    assert _java_hash("TagA") == 2598919
    assert _java_hash("") == 0
    assert _java_hash("ä") == 228
