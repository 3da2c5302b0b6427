"""A drain's backlog: ``count`` messages of ``size`` bytes on a fresh 4-queue topic, sent in batches by our client.

Shared by the drain benchmarks (``bench.vs_java``, ``bench.consume_ab``, ``bench.pull_trace``) so every broker
drains the same backlog. The size matters: RocketMQ's benchmark Consumer prints a TPS line per 9-second window,
so a backlog smaller than ~10 s of the drain rate runs dry inside the window and the line measures the backlog,
not the broker (``drain_ran_dry``).
"""

from __future__ import annotations

import asyncio
import os

from mqclient.admin import AdminClient
from mqclient.errors import MQClientError
from mqclient.message import Message
from mqclient.producer import Producer

BATCH = 32
#: Seconds of consumption one TPS line of ``benchmark.Consumer`` covers (10 one-second snapshots).
LINE_WINDOW_S = 9.0


async def create_topic(namesrv: str, topic: str, queues: int = 4) -> list:
    async with AdminClient(namesrv) as admin:
        return (await admin.create_topic_everywhere(topic, queues)).write_queues()


async def fill_backlog(namesrv: str, topic: str, count: int, size: int = 1024) -> None:
    queues = await create_topic(namesrv, topic)
    body = os.urandom(size // 2 + 1).hex().encode()[:size]
    batch = [Message(topic, body) for _ in range(BATCH)]
    async with Producer(namesrv) as producer:
        claimed = 0  # batches are claimed before they are sent, so 8 workers never overshoot ``count``

        async def worker(k: int) -> None:
            nonlocal claimed
            i = k
            while claimed < count:
                n = min(BATCH, count - claimed)
                claimed += n
                try:
                    await producer.send_batch(batch[:n], queue=queues[i % len(queues)])
                except MQClientError:  # e.g. the broker's fast failure on a loaded machine: back off, go on
                    claimed -= n
                    await asyncio.sleep(0.2)
                    continue
                i += 1

        await asyncio.gather(*(worker(k) for k in range(8)))


def drain_ran_dry(best_tps: float, backlog: int) -> bool:
    """True when the best line may have consumed most of the backlog: the figure is then a floor, not a rate."""
    return best_tps * LINE_WINDOW_S > 0.8 * backlog
