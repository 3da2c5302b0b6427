"""RemotingServer + RemotingClient end to end on loopback: dispatch rules, bad input, flow control."""

from __future__ import annotations

import asyncio
import struct

import orjson
import pytest
import structlog
from remoting_helpers import FnProcessor, expect_silence, raw_frame, read_frame

from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode, SerializeType
from remoting.command import FLAG_ONEWAY, RemotingCommand
from remoting.errors import HeaderError, RemotingConnectError, RemotingTimeoutError
from remoting.executor import RequestExecutor
from remoting.headers import (
    GetMaxOffsetRequestHeader,
    GetMaxOffsetResponseHeader,
    decode_header,
    encode_header,
)
from remoting.server import OVERLOAD_REMARK, REJECT_REQUEST_REMARK


@pytest.fixture
async def client():
    c = RemotingClient(connect_timeout_s=2.0)
    yield c
    await c.close()


async def open_raw(server):
    return await asyncio.open_connection("127.0.0.1", server.port)


def request_bytes(code: int, opaque: int, ext: dict | None = None, *, oneway: bool = False, body: bytes = b"") -> bytes:
    cmd = RemotingCommand.request(code, ext or {}, body or None, opaque=opaque, oneway=oneway)
    return cmd.to_bytes()


# ---- dispatch ---------------------------------------------------------------------------------


async def test_round_trip_json_and_rocketmq(make_server, client) -> None:
    server = await make_server({10: (FnProcessor(), RequestExecutor("send", 2, 100))})
    for stype in (SerializeType.JSON, SerializeType.ROCKETMQ):
        req = RemotingCommand.request(10, {"topic": "T"}, b"hello", serialize_type=stype)
        resp = await client.invoke(server.address, req, 3)
        assert (resp.code, resp.ext_fields, resp.body) == (0, {"topic": "T"}, b"hello")
        assert resp.serialize_type == stype and resp.opaque == req.opaque and resp.is_response


async def test_typed_header_processor(make_server, client) -> None:
    async def get_max(channel, request):
        hdr = decode_header(GetMaxOffsetRequestHeader, request.ext_fields)
        return request.response(0, None, encode_header(GetMaxOffsetResponseHeader(offset=hdr.queue_id * 10)))

    server = await make_server({30: (FnProcessor(get_max), RequestExecutor("admin", 1, 10))})
    resp = await client.invoke(server.address, RemotingCommand.request(30, {"topic": "t", "queueId": "4"}), 3)
    assert resp.ext_fields == {"offset": "40"}
    # A missing required field is a SYSTEM_ERROR naming it, and the connection stays usable.
    resp = await client.invoke(server.address, RemotingCommand.request(30, {"queueId": "4"}), 3)
    assert resp.code == ResponseCode.SYSTEM_ERROR
    assert resp.remark == "GetMaxOffsetRequestHeader: the header field 'topic' is missing"
    resp = await client.invoke(server.address, RemotingCommand.request(30, {"topic": "t", "queueId": "x"}), 3)
    assert resp.code == 1 and "'queueId' is not an integer: 'x'" in resp.remark


async def test_unknown_code_answers_3_with_j_remark(make_server, client) -> None:
    server = await make_server({10: (FnProcessor(), RequestExecutor("send", 1, 10))})
    resp = await client.invoke(server.address, RemotingCommand.request(999), 3)
    assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    assert resp.remark == " request type 999 not supported"


async def test_default_processor_gets_unregistered_codes(make_server, client) -> None:
    default = FnProcessor()
    server = await make_server(
        {10: (FnProcessor(), RequestExecutor("send", 1, 10))}, default=(default, RequestExecutor("admin", 1, 10))
    )
    resp = await client.invoke(server.address, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO), 3)
    assert resp.code == 0 and [c.code for c in default.calls] == [28]


async def test_processor_exception_is_system_error_and_connection_survives(make_server, client) -> None:
    async def boom(channel, request):
        if request.ext_fields.get("fail") == "header":
            raise HeaderError("SomeHeader: the header field 'x' is missing")
        raise ValueError("boom")

    server = await make_server(
        {10: (FnProcessor(boom), RequestExecutor("send", 1, 10)), 11: (FnProcessor(), RequestExecutor("pull", 1, 10))}
    )
    with structlog.testing.capture_logs() as logs:
        resp = await client.invoke(server.address, RemotingCommand.request(10), 3)
    assert (resp.code, resp.remark) == (1, "ValueError: boom")
    assert len([e for e in logs if e["event"] == "request processing failed"]) == 1
    resp = await client.invoke(server.address, RemotingCommand.request(10, {"fail": "header"}), 3)
    assert (resp.code, resp.remark) == (1, "SomeHeader: the header field 'x' is missing")
    assert (await client.invoke(server.address, RemotingCommand.request(11), 3)).code == 0


async def test_oneway_is_never_answered(make_server) -> None:
    async def boom(channel, request):
        raise RuntimeError("boom")

    processor = FnProcessor()
    server = await make_server(
        {15: (processor, RequestExecutor("cm", 1, 10)), 16: (FnProcessor(boom), RequestExecutor("boom", 1, 10))}
    )
    reader, writer = await open_raw(server)
    writer.write(request_bytes(15, 1, oneway=True))  # processor returns a response: dropped
    writer.write(request_bytes(16, 2, oneway=True))  # processor raises: no error reply
    writer.write(request_bytes(999, 3, oneway=True))  # unknown code: no reply
    await expect_silence(reader)
    assert len(processor.calls) == 1
    writer.write(request_bytes(15, 4))
    assert (await read_frame(reader)).opaque == 4
    writer.close()


async def test_parked_request_answered_later_through_the_channel(make_server, client) -> None:
    # Long polling: the processor returns None and answers from elsewhere later.
    parked: list[tuple] = []

    async def park(channel, request):
        parked.append((channel, request))

    server = await make_server({11: (FnProcessor(park), RequestExecutor("pull", 1, 10))})
    fut = asyncio.ensure_future(client.invoke(server.address, RemotingCommand.request(11), 3))
    while not parked:
        await asyncio.sleep(0.01)
    channel, request = parked[0]
    channel.send(request.response(ResponseCode.PULL_NOT_FOUND, "OFFSET_OVERFLOW_ONE"))
    assert (await fut).code == 19


# ---- busy responses -------------------------------------------------------------------------------


async def test_overload_when_queue_full_and_not_for_oneway(make_server) -> None:
    gate = asyncio.Event()

    async def slow(channel, request):
        await gate.wait()
        return request.response(0)

    executor = RequestExecutor("send", workers=1, capacity=1)
    server = await make_server({10: (FnProcessor(slow), executor)})
    reader, writer = await open_raw(server)
    writer.write(request_bytes(10, 1))  # taken by the worker
    await asyncio.sleep(0.05)
    writer.write(request_bytes(10, 2))  # waits in the queue (capacity 1)
    writer.write(request_bytes(10, 3))  # queue full → [OVERLOAD]
    writer.write(request_bytes(10, 4, oneway=True))  # full too, but oneway → silently dropped
    busy = await read_frame(reader)
    assert (busy.code, busy.remark, busy.opaque) == (ResponseCode.SYSTEM_BUSY, OVERLOAD_REMARK, 3)
    await expect_silence(reader, 0.2)
    assert executor.rejected == 2 and executor.peak == 1
    gate.set()
    assert sorted([(await read_frame(reader)).opaque for _ in range(2)]) == [1, 2]
    writer.close()


async def test_reject_request_before_queueing(make_server, client) -> None:
    processor = FnProcessor()
    processor.reject = True
    server = await make_server({10: (processor, RequestExecutor("send", 1, 10))})
    resp = await client.invoke(server.address, RemotingCommand.request(10), 3)
    assert (resp.code, resp.remark) == (2, REJECT_REQUEST_REMARK)
    assert processor.calls == []
    reader, writer = await open_raw(server)
    writer.write(request_bytes(10, 7, oneway=True))
    await expect_silence(reader, 0.2)
    processor.reject = False
    assert (await client.invoke(server.address, RemotingCommand.request(10), 3)).code == 0
    writer.close()


async def test_executor_isolation(make_server, client) -> None:
    gate = asyncio.Event()

    async def stuck(channel, request):
        await gate.wait()
        return request.response(0)

    send = RequestExecutor("send", workers=1, capacity=100)
    pull = RequestExecutor("pull", workers=1, capacity=100)
    server = await make_server({10: (FnProcessor(stuck), send), 11: (FnProcessor(), pull)})
    blocked = [asyncio.ensure_future(client.invoke(server.address, RemotingCommand.request(10), 10)) for _ in range(5)]
    # The send executor is wedged; pull requests on the same connection still get through.
    for _ in range(20):
        assert (await client.invoke(server.address, RemotingCommand.request(11), 5)).code == 0
    assert not any(f.done() for f in blocked) and send.size == 4
    gate.set()
    assert [r.code for r in await asyncio.gather(*blocked)] == [0] * 5


# ---- bad input ---------------------------------------------------------------------------------------

_HUGE = 16 * 1024 * 1024 + 1


@pytest.mark.parametrize(
    "garbage, reason",
    [
        (b"\xff\xff\xff\xff\x00\x00\x00\x00", "bad frame"),  # negative length
        (struct.pack(">i", 0), "bad frame"),
        (struct.pack(">i", _HUGE), "bad frame"),  # > 16 MiB
        (raw_frame(b"{}", header_len=500), "undecodable command"),  # header length beyond the frame
        (raw_frame(b"{not json"), "undecodable command"),
        (raw_frame(b"\x00" * 20, stype=7), "undecodable command"),  # unknown serialization type
        (raw_frame(orjson.dumps({"code": 10, "opaque": "x"})), "undecodable command"),
        (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "bad frame"),  # 0x47455420 > 16 MiB
    ],
)
async def test_garbage_closes_the_connection_with_one_log_line(make_server, client, garbage, reason) -> None:
    server = await make_server({10: (FnProcessor(), RequestExecutor("send", 1, 10))})
    with structlog.testing.capture_logs() as logs:
        reader, writer = await open_raw(server)
        writer.write(garbage)
        assert await asyncio.wait_for(reader.read(), 5) == b""  # closed, nothing written back
        writer.close()
    lines = [e for e in logs if e["log_level"] in ("warning", "error")]
    assert len(lines) == 1 and lines[0]["event"] == "closing the connection" and lines[0]["reason"] == reason
    # The server keeps serving other connections.
    assert (await client.invoke(server.address, RemotingCommand.request(10), 3)).code == 0


async def test_bad_header_with_opaque_is_answered_and_connection_stays(make_server) -> None:
    server = await make_server({10: (FnProcessor(), RequestExecutor("send", 1, 10))})
    reader, writer = await open_raw(server)
    writer.write(raw_frame(orjson.dumps({"code": 10, "opaque": 5, "flag": 0, "extFields": [1, 2]})))
    resp = await read_frame(reader)
    assert (resp.code, resp.opaque) == (1, 5) and "'extFields' must be an object" in resp.remark
    # oneway with a bad header: no answer
    writer.write(raw_frame(orjson.dumps({"code": 10, "opaque": 6, "flag": FLAG_ONEWAY, "remark": 3})))
    await expect_silence(reader, 0.2)
    writer.write(request_bytes(10, 7))
    assert (await read_frame(reader)).opaque == 7
    writer.close()


async def test_c_style_request_with_untyped_ext_fields(make_server) -> None:
    seen = []

    async def record(channel, request):
        seen.append(request.ext_fields)
        return request.response(0, None, {"queueId": "1", "queueOffset": "0", "msgId": "X"})

    server = await make_server({10: (FnProcessor(record), RequestExecutor("send", 1, 10))})
    reader, writer = await open_raw(server)
    header = {
        "code": 10,
        "language": "CPP",
        "version": 63,
        "opaque": 0,
        "flag": 0,
        "remark": "",
        "extFields": {"queueId": 1, "sysFlag": 0, "batch": "1", "unitMode": False, "topic": "T"},
    }
    writer.write(raw_frame(orjson.dumps(header), b"body"))
    head = await asyncio.wait_for(reader.readexactly(8), 5)
    _length, hlen = struct.unpack(">iI", head)  # C reads hlen unmasked: the type byte must be 0
    assert hlen < 1 << 24
    resp_header = orjson.loads(await reader.readexactly(hlen))
    assert all(type(v) is str for v in resp_header["extFields"].values())
    assert resp_header["opaque"] == 0 and resp_header["flag"] == 1
    assert seen == [{"queueId": "1", "sysFlag": "0", "batch": "1", "unitMode": "false", "topic": "T"}]
    writer.close()


async def test_many_frames_in_one_write_and_split_frames(make_server) -> None:
    server = await make_server({10: (FnProcessor(), RequestExecutor("send", 4, 1000))})
    reader, writer = await open_raw(server)
    blob = b"".join(request_bytes(10, i, body=b"x" * (i * 37)) for i in range(1, 201))
    for i in range(0, len(blob), 1013):  # frames straddle writes
        writer.write(blob[i : i + 1013])
        await writer.drain()
    got = {}
    for _ in range(200):
        resp = await read_frame(reader)
        got[resp.opaque] = resp.body
    assert got == {i: b"x" * (i * 37) for i in range(1, 201)}
    writer.close()


# ---- back-pressure --------------------------------------------------------------------------------


async def test_client_that_does_not_read_does_not_make_the_server_buffer_unboundedly(make_server) -> None:
    body = b"r" * (256 * 1024)
    processor = FnProcessor(lambda channel, request: _answer(request, body))
    server = await make_server(
        {11: (processor, RequestExecutor("pull", 4, 100_000))},
        max_inflight_per_connection=8,
        write_high_water=512 * 1024,
        write_low_water=128 * 1024,
    )
    reader, writer = await open_raw(server)
    total = 600  # 150 MiB of responses if the server kept answering
    writer.write(b"".join(request_bytes(11, i) for i in range(1, total + 1)))
    await asyncio.sleep(1.0)
    channel = server.channels[0]
    processed = len(processor.calls)
    # Kernel socket buffers absorb a few MiB; beyond that the server must stop reading.
    assert processed < total // 2, processed
    assert channel.write_buffer_size <= 512 * 1024 + 9 * len(body)
    await asyncio.sleep(0.3)
    assert len(processor.calls) == processed  # stalled, not just slow
    # Once the client reads, everything is answered in order of arrival.
    opaques = [(await read_frame(reader, timeout=20)).opaque for _ in range(total)]
    assert sorted(opaques) == list(range(1, total + 1))
    writer.close()


async def _answer(request, body):
    return request.response(0, None, None, body)


# ---- client ----------------------------------------------------------------------------------------


async def test_client_invoke_timeout_and_late_response(make_server, client) -> None:
    gate = asyncio.Event()

    async def slow(channel, request):
        await gate.wait()
        return request.response(0)

    server = await make_server(
        {10: (FnProcessor(slow), RequestExecutor("send", 1, 10)), 11: (FnProcessor(), RequestExecutor("pull", 1, 10))}
    )
    with pytest.raises(RemotingTimeoutError, match="timeout"):
        await client.invoke(server.address, RemotingCommand.request(10), 0.2)
    gate.set()  # the late answer must be dropped quietly, and the connection reused
    assert (await client.invoke(server.address, RemotingCommand.request(11), 3)).code == 0
    channel = await client.get_channel(server.address)
    assert channel.pending_invokes == 0


async def test_client_connect_error(client) -> None:
    probe = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = probe.sockets[0].getsockname()[1]
    probe.close()
    await probe.wait_closed()
    with pytest.raises(RemotingConnectError):
        await client.invoke(f"127.0.0.1:{port}", RemotingCommand.request(10), 2)
    with pytest.raises(RemotingConnectError, match="bad address"):
        await client.invoke("nonsense", RemotingCommand.request(10), 2)


async def test_client_fails_pending_invokes_when_the_server_goes_away(make_server, client) -> None:
    async def hang_up(channel, request):
        channel.close()

    server = await make_server(
        {
            10: (FnProcessor(hang_up), RequestExecutor("send", 1, 10)),
            11: (FnProcessor(), RequestExecutor("pull", 1, 10)),
        }
    )
    with pytest.raises(RemotingConnectError, match="closed"):
        await client.invoke(server.address, RemotingCommand.request(10), 5)
    # reconnects transparently
    assert (await client.invoke(server.address, RemotingCommand.request(11), 3)).code == 0


async def test_one_connection_per_address_multiplexed(make_server, client) -> None:
    server = await make_server({10: (FnProcessor(), RequestExecutor("send", 4, 10_000))})
    results = await asyncio.gather(
        *(client.invoke(server.address, RemotingCommand.request(10, {"i": str(i)}), 10) for i in range(300))
    )
    assert [r.ext_fields["i"] for r in results] == [str(i) for i in range(300)]
    assert len(server.channels) == 1


# ---- broker → client ---------------------------------------------------------------------------------


async def test_broker_to_client_invoke_round_trip(make_server, client) -> None:
    notified = asyncio.Event()

    async def heartbeat(channel, request):
        # As J does for GET_CONSUMER_RUNNING_INFO: ask the client over its own connection.
        info = await channel.invoke(
            RemotingCommand.request(RequestCode.GET_CONSUMER_RUNNING_INFO, {"consumerGroup": "g", "clientId": "c"}), 3
        )
        channel.invoke_oneway(RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": "g"}))
        unknown = await channel.invoke(RemotingCommand.request(RequestCode.CONSUME_MESSAGE_DIRECTLY), 3)
        return request.response(0, None, {"fromClient": info.body.decode(), "unknown": str(unknown.code)})

    async def running_info(channel, request):
        return request.response(
            0, None, None, b'{"running":true,"group":"%s"}' % request.ext_fields["consumerGroup"].encode()
        )

    async def ids_changed(channel, request):
        assert request.is_oneway
        notified.set()

    client.set_request_handler(RequestCode.GET_CONSUMER_RUNNING_INFO, running_info)
    client.set_request_handler(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, ids_changed)
    server = await make_server({34: (FnProcessor(heartbeat), RequestExecutor("hb", 1, 10))})
    resp = await client.invoke(server.address, RemotingCommand.request(34), 5)
    assert resp.ext_fields == {"fromClient": '{"running":true,"group":"g"}', "unknown": "3"}
    await asyncio.wait_for(notified.wait(), 3)


async def test_broker_invoke_completed_by_c_style_reply_flag_3(make_server) -> None:
    # C answers broker→client requests through its oneway path: flag = 3. Key on bit0 only.
    results = []

    async def heartbeat(channel, request):
        reply = await channel.invoke(RemotingCommand.request(RequestCode.CHECK_TRANSACTION_STATE), 3)
        results.append(reply)
        return request.response(0)

    server = await make_server({34: (FnProcessor(heartbeat), RequestExecutor("hb", 1, 10))})
    reader, writer = await open_raw(server)
    writer.write(request_bytes(34, 0))
    broker_request = await read_frame(reader)
    assert broker_request.code == 39 and not broker_request.is_response and broker_request.opaque >= 1
    writer.write(raw_frame(orjson.dumps({"code": 0, "opaque": broker_request.opaque, "flag": 3})))
    assert (await read_frame(reader)).code == 0
    assert results[0].code == 0
    writer.close()


async def test_broker_invoke_fails_when_client_disconnects(make_server) -> None:
    outcome: asyncio.Future = asyncio.get_running_loop().create_future()

    async def heartbeat(channel, request):
        try:
            await channel.invoke(RemotingCommand.request(RequestCode.CHECK_TRANSACTION_STATE), 5)
        except Exception as exc:  # noqa: BLE001 - the test inspects it
            outcome.set_result(exc)

    server = await make_server({34: (FnProcessor(heartbeat), RequestExecutor("hb", 1, 10))})
    reader, writer = await open_raw(server)
    writer.write(request_bytes(34, 0))
    await read_frame(reader)
    writer.close()
    assert isinstance(await asyncio.wait_for(outcome, 3), RemotingConnectError)


# ---- lifecycle ---------------------------------------------------------------------------------------


class Recorder:
    def __init__(self) -> None:
        self.events: list[str] = []

    def on_channel_connect(self, remote, channel):
        self.events.append("connect")

    def on_channel_close(self, remote, channel):
        self.events.append("close")

    def on_channel_exception(self, remote, channel):
        self.events.append("exception")


async def test_channel_event_listener(make_server) -> None:
    listener = Recorder()
    server = await make_server({10: (FnProcessor(), RequestExecutor("send", 1, 10))}, listener=listener)
    reader, writer = await open_raw(server)
    writer.write(request_bytes(10, 1))
    await read_frame(reader)
    writer.close()
    for _ in range(100):
        if "close" in listener.events:
            break
        await asyncio.sleep(0.01)
    reader, writer = await open_raw(server)
    writer.write(struct.pack(">i", -1))
    await asyncio.wait_for(reader.read(), 3)
    writer.close()
    for _ in range(100):
        if listener.events.count("close") == 2:
            break
        await asyncio.sleep(0.01)
    assert listener.events == ["connect", "close", "connect", "exception", "close"]


async def test_stop_lets_queued_requests_finish(make_server) -> None:
    async def slowish(channel, request):
        await asyncio.sleep(0.1)
        return request.response(0)

    executor = RequestExecutor("send", 1, 100)
    server = await make_server({10: (FnProcessor(slowish), executor)})
    reader, writer = await open_raw(server)
    writer.write(b"".join(request_bytes(10, i) for i in range(1, 4)))
    while executor.size + executor.active < 3:
        await asyncio.sleep(0.01)
    stopping = asyncio.ensure_future(server.stop(grace_s=5))
    answered = [(await read_frame(reader)).opaque for _ in range(3)]
    await stopping
    assert answered == [1, 2, 3]
    assert await asyncio.wait_for(reader.read(), 3) == b""
    writer.close()


async def test_answers_before_a_bad_frame_are_delivered_before_the_close(make_server) -> None:
    server = await make_server({10: (FnProcessor(), RequestExecutor("send", 1, 10))})
    reader, writer = await open_raw(server)
    # Unknown code (answered synchronously at dispatch) then a negative length in the same write.
    writer.write(request_bytes(999, 1) + struct.pack(">i", -1))
    resp = await read_frame(reader)
    assert (resp.code, resp.opaque) == (3, 1)
    assert await asyncio.wait_for(reader.read(), 5) == b""
    writer.close()
