"""mqadmin commands about consumer and producer groups and their offsets: consumerProgress, consumerConnection,
producerConnection, resetOffsetByTime.
"""

from __future__ import annotations

import argparse
from typing import Any

from mqclient.admin import AdminClient, AdminError, MessageQueue
from mqclient.mqadmin.common import RETRY_PREFIX, AddCommand, Output, fmt_ms, parse_bool, parse_timestamp, table
from remoting.codes import ResponseCode


def add_commands(add: AddCommand) -> None:
    p = add("consumerProgress", cmd_consumer_progress, "A consumer group's progress (all groups without -g)")
    p.add_argument("-g", "--groupName", dest="group")
    p.add_argument("-s", "--showClientIP", dest="show_client_ip", help="accepted for compatibility; ignored")
    p = add("consumerConnection", cmd_consumer_connection, "A consumer group's connections and subscriptions")
    p.add_argument("-g", "--consumerGroup", dest="group", required=True)
    p.add_argument("-b", "--brokerAddr", dest="broker")
    p = add("producerConnection", cmd_producer_connection, "A producer group's connections")
    p.add_argument("-g", "--producerGroup", dest="group", required=True)
    p.add_argument("-t", "--topic", required=True)
    p = add("resetOffsetByTime", cmd_reset_offset_by_time, "Reset a group's offsets of a topic to a time")
    p.add_argument("-g", "--group", required=True)
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-s", "--timestamp", required=True, help="now | epoch ms | yyyy-MM-dd#HH:mm:ss:SSS")
    p.add_argument("-f", "--force", help="true|false (default true)")
    p.add_argument("-c", "--cplus", action="store_true", help="accepted for compatibility; ignored")


async def consume_stats(admin: AdminClient, group: str, topic: str | None = None) -> tuple[float, dict]:
    """Upstream examineConsumeStats: ask each broker of the group's retry topic."""
    brokers = await admin.route_masters(RETRY_PREFIX + group)
    tps = 0.0
    table_: dict[MessageQueue, dict[str, int]] = {}
    for addr in brokers.values():
        t, offsets = await admin.consume_stats(addr, group, topic)
        tps += t
        table_.update(offsets)
    if not table_:
        raise AdminError(
            "Not found the consumer group consume stats, because return offset table is empty, "
            "maybe the consumer not consume any message",
            code=ResponseCode.CONSUMER_NOT_ONLINE,
        )
    return tps, table_


async def _consumer_connection(admin: AdminClient, group: str, broker: str | None = None) -> dict[str, Any]:
    if broker is None:
        brokers = await admin.route_masters(RETRY_PREFIX + group)
        if not brokers:
            raise AdminError(f"no broker serves {RETRY_PREFIX + group}")
        broker = next(iter(brokers.values()))
    cc = await admin.consumer_connection(broker, group)
    if not cc.get("connectionSet"):
        raise AdminError("Not found the consumer group connection", code=ResponseCode.CONSUMER_NOT_ONLINE)
    return cc


async def cmd_consumer_progress(admin: AdminClient, args: argparse.Namespace) -> Output:
    if args.group:
        tps, offsets = await consume_stats(admin, args.group)
        rows, data, diff_total = [], [], 0
        for mq in sorted(offsets):
            o = offsets[mq]
            diff = int(o.get("brokerOffset", 0)) - int(o.get("consumerOffset", 0))
            diff_total += diff
            last = int(o.get("lastTimestamp") or 0)
            rows.append(
                [
                    mq.topic,
                    mq.broker_name,
                    mq.queue_id,
                    o.get("brokerOffset", 0),
                    o.get("consumerOffset", 0),
                    diff,
                    fmt_ms(last) if last else "N/A",
                ]
            )
            data.append(
                {
                    **mq.to_json(),
                    "brokerOffset": o.get("brokerOffset", 0),
                    "consumerOffset": o.get("consumerOffset", 0),
                    "diff": diff,
                    "lastTimestamp": last,
                }
            )
        text = (
            table(["#Topic", "#Broker Name", "#QID", "#Broker Offset", "#Consumer Offset", "#Diff", "#LastTime"], rows)
            + f"\n\nConsume TPS: {tps:.2f}\nDiff Total: {diff_total}"
        )
        return Output({"group": args.group, "consumeTps": tps, "diffTotal": diff_total, "queues": data}, text)
    rows, data = [], []
    for topic in sorted(await admin.topic_list()):
        if not topic.startswith(RETRY_PREFIX):
            continue
        group = topic[len(RETRY_PREFIX) :]
        item: dict[str, Any] = {
            "group": group,
            "count": 0,
            "version": "OFFLINE",
            "consumeType": "",
            "messageModel": "",
            "consumeTps": 0,
            "diffTotal": 0,
        }
        try:
            tps, offsets = await consume_stats(admin, group)
            item["consumeTps"] = int(tps)
            item["diffTotal"] = sum(
                int(o.get("brokerOffset", 0)) - int(o.get("consumerOffset", 0)) for o in offsets.values()
            )
        except AdminError:
            pass
        try:
            cc = await _consumer_connection(admin, group)
            conns = cc.get("connectionSet") or []
            item.update(
                count=len(conns),
                consumeType=_consume_type(cc.get("consumeType")),
                messageModel=cc.get("messageModel") or "",
                version=str(min((int(c.get("version") or 0) for c in conns), default=0)),
            )
        except AdminError:
            pass
        data.append(item)
        rows.append(
            [
                group,
                item["count"],
                item["version"],
                item["consumeType"],
                item["messageModel"],
                item["consumeTps"],
                item["diffTotal"],
            ]
        )
    return Output(data, table(["#Group", "#Count", "#Version", "#Type", "#Model", "#TPS", "#Diff Total"], rows))


def _consume_type(value: Any) -> str:
    text = str(value or "")
    return {"CONSUME_ACTIVELY": "PULL", "CONSUME_PASSIVELY": "PUSH"}.get(text, text)


async def cmd_consumer_connection(admin: AdminClient, args: argparse.Namespace) -> Output:
    cc = await _consumer_connection(admin, args.group, args.broker)
    conns = sorted(cc.get("connectionSet") or [], key=lambda c: str(c.get("clientId")))
    text = table(
        ["#ClientId", "#ClientAddr", "#Language", "#Version"],
        [[c.get("clientId"), c.get("clientAddr"), c.get("language"), c.get("version")] for c in conns],
    )
    subs = cc.get("subscriptionTable") or {}
    text += "\n\nBelow is subscription:\n" + table(
        ["#Topic", "#SubExpression"], [[s.get("topic", t), s.get("subString")] for t, s in sorted(subs.items())]
    )
    text += (
        f"\n\nConsumeType: {cc.get('consumeType')}\nMessageModel: {cc.get('messageModel')}\n"
        f"ConsumeFromWhere: {cc.get('consumeFromWhere')}"
    )
    return Output(cc, text)


async def cmd_producer_connection(admin: AdminClient, args: argparse.Namespace) -> Output:
    brokers = await admin.route_masters(args.topic)
    if not brokers:
        raise AdminError(f"no broker serves topic {args.topic}")
    pc = await admin.producer_connection(next(iter(brokers.values())), args.group)
    conns = sorted(pc.get("connectionSet") or [], key=lambda c: str(c.get("clientId")))
    if not conns:
        raise AdminError("Not found the producer group connection")
    rows = [
        [f"{i:04d}", c.get("clientId"), c.get("clientAddr"), c.get("language"), c.get("version")]
        for i, c in enumerate(conns, 1)
    ]
    return Output(pc, table(["#", "#ClientId", "#ClientAddr", "#Language", "#Version"], rows))


async def cmd_reset_offset_by_time(admin: AdminClient, args: argparse.Namespace) -> Output:
    timestamp = parse_timestamp(args.timestamp)
    force = parse_bool(args.force) if args.force is not None else True
    brokers = await admin.route_masters(args.topic)
    if not brokers:
        raise AdminError(f"no broker serves topic {args.topic}")
    header = (
        f"rollback consumer offset by specified group[{args.group}], topic[{args.topic}], force[{force}], "
        f"timestamp(string)[{args.timestamp}], timestamp(long)[{timestamp}]"
    )
    offsets: dict[MessageQueue, int] = {}
    try:
        for addr in brokers.values():
            offsets.update(await admin.reset_offset(addr, args.topic, args.group, timestamp, force))
    except AdminError as exc:
        # Upstream falls back to committing offsets itself when the group is not online; so do we,
        # and also when the broker does not serve 222 at all.
        if exc.code not in (ResponseCode.CONSUMER_NOT_ONLINE, ResponseCode.REQUEST_CODE_NOT_SUPPORTED):
            raise
        return await _reset_offset_old(admin, args, brokers, timestamp, force, header)
    data = [{**mq.to_json(), "offset": off} for mq, off in sorted(offsets.items())]
    rows = [[mq.broker_name, mq.queue_id, off] for mq, off in sorted(offsets.items())]
    return Output(
        {"group": args.group, "topic": args.topic, "timestamp": timestamp, "force": force, "offsets": data},
        header + "\n" + table(["#brokerName", "#queueId", "#offset"], rows),
    )


async def _reset_offset_old(
    admin: AdminClient, args: argparse.Namespace, brokers: dict[str, str], timestamp: int, force: bool, header: str
) -> Output:
    """Upstream resetOffsetByTimestampOld: read the group's offsets, look the timestamp up, commit (15)."""
    route = await admin.topic_route(args.topic)
    read_queues = {q.get("brokerName"): int(q.get("readQueueNums") or 0) for q in route.get("queueDatas") or []}
    rows, data = [], []
    for name, addr in brokers.items():
        _, offsets = await admin.consume_stats(addr, args.group)
        queues = {mq: o for mq, o in offsets.items() if mq.topic == args.topic}
        if not queues:  # the group never consumed here: start from each queue's min offset
            stats = await admin.topic_stats(addr, args.topic)
            for q in range(read_queues.get(name, 0)):
                mq = MessageQueue(args.topic, name, q)
                s = stats.get(mq, {})
                queues[mq] = {"brokerOffset": s.get("maxOffset", 0), "consumerOffset": s.get("minOffset", 0)}
        for mq in sorted(queues):
            o = queues[mq]
            consumer_offset = int(o.get("consumerOffset", 0))
            target = (
                await admin.max_offset(addr, mq.topic, mq.queue_id)
                if timestamp == -1
                else await admin.search_offset(addr, mq.topic, mq.queue_id, timestamp)
            )
            rollback = consumer_offset
            if force or target <= consumer_offset:
                rollback = target
                await admin.update_consumer_offset(addr, args.group, mq.topic, mq.queue_id, target)
            item = {
                **mq.to_json(),
                "brokerOffset": int(o.get("brokerOffset", 0)),
                "consumerOffset": consumer_offset,
                "timestampOffset": target,
                "rollbackOffset": rollback,
            }
            data.append(item)
            rows.append([mq.broker_name, mq.queue_id, item["brokerOffset"], consumer_offset, target, rollback])
    text = (
        header
        + "\n"
        + table(
            ["#brokerName", "#queueId", "#brokerOffset", "#consumerOffset", "#timestampOffset", "#rollbackOffset"], rows
        )
    )
    return Output(
        {
            "group": args.group,
            "topic": args.topic,
            "timestamp": timestamp,
            "force": force,
            "offline": True,
            "offsets": data,
        },
        text,
    )
