"""The side-by-side script's pieces: the protocol-ceiling server answers like a broker, the benchmark tools'
lines are parsed, and a machine without the reference tools gets a skip line, not a failure."""

from __future__ import annotations

import orjson

from bench import vs_java
from bench.ceiling_server import serve
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand


async def test_ceiling_answers_sends_with_their_opaque_and_routes_to_itself() -> None:
    server = await serve("127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    addr = f"127.0.0.1:{port}"
    client = RemotingClient()
    try:
        for _ in range(3):  # the client matches answers by opaque: a wrongly patched one would time out
            send = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {"a": "PID", "b": "T"}, b"x" * 1024)
            resp = await client.invoke(addr, send, 3.0)
            assert resp.code == ResponseCode.SUCCESS and resp.opaque == send.opaque
            assert resp.ext_fields["queueId"] == "0" and resp.ext_fields["msgId"]
        route = await client.invoke(
            addr, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Any"}), 3.0
        )
        data = orjson.loads(route.body)
        assert data["brokerDatas"][0]["brokerAddrs"] == {"0": f"127.0.0.1:{port}"}
        other = await client.invoke(addr, RemotingCommand.request(RequestCode.HEART_BEAT), 3.0)
        assert other.code == ResponseCode.SUCCESS
    finally:
        await client.close()
        server.close()


def test_benchmark_lines_are_parsed() -> None:
    send = (
        "Current Time: 2026-11-24 14:26:44,760 Send TPS: 29891 Max RT(ms): 1642 Average RT(ms):   0.534 "
        "Send Failed: 0 Response Failed: 0"
    )
    consume = (
        "Current Time: 2026-11-24 14:26:44,760 TPS: 5689 FAIL: 0 AVG(B2C) RT(ms): 1.250 "
        "AVG(S2C) RT(ms):   3.900 MAX(B2C) RT(ms): 120 MAX(S2C) RT(ms): 140"
    )
    m = vs_java.SEND_LINE.search(send)
    assert m and m.group(1) == "29891" and m.group(3) == "0.534"
    c = vs_java.CONSUME_LINE.search(consume)
    assert c and c.group(1) == "5689" and c.group(4) == "3.900"
    assert vs_java.CONSUME_LINE.search(send) is None
    assert vs_java._median_after_first([100.0, 300.0, 500.0]) == 400.0


def test_missing_reference_tools_skip_cleanly(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("HOME", str(tmp_path))
    assert vs_java.main(["--rmq-bin", str(tmp_path / "nowhere")]) == 0
    assert capsys.readouterr().out.startswith("skipped: Apache RocketMQ 4.9.7 tools not found")


def test_the_mixed_topic_exists_before_the_tools_start() -> None:
    """A consumer started on a missing topic waits out its 30 s route refresh: the mixed phase creates the topic
    first, 4 queues on every master, as the Producer's auto-creation would."""
    import asyncio

    from broker.testing.embedded import EmbeddedBroker
    from mqclient.admin import AdminClient

    async def route(namesrv: str):
        async with AdminClient(namesrv) as admin:
            return await admin.route("MixedFirst")

    with EmbeddedBroker() as broker:
        vs_java.create_topic(broker.namesrv_addr, "MixedFirst", queues=6)  # not a default count: made here
        created = asyncio.run(route(broker.namesrv_addr))
    assert created is not None and len(created.write_queues()) == 6
