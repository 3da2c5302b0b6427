"""``SendMessageProcessor.process_requests_now``: a read's group of single sends checked, built, stored and answered on
the caller's stack (``SendRowPut.put_now``), else the ``Pending`` rest.

Pinned against the coroutine path (``process_requests`` started by the metrics wrapper, as before the entry existed)
in a second broker fed the same seeded random groups through the server's ``dispatch_many``: plain sends to a few
topics, new topics and queues (a queue's first entry), refused queue ids in the middle of a group, half messages,
DELAY levels, several keys, bodies that fill the small CommitLog files (a BLANK and the next file), a batch and a
send whose header was not decoded ahead among the sends, an append stall injected before some groups; and under
SYNC_FLUSH. Same answers (codes, remarks, queue ids and offsets, msgIds but the broker's port), records, consume
queues, index keys, put statistics, request-metrics counts, executor and in-flight counts; each way out to the
``Pending`` rest taken, and the common group answered at once.
"""

from __future__ import annotations

import asyncio
import random
import re
import struct

from broker_helpers import FakeChannel, send_request, start_broker

from remoting.codes import RequestCode
from remoting.command import FLAG_ONEWAY
from remoting.pending import Pending
from store.message import BLANK_MAGIC_CODE, decode_record, decode_records, encode_properties

_TOPICS = ["GrpA", "GrpB"]


def _wrapper(broker):
    """The metrics wrapper the server's group entry calls (``RequestGroup.now``)."""
    return broker.server._routes[int(RequestCode.SEND_MESSAGE_V2)].processor


def _general(broker) -> None:
    """The broker's groups run through ``process_requests`` (the coroutine path), as before the entry."""
    _wrapper(broker)._inner_group_now = None


def _spy_outcomes(broker) -> list[str]:
    """How each group left ``process_requests_now``: "now" (answered at once) or "pending"."""
    outcomes: list[str] = []
    processor = broker.send_processor
    real = processor.process_requests_now

    def spy(channel, requests):
        answers = real(channel, requests)
        outcomes.append("pending" if answers.__class__ is Pending else "now")
        return answers

    _wrapper(broker)._inner_group_now = spy
    return outcomes


def _batch_body(bodies) -> bytes:
    out = bytearray()
    for body in bodies:
        p = encode_properties({}).encode()
        out += struct.pack(">iiiii", 20 + len(body) + 2 + len(p), 0, 0, 0, len(body)) + body
        out += struct.pack(">h", len(p)) + p
    return bytes(out)


def _group(rng: random.Random, g: int, topics: list[str]) -> list:
    if rng.random() < 0.04:
        topics.append(f"GrpNew{g}")  # a new topic: its queues' first entries
    size = rng.choice((2, 2, 3, 4, 4, 8, 9, 16))
    requests = []
    odd_group = rng.random() < 0.3
    for i in range(size):
        n = g * 100 + i
        props = {"UNIQ_KEY": f"7F0000014E2A18B4AAC27D2F{n:08X}", "WAIT": "true"}
        queue_id = rng.randrange(4)
        odd = rng.random() if odd_group else 1.0
        if odd < 0.05:
            queue_id = 99  # refused in the middle of the group
        elif odd < 0.10:
            props = {"UNIQ_KEY": props["UNIQ_KEY"], "TRAN_MSG": "true", "PGROUP": "PG"}  # a half message
        elif odd < 0.15:
            props["DELAY"] = "2"
        elif odd < 0.22:
            props["KEYS"] = f"k{n} j{n}"  # several keys
        elif odd < 0.3:
            props["KEYS"] = f"k{n}"
            props["TAGS"] = "t"
        body = bytes([n % 251]) * rng.choice((0, 10, 200, 1000, 3000))
        if odd_group and rng.random() < 0.04:
            request = send_request(
                rng.choice(topics),
                _batch_body([body, b"b2"]),
                queue_id=queue_id,
                code=RequestCode.SEND_BATCH_MESSAGE,
                batch=True,
            )
        else:
            request = send_request(rng.choice(topics), body, queue_id=queue_id, props=props)
        requests.append(request)
    return requests


async def _dispatch(broker, channel: FakeChannel, requests: list, decode_ahead: list[bool]) -> list:
    """``requests`` handed to the server as one read's run (their headers decoded ahead where the connection's reader
    would), and their answers once all are written."""
    processor = broker.send_processor
    for request, ahead in zip(requests, decode_ahead):
        if ahead:
            processor.groupable(request)
    want = len(channel.sent) + sum(1 for r in requests if not r.flag & FLAG_ONEWAY)
    broker.server.dispatch_many(channel, requests)
    for _ in range(5000):
        if len(channel.sent) >= want and channel.in_flight == 0:
            break
        await asyncio.sleep(0.001)
    assert len(channel.sent) == want and channel.in_flight == 0
    return channel.sent[want - len(requests) :]


def _neutral(answer, port: int) -> tuple:
    ext = dict(answer.ext_fields or {})
    if "msgId" in ext:
        ext["msgId"] = ext["msgId"].replace(f"{port:08X}", "PORTPORT")
    remark = None if answer.remark is None else re.sub(r"127\.0\.0\.1:\d+", "ADDR", answer.remark)
    return answer.code, answer.opaque, answer.flag, remark, sorted(ext.items())


def _records(broker) -> list[tuple]:
    cl = broker.store.commit_log
    out = []
    for mf in cl.mapped_file_queue.mapped_files:
        view = mf.write_view[: mf.wrote_position]
        pos = 0
        while pos < len(view) and struct.unpack_from(">i", view, pos + 4)[0] != BLANK_MAGIC_CODE:  # (a file's end)
            m = decode_record(view, pos)
            out.append((m.topic, m.queue_id, m.queue_offset, m.commit_log_offset, m.body, m.properties, m.flag))
            pos += m.store_size
    return out


def _queues(broker) -> dict:
    table = broker.store.dispatcher.consume_queue_table
    return {(t, q): cq.get_max_offset_in_queue() for t, queues in table.items() for q, cq in queues.items()}


def _index(broker, keys: list[tuple[str, str]]) -> list:
    out = []
    for topic, key in keys:
        found = broker.store.query_message(topic, key, 64, 0, 2**62)
        out.append(sorted((m.queue_id, m.queue_offset, m.body) for m in map(_decoded, found.buffers)))
    return out


def _decoded(record):
    return decode_records(record)[0]


def _counts(broker) -> tuple:
    executor = broker.server._routes[int(RequestCode.SEND_MESSAGE_V2)].executor
    latency = {key: cell.count for key, cell in broker.metrics.requests.latency.items()}
    store_stats = broker.store.stats
    return (
        dict(broker.stats.put_nums),
        dict(broker.stats.put_size),
        latency,
        executor.completed,
        executor.active,
        store_stats.put_count,
    )


async def _run_pair(now_side, general, groups: int, seed: int, *, stalls: bool) -> list[str]:
    _general(general)
    outcomes = _spy_outcomes(now_side)
    rng = random.Random(seed)
    topics = list(_TOPICS)
    ca, cb = FakeChannel(), FakeChannel()
    keys: list[tuple[str, str]] = []
    for g in range(groups):
        group_seed = rng.random()
        stall = stalls and rng.random() < 0.06
        ahead = [random.Random(group_seed + k).random() > 0.03 for k in range(16)]
        answers = []
        for broker, channel in ((now_side, ca), (general, cb)):
            gen = random.Random(group_seed)
            requests = _group(gen, g, list(topics))
            for k, request in enumerate(requests):
                request.opaque = g * 100 + k
                if k and gen.random() < 0.03:
                    request.flag |= FLAG_ONEWAY
            if stall:  # (the append stalled for a few ms: the one pass does not run)
                broker.store.commit_log.fault.inject_stall_append(3)
            random.seed(group_seed)  # (a queue id the broker picks: the same pick on either side)
            answers.append(await _dispatch(broker, channel, requests, ahead[: len(requests)]))
        _group(random.Random(group_seed), g, topics)  # (the new topics the group named, kept for the next ones)
        assert [_neutral(a, now_side.server.port) for a in answers[0]] == [
            _neutral(b, general.server.port) for b in answers[1]
        ], g
        for k in range(0, 16, 5):
            n = g * 100 + k
            keys += [(t, f"7F0000014E2A18B4AAC27D2F{n:08X}") for t in topics[:2]]
            keys += [(t, f"k{n}") for t in topics[:2]] + [(t, f"j{n}") for t in topics[:2]]
    assert _records(now_side) == _records(general)
    assert _queues(now_side) == _queues(general)
    assert _counts(now_side) == _counts(general)
    assert (ca.in_flight, ca.finished) == (cb.in_flight, cb.finished)
    index_a, index_b = _index(now_side, keys), _index(general, keys)
    assert index_a == index_b and sum(map(len, index_a)) > 50
    return outcomes


async def test_the_group_entry_answers_and_stores_what_the_coroutine_path_does(tmp_path) -> None:
    overrides = {"mappedFileSizeCommitLog": 96 * 1024}  # (files filled every few groups: BLANKs, next files)
    now_side = await start_broker(tmp_path / "now", **overrides)
    general = await start_broker(tmp_path / "general", **overrides)
    try:
        files_before = len(now_side.store.commit_log.mapped_file_queue.mapped_files)
        outcomes = await _run_pair(now_side, general, 260, 1514, stalls=True)
        assert len(now_side.store.commit_log.mapped_file_queue.mapped_files) > files_before + 5
        # the common group answered at once, and the ways out taken (a new queue, a half message, a full file,
        # a stall: the Pending rest; a refused send, a batch, a header not decoded ahead: the one-by-one loop)
        assert outcomes.count("now") > 100 and outcomes.count("pending") > 30, outcomes
    finally:
        await now_side.shutdown()
        await general.shutdown()


async def test_the_group_entry_under_sync_flush_answers_after_the_fsync_as_the_coroutine_path(tmp_path) -> None:
    now_side = await start_broker(tmp_path / "now", flushDiskType="SYNC_FLUSH")
    general = await start_broker(tmp_path / "general", flushDiskType="SYNC_FLUSH")
    try:
        outcomes = await _run_pair(now_side, general, 40, 77, stalls=False)
        assert set(outcomes) == {"pending"}  # (every group waits for its fsync)
    finally:
        await now_side.shutdown()
        await general.shutdown()


async def test_common_groups_are_answered_at_once_and_never_yield(tmp_path) -> None:
    """A group's caller (a read's callback) returns to the loop after it, so its put is not one of the puts "in a
    row" that yield every 64th appends (``put_now(..., in_a_row=False)``): 200 groups of the Producer's sends all
    answered at once, none a ``Pending`` rest, the store's count of puts in a row untouched."""
    broker = await start_broker(tmp_path / "b")
    try:
        outcomes = _spy_outcomes(broker)
        channel = FakeChannel()
        await _dispatch(broker, channel, [send_request("GrpY", b"x", queue_id=q) for q in range(4)], [True] * 4)
        before = broker.store.putter._inline_appends
        del outcomes[:]
        for g in range(200):
            requests = [
                send_request("GrpY", b"y" * 100, queue_id=k % 4, props={"UNIQ_KEY": f"U{g}x{k}", "WAIT": "true"})
                for k in range(2 + g % 15)
            ]
            for k, request in enumerate(requests):
                request.opaque = g * 100 + k
            answers = await _dispatch(broker, channel, requests, [True] * len(requests))
            assert {a.code for a in answers} == {0}
        assert outcomes == ["now"] * 200
        assert broker.store.putter._inline_appends == before
    finally:
        await broker.shutdown()
