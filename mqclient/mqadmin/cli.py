"""``mqadmin``: upstream's admin commands (same names and option letters) plus fault injection.

``mqadmin <command> -n host:port[;host:port] [options] [--json] [--ak KEY --sk SECRET]``; the name server
also comes from ``NAMESRV_ADDR``. Each command sends the requests upstream's tool sends (see ``AdminClient``)
and prints a readable table, or with ``--json`` the data as JSON. With ``--ak``/``--sk`` (or
``ROCKETMQ_ACCESS_KEY``/``ROCKETMQ_SECRET_KEY``) every request is signed for a broker with ``aclEnable=true``;
admin commands then need an admin account. Exit status: 0 done, 1 a request failed or was
refused (the reason goes to stderr), 2 bad usage.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from mqclient.admin import (
    LONG_MAX,
    ORDER_TOPIC_CONFIG,
    AdminClient,
    AdminError,
    MessageQueue,
    StoredMessage,
    decode_offset_msg_id,
    message_json,
)
from remoting.codes import ResponseCode
from remoting.headers import CreateAccessConfigRequestHeader
from remoting.signature import SessionCredentials

DEFAULT_NAMESRV = "127.0.0.1:9876"
RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
FAULT_KINDS = ("stall_queue", "stall_send_workers", "stall_append", "drain_transient_pool", "slow_fsync", "clear")


class UsageError(Exception):
    """Bad command-line input (exit status 2)."""


@dataclass
class Output:
    data: Any
    text: str


# ------------------------------------------------------------------------------------------------
# rendering


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Left-aligned columns two spaces apart; numbers right-aligned."""
    cells = [[str(h) for h in headers]] + [["" if v is None else str(v) for v in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    numeric = [all(_is_number(row[i]) for row in rows) and bool(rows) for i in range(len(headers))]
    lines = []
    for r in cells:
        parts = [
            c.rjust(w) if numeric[i] and r is not cells[0] else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))
        ]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def fmt_ms(ms: int) -> str:
    """Upstream's timeMillisToHumanString2 shape: ``2024-05-01 12:00:00,123`` (local time)."""
    if ms <= 0:
        return ""
    dt = datetime.fromtimestamp(ms / 1000)
    return dt.strftime("%Y-%m-%d %H:%M:%S,") + f"{ms % 1000:03d}"


def _float(text: str | None) -> float:
    try:
        return float((text or "0").split()[0])
    except (ValueError, IndexError):
        return 0.0


def _int(text: str | None) -> int:
    try:
        return int(text or 0)
    except ValueError:
        return 0


def parse_bool(text: str) -> bool:
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise UsageError(f"expected true or false, got {text!r}")
    return value == "true"


def parse_timestamp(text: str) -> int:
    """``now`` → -1 (upstream), epoch milliseconds, or ``yyyy-MM-dd#HH:mm:ss:SSS`` (local time)."""
    text = text.strip()
    if text == "now":
        return -1
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        dt = datetime.strptime(text, "%Y-%m-%d#%H:%M:%S:%f")
    except ValueError:
        raise UsageError(f"bad timestamp {text!r}: use now, epoch milliseconds or yyyy-MM-dd#HH:mm:ss:SSS") from None
    return int(dt.timestamp() * 1000)


# ------------------------------------------------------------------------------------------------
# targets


async def _targets(admin: AdminClient, args: argparse.Namespace, *, masters_only: bool = True) -> list[str]:
    """Broker addresses named by ``-b`` or, with ``-c``, the cluster's masters (or every broker)."""
    if getattr(args, "broker", None):
        return [args.broker]
    if getattr(args, "cluster", None):
        if masters_only:
            return list((await admin.masters(args.cluster)).values())
        info = await admin.cluster_info()
        names = info["clusterAddrTable"].get(args.cluster)
        if names is None:
            raise AdminError(f"cluster {args.cluster!r} is not known to the name server")
        return [
            addr
            for name in sorted(names)
            for _, addr in sorted(((info["brokerAddrTable"].get(name) or {}).get("brokerAddrs") or {}).items())
        ]
    raise UsageError("name a broker with -b host:port or a cluster with -c name")


# ------------------------------------------------------------------------------------------------
# cluster and brokers


async def cmd_cluster_list(admin: AdminClient, args: argparse.Namespace) -> Output:
    info = await admin.cluster_info()
    brokers = []
    for cluster, names in sorted(info["clusterAddrTable"].items()):
        for name in sorted(names):
            addrs = (info["brokerAddrTable"].get(name) or {}).get("brokerAddrs") or {}
            for bid, addr in sorted(addrs.items(), key=lambda kv: int(kv[0])):
                brokers.append((cluster, name, int(bid), addr))
    stats = await admin.gather({addr: admin.runtime_info(addr) for _, _, _, addr in brokers})
    now = int(time.time() * 1000)
    rows, data = [], []
    for cluster, name, bid, addr in brokers:
        kv = stats[addr] if isinstance(stats[addr], dict) else {}
        if args.more:
            item = {
                "cluster": cluster,
                "brokerName": name,
                "brokerId": bid,
                "addr": addr,
                "inTotalYest": _int(kv.get("msgPutTotalTodayMorning")) - _int(kv.get("msgPutTotalYesterdayMorning")),
                "outTotalYest": _int(kv.get("msgGetTotalTodayMorning")) - _int(kv.get("msgGetTotalYesterdayMorning")),
                "inTotalToday": _int(kv.get("msgPutTotalTodayNow")) - _int(kv.get("msgPutTotalTodayMorning")),
                "outTotalToday": _int(kv.get("msgGetTotalTodayNow")) - _int(kv.get("msgGetTotalTodayMorning")),
            }
            rows.append(
                [cluster, name, item["inTotalYest"], item["outTotalYest"], item["inTotalToday"], item["outTotalToday"]]
            )
        else:
            earliest = _int(kv.get("earliestMessageTimeStamp"))
            item = {
                "cluster": cluster,
                "brokerName": name,
                "brokerId": bid,
                "addr": addr,
                "version": kv.get("brokerVersionDesc", ""),
                "inTps": _float(kv.get("putTps")),
                "outTps": _float(kv.get("getTransferedTps")),
                "sendQueueSize": _int(kv.get("sendThreadPoolQueueSize")),
                "sendQueueHeadWaitMs": _int(kv.get("sendThreadPoolQueueHeadWaitTimeMills")),
                "pullQueueSize": _int(kv.get("pullThreadPoolQueueSize")),
                "pullQueueHeadWaitMs": _int(kv.get("pullThreadPoolQueueHeadWaitTimeMills")),
                "pageCacheLockTimeMills": _int(kv.get("pageCacheLockTimeMills")),
                "hours": round((now - earliest) / 3_600_000, 2) if earliest > 0 else 0.0,
                "commitLogDiskRatio": _float(kv.get("commitLogDiskRatio")),
            }
            if not kv:
                item["error"] = str(stats[addr])
            rows.append(
                [
                    cluster,
                    name,
                    bid,
                    addr,
                    item["version"],
                    f"{item['inTps']:.2f}({item['sendQueueSize']},{item['sendQueueHeadWaitMs']}ms)",
                    f"{item['outTps']:.2f}({item['pullQueueSize']},{item['pullQueueHeadWaitMs']}ms)",
                    item["pageCacheLockTimeMills"],
                    f"{item['hours']:.2f}",
                    f"{item['commitLogDiskRatio']:.4f}",
                ]
            )
        data.append(item)
    if args.more:
        text = table(
            ["#Cluster Name", "#Broker Name", "#InTotalYest", "#OutTotalYest", "#InTotalToday", "#OutTotalToday"], rows
        )
    else:
        text = table(
            [
                "#Cluster Name",
                "#Broker Name",
                "#BID",
                "#Addr",
                "#Version",
                "#InTPS(LOAD)",
                "#OutTPS(LOAD)",
                "#PCWait(ms)",
                "#Hour",
                "#SPACE",
            ],
            rows,
        )
    return Output(data, text)


async def cmd_broker_status(admin: AdminClient, args: argparse.Namespace) -> Output:
    addrs = await _targets(admin, args, masters_only=False)
    results = await admin.gather({addr: admin.runtime_info(addr) for addr in addrs})
    data, lines = {}, []
    for addr in addrs:
        kv = results[addr]
        if isinstance(kv, AdminError):
            if len(addrs) == 1:
                raise kv
            data[addr] = {"error": str(kv)}
            lines.append(f"{addr}  error: {kv}")
            continue
        data[addr] = dict(sorted(kv.items()))
        width = max((len(k) for k in kv), default=0)
        prefix = f"{addr}  " if len(addrs) > 1 else ""
        lines.extend(f"{prefix}{k.ljust(width)} : {v}" for k, v in sorted(kv.items()))
    return Output(data if len(addrs) > 1 else data[addrs[0]], "\n".join(lines))


async def cmd_get_broker_config(admin: AdminClient, args: argparse.Namespace) -> Output:
    addrs = await _targets(admin, args, masters_only=False)
    data, lines = {}, []
    for addr in addrs:
        props = await admin.broker_config(addr)
        data[addr] = props
        width = max((len(k) for k in props), default=0)
        lines.append(f"============{addr}============")
        lines.extend(f"{k.ljust(width)} = {v}" for k, v in sorted(props.items()))
    return Output(data if len(addrs) > 1 else data[addrs[0]], "\n".join(lines))


async def cmd_update_broker_config(admin: AdminClient, args: argparse.Namespace) -> Output:
    addrs = await _targets(admin, args)
    for addr in addrs:
        await admin.update_broker_config(addr, {args.key: args.value})
    return Output(
        {"updated": addrs, "key": args.key, "value": args.value},
        "\n".join(f"update broker config success, {addr}" for addr in addrs),
    )


async def cmd_set_log_level(admin: AdminClient, args: argparse.Namespace) -> Output:
    props = {}
    if args.level:
        props["logLevel"] = args.level
    if args.request_log is not None:
        props["requestLogEnable"] = str(parse_bool(args.request_log)).lower()
    if not props:
        raise UsageError("give -l LEVEL and/or --request-log true|false")
    addrs = await _targets(admin, args)
    for addr in addrs:
        await admin.update_broker_config(addr, props)
    return Output(
        {"updated": addrs, **props},
        "\n".join(f"{addr}: " + ", ".join(f"{k}={v}" for k, v in props.items()) for addr in addrs),
    )


# ------------------------------------------------------------------------------------------------
# topics


async def cmd_topic_list(admin: AdminClient, args: argparse.Namespace) -> Output:
    topics = sorted(await admin.topic_list())
    if not args.cluster_mode:
        return Output(topics, "\n".join(topics))
    info = await admin.cluster_info()
    broker_cluster = {name: cluster for cluster, names in info["clusterAddrTable"].items() for name in names}
    rows, data = [], []
    for topic in topics:
        if topic.startswith((RETRY_PREFIX, DLQ_PREFIX)):
            continue
        cluster, groups = "", []
        try:
            brokers = await admin.route_masters(topic)
            if brokers:
                name, addr = next(iter(brokers.items()))
                cluster = broker_cluster.get(name, "")
                groups = await admin.topic_consume_by_who(addr, topic)
        except AdminError:
            pass
        for group in groups or [""]:
            rows.append([cluster, topic, group])
            data.append({"cluster": cluster, "topic": topic, "consumerGroup": group})
    return Output(data, table(["#Cluster Name", "#Topic", "#Consumer Group"], rows))


async def cmd_topic_route(admin: AdminClient, args: argparse.Namespace) -> Output:
    route = await admin.topic_route(args.topic)
    if not args.list:
        return Output(route, json.dumps(route, indent=2, sort_keys=True))
    queues = {q.get("brokerName"): q for q in route.get("queueDatas") or []}
    rows, total_r, total_w = [], 0, 0
    for bd in sorted(route.get("brokerDatas") or [], key=lambda b: b.get("brokerName", "")):
        q = queues.get(bd.get("brokerName")) or {}
        total_r += int(q.get("readQueueNums") or 0)
        total_w += int(q.get("writeQueueNums") or 0)
        rows.append(
            [
                bd.get("cluster"),
                bd.get("brokerName"),
                json.dumps(bd.get("brokerAddrs")),
                q.get("readQueueNums"),
                q.get("writeQueueNums"),
                q.get("perm"),
            ]
        )
    rows.append(["Total:", len(queues), "", total_r, total_w, ""])
    return Output(
        route, table(["#ClusterName", "#BrokerName", "#BrokerAddrs", "#ReadQueue", "#WriteQueue", "#Perm"], rows)
    )


async def cmd_topic_status(admin: AdminClient, args: argparse.Namespace) -> Output:
    brokers = await admin.route_masters(args.topic)
    merged: dict[MessageQueue, dict[str, int]] = {}
    for addr in brokers.values():
        merged.update(await admin.topic_stats(addr, args.topic))
    if not merged:
        raise AdminError(f"Not found the topic stats info of {args.topic}")
    data, rows = [], []
    for mq in sorted(merged):
        o = merged[mq]
        data.append(
            {
                **mq.to_json(),
                "minOffset": o.get("minOffset", 0),
                "maxOffset": o.get("maxOffset", 0),
                "lastUpdateTimestamp": o.get("lastUpdateTimestamp", 0),
            }
        )
        rows.append(
            [
                mq.broker_name,
                mq.queue_id,
                o.get("minOffset", 0),
                o.get("maxOffset", 0),
                fmt_ms(int(o.get("lastUpdateTimestamp") or 0)),
            ]
        )
    return Output(data, table(["#Broker Name", "#QID", "#Min Offset", "#Max Offset", "#Last Updated"], rows))


async def cmd_update_topic(admin: AdminClient, args: argparse.Namespace) -> Output:
    if args.perm not in (2, 4, 6, 7):
        raise UsageError(f"perm must be 2 (W), 4 (R) or 6 (RW), got {args.perm}")
    order = parse_bool(args.order) if args.order is not None else False
    sys_flag = (1 if args.unit and parse_bool(args.unit) else 0) | (
        2 if args.has_unit_sub and parse_bool(args.has_unit_sub) else 0
    )
    if args.broker:
        targets = {args.broker: args.broker}
    elif args.cluster:
        targets = {addr: name for name, addr in (await admin.masters(args.cluster)).items()}
    else:
        raise UsageError("name a broker with -b host:port or a cluster with -c name")
    for addr in targets:
        await admin.create_topic(
            addr,
            args.topic,
            read_queues=args.read_queues,
            write_queues=args.write_queues,
            perm=args.perm,
            order=order,
            topic_sys_flag=sys_flag,
            attributes=args.attributes,
        )
    lines = [f"create topic to {addr} success." for addr in targets]
    if order:
        # Upstream records the ordered layout on the name server: "brokerName:queues;…".
        masters = await admin.masters()
        names = [name for name, addr in masters.items() if addr in targets]
        conf = ";".join(f"{n}:{args.write_queues}" for n in sorted(names))
        await admin.put_kv_config(ORDER_TOPIC_CONFIG, args.topic, conf)
        lines.append(f"set orderConf. isOrder=true, orderConf=[{conf}]")
    config = {
        "topicName": args.topic,
        "readQueueNums": args.read_queues,
        "writeQueueNums": args.write_queues,
        "perm": args.perm,
        "order": order,
        "topicSysFlag": sys_flag,
        "topicFilterType": "SINGLE_TAG",
    }
    lines.append("TopicConfig " + json.dumps(config, sort_keys=True))
    return Output({"brokers": list(targets), "topicConfig": config}, "\n".join(lines))


async def cmd_delete_topic(admin: AdminClient, args: argparse.Namespace) -> Output:
    masters = await admin.masters(args.cluster)
    for addr in masters.values():
        await admin.delete_topic_in_broker(addr, args.topic)
    await admin.delete_topic_in_namesrv(args.topic, args.cluster)
    return Output(
        {"topic": args.topic, "cluster": args.cluster, "brokers": list(masters.values())},
        f"delete topic [{args.topic}] from cluster [{args.cluster}] success.\n"
        f"delete topic [{args.topic}] from NameServer success.",
    )


# ------------------------------------------------------------------------------------------------
# consumers and producers


async def _consume_stats(admin: AdminClient, group: str, topic: str | None = None) -> tuple[float, dict]:
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
        tps, offsets = await _consume_stats(admin, args.group)
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
            tps, offsets = await _consume_stats(admin, group)
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


# ------------------------------------------------------------------------------------------------
# messages


def _message_text(msg: StoredMessage) -> str:
    rows = [
        ("OffsetID:", msg.offset_msg_id),
        ("Topic:", msg.topic),
        ("Tags:", f"[{msg.tags}]"),
        ("Keys:", f"[{' '.join(msg.keys) or None}]"),
        ("Queue ID:", msg.queue_id),
        ("Queue Offset:", msg.queue_offset),
        ("CommitLog Offset:", msg.commit_log_offset),
        ("Reconsume Times:", msg.reconsume_times),
        ("Born Timestamp:", fmt_ms(msg.born_timestamp)),
        ("Store Timestamp:", fmt_ms(msg.store_timestamp)),
        ("Born Host:", msg.born_host),
        ("Store Host:", msg.store_host),
        ("System Flag:", msg.sys_flag),
        ("Properties:", msg.properties),
        ("Body Size:", len(msg.body)),
    ]
    return "\n".join(f"{k:<20} {v}" for k, v in rows)


async def cmd_query_msg_by_id(admin: AdminClient, args: argparse.Namespace) -> Output:
    known: set[str] | None = None
    found: list[StoredMessage] = []
    for msg_id in [m.strip() for m in args.msg_id.split(",") if m.strip()]:
        msg = None
        try:
            addr, offset = decode_offset_msg_id(msg_id)
        except ValueError:
            addr, offset = None, -1
        if addr is not None:
            if known is None:
                info = await admin.cluster_info()
                known = {a for bd in info["brokerAddrTable"].values() for a in (bd.get("brokerAddrs") or {}).values()}
            if addr in known:  # a client's UNIQ_KEY also has 32 hex digits: only trust ids of real brokers
                msg = await admin.view_message(addr, offset)
        if msg is None:
            if not args.topic:
                raise AdminError(
                    f"{msg_id} is not the offset id of a known broker; to look a client message id "
                    "(UNIQ_KEY) up, also give its topic with -t"
                )
            for broker in (await admin.route_masters(args.topic)).values():
                hits = [
                    m
                    for m in await admin.query_message(broker, args.topic, msg_id, max_num=32, unique_key=True)
                    if m.properties.get("UNIQ_KEY") == msg_id
                ]
                if hits:
                    msg = min(hits, key=lambda m: m.store_timestamp)
                    break
        if msg is None:
            raise AdminError(f"query message by id finished, but no message: {msg_id}", code=ResponseCode.NO_MESSAGE)
        found.append(msg)
    return Output([message_json(m) for m in found], "\n\n".join(_message_text(m) for m in found))


async def cmd_query_msg_by_key(admin: AdminClient, args: argparse.Namespace) -> Output:
    brokers = await admin.route_masters(args.topic)
    results = await admin.gather(
        {
            addr: admin.query_message(addr, args.topic, args.key, max_num=64, begin_ms=0, end_ms=LONG_MAX)
            for addr in brokers.values()
        }
    )
    msgs: list[StoredMessage] = []
    for result in results.values():
        if isinstance(result, AdminError):
            raise result
        # As upstream: the index is a hash, so keep only messages whose KEYS really hold the key.
        msgs.extend(m for m in result if m.topic == args.topic and args.key in m.keys)
    msgs.sort(key=lambda m: (m.store_timestamp, m.commit_log_offset))
    rows = [[m.msg_id, m.queue_id, m.queue_offset] for m in msgs]
    return Output([message_json(m) for m in msgs], table(["#Message ID", "#QID", "#Offset"], rows))


# ------------------------------------------------------------------------------------------------
# stats


async def cmd_stats_all(admin: AdminClient, args: argparse.Namespace) -> Output:
    rows, data = [], []
    for topic in sorted(await admin.topic_list()):
        if topic.startswith((RETRY_PREFIX, DLQ_PREFIX)) or (args.topic and topic != args.topic):
            continue
        try:
            masters = await admin.route_masters(topic)
        except AdminError:
            continue
        groups: set[str] = set()
        in_tps, in_today = 0.0, 0
        for addr in masters.values():
            try:
                groups.update(await admin.topic_consume_by_who(addr, topic))
            except AdminError:
                pass
            try:
                bsd = await admin.view_stats(addr, "TOPIC_PUT_NUMS", topic)
                in_tps += float(bsd["statsMinute"]["tps"])
                in_today += _sum_24h(bsd)
            except (AdminError, KeyError, TypeError):
                pass
        if not groups:
            if not args.active or in_today > 0:
                rows.append([topic, "", 0, f"{in_tps:.2f}", "", in_today, "NO_CONSUMER"])
                data.append(
                    {
                        "topic": topic,
                        "consumerGroup": None,
                        "accumulation": 0,
                        "inTps": in_tps,
                        "outTps": None,
                        "inMsg24Hour": in_today,
                        "outMsg24Hour": None,
                    }
                )
            continue
        for group in sorted(groups):
            out_tps, out_today = 0.0, 0
            for addr in masters.values():
                try:
                    bsd = await admin.view_stats(addr, "GROUP_GET_NUMS", f"{topic}@{group}")
                    out_tps += float(bsd["statsMinute"]["tps"])
                    out_today += _sum_24h(bsd)
                except (AdminError, KeyError, TypeError):
                    pass
            accumulate = 0
            try:
                _, offsets = await _consume_stats(admin, group, topic)
                accumulate = max(
                    0, sum(int(o.get("brokerOffset", 0)) - int(o.get("consumerOffset", 0)) for o in offsets.values())
                )
            except AdminError:
                pass
            if not args.active or in_today > 0 or out_today > 0:
                rows.append([topic, group, accumulate, f"{in_tps:.2f}", f"{out_tps:.2f}", in_today, out_today])
                data.append(
                    {
                        "topic": topic,
                        "consumerGroup": group,
                        "accumulation": accumulate,
                        "inTps": in_tps,
                        "outTps": out_tps,
                        "inMsg24Hour": in_today,
                        "outMsg24Hour": out_today,
                    }
                )
    return Output(
        data,
        table(
            ["#Topic", "#Consumer Group", "#Accumulation", "#InTPS", "#OutTPS", "#InMsg24Hour", "#OutMsg24Hour"], rows
        ),
    )


def _sum_24h(bsd: dict[str, Any]) -> int:
    """Upstream compute24HourSum: the day's sum, else the hour's, else the minute's."""
    for key in ("statsDay", "statsHour", "statsMinute"):
        total = int((bsd.get(key) or {}).get("sum") or 0)
        if total:
            return total
    return 0


# ------------------------------------------------------------------------------------------------
# fault injection (ours)


async def cmd_inject_fault(admin: AdminClient, args: argparse.Namespace) -> Output:
    if args.kind != "clear" and (args.duration is None or args.duration <= 0):
        raise UsageError("give the fault's duration in milliseconds with -d (e.g. -d 2000)")
    addrs = await _targets(admin, args)
    for addr in addrs:
        await admin.fault_inject(addr, args.kind, duration_ms=args.duration or 0, target=args.target, value=args.value)
    what = (
        args.kind
        + (f" on {args.target}" if args.target else "")
        + (f" for {args.duration} ms" if args.duration else "")
    )
    return Output(
        {
            "brokers": addrs,
            "kind": args.kind,
            "durationMs": args.duration or 0,
            "target": args.target,
            "value": args.value,
        },
        "\n".join(f"{addr}: {what} armed" for addr in addrs),
    )


async def cmd_clear_faults(admin: AdminClient, args: argparse.Namespace) -> Output:
    addrs = await _targets(admin, args)
    for addr in addrs:
        await admin.fault_inject(addr, "clear")
    return Output({"brokers": addrs, "kind": "clear"}, "\n".join(f"{addr}: faults cleared" for addr in addrs))


# ------------------------------------------------------------------------------------------------
# ACL 1.0 (upstream's acl commands; the broker needs aclEnable=true and these an admin account)


def _bool_text(text: str | None) -> bool:
    return text is not None and text.strip().lower() == "true"


async def cmd_update_acl_config(admin: AdminClient, args: argparse.Namespace) -> Output:
    hdr = CreateAccessConfigRequestHeader(
        access_key=args.access_key,
        secret_key=args.secret_key,
        white_remote_address=args.white_remote_address,
        admin=_bool_text(args.admin),
        default_topic_perm=args.default_topic_perm,
        default_group_perm=args.default_group_perm,
        topic_perms=args.topic_perms,
        group_perms=args.group_perms,
    )
    addrs = await _targets(admin, args)
    for addr in addrs:
        await admin.update_acl_config(addr, hdr)
    return Output(
        {"brokers": addrs, "accessKey": args.access_key},
        "\n".join(f"create or update plain access config to {addr} success." for addr in addrs),
    )


async def cmd_delete_acl_config(admin: AdminClient, args: argparse.Namespace) -> Output:
    addrs = await _targets(admin, args)
    for addr in addrs:
        await admin.delete_acl_config(addr, args.access_key)
    return Output(
        {"brokers": addrs, "accessKey": args.access_key},
        "\n".join(f"delete plain access config account from {addr} success." for addr in addrs),
    )


async def cmd_update_global_white_addr(admin: AdminClient, args: argparse.Namespace) -> Output:
    addrs = await _targets(admin, args)
    for addr in addrs:
        await admin.update_global_white_addrs(addr, args.addresses, args.acl_file)
    return Output(
        {"brokers": addrs, "globalWhiteRemoteAddresses": args.addresses},
        "\n".join(f"update global white remote addresses to {addr} success." for addr in addrs),
    )


async def cmd_cluster_acl_config_version(admin: AdminClient, args: argparse.Namespace) -> Output:
    addrs = await _targets(admin, args)
    data, rows = [], []
    for addr in addrs:
        info = await admin.acl_config_version(addr)
        files = json.loads(info.get("allAclFileVersion") or "{}")
        for path, version in sorted(files.items()):
            stamp = datetime.fromtimestamp(int(version.get("timestamp", 0)) / 1000).strftime("%Y-%m-%d %H:%M:%S")
            rows.append(
                [
                    info.get("clusterName"),
                    info.get("brokerName"),
                    info.get("brokerAddr"),
                    path,
                    version.get("counter"),
                    stamp,
                ]
            )
        data.append({**info, "allAclFileVersion": files})
    return Output(
        data,
        table(
            [
                "#Cluster Name",
                "#Broker Name",
                "#Broker Addr",
                "#AclFilePath",
                "#AclConfigVersionNum",
                "#AclLastUpdateTime",
            ],
            rows,
        ),
    )


async def cmd_get_acl_config(admin: AdminClient, args: argparse.Namespace) -> Output:
    addrs = await _targets(admin, args)
    data, lines = {}, []
    for addr in addrs:
        config = await admin.acl_config(addr)
        data[addr] = config
        lines.append(f"globalWhiteRemoteAddresses: [{', '.join(config.get('globalWhiteAddrs') or [])}]")
        lines.append("")
        lines.append("accounts:")
        for account in config.get("plainAccessConfigs") or []:
            for key in (
                "accessKey",
                "secretKey",
                "whiteRemoteAddress",
                "admin",
                "defaultTopicPerm",
                "defaultGroupPerm",
                "topicPerms",
                "groupPerms",
            ):
                value = account.get(key)
                if isinstance(value, list):
                    value = f"[{', '.join(value)}]"
                elif isinstance(value, bool):
                    value = str(value).lower()
                lines.append(f"  {key:<18}: {'' if value is None else value}")
            lines.append("")
    return Output(data, "\n".join(lines).rstrip())


# ------------------------------------------------------------------------------------------------
# command line


Command = Callable[[AdminClient, argparse.Namespace], Awaitable[Output]]


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "-n",
        "--namesrvAddr",
        dest="namesrv",
        help="name server address(es), ';'-separated (default: $NAMESRV_ADDR or 127.0.0.1:9876)",
    )
    common.add_argument("--json", action="store_true", help="print the result as JSON")
    common.add_argument("--timeout", type=float, default=5.0, help="seconds per request (default 5)")
    common.add_argument(
        "--ak",
        dest="ak",
        default=os.environ.get("ROCKETMQ_ACCESS_KEY"),
        help="ACL access key to sign requests with (default: $ROCKETMQ_ACCESS_KEY)",
    )
    common.add_argument(
        "--sk",
        dest="sk",
        default=os.environ.get("ROCKETMQ_SECRET_KEY"),
        help="ACL secret key (default: $ROCKETMQ_SECRET_KEY)",
    )
    parser = argparse.ArgumentParser(prog="mqadmin", description="mini-rocketmq admin tool (upstream command names)")
    sub = parser.add_subparsers(dest="command", metavar="command", required=True)

    def add(name: str, fn: Command, help_: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, parents=[common], help=help_, description=help_)
        p.set_defaults(fn=fn)
        return p

    def broker_or_cluster(p: argparse.ArgumentParser) -> None:
        p.add_argument("-b", "--brokerAddr", dest="broker", help="broker address host:port")
        p.add_argument("-c", "--clusterName", dest="cluster", help="every master of this cluster")

    p = add("clusterList", cmd_cluster_list, "List brokers of every cluster with their load")
    p.add_argument("-m", "--moreStats", dest="more", action="store_true", help="message totals of today/yesterday")
    p = add("topicList", cmd_topic_list, "List all topics")
    p.add_argument(
        "-c", "--clusterModel", dest="cluster_mode", action="store_true", help="with their cluster and consumer groups"
    )
    p = add("topicRoute", cmd_topic_route, "Examine a topic's route")
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-l", "--list", action="store_true", help="table instead of JSON")
    p = add("topicStatus", cmd_topic_status, "Examine a topic's queue offsets")
    p.add_argument("-t", "--topic", required=True)
    p = add("updateTopic", cmd_update_topic, "Create or update a topic")
    broker_or_cluster(p)
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-r", "--readQueueNums", dest="read_queues", type=int, default=8)
    p.add_argument("-w", "--writeQueueNums", dest="write_queues", type=int, default=8)
    p.add_argument("-p", "--perm", type=int, default=6, help="2 W, 4 R, 6 RW")
    p.add_argument("-o", "--order", help="true|false")
    p.add_argument("-u", "--unit", help="true|false")
    p.add_argument("-s", "--hasUnitSub", dest="has_unit_sub", help="true|false")
    p.add_argument("-a", "--attributes", help="5.x topic attributes, e.g. +message.type=FIFO")
    p = add("deleteTopic", cmd_delete_topic, "Delete a topic from a cluster's brokers and the name server")
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-c", "--clusterName", dest="cluster", required=True)
    p = add("brokerStatus", cmd_broker_status, "A broker's runtime info")
    broker_or_cluster(p)
    p = add("getBrokerConfig", cmd_get_broker_config, "A broker's configuration")
    broker_or_cluster(p)
    p = add(
        "updateBrokerConfig",
        cmd_update_broker_config,
        "Change one configuration key (also logLevel=DEBUG|INFO|..., requestLogEnable=true|false)",
    )
    broker_or_cluster(p)
    p.add_argument("-k", "--key", required=True)
    p.add_argument("-v", "--value", required=True)
    p = add("consumerProgress", cmd_consumer_progress, "A consumer group's progress (all groups without -g)")
    p.add_argument("-g", "--groupName", dest="group")
    p.add_argument("-s", "--showClientIP", dest="show_client_ip", help="accepted for compatibility; ignored")
    p = add("consumerConnection", cmd_consumer_connection, "A consumer group's connections and subscriptions")
    p.add_argument("-g", "--consumerGroup", dest="group", required=True)
    p.add_argument("-b", "--brokerAddr", dest="broker")
    p = add("producerConnection", cmd_producer_connection, "A producer group's connections")
    p.add_argument("-g", "--producerGroup", dest="group", required=True)
    p.add_argument("-t", "--topic", required=True)
    p = add("queryMsgById", cmd_query_msg_by_id, "Query messages by offset id (or, with -t, by client id)")
    p.add_argument("-i", "--msgId", dest="msg_id", required=True, help="ids, ','-separated")
    p.add_argument("-t", "--topic", help="topic, to look client message ids (UNIQ_KEY) up")
    p = add("queryMsgByKey", cmd_query_msg_by_key, "Query messages by key")
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-k", "--msgKey", dest="key", required=True)
    p = add("resetOffsetByTime", cmd_reset_offset_by_time, "Reset a group's offsets of a topic to a time")
    p.add_argument("-g", "--group", required=True)
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-s", "--timestamp", required=True, help="now | epoch ms | yyyy-MM-dd#HH:mm:ss:SSS")
    p.add_argument("-f", "--force", help="true|false (default true)")
    p.add_argument("-c", "--cplus", action="store_true", help="accepted for compatibility; ignored")
    p = add("statsAll", cmd_stats_all, "Topic and consumer TPS")
    p.add_argument("-a", "--activeTopic", dest="active", action="store_true")
    p.add_argument("-t", "--topic")
    p = add("injectFault", cmd_inject_fault, "Arm a fault (broker started with faultInjectionEnable=true)")
    broker_or_cluster(p)
    p.add_argument("-k", "--kind", required=True, choices=FAULT_KINDS)
    p.add_argument("-d", "--durationMs", dest="duration", type=int, help="how long, in milliseconds")
    p.add_argument("--target", help="queue for stall_queue: send, pull, query, heartbeat, admin, ...")
    p.add_argument("--value", help="kind-specific value, e.g. slow_fsync's sleep in ms")
    p = add("clearFaults", cmd_clear_faults, "End every active fault")
    broker_or_cluster(p)
    p = add("setLogLevel", cmd_set_log_level, "Change a broker's log level / request logging at run time")
    broker_or_cluster(p)
    p.add_argument("-l", "--level", help="DEBUG, INFO, WARNING, ERROR")
    p.add_argument("--request-log", dest="request_log", help="true|false: one debug line per request")
    p = add("updateAclConfig", cmd_update_acl_config, "Create or update an ACL account in the brokers' plain_acl.yml")
    broker_or_cluster(p)
    p.add_argument("-a", "--accessKey", dest="access_key", required=True)
    p.add_argument("-s", "--secretKey", dest="secret_key")
    p.add_argument("-w", "--whiteRemoteAddress", dest="white_remote_address")
    p.add_argument("-i", "--defaultTopicPerm", dest="default_topic_perm", help="DENY, PUB, SUB or PUB|SUB")
    p.add_argument("-u", "--defaultGroupPerm", dest="default_group_perm", help="DENY, PUB, SUB or PUB|SUB")
    p.add_argument("-t", "--topicPerms", dest="topic_perms", help="e.g. topicA=DENY,topicD=SUB")
    p.add_argument("-g", "--groupPerms", dest="group_perms", help="e.g. groupA=DENY,groupD=SUB")
    p.add_argument("-m", "--admin", help="true|false")
    p = add("deleteAclConfig", cmd_delete_acl_config, "Delete an ACL account")
    broker_or_cluster(p)
    p.add_argument("-a", "--accessKey", dest="access_key", required=True)
    p = add("updateGlobalWhiteAddr", cmd_update_global_white_addr, "Replace the ACL global white address list")
    broker_or_cluster(p)
    p.add_argument(
        "-g", "--globalWhiteRemoteAddresses", dest="addresses", required=True, help="e.g. 10.10.103.*,192.168.0.*"
    )
    p.add_argument("-p", "--aclFileFullPath", dest="acl_file", help="which ACL file (default plain_acl.yml)")
    p = add("clusterAclConfigVersion", cmd_cluster_acl_config_version, "The ACL files' versions of each broker")
    broker_or_cluster(p)
    p = add("getAclConfig", cmd_get_acl_config, "Every ACL account and white address of each broker")
    broker_or_cluster(p)
    return parser


async def run(args: argparse.Namespace) -> Output:
    namesrv = args.namesrv or os.environ.get("NAMESRV_ADDR") or DEFAULT_NAMESRV
    if bool(args.ak) != bool(args.sk):
        raise UsageError("give both --ak and --sk (or neither)")
    credentials = SessionCredentials(args.ak, args.sk) if args.ak else None
    async with AdminClient(namesrv, timeout_s=args.timeout, credentials=credentials) as admin:
        return await args.fn(admin, args)


def _quiet_logging() -> None:
    """The tool's own output is stdout; library log lines (connections, …) go to stderr, warnings only.
    Left alone when the host process (a test suite, say) configured structlog itself."""
    import logging

    import structlog

    if not structlog.is_configured():
        structlog.configure(
            wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
            logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        )


def main(argv: list[str] | None = None) -> int:
    from mqclient.cli_support import run_cli

    return run_cli("mqadmin", lambda: _main(argv))


def _main(argv: list[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _quiet_logging()
    try:
        out = asyncio.run(run(args))
    except UsageError as exc:
        print(f"mqadmin {args.command}: {exc}", file=sys.stderr)
        return 2
    except AdminError as exc:
        print(f"mqadmin {args.command} failed: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    if args.json:
        print(json.dumps(out.data, indent=2, sort_keys=True, default=str))
    elif out.text:
        print(out.text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
