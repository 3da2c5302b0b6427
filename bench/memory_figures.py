"""Private memory of a broker subprocess after what issue 13 (item 5) found kept alive, printed as figures.

    python -m bench.memory_figures [--queues 290] [--requests 40] [--partials 8]

Phases, each measured after the connections involved have closed (private = Private_Clean + Private_Dirty of
/proc/PID/smaps_rollup; RSS also counts the shared file pages the store maps):
1. after boot;
2. after ``--requests`` requests each carrying a 4 MiB remark, one connection each;
3. after ``--partials`` connections that each sent 15 MiB of a frame and closed;
4. after ``--queues`` topics got one message each, a restart on the same store (every queue recovered).
Runs only on 127.0.0.1 and prints one line per phase.
"""

from __future__ import annotations

import argparse
import asyncio
import struct
import tempfile
import time
from pathlib import Path

from bench.broker_proc import SMALL_STORE, BrokerProcess, rss_bytes
from mqclient import Message, Producer
from remoting.client import RemotingClient
from remoting.command import RemotingCommand

MiB = 1024 * 1024
GET_BROKER_RUNTIME_INFO = 28


def private_bytes(pid: int) -> int:
    total = 0
    with open(f"/proc/{pid}/smaps_rollup", encoding="ascii") as f:
        for line in f:
            if line.startswith(("Private_Clean:", "Private_Dirty:")):
                total += int(line.split()[1]) * 1024
    return total


def figure(broker: BrokerProcess, phase: str) -> None:
    assert broker.proc is not None
    pid = broker.proc.pid
    print(
        f"{phase:<44} private {private_bytes(pid) / MiB:8.1f} MiB   rss {(rss_bytes(pid) or 0) / MiB:8.1f} MiB",
        flush=True,
    )


async def big_remarks(addr: str, n: int) -> None:
    for _ in range(n):
        client = RemotingClient()
        try:
            request = RemotingCommand.request(GET_BROKER_RUNTIME_INFO, {})
            request.remark = "r" * (4 * MiB)
            await client.invoke(addr, request, 30)
        finally:
            await client.close()


async def partial_frames(addr: str, n: int) -> None:
    host, port = addr.rsplit(":", 1)
    writers = []
    for _ in range(n):
        _, writer = await asyncio.open_connection(host, int(port))
        writer.write(struct.pack(">i", 16 * MiB - 64) + b"p" * (15 * MiB))
        await writer.drain()
        writers.append(writer)
    await asyncio.sleep(1.0)
    for writer in writers:
        writer.close()
        await writer.wait_closed()


async def many_queues(namesrv: str, n: int) -> None:
    async with Producer(namesrv) as producer:
        for i in range(n):
            await producer.send(Message(f"MemQ{i}", b"x" * 100))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queues", type=int, default=290, help="topics created before the restart")
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--partials", type=int, default=8)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="memfig-") as tmp:
        store = Path(tmp) / "store"
        config = dict(SMALL_STORE, defaultTopicQueueNums="1")
        broker = BrokerProcess(store_dir=store, config=config, fault_injection=False).start()
        try:
            time.sleep(1.0)
            figure(broker, "1. after boot")
            asyncio.run(big_remarks(broker.broker_addr, args.requests))
            time.sleep(1.0)
            figure(broker, f"2. after {args.requests} requests with a 4 MiB remark")
            asyncio.run(partial_frames(broker.broker_addr, args.partials))
            time.sleep(1.0)
            figure(broker, f"3. after {args.partials} partial 15 MiB frames")
            asyncio.run(many_queues(broker.namesrv, args.queues))
            figure(broker, f"4a. after one message to {args.queues} topics")
        finally:
            broker.stop()
        broker = BrokerProcess(
            store_dir=store,
            config=config,
            fault_injection=False,
            listen_port=broker.listen_port,
            namesrv_port=broker.namesrv_port,
        ).start()
        try:
            time.sleep(1.0)
            figure(broker, f"4b. after a restart with {args.queues} queues")
        finally:
            broker.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
