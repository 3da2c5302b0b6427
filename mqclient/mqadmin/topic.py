"""mqadmin commands about topics: topicList, topicRoute, topicStatus, updateTopic, deleteTopic."""

from __future__ import annotations

import argparse
import json

from mqclient.admin import ORDER_TOPIC_CONFIG, AdminClient, AdminError, MessageQueue
from mqclient.mqadmin.common import (
    DLQ_PREFIX,
    RETRY_PREFIX,
    AddCommand,
    Output,
    UsageError,
    broker_or_cluster,
    fmt_ms,
    parse_bool,
    table,
)


def add_commands(add: AddCommand) -> None:
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
