"""CPU cost of the consume path inside one broker process: microseconds per PULL_MESSAGE, no network.

End-to-end consume figures on a shared 2-core machine swing by 2x from one minute to the next (the broker is
latency-bound there, at 15% of a core), so this measures what the broker spends on its side alone: an in-process
BrokerController gets a backlog, a consumer group registers by heartbeat (as the Java push consumer does: its
pulls carry no subscription), then

- **drain**: pulls of 32 messages walk the backlog (processor + response encoding + offset commit);
- **drain through dispatch**: the same pulls handed to ``RemotingServer.dispatch`` (executor task, metrics
  wrapper, coroutines, the answer's write): the per-pull fixed cost around the processor;
- **caught up**: a pull parks (long polling), one message arrives, the woken pull answers it — the
  consume-while-producing cycle, one message per pull; then the same with the pull handed to ``dispatch``.

    python -m bench.pull_cost [--backlog 20000] [--repeat 5] [--bytecodes] [--serialize rocketmq|json] [--batch 32]

``--batch N`` stores the backlog in runs of N messages per queue, as a batch sent to one queue lies (the drain
benchmarks' backlogs are filled so, ``bench/backlog.py``): a queue's records are then back to back in the commit
log. The default, 1, sends round robin over the queues, as the Java Producer does (records interleaved).

Each pull request is decoded from its frame, as the server decodes it, in the serialization RocketMQ 4.9.7's
benchmark Consumer uses (``--serialize``, default ROCKETMQ: its main sets ``rocketmq.serialize.type``, as the
benchmark Producer's does), and each answer is encoded in it (the request's type).

``--bytecodes`` counts the Python bytecodes the loop thread executes instead (``sys.settrace`` opcode events):
a figure the other processes on the machine cannot move, to compare two checkouts with
(``PYTHONPATH=<checkout> python bench/pull_cost.py --bytecodes`` for each).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import orjson

from bench.opcode_counter import OpcodeCounter
from broker.controller import BrokerController
from broker.testing.in_loop import start_in_loop
from remoting import loop as loop_choice
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.headers import SendMessageRequestHeader, encode_header
from remoting.offline_channel import OfflineChannel

TOPIC = "PullCostTopic"
ROCKETMQ, JSON = 1, 0  # SerializeType
SERIALIZE = {"rocketmq": ROCKETMQ, "json": JSON}
GROUP = "PullCostGroup"
QUEUES = 4
ROUND_ARRIVALS = 4  # the "arrivals a wake round" line: messages a woken pull answers at once


class SinkChannel(OfflineChannel):
    """A channel that encodes what it is sent (as the real one does) and keeps the last answer."""

    def __init__(self) -> None:
        super().__init__()
        self.last: RemotingCommand | None = None
        self.bytes = 0

    def send(self, cmd: RemotingCommand) -> None:
        self.last = cmd
        self.bytes += sum(map(len, cmd.encode()))  # (no generator: the meter counts this channel's Python too)


def send_request(queue_id: int, body: bytes) -> RemotingCommand:
    hdr = SendMessageRequestHeader(
        producer_group="PG",
        topic=TOPIC,
        default_topic="TBW102",
        default_topic_queue_nums=QUEUES,
        queue_id=queue_id,
        sys_flag=0,
        born_timestamp=int(time.time() * 1000),
        flag=0,
        properties="",
    )
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, encode_header(hdr.to_v2()), body)


def pull_frame(queue_id: int, offset: int, commit: int, serialize: int = ROCKETMQ) -> bytes:
    """A PULL_MESSAGE's frame after its length word, as a consumer sends it (built before the meter starts: the
    client's encode is not the broker's cost; its decode is, as the server decodes it: `decode`)."""
    ext = {
        "consumerGroup": GROUP,
        "topic": TOPIC,
        "queueId": str(queue_id),
        "queueOffset": str(offset),
        "maxMsgNums": "32",
        "sysFlag": "3",  # commit offset + suspend; no subscription (the Java push consumer)
        "commitOffset": str(commit),
        "suspendTimeoutMillis": "15000",
        "subVersion": "0",
        "expressionType": "TAG",
    }
    frame = RemotingCommand.request(RequestCode.PULL_MESSAGE, ext, serialize_type=serialize).to_bytes()
    return frame[4:]


def decode(frame: bytes) -> RemotingCommand:
    """The request of ``frame`` as a connection decodes it: ``RemotingCommand.decode_at`` of the frame in the bytes of
    one read (``RemotingProtocol._process``), which reads a header of a learned layout in one piece into a
    ``LayoutCommand`` (``RemotingCommand.decode``, which the harness used before, costs ~100 bytecodes more)."""
    return RemotingCommand.decode_at(frame, 0, len(frame))


def heartbeat() -> RemotingCommand:
    body = {
        "clientID": "127.0.0.1@pullcost",
        "consumerDataSet": [
            {
                "groupName": GROUP,
                "consumeType": "CONSUME_PASSIVELY",
                "messageModel": "CLUSTERING",
                "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                "subscriptionDataSet": [{"topic": TOPIC, "subString": "*", "subVersion": 1, "expressionType": "TAG"}],
            }
        ],
        "producerDataSet": [],
    }
    return RemotingCommand.request(RequestCode.HEART_BEAT, {}, orjson.dumps(body))


class Meter:
    """Loop-thread CPU microseconds, or bytecodes with ``bytecodes``, between ``start`` and ``stop``."""

    def __init__(self, bytecodes: bool) -> None:
        self.ops = OpcodeCounter() if bytecodes else None
        self.unit = "bytecodes" if bytecodes else "us"
        self._started = 0.0

    def start(self) -> None:
        if self.ops is not None:
            self.ops.count = 0
            sys.settrace(self.ops.trace)
        else:
            self._started = time.thread_time()

    def stop(self, per: int) -> float:
        if self.ops is not None:
            sys.settrace(None)
            return self.ops.count / per
        return (time.thread_time() - self._started) / per * 1e6


async def measure(
    backlog: int, repeat: int, bytecodes: bool = False, serialize: int = ROCKETMQ, batch: int = 1
) -> None:
    with tempfile.TemporaryDirectory(prefix="pull-cost-") as tmp:
        broker = await start_in_loop(Path(tmp) / "store", mappedFileSizeCommitLog=256 * 1024 * 1024)
        # (a shared machine's disk may be over the store's 90 % mark, where it refuses every put: the harness stores a
        # few MB, so its mark is 99 %)
        broker.store.config.disk_space_warning_level_ratio = 0.99
        broker.store._disk_full = False
        client = RemotingClient()
        try:
            await run(broker, client, backlog, repeat, Meter(bytecodes), serialize, batch)
        finally:
            await client.close()
            await broker.shutdown()


async def run(
    broker: BrokerController,
    client: RemotingClient,
    backlog: int,
    repeat: int,
    meter: Meter,
    serialize: int,
    batch: int = 1,
) -> None:
    addr = broker.config.broker_addr
    body = b"m" * 1024
    sink = SinkChannel()
    send = broker.send_processor
    for i in range(backlog):
        await send.process_request(sink, send_request(i // batch % QUEUES, body))
    assert (await client.invoke(addr, heartbeat(), 5)).code == ResponseCode.SUCCESS
    pull = broker.pull_processor
    per_queue = backlog // QUEUES
    frames = {(q, o): pull_frame(q, o, o, serialize) for q in range(QUEUES) for o in range(0, per_queue, 32)}

    async def processed(frame: bytes) -> RemotingCommand:
        response = await pull.process_request(sink, decode(frame))
        assert response is not None
        sink.send(response)
        return response

    async def dispatched(frame: bytes) -> RemotingCommand:
        sink.last = None
        broker.server.dispatch(sink, decode(frame))
        while sink.last is None:  # (run at once when a worker is idle, as here; else queued)
            await asyncio.sleep(0)
        return sink.last

    def next_offset(response: RemotingCommand) -> int:
        """The answer's nextBeginOffset: a pull's answer holds it as an int (reading its extFields would build the
        map, which nothing on the way to the socket does: not the broker's cost)."""
        held = getattr(response, "next_begin_offset", None)
        return held if held is not None else int(response.ext_fields["nextBeginOffset"])

    async def drain_all(pull_one: Callable[[bytes], Awaitable[RemotingCommand]]) -> float:
        """Every queue drained from offset 0 by pulls of 32; the meter's figure per pull."""
        pulls = 0
        meter.start()
        for q in range(QUEUES):
            offset = 0
            while offset < per_queue:
                response = await pull_one(frames[q, offset])
                assert response.code == ResponseCode.SUCCESS, response
                offset = next_offset(response)
                pulls += 1
        return meter.stop(pulls)

    drain = [await drain_all(processed) for _ in range(repeat)]
    u = meter.unit
    print(f"drain: {min(drain):.1f} {u} per pull of 32 (best of {repeat}, loop thread; {len(frames)} pulls each)")

    # the same pulls through the server's dispatch (executor task, metrics wrapper, coroutines, answer's write):
    # the per-pull fixed cost around the processor
    through_dispatch = [await drain_all(dispatched) for _ in range(repeat)]
    print(f"  through RemotingServer.dispatch: {min(through_dispatch):.1f} {u} per pull of 32 (the processor's above)")

    # caught up: park, one arrival, the woken pull answers. (Woken pulls re-run in the next loop turn, not at the end
    # of a 1 ms round, broker/pull_wake.py: the cycle counts the work of one message's park, wake and answer.)
    wake_rounds = getattr(broker, "pull_wake", None)  # (a checkout before the rounds re-runs in the next turn)
    if wake_rounds is not None:
        wake_rounds.round_s = 0.0
    rounds = 2000
    cycle: list[float] = []
    for _ in range(repeat):
        sink.last = None
        first = broker.store.get_max_offset_in_queue(TOPIC, 0)
        frames = {o: pull_frame(0, o, o, serialize) for o in range(first, first + rounds)}
        meter.start()
        for offset in range(first, first + rounds):  # (each round sends queue 0 one message)
            assert await pull.process_request(sink, decode(frames[offset])) is None  # parked
            await send.process_request(sink, send_request(0, body))
            for _ in range(3):  # the wake-up is deferred to the loop
                await asyncio.sleep(0)
        cycle.append(meter.stop(rounds))
        assert sink.last is not None and sink.last.code == ResponseCode.SUCCESS
        assert broker.store.get_max_offset_in_queue(TOPIC, 0) == first + rounds  # (the rounds' offsets were the end)
    # the same cycle with the pull handed to the server's dispatch, as a connection hands it over (the send as
    # above): the per-pull fixed cost around the processor, paid once per caught-up pull (the woken answer is
    # written by the hold service itself)
    cycle_dispatched: list[float] = []
    pull_executor = broker.executors["pull"]
    for _ in range(repeat):
        sink.last = None
        first = broker.store.get_max_offset_in_queue(TOPIC, 0)
        frames = {o: pull_frame(0, o, o, serialize) for o in range(first, first + rounds)}
        meter.start()
        for offset in range(first, first + rounds):
            done = pull_executor.completed
            broker.server.dispatch(sink, decode(frames[offset]))
            while pull_executor.completed == done:  # parked at once when a worker is idle, as here
                await asyncio.sleep(0)
            await send.process_request(sink, send_request(0, body))
            for _ in range(3):
                await asyncio.sleep(0)
        cycle_dispatched.append(meter.stop(rounds))
        assert sink.last is not None and sink.last.code == ResponseCode.SUCCESS
        assert broker.store.get_max_offset_in_queue(TOPIC, 0) == first + rounds  # (the rounds' offsets were the end)
    # a round's arrivals: the park, ROUND_ARRIVALS sends before the woken pull re-runs (as a wake round of
    # broker/pull_wake.py gathers them), one answer of them all; per message
    round_cycle: list[float] = []
    for _ in range(repeat):
        sink.last = None
        first = broker.store.get_max_offset_in_queue(TOPIC, 0)
        offsets = range(first, first + rounds, ROUND_ARRIVALS)
        frames = {o: pull_frame(0, o, o, serialize) for o in offsets}
        meter.start()
        for offset in offsets:
            assert await pull.process_request(sink, decode(frames[offset])) is None  # parked
            for _ in range(ROUND_ARRIVALS):
                await send.process_request(sink, send_request(0, body))
            for _ in range(3):
                await asyncio.sleep(0)
        round_cycle.append(meter.stop(rounds))
        assert sink.last is not None and next_offset(sink.last) == first + rounds
    alone: list[float] = []
    for _ in range(repeat):
        meter.start()
        for _ in range(rounds):
            await send.process_request(sink, send_request(1, body))
            for _ in range(3):
                await asyncio.sleep(0)
        alone.append(meter.stop(rounds))
    print(f"caught up: {min(cycle):.1f} {u} per park + send + wake + answer of one message")
    print(f"  of which the send alone: {min(alone):.1f} {u}; the consume side: {min(cycle) - min(alone):.1f} {u}")
    print(
        f"  the pull through RemotingServer.dispatch: {min(cycle_dispatched):.1f} {u}; the consume side:"
        f" {min(cycle_dispatched) - min(alone):.1f} {u}"
    )
    print(
        f"caught up, {ROUND_ARRIVALS} arrivals a wake round: {min(round_cycle):.1f} {u} per message; the consume side:"
        f" {min(round_cycle) - min(alone):.1f} {u}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backlog", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=1, help="messages per queue in a row (1: round robin)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--bytecodes", action="store_true", help="count Python bytecodes instead of CPU time")
    parser.add_argument("--serialize", choices=sorted(SERIALIZE), default="rocketmq", help="the pulls' header type")
    args = parser.parse_args(argv)
    loop_choice.install()  # uvloop when installed, as the broker runs (remoting.loop)
    asyncio.run(measure(args.backlog, args.repeat, args.bytecodes, SERIALIZE[args.serialize], args.batch))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
