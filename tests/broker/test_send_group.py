"""The SEND requests decoded from one read: checked one by one, stored with one ``put_sent_group``, each
answered as a lone send would be (``SendMessageProcessor.process_requests`` behind the server's grouping).

The frames go out in one write, so the broker decodes them from one read. Without the grouping the store's
``put_sent_group`` is never called and the first test fails.
"""

from __future__ import annotations

import asyncio
import random
import re
import struct
import time

import structlog
from broker_helpers import send_request, start_broker

from remoting.codes import RequestCode, ResponseCode
from remoting.command import FLAG_ONEWAY, RemotingCommand
from remoting.send_answer import SentAnswers
from store.message import decode_records, encode_properties


async def read_answer(reader) -> RemotingCommand:
    (length,) = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 5))
    return RemotingCommand.decode(memoryview(await asyncio.wait_for(reader.readexactly(length), 5)))


def spy_groups(broker) -> list[int]:
    """Sizes of the store's group puts, recorded from here on."""
    sizes: list[int] = []
    store = broker.store
    # (a lone send's synchronous entry puts through put_sent_group_now: both spied)
    for name in ("put_sent_group", "put_sent_group_now"):
        real = getattr(store, name)

        def put_sent_group(msgs, *hosts, real=real):
            sizes.append(len(msgs))
            return real(msgs, *hosts)

        setattr(store, name, put_sent_group)
    return sizes


async def exchange(broker, requests: list[RemotingCommand]) -> dict[int, RemotingCommand]:
    reader, writer = await asyncio.open_connection("127.0.0.1", broker.server.port)
    try:
        for opaque, request in enumerate(requests, 1):
            request.opaque = opaque
        writer.write(b"".join(r.to_bytes() for r in requests))  # one write: one read on the broker's side
        answers = [await read_answer(reader) for _ in requests]
    finally:
        writer.close()
    return {a.opaque: a for a in answers}


def batch_body(bodies) -> bytes:
    out = bytearray()
    for body in bodies:
        p = encode_properties({}).encode()
        out += struct.pack(">iiiii", 20 + len(body) + 2 + len(p), 0, 0, 0, len(body)) + body
        out += struct.pack(">h", len(p)) + p
    return bytes(out)


async def test_sends_of_one_read_are_stored_in_one_group_put_in_request_order(broker) -> None:
    sizes = spy_groups(broker)
    requests = [send_request("GroupT", f"m{i}".encode(), queue_id=1) for i in range(8)]
    answers = await exchange(broker, requests)
    assert sizes == [8]
    assert [answers[o].code for o in range(1, 9)] == [ResponseCode.SUCCESS] * 8
    # queue offsets follow the order of the requests, and each answer carries its own message id
    assert [int(answers[o].ext_fields["queueOffset"]) for o in range(1, 9)] == list(range(8))
    assert len({answers[o].ext_fields["msgId"] for o in range(1, 9)}) == 8
    stored = decode_records(broker.store.get_message("G", "GroupT", 1, 0, 32).body)
    assert [m.body for m in stored] == [f"m{i}".encode() for i in range(8)]
    # the request metrics and the put statistics saw each send
    cells = broker.metrics.requests.latency
    assert cells[(int(RequestCode.SEND_MESSAGE_V2), int(ResponseCode.SUCCESS), False, "success")].count == 8


async def test_a_lone_send_is_a_row_of_its_own_and_a_half_message_is_put_as_a_message(broker) -> None:
    """A send alone in its read goes through the store's one pass too (a group of one row; before, one
    ``put_message`` of a message): answered and stored as in a group, its statistics counted. A transaction half
    message goes as the message the transaction service made of it, answered with the queue id it was sent to."""
    sizes = spy_groups(broker)
    rows: list = []
    for name in ("put_sent_group", "put_sent_group_now"):
        real = getattr(broker.store, name)

        def spy(items, *hosts, real=real):
            rows.extend(item.__class__ is tuple for item in items)
            return real(items, *hosts)

        setattr(broker.store, name, spy)
    first = await exchange(broker, [send_request("LoneT", b"one", queue_id=2, props={"UNIQ_KEY": "L1"})])
    second = await exchange(broker, [send_request("LoneT", b"two", queue_id=2, props={"UNIQ_KEY": "L2"})])
    half = await exchange(
        broker, [send_request("LoneT", b"half", queue_id=3, props={"TRAN_MSG": "true", "PGROUP": "PG"})]
    )
    assert sizes == [1, 1, 1] and rows == [True, True, False]
    assert [a[1].code for a in (first, second, half)] == [ResponseCode.SUCCESS] * 3
    assert [first[1].ext_fields["queueOffset"], second[1].ext_fields["queueOffset"]] == ["0", "1"]
    assert half[1].ext_fields["queueId"] == "3"
    stored = decode_records(broker.store.get_message("G", "LoneT", 2, 0, 32).body)
    assert [m.body for m in stored] == [b"one", b"two"]
    assert broker.stats.put_nums["LoneT"] == 2


async def test_a_refused_send_costs_only_its_own_answer_and_a_batch_keeps_its_place(broker) -> None:
    sizes = spy_groups(broker)
    requests = [
        send_request("GroupT2", b"a", queue_id=0),
        send_request("bad topic!", b"x"),  # refused by the topic-name check (SYSTEM_ERROR, one warning)
        send_request("GroupT2", b"b", queue_id=0),
        send_request("GroupT2", batch_body([b"c1", b"c2"]), queue_id=0, code=RequestCode.SEND_BATCH_MESSAGE),
        send_request("GroupT2", b"d", queue_id=0),
        RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {"b": "GroupT2"}, b"no header"),  # header incomplete
    ]
    answers = await exchange(broker, requests)
    assert answers[2].code == ResponseCode.SYSTEM_ERROR and "illegal characters" in answers[2].remark
    assert answers[6].code == ResponseCode.SYSTEM_ERROR and "missing" in answers[6].remark
    assert [answers[o].code for o in (1, 3, 4, 5)] == [ResponseCode.SUCCESS] * 4
    # a and b are stored before the batch (which goes through the lone-request path), d after it
    assert [answers[o].ext_fields["queueOffset"] for o in (1, 3, 4, 5)] == ["0", "1", "2", "4"]
    # a, the refused one and b were one group (the batch and what follows it go one by one while it holds the
    # send worker, or as a group of their own)
    assert sizes[0] == 2 and sum(sizes) <= 3
    bodies = [m.body for m in decode_records(broker.store.get_message("G", "GroupT2", 0, 0, 32).body)]
    assert bodies == [b"a", b"b", b"c1", b"c2", b"d"]
    # the request metrics saw each send once, the refused ones under their own answer
    cells = broker.metrics.requests.latency
    v2 = int(RequestCode.SEND_MESSAGE_V2)
    assert cells[(v2, int(ResponseCode.SUCCESS), False, "success")].count == 3
    # the refused topic was answered by the processor ("success" with SYSTEM_ERROR, as alone); the request
    # without a header made its processing raise: "process_request_failed", as a lone one is counted
    assert cells[(v2, int(ResponseCode.SYSTEM_ERROR), False, "success")].count == 1
    assert cells[(v2, int(ResponseCode.SYSTEM_ERROR), False, "process_request_failed")].count == 1
    assert cells[(int(RequestCode.SEND_BATCH_MESSAGE), int(ResponseCode.SUCCESS), False, "success")].count == 1


async def test_a_send_without_a_header_is_counted_alike_alone_and_in_a_group(broker) -> None:
    """The same undecodable send, alone and inside a group: the same answer, one warning each, and the same
    metrics cell ("process_request_failed"), whichever path ran it."""
    v2 = int(RequestCode.SEND_MESSAGE_V2)
    cells = broker.metrics.requests.latency
    key = (v2, int(ResponseCode.SYSTEM_ERROR), False, "process_request_failed")

    def headerless() -> RemotingCommand:
        return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {"b": "GroupT3"}, b"no header")

    with structlog.testing.capture_logs() as logs:
        alone = await exchange(broker, [headerless()])
    assert alone[1].code == ResponseCode.SYSTEM_ERROR and "missing" in alone[1].remark
    assert cells[key].count == 1
    sizes = spy_groups(broker)
    with structlog.testing.capture_logs() as group_logs:
        grouped = await exchange(broker, [send_request("GroupT3", b"a"), headerless(), send_request("GroupT3", b"b")])
    assert sizes == [2]  # the two good sends were stored by one group put: the headerless one was in the group
    assert [grouped[o].code for o in (1, 2, 3)] == [ResponseCode.SUCCESS, ResponseCode.SYSTEM_ERROR, 0]
    assert grouped[2].remark == alone[1].remark
    assert cells[key].count == 2
    assert (v2, int(ResponseCode.SYSTEM_ERROR), False, "success") not in cells
    for seen in (logs, group_logs):
        warnings = [e for e in seen if e["log_level"] == "warning"]
        assert [e["event"] for e in warnings] == ["request processing failed"], warnings
        assert not warnings[0].get("exc_info")  # our own decode error: no traceback


async def test_a_group_under_sync_flush_is_answered_after_its_fsync(tmp_path) -> None:
    broker = await start_broker(tmp_path, flushDiskType="SYNC_FLUSH")
    try:
        sizes = spy_groups(broker)
        answers = await exchange(broker, [send_request("GroupSync", f"s{i}".encode(), queue_id=2) for i in range(6)])
        assert sizes == [6]
        assert [answers[o].code for o in range(1, 7)] == [ResponseCode.SUCCESS] * 6
        assert [answers[o].ext_fields["queueOffset"] for o in range(1, 7)] == [str(i) for i in range(6)]
        mfq = broker.store.commit_log.mapped_file_queue
        assert mfq.flushed_where >= mfq.max_offset() > 0  # answered only once an fsync covered them
    finally:
        await broker.shutdown()


async def test_a_group_checks_each_topic_once_and_each_queue_id(broker, monkeypatch) -> None:
    """The topic checks (permission, name, config lookup or creation) run once per topic of a group, the queue
    id check once per send; the put statistics are updated once per run of sends to one topic."""
    processor = broker.send_processor
    checks: list[str] = []
    real_check = processor._topic_check
    monkeypatch.setattr(processor, "_topic_check", lambda ch, hdr: checks.append(hdr.topic) or real_check(ch, hdr))
    puts: list[tuple[str, int]] = []
    real_put = broker.stats.on_put
    monkeypatch.setattr(broker.stats, "on_put", lambda t, n, size: puts.append((t, n)) or real_put(t, n, size))
    sizes = spy_groups(broker)
    requests = [send_request("OnceA", f"a{i}".encode(), queue_id=i % 3) for i in range(5)]
    requests += [send_request("OnceA", b"bad", queue_id=99)]  # refused by its queue id alone
    requests += [send_request("OnceB", f"b{i}".encode()) for i in range(3)]
    answers = await exchange(broker, requests)
    assert sizes == [8]
    assert checks == ["OnceA", "OnceB"]
    assert answers[6].code == ResponseCode.SYSTEM_ERROR and "queueId[99] is illegal" in answers[6].remark
    assert [answers[o].code for o in (1, 2, 3, 4, 5, 7, 8, 9)] == [ResponseCode.SUCCESS] * 8
    assert puts == [("OnceA", 5), ("OnceB", 3)]
    assert broker.stats.put_nums["OnceA"] == 5 and broker.stats.put_nums["OnceB"] == 3


async def test_send_answers_come_in_the_request_s_serialization_as_the_generic_encode_writes_them(broker) -> None:
    """A stored send's answer is written from a template (``remoting.send_answer``): a ROCKETMQ request gets a
    ROCKETMQ answer and a JSON one JSON, in a group and alone, with the bytes the generic encode writes for the
    same answer; a change of regionId / traceOn shows in the next answers."""

    async def raw_answers(requests):
        reader, writer = await asyncio.open_connection("127.0.0.1", broker.server.port)
        try:
            for opaque, request in enumerate(requests, 1):
                request.opaque = opaque
            writer.write(b"".join(r.to_bytes() for r in requests))
            frames = []
            for _ in requests:
                (length,) = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 5))
                frames.append(await asyncio.wait_for(reader.readexactly(length), 5))
        finally:
            writer.close()
        return frames

    for region, trace_on in (("DefaultRegion", True), ('Reg"ión', False)):
        broker.config.region_id = region
        broker.config.trace_on = trace_on
        for serialize_type in (0, 1):
            for count in (1, 5):  # alone, and a group of one read
                requests = [send_request("AnswerT", b"m", queue_id=2) for _ in range(count)]
                for request in requests:
                    request.serialize_type = serialize_type
                for frame in await raw_answers(requests):
                    answer = RemotingCommand.decode(frame)
                    assert answer.code == ResponseCode.SUCCESS and answer.serialize_type == serialize_type
                    assert answer.ext_fields["queueId"] == "2" and len(answer.ext_fields["msgId"]) == 32
                    assert answer.ext_fields["MSG_REGION"] == region
                    assert answer.ext_fields["TRACE_ON"] == ("true" if trace_on else "false")
                    generic = RemotingCommand(answer.code, answer.opaque, answer.flag, None, answer.ext_fields)
                    generic.serialize_type = serialize_type
                    assert generic.to_bytes()[4:] == frame


def _no_port(remark: str | None) -> str | None:
    """A remark without the client's port (each connection has its own)."""
    return None if remark is None else re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1", remark)


def _stored(broker) -> list[tuple]:
    """Every record of the broker's CommitLog, as what does not depend on the broker or the connection."""
    cl = broker.store.commit_log
    _, view = cl.get_data(0)
    records = decode_records(view[: cl.get_max_offset()])
    return [(m.topic, m.queue_id, m.body, m.properties, m.flag, m.sys_flag, m.reconsume_times) for m in records]


async def test_odd_sends_in_a_group_are_answered_and_stored_as_one_by_one(tmp_path) -> None:
    """Differential: the group path (``_message`` with the group's checked topics, ``put_sent_group``) against
    the one-request path (``_message`` alone, ``put_message``) for sends off the common path: a queue id out of
    range after the topic was checked, a retry past its limit (the DLQ, queue 0), non-ASCII and oversized
    properties (an ASCII text and a non-ASCII one shorter in characters than the limit but over it in bytes),
    DELAY levels good and bad, a transaction half message. Same answers (code, remark, queue id), same records."""
    requests = [
        send_request("DiffT", b"m0", queue_id=1, props={"UNIQ_KEY": "A0", "WAIT": "true"}),
        send_request("DiffT", b"m1", queue_id=99),  # refused by its queue id alone, its topic checked
        send_request("DiffT", b"m2", queue_id=2, props={"KEYS": "ключ", "TAGS": "т"}),
        send_request("DiffT", b"m3", queue_id=0, props={"X": "a" * 33_000}),
        send_request("DiffT", b"m4", queue_id=0, props={"X": "я" * 17_000}),  # 17,000 characters, 34,000 bytes
        send_request("DiffT", b"m5", queue_id=3, props={"DELAY": "2"}),
        send_request("DiffT", b"m6", queue_id=3, props={"DELAY": "two"}),
        send_request("DiffT", b"m7", queue_id=1, props={"TRAN_MSG": "true", "PGROUP": "PG"}),
        send_request("%RETRY%DiffG", b"m8", queue_id=0, reconsume_times=5, max_reconsume_times=3),
        send_request("%RETRY%DiffG", b"m9", queue_id=0, reconsume_times=0, max_reconsume_times=3),
        send_request("DiffU", b"m10", queue_id=0, props={"WAIT": "false"}),
    ]
    grouped = await start_broker(tmp_path / "grouped")
    alone = await start_broker(tmp_path / "alone")
    try:
        sizes = spy_groups(grouped)
        in_group = await exchange(grouped, requests)
        assert sizes and sum(sizes) >= 6  # (the group path was taken)
        one_by_one = {}
        for request in requests:
            one_by_one.update({o + len(one_by_one): a for o, a in (await exchange(alone, [request])).items()})
        for opaque in range(1, len(requests) + 1):
            a, b = in_group[opaque], one_by_one[opaque]
            assert (a.code, _no_port(a.remark)) == (b.code, _no_port(b.remark)), opaque
            assert a.ext_fields.get("queueId") == b.ext_fields.get("queueId"), opaque
        codes = [in_group[o].code for o in range(1, len(requests) + 1)]
        assert codes.count(ResponseCode.SUCCESS) == 7 and codes.count(ResponseCode.MESSAGE_ILLEGAL) == 2
        # refused by the processor, which measures the properties in UTF-8 bytes (not by the store's own limit)
        assert "properties length 33002 is over" in in_group[4].remark
        assert "properties length 34002 is over" in in_group[5].remark
        assert _stored(grouped) == _stored(alone)
        assert {r[0] for r in _stored(grouped)} >= {"DiffT", "DiffU", "%DLQ%DiffG", "%RETRY%DiffG"}
    finally:
        await grouped.shutdown()
        await alone.shutdown()


async def test_each_property_that_changes_a_send_is_seen_in_a_group(tmp_path) -> None:
    """``_message`` asks one question of a send's property names before it looks for a half message, a DELAY
    level or a timer park: each such property (and the prepared transaction flag), sent among plain sends of
    one read, still sends its message where it alone would go. Without the look at a name its message would be
    stored in the sent topic, as the plain ones are."""
    future = str(int(time.time() * 1000) + 3_600_000)
    cases = [
        ({"TRAN_MSG": "true", "PGROUP": "PG"}, {}, "RMQ_SYS_TRANS_HALF_TOPIC"),
        ({}, {"f": "4"}, "RMQ_SYS_TRANS_HALF_TOPIC"),  # TRANSACTION_PREPARED_TYPE in the sys flag alone
        ({"DELAY": "2"}, {}, "SCHEDULE_TOPIC_XXXX"),
        ({"TIMER_DELAY_SEC": "30"}, {}, "rmq_sys_wheel_timer"),
        ({"TIMER_DELAY_MS": "30000"}, {}, "rmq_sys_wheel_timer"),
        ({"TIMER_DELIVER_MS": future}, {}, "rmq_sys_wheel_timer"),
    ]
    requests = []
    for k, (props, ext, _) in enumerate(cases):
        requests.append(send_request("SpecT", b"plain%d" % k, queue_id=0, props={"UNIQ_KEY": f"P{k}"}))
        requests.append(send_request("SpecT", b"special%d" % k, queue_id=1, props=props, extra_ext=ext))
    broker = await start_broker(tmp_path / "b")
    try:
        sizes = spy_groups(broker)
        answers = await exchange(broker, requests)
        assert sizes and max(sizes) >= 6  # (the group path was taken)
        assert {a.code for a in answers.values()} == {ResponseCode.SUCCESS}
        topics = {m[2]: m[0] for m in _stored(broker)}
        for k, (_, _, where) in enumerate(cases):
            assert topics[b"plain%d" % k] == "SpecT"
            assert topics[b"special%d" % k] == where, (k, topics[b"special%d" % k])
    finally:
        await broker.shutdown()


async def _raw_frames(broker, requests: list[RemotingCommand]) -> list[bytes]:
    """The answer frames of ``requests`` written in one write (one read on the broker's side), in the order they
    came back; oneway requests get none."""
    reader, writer = await asyncio.open_connection("127.0.0.1", broker.server.port)
    try:
        writer.write(b"".join(r.to_bytes() for r in requests))
        frames = []
        for _ in [r for r in requests if not r.flag & FLAG_ONEWAY]:
            (length,) = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 5))
            frames.append(await asyncio.wait_for(reader.readexactly(length), 5))
    finally:
        writer.close()
    return frames


async def _frames_one_by_one(broker, requests: list[RemotingCommand]) -> list[bytes]:
    """``_raw_frames``, each request in a write of its own after the answer to the one before (a lone send each)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", broker.server.port)
    try:
        frames = []
        for request in requests:
            writer.write(request.to_bytes())
            if not request.flag & FLAG_ONEWAY:
                (length,) = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 5))
                frames.append(await asyncio.wait_for(reader.readexactly(length), 5))
    finally:
        writer.close()
    return frames


def _without_port(frame: bytes, port: int) -> bytes:
    """An answer frame with its msgId's port (8 hex digits after the 8 of the IP) made neutral: two brokers differ
    in it alone; a refusal's remark names the client's address (and its header's length follows it)."""
    frame = frame.replace(f"{port:08X}".encode(), b"PORTPORT")
    neutral = re.sub(rb"127\.0\.0\.1:\d+", b"ADDR", frame)
    return frame if neutral == frame else b"~" + neutral[4:]


async def test_a_stored_group_answered_as_the_store_s_results_writes_what_answer_objects_write(tmp_path) -> None:
    """Differential: groups answered as the store's results (``SentAnswers``, every request a single send stored in
    the store's one pass to one topic) against the same groups answered with one ``SendResultAnswer`` a send (the
    processor's ``_answer_results`` in place of ``_answer_whole``), over seeded random groups of one read: plain sends to
    one or two topics, refused queue ids, a half message, oneway sends, JSON requests; and against each send alone
    (the lone path). The same answer bytes (but the broker's port in the msgId and the client's address in a
    refusal), records and put statistics; the results' answers taken where expected."""
    rng = random.Random(15)
    groups = []
    for g in range(60):
        topics = ["ResA"] if rng.random() < 0.7 else ["ResA", "ResB"]
        group = []
        for i in range(rng.randint(1, 9)):
            odd = rng.random()
            props = {"UNIQ_KEY": f"K{g}x{i}", "WAIT": "true"}
            queue_id = rng.randrange(4)
            if odd < 0.04:
                queue_id = 99  # refused
            elif odd < 0.07:
                props = {"TRAN_MSG": "true", "PGROUP": "PG"}  # a half message: put as a message
            request = send_request(
                rng.choice(topics),
                bytes(rng.randrange(256) for _ in range(rng.randint(0, 40))),
                queue_id=queue_id,
                props=props,
            )
            if rng.random() < 0.05:
                request.serialize_type = 0
            if rng.random() < 0.03 and i:  # (not a group's first: its lone copy has an answer after it)
                request.flag |= FLAG_ONEWAY
            group.append(request)
        groups.append(group)
    for group in groups:
        group.reverse()  # (a oneway send never last: the next group's answers come after it is stored)
    fast = await start_broker(tmp_path / "fast")
    objects = await start_broker(tmp_path / "objects")
    alone = await start_broker(tmp_path / "alone")
    taken: list[bool] = []
    try:
        processor = fast.send_processor
        real_fast = processor._answer_whole

        def spy(channel, msgs, requests, queue_ids, results):
            answers = real_fast(channel, msgs, requests, queue_ids, results)
            taken.append(answers.__class__ is SentAnswers)
            return answers

        processor._answer_whole = spy
        other = objects.send_processor

        def with_answer_objects(channel, msgs, requests, queue_ids, results):
            responses = [None] * len(requests)
            held = [(i, r, r.custom_header, q) for i, (r, q) in enumerate(zip(requests, queue_ids))]
            other._answer_results(channel, msgs, held, results, responses, other._answer_template())
            return responses

        other._answer_whole = with_answer_objects
        for opaque_base, group in enumerate(groups):
            for i, request in enumerate(group):
                request.opaque = opaque_base * 100 + i
            a = await _raw_frames(fast, group)
            b = await _raw_frames(objects, group)
            c = await _frames_one_by_one(alone, group)
            neutral = [_without_port(f, fast.server.port) for f in a]
            assert neutral == [_without_port(f, objects.server.port) for f in b], opaque_base
            assert neutral == [_without_port(f, alone.server.port) for f in c], opaque_base
        assert _stored(fast) == _stored(objects) == _stored(alone)
        assert dict(fast.stats.put_nums) == dict(objects.stats.put_nums) == dict(alone.stats.put_nums)
        counts = [
            {key: cell.count for key, cell in broker.metrics.requests.latency.items()} for broker in (fast, objects)
        ]
        assert counts[0] == counts[1] and counts[0]
        assert any(taken) and not all(taken)
    finally:
        await fast.shutdown()
        await objects.shutdown()
        await alone.shutdown()
