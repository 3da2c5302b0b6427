"""mqadmin commands that find messages (queryMsgById, queryMsgByKey) and the traffic figures (statsAll)."""

from __future__ import annotations

import argparse
from typing import Any

from mqclient.admin import LONG_MAX, AdminClient, AdminError, StoredMessage, decode_offset_msg_id, message_json
from mqclient.mqadmin.common import DLQ_PREFIX, RETRY_PREFIX, AddCommand, Output, fmt_ms, table
from mqclient.mqadmin.group import consume_stats
from remoting.codes import ResponseCode


def add_commands(add: AddCommand) -> None:
    p = add("queryMsgById", cmd_query_msg_by_id, "Query messages by offset id (or, with -t, by client id)")
    p.add_argument("-i", "--msgId", dest="msg_id", required=True, help="ids, ','-separated")
    p.add_argument("-t", "--topic", help="topic, to look client message ids (UNIQ_KEY) up")
    p = add("queryMsgByKey", cmd_query_msg_by_key, "Query messages by key")
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-k", "--msgKey", dest="key", required=True)
    p = add("statsAll", cmd_stats_all, "Topic and consumer TPS")
    p.add_argument("-a", "--activeTopic", dest="active", action="store_true")
    p.add_argument("-t", "--topic")


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
                _, offsets = await consume_stats(admin, group, topic)
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
