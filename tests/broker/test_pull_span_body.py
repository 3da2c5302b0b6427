"""A pull of records that lie back to back in the commit log (a batch sent to one queue, as every drain backlog of
the benchmarks is filled) is answered with the commit log's bytes as they lie, one view, no per-record cuts and no
join: the body must still be exactly the records the pull found, in the serialization the request used."""

from __future__ import annotations

from broker_helpers import pull_request, send_request

from broker.processor.pull_answer import PullAnswer
from remoting.codes import ResponseCode
from store.message import decode_records
from store.results import GetMessageResult

ROCKETMQ, JSON = 1, 0


async def test_a_batched_queue_is_answered_as_one_span(broker, client, monkeypatch):
    addr = broker.config.broker_addr
    for n in range(40):  # one queue: back to back
        req = send_request("TSB", f"span-{n}".encode())
        assert (await client.invoke(addr, req, 5)).code == ResponseCode.SUCCESS
    spans: list[int] = []
    set_span = GetMessageResult.set_span

    def spy(self, span, sizes):
        spans.append(len(sizes))
        set_span(self, span, sizes)

    monkeypatch.setattr(GetMessageResult, "set_span", spy)
    bodies_given: list[object] = []
    original_init = PullAnswer.__init__

    def init_spy(self, request, code, remark, next_begin, min_offset, max_offset, body=None):
        bodies_given.append(body)
        original_init(self, request, code, remark, next_begin, min_offset, max_offset, body)

    monkeypatch.setattr(PullAnswer, "__init__", init_spy)
    for serialize in (ROCKETMQ, JSON):
        offset = 0
        bodies: list[bytes] = []
        while offset < 40:
            req = pull_request("GSB", "TSB", 0, offset, sys_flag=0x4)
            req.serialize_type = serialize
            answer = await client.invoke(addr, req, 5)
            assert answer.code == ResponseCode.SUCCESS
            msgs = decode_records(answer.body)
            assert [m.queue_offset for m in msgs] == list(range(offset, offset + len(msgs)))
            bodies += [m.body for m in msgs]
            offset = int(answer.ext_fields["nextBeginOffset"])
        assert bodies == [f"span-{n}".encode() for n in range(40)]
    assert spans == [32, 8, 32, 8]
    # the span itself is the body, a view of the mapped commit-log file: no join made a copy of it
    assert all(type(body) is memoryview for body in bodies_given) and len(bodies_given) == 4
