"""RequestExecutor.pause: the fault-injection hook that stalls a worker pool without blocking the loop."""

from __future__ import annotations

import asyncio

from remoting.command import RemotingCommand
from remoting.executor import RequestExecutor, RequestTask
from remoting.offline_channel import OfflineChannel


class _Channel(OfflineChannel):
    def __init__(self):
        super().__init__()
        self.sent = []

    def send(self, cmd):
        self.sent.append(cmd)


class _Processor:
    def __init__(self):
        self.times = []

    async def process_request(self, channel, request):
        self.times.append(asyncio.get_running_loop().time())
        return request.response(0)


async def test_paused_workers_take_nothing_until_resumed():
    ex = RequestExecutor("send", 2, 10)
    ex.start()
    proc = _Processor()
    ch = _Channel()
    loop = asyncio.get_running_loop()
    ex.pause(0.3)
    t0 = loop.time()
    ex.submit(RequestTask(ch, RemotingCommand.request(10, {}, opaque=1), 0, processor=proc))
    await asyncio.sleep(0.15)
    assert ch.sent == [] and ex.size == 1 and ex.paused  # the request ages in the queue
    await asyncio.sleep(0.4)
    assert len(ch.sent) == 1 and proc.times[0] - t0 >= 0.29
    ex.pause(10)
    ex.resume()
    ex.submit(RequestTask(ch, RemotingCommand.request(10, {}, opaque=2), 0, processor=proc))
    await asyncio.sleep(0.2)
    assert len(ch.sent) == 2
    await ex.stop(1)
