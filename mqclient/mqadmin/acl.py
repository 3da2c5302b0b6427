"""mqadmin's ACL 1.0 commands, upstream's: the broker needs aclEnable=true, and these an admin account."""

from __future__ import annotations

import argparse
import json
from datetime import datetime

from mqclient.admin import AdminClient
from mqclient.mqadmin.common import AddCommand, Output, broker_or_cluster, table, targets
from remoting.headers import CreateAccessConfigRequestHeader


def add_commands(add: AddCommand) -> None:
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
    addrs = await targets(admin, args)
    for addr in addrs:
        await admin.update_acl_config(addr, hdr)
    return Output(
        {"brokers": addrs, "accessKey": args.access_key},
        "\n".join(f"create or update plain access config to {addr} success." for addr in addrs),
    )


async def cmd_delete_acl_config(admin: AdminClient, args: argparse.Namespace) -> Output:
    addrs = await targets(admin, args)
    for addr in addrs:
        await admin.delete_acl_config(addr, args.access_key)
    return Output(
        {"brokers": addrs, "accessKey": args.access_key},
        "\n".join(f"delete plain access config account from {addr} success." for addr in addrs),
    )


async def cmd_update_global_white_addr(admin: AdminClient, args: argparse.Namespace) -> Output:
    addrs = await targets(admin, args)
    for addr in addrs:
        await admin.update_global_white_addrs(addr, args.addresses, args.acl_file)
    return Output(
        {"brokers": addrs, "globalWhiteRemoteAddresses": args.addresses},
        "\n".join(f"update global white remote addresses to {addr} success." for addr in addrs),
    )


async def cmd_cluster_acl_config_version(admin: AdminClient, args: argparse.Namespace) -> Output:
    addrs = await targets(admin, args)
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
    addrs = await targets(admin, args)
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
