"""The send header decoded once, by ``SendMessageProcessor.groupable`` (the connection asks it of every send as it
decodes a read), and kept on the request (``custom_header``) for the group's ``process_requests`` and the lone path:
kept exactly for the requests ``_is_batch`` calls single sends, equal to the header the map decodes, and a request
kept for a single send is stored as one (the C++ client's batch flag "1" in the V1 name is not).

Without the keeping, ``custom_header`` stays None and the first test fails; a header kept for a request that
``_is_batch`` calls a batch fails the second."""

from __future__ import annotations

import itertools

from broker_helpers import send_request

from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.headers import SendMessageRequestHeader, decode_header, decode_send_message_v2
from remoting.send_header import SendHeaderValues
from store.message import decode_records


def _decoded(request: RemotingCommand) -> RemotingCommand:
    """The request as the broker's connection decodes it (ROCKETMQ header: the layout path from the third on)."""
    request.serialize_type = 1
    frame = request.to_bytes()[4:]
    for _ in range(2):
        RemotingCommand.decode_at(frame, 0, len(frame))
    return RemotingCommand.decode_at(frame, 0, len(frame))


def _map_header(request: RemotingCommand) -> SendMessageRequestHeader:
    if request.code == RequestCode.SEND_MESSAGE:
        return decode_header(SendMessageRequestHeader, request.ext_fields)
    return decode_send_message_v2(request.ext_fields)


async def test_a_single_send_s_header_is_decoded_once_and_kept(broker) -> None:
    processor = broker.send_processor
    request = _decoded(send_request("KeptT", b"x", queue_id=2))
    assert request.ext_layout is not None  # (the benchmark Producer's path)
    assert processor.groupable(request)
    kept = request.custom_header
    assert kept is not None and kept.__class__ is SendHeaderValues and kept == _map_header(request)
    assert processor._header(request) is kept  # the group and the lone path read it, never decode it again


async def test_the_header_is_kept_exactly_for_what_is_batch_calls_a_single_send(broker) -> None:
    processor = broker.send_processor
    texts = [None, "false", "true", "1", "", "TRUE"]
    for code, m, batch in itertools.product((RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_MESSAGE), texts, texts):
        extra = {k: v for k, v in (("m", m), ("batch", batch)) if v is not None}
        for request in (send_request("KeptT", b"x", code=code), _decoded(send_request("KeptT", b"x", code=code))):
            request.ext_fields.pop("m", None)
            request.ext_fields.pop("batch", None)
            request.ext_fields.update(extra)
            request.ext_layout = request.ext_values = None  # (the map changed)
            grouped = processor.groupable(request)
            kept = request.custom_header
            request.custom_header = None
            single = not processor._is_batch(request, _map_header(request))
            if kept is not None:
                assert grouped and single and kept == _map_header(request), (code, extra)
            elif grouped:
                assert not single, (code, extra)  # (the one way groupable takes it and keeps nothing)


async def test_a_c_plus_plus_batch_flag_among_single_sends_is_still_stored_as_a_batch(broker) -> None:
    """m "false" but the V1 name "1" (the C++ client's batch flag): groupable takes it into the group, keeps no
    header, and the group stores its body as a batch (two messages), as the lone path does."""
    from test_send_group import batch_body, exchange

    requests = [send_request("KeptB", b"a", queue_id=1), send_request("KeptB", batch_body([b"b1", b"b2"]), queue_id=1)]
    requests[1].ext_fields.update({"m": "false", "batch": "1"})
    answers = await exchange(broker, requests)
    assert [answers[o].code for o in (1, 2)] == [ResponseCode.SUCCESS] * 2
    stored = decode_records(broker.store.get_message("G", "KeptB", 1, 0, 32).body)
    assert [m.body for m in stored] == [b"a", b"b1", b"b2"]


async def test_a_busy_store_refuses_every_send_of_a_group_and_counts_each(broker, monkeypatch) -> None:
    """The busy question asked once for a group (``reject_requests``): every send answered [REJECTREQUEST], each
    counted in the request metrics and the broker's busy statistics, as one by one; none stored."""
    from test_send_group import exchange

    asked = []
    monkeypatch.setattr(broker.store, "is_busy_or_deficient", lambda: asked.append(1) or True)
    busy_before = broker.stats.busy["REJECTREQUEST"]
    answers = await exchange(broker, [send_request("BusyT", f"m{i}".encode(), queue_id=1) for i in range(6)])
    assert [answers[o].code for o in range(1, 7)] == [ResponseCode.SYSTEM_BUSY] * 6
    assert all(answers[o].remark.startswith("[REJECTREQUEST]") for o in range(1, 7))
    assert broker.stats.busy["REJECTREQUEST"] - busy_before == 6
    assert broker.metrics.requests.rejected["send"] == 6
    assert len(asked) < 6  # (asked once for the read's group, not once a send)
    monkeypatch.undo()
    answers = await exchange(broker, [send_request("BusyT", b"after", queue_id=1)])
    assert answers[1].code == ResponseCode.SUCCESS


async def test_a_group_s_busy_check_that_raises_asks_each_request_as_before(broker, monkeypatch) -> None:
    """``reject_requests`` raising: the server asks ``reject_request`` of each request, as without it (its own log
    line, the request let in when that raises too)."""
    from test_send_group import exchange

    def broken(count: int) -> bool:
        raise RuntimeError("broken busy check")

    monkeypatch.setattr(broker.send_processor, "reject_requests", broken)
    for route in broker.server._routes.values():  # (the server took the bound method when it registered it)
        if route.reject_many is not None:
            object.__setattr__(route, "reject_many", broken)
    answers = await exchange(broker, [send_request("BusyR", f"m{i}".encode(), queue_id=1) for i in range(4)])
    assert [answers[o].code for o in range(1, 5)] == [ResponseCode.SUCCESS] * 4


async def test_a_layout_read_send_gets_the_map_s_answer_without_building_the_map(broker) -> None:
    """``groupable`` on a V2 request read by a learned layout answers from the values (``single_send_v2_values``):
    the same answer and kept header as the map path gives the same request, for every batch flag text; the single
    send's extFields map is never built."""
    processor = broker.send_processor
    for m in (None, "false", "true", "1", "", "TRUE", "no"):
        template = send_request("KeptL", b"x", queue_id=1)
        if m is None:
            del template.ext_fields["m"]
        else:
            template.ext_fields["m"] = m
        request = _decoded(template)
        assert request.ext_layout is not None and request._ext is None
        grouped = processor.groupable(request)
        kept = request.custom_header
        if kept is not None:
            assert request._ext is None, m  # (no map built for a single send)
        plain = RemotingCommand(
            request.code, request.opaque, 0, None, dict(request.ext_fields), request.body, serialize_type=1
        )
        assert plain == request and request == plain  # (a LayoutCommand equals the plain command either way)
        assert processor.groupable(plain) == grouped, m
        assert plain.custom_header == kept, m
