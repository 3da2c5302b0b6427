"""Helpers for the mqadmin tests: the CLI run in-process, sending, pulling and heartbeats through real clients,
a background loop."""

from __future__ import annotations

import json

from remoting.client import RemotingClient
from remoting.codes import RequestCode
from remoting.command import RemotingCommand


def run_cli(capsys, broker, *args: str) -> tuple[int, str, str]:
    """``mqadmin ARGS -n <broker's name server>`` in this process: (exit status, stdout, stderr)."""
    from mqclient.mqadmin import main

    code = main([*args, "-n", broker.namesrv_addr])
    out = capsys.readouterr()
    return code, out.out, out.err


def run_json(capsys, broker, *args: str):
    """The command's ``--json`` output, parsed; it must succeed."""
    code, out, err = run_cli(capsys, broker, *args, "--json")
    assert code == 0, err
    return json.loads(out)


async def send_messages(
    broker, topic: str, n: int, *, keys: str | None = None, group: str = "PG_tools", queue_id: int | None = None
) -> list:
    """``n`` messages through mqclient's producer (SEND_MESSAGE_V2); returns the SendResults."""
    from mqclient.message import Message
    from mqclient.producer import Producer, ProducerConfig
    from mqclient.route import MessageQueue

    results = []
    async with Producer(broker.namesrv_addr, ProducerConfig(group=group)) as producer:
        for i in range(n):
            msg = Message(topic, f"body-{i}".encode(), tags="TagA", keys=keys)
            queue = None if queue_id is None else MessageQueue(topic, broker.broker_name, queue_id)
            results.append(await producer.send(msg, queue=queue))
    return results


async def producer_heartbeat(client: RemotingClient, broker, group: str, client_id: str = "127.0.0.1@tools") -> None:
    body = json.dumps({"clientID": client_id, "consumerDataSet": [], "producerDataSet": [{"groupName": group}]})
    resp = await client.invoke(
        broker.broker_addr, RemotingCommand.request(RequestCode.HEART_BEAT, {}, body.encode()), 5.0
    )
    assert resp.code == 0, resp.remark


async def pull(
    client: RemotingClient, broker, topic: str, group: str, queue_id: int, offset: int = 0, max_nums: int = 32
) -> RemotingCommand:
    """One PULL_MESSAGE without suspend, committing nothing."""
    ext = {
        "consumerGroup": group,
        "topic": topic,
        "queueId": str(queue_id),
        "queueOffset": str(offset),
        "maxMsgNums": str(max_nums),
        "sysFlag": "4",
        "commitOffset": "0",
        "suspendTimeoutMillis": "0",
        "subscription": "*",
        "subVersion": "0",
        "expressionType": "TAG",
    }
    return await client.invoke(broker.broker_addr, RemotingCommand.request(RequestCode.PULL_MESSAGE, ext), 5.0)


class BackgroundLoop:
    """An event loop on a thread, for clients that must keep running while a sync test calls the CLI."""

    def __init__(self) -> None:
        import asyncio
        import threading

        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro, timeout_s: float = 30.0):
        import asyncio

        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5.0)
        self.loop.close()
