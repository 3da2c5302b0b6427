"""The same pulls against our broker and Apache RocketMQ 4.9.7's, side by side: the answer fields a client reads.

Each broker gets the same backlog (batches of 32 to one queue, as ``bench/backlog.py`` fills the drain benchmarks',
here in turn over the queues so that each queue holds the same; the pulls wait until every queue shows all of its
messages, as Java's broker dispatches them a little after it acknowledges them), then every queue is pulled as RocketMQ's benchmark Consumer pulls it (ROCKETMQ-serialized header, 32 messages,
subscription ``*`` in the request) from offset 0, mid-queue, its end (PULL_NOT_FOUND, no suspend) and past it
(PULL_OFFSET_MOVED). Printed per pull: code, remark, the four extFields, the records in the body, whether each
record's queue offset is the one the pull asked for onward, and the first record's body size and property keys.
A line differs where the brokers answer differently. Skips when the Java broker is missing.

    python -m bench.pull_answers [--backlog 1024]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path

from bench.backlog import BATCH, create_topic
from bench.broker_proc import BrokerProcess
from bench.java_broker import JavaBroker
from bench.vs_java import find_reference_bin
from mqclient.admin import AdminClient
from mqclient.message import Message
from mqclient.producer import Producer
from remoting.client import RemotingClient
from remoting.codes import RequestCode
from remoting.command import RemotingCommand
from store.message import decode_records

TOPIC = "PullAnswersTopic"
GROUP = "PullAnswersGroup"
ROCKETMQ = 1


def pull(queue_id: int, offset: int) -> RemotingCommand:
    ext = {
        "consumerGroup": GROUP,
        "topic": TOPIC,
        "queueId": str(queue_id),
        "queueOffset": str(offset),
        "maxMsgNums": "32",
        "sysFlag": "4",  # subscription in the request; no suspend, no offset commit
        "commitOffset": "0",
        "suspendTimeoutMillis": "15000",
        "subVersion": "0",
        "subscription": "*",
        "expressionType": "TAG",
    }
    cmd = RemotingCommand.request(RequestCode.PULL_MESSAGE, ext)
    cmd.serialize_type = ROCKETMQ
    return cmd


async def answers(namesrv: str, backlog: int) -> list[tuple[str, str]]:
    queues = await create_topic(namesrv, TOPIC)
    batch = [Message(TOPIC, b"a" * 1024) for _ in range(BATCH)]
    per_queue = backlog // BATCH // len(queues) * BATCH
    async with Producer(namesrv) as producer:
        for i in range(per_queue // BATCH * len(queues)):
            await producer.send_batch(batch, queue=queues[i % len(queues)])
    async with AdminClient(namesrv) as admin:
        addr = next(iter((await admin.route_masters(TOPIC)).values()))
    client = RemotingClient()
    rows = []
    try:
        for _ in range(100):  # until each queue shows all of its messages
            tops = [(await client.invoke(addr, pull(q, 0), 10)).ext_fields.get("maxOffset") for q in range(4)]
            if tops == [str(per_queue)] * 4:
                break
            await asyncio.sleep(0.1)
        for queue_id in range(4):
            for offset in (0, 32, per_queue // 2 + 5, per_queue, per_queue + 100):
                r = await client.invoke(addr, pull(queue_id, offset), 10)
                records = decode_records(r.body) if r.body else []
                offsets_ok = [m.queue_offset for m in records] == list(range(offset, offset + len(records)))
                ext = ", ".join(f"{k}={r.ext_fields.get(k)}" for k in PULL_KEYS)
                rows.append(
                    (
                        f"q{queue_id}@{offset}",
                        f"code={r.code} remark={r.remark} {ext} records={len(records)} offsets_ok={offsets_ok}"
                        + (
                            f" first: body={len(records[0].body)} B, {sorted(records[0].properties)}" if records else ""
                        ),
                    )
                )
    finally:
        await client.close()
    return rows


PULL_KEYS = ("suggestWhichBrokerId", "nextBeginOffset", "minOffset", "maxOffset")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backlog", type=int, default=1024)
    parser.add_argument("--rmq-bin", help="folder with rmq-anchor (default: PATH, then ~/.cache)")
    args = parser.parse_args(argv)
    bin_dir = find_reference_bin(args.rmq_bin)
    if bin_dir is None:
        print("skipped: Apache RocketMQ 4.9.7 (rmq-anchor) not found; see bench/vs_java.py")
        return 0
    with tempfile.TemporaryDirectory(prefix="pull-answers-") as tmp:
        ours = BrokerProcess(store_dir=Path(tmp) / "store", fault_injection=False).start()
        try:
            our_rows = asyncio.run(answers(ours.namesrv, args.backlog))
        finally:
            ours.stop()
    java = JavaBroker(bin_dir).start()
    try:
        java_rows = asyncio.run(answers(java.namesrv, args.backlog))
    finally:
        java.stop()
    same = 0
    for (label, a), (_, b) in zip(our_rows, java_rows, strict=True):
        mark = "same" if a == b else "DIFF"
        same += a == b
        print(f"{label:10} {mark}\n  ours: {a}\n  java: {b}")
    print(f"{same} of {len(our_rows)} pulls answered alike")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
