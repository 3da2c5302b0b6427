"""What every mqadmin command shares: its result (``Output``), tables and time stamps as upstream prints them,
option values, and the brokers a command addresses (``-b`` or ``-c``).
"""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from mqclient.admin import AdminClient, AdminError

DEFAULT_NAMESRV = "127.0.0.1:9876"
RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"


class UsageError(Exception):
    """Bad command-line input (exit status 2)."""


@dataclass
class Output:
    data: Any
    text: str


Command = Callable[[AdminClient, argparse.Namespace], Awaitable[Output]]


#: ``add(name, command, help)`` -> the command's subparser, with the common options (-n, --json, --ak/--sk ...)
AddCommand = Callable[[str, Command, str], argparse.ArgumentParser]


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


def as_float(text: str | None) -> float:
    try:
        return float((text or "0").split()[0])
    except (ValueError, IndexError):
        return 0.0


def as_int(text: str | None) -> int:
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


def broker_or_cluster(p: argparse.ArgumentParser) -> None:
    """The ``-b host:port`` / ``-c cluster`` pair of the commands that address brokers (see ``targets``)."""
    p.add_argument("-b", "--brokerAddr", dest="broker", help="broker address host:port")
    p.add_argument("-c", "--clusterName", dest="cluster", help="every master of this cluster")


async def targets(admin: AdminClient, args: argparse.Namespace, *, masters_only: bool = True) -> list[str]:
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
