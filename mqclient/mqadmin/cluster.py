"""mqadmin commands about clusters and brokers: clusterList, brokerStatus, get/updateBrokerConfig, setLogLevel,
and our fault injection (injectFault, clearFaults).
"""

from __future__ import annotations

import argparse
import time

from mqclient.admin import AdminClient, AdminError
from mqclient.mqadmin.common import (
    AddCommand,
    Output,
    UsageError,
    as_float,
    as_int,
    broker_or_cluster,
    parse_bool,
    table,
    targets,
)

FAULT_KINDS = ("stall_queue", "stall_send_workers", "stall_append", "drain_transient_pool", "slow_fsync", "clear")


def add_commands(add: AddCommand) -> None:
    p = add("clusterList", cmd_cluster_list, "List brokers of every cluster with their load")
    p.add_argument("-m", "--moreStats", dest="more", action="store_true", help="message totals of today/yesterday")
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
    p = add("setLogLevel", cmd_set_log_level, "Change a broker's log level / request logging at run time")
    broker_or_cluster(p)
    p.add_argument("-l", "--level", help="DEBUG, INFO, WARNING, ERROR")
    p.add_argument("--request-log", dest="request_log", help="true|false: one debug line per request")
    p = add("injectFault", cmd_inject_fault, "Arm a fault (broker started with faultInjectionEnable=true)")
    broker_or_cluster(p)
    p.add_argument("-k", "--kind", required=True, choices=FAULT_KINDS)
    p.add_argument("-d", "--durationMs", dest="duration", type=int, help="how long, in milliseconds")
    p.add_argument("--target", help="queue for stall_queue: send, pull, query, heartbeat, admin, ...")
    p.add_argument("--value", help="kind-specific value, e.g. slow_fsync's sleep in ms")
    p = add("clearFaults", cmd_clear_faults, "End every active fault")
    broker_or_cluster(p)


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
                "inTotalYest": as_int(kv.get("msgPutTotalTodayMorning"))
                - as_int(kv.get("msgPutTotalYesterdayMorning")),
                "outTotalYest": as_int(kv.get("msgGetTotalTodayMorning"))
                - as_int(kv.get("msgGetTotalYesterdayMorning")),
                "inTotalToday": as_int(kv.get("msgPutTotalTodayNow")) - as_int(kv.get("msgPutTotalTodayMorning")),
                "outTotalToday": as_int(kv.get("msgGetTotalTodayNow")) - as_int(kv.get("msgGetTotalTodayMorning")),
            }
            rows.append(
                [cluster, name, item["inTotalYest"], item["outTotalYest"], item["inTotalToday"], item["outTotalToday"]]
            )
        else:
            earliest = as_int(kv.get("earliestMessageTimeStamp"))
            item = {
                "cluster": cluster,
                "brokerName": name,
                "brokerId": bid,
                "addr": addr,
                "version": kv.get("brokerVersionDesc", ""),
                "inTps": as_float(kv.get("putTps")),
                "outTps": as_float(kv.get("getTransferedTps")),
                "sendQueueSize": as_int(kv.get("sendThreadPoolQueueSize")),
                "sendQueueHeadWaitMs": as_int(kv.get("sendThreadPoolQueueHeadWaitTimeMills")),
                "pullQueueSize": as_int(kv.get("pullThreadPoolQueueSize")),
                "pullQueueHeadWaitMs": as_int(kv.get("pullThreadPoolQueueHeadWaitTimeMills")),
                "pageCacheLockTimeMills": as_int(kv.get("pageCacheLockTimeMills")),
                "hours": round((now - earliest) / 3_600_000, 2) if earliest > 0 else 0.0,
                "commitLogDiskRatio": as_float(kv.get("commitLogDiskRatio")),
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
    addrs = await targets(admin, args, masters_only=False)
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
    addrs = await targets(admin, args, masters_only=False)
    data, lines = {}, []
    for addr in addrs:
        props = await admin.broker_config(addr)
        data[addr] = props
        width = max((len(k) for k in props), default=0)
        lines.append(f"============{addr}============")
        lines.extend(f"{k.ljust(width)} = {v}" for k, v in sorted(props.items()))
    return Output(data if len(addrs) > 1 else data[addrs[0]], "\n".join(lines))


async def cmd_update_broker_config(admin: AdminClient, args: argparse.Namespace) -> Output:
    addrs = await targets(admin, args)
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
    addrs = await targets(admin, args)
    for addr in addrs:
        await admin.update_broker_config(addr, props)
    return Output(
        {"updated": addrs, **props},
        "\n".join(f"{addr}: " + ", ".join(f"{k}={v}" for k, v in props.items()) for addr in addrs),
    )


# ------------------------------------------------------------------------------------------------
# fault injection (ours)


async def cmd_inject_fault(admin: AdminClient, args: argparse.Namespace) -> Output:
    if args.kind != "clear" and (args.duration is None or args.duration <= 0):
        raise UsageError("give the fault's duration in milliseconds with -d (e.g. -d 2000)")
    addrs = await targets(admin, args)
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
    addrs = await targets(admin, args)
    for addr in addrs:
        await admin.fault_inject(addr, "clear")
    return Output({"brokers": addrs, "kind": "clear"}, "\n".join(f"{addr}: faults cleared" for addr in addrs))
