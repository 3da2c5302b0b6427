"""The ``mqadmin`` command line: common options, one subcommand per upstream command, exit status.

``main`` parses, runs the command's coroutine against one ``AdminClient`` and prints its ``Output`` (a table,
or JSON with ``--json``). The commands live by subject beside this module: ``cluster`` (clusters, brokers,
fault injection), ``topic``, ``group`` (consumer/producer groups and offsets), ``message`` (queries and
statsAll) and ``acl``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys

from mqclient.admin import AdminClient, AdminError
from mqclient.mqadmin import acl, cluster, group, message, topic
from mqclient.mqadmin.common import DEFAULT_NAMESRV, Command, Output, UsageError
from remoting.signature import SessionCredentials


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

    for commands in (cluster, topic, group, message, acl):
        commands.add_commands(add)
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
