"""``mqbroker``: start the embedded name server and the broker in one process.

``mqbroker [-c broker.conf] [--set KEY=VALUE ...]``. A bad configuration prints one line and exits 2.
On SIGTERM/SIGINT the broker stops accepting, answers what is in flight, flushes, persists offsets
and exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import signal
import sys
from typing import TYPE_CHECKING

import structlog

from broker.deferred_import import defer

if TYPE_CHECKING:
    from broker.config import BrokerConfig

# imported at their first use, not on the path to the ports (broker.deferred_import): numpy serves the store's
# consume queues, index and record parser, which an empty store first needs for its first message
DEFERRED_IMPORTS = ("numpy",)

log = structlog.get_logger("broker")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="mqbroker", description="mini-rocketmq: a RocketMQ-compatible broker")
    parser.add_argument("-c", "--config", dest="config", help="broker.conf (Java properties, RocketMQ key names)")
    parser.add_argument(
        "--set",
        dest="assignments",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one broker.conf key; repeatable",
    )
    parser.add_argument("-p", "--print-config", action="store_true", help="print the effective config and exit")
    return parser.parse_args(argv)


async def run(config: BrokerConfig) -> int:
    from broker.config import ConfigError
    from broker.controller import BrokerController

    controller = BrokerController(config)
    grpc_server = None
    if config.grpc_server_port >= 0:  # the 5.x clients' endpoint; -1 disables it and spares importing grpc
        from proxy.server import GrpcServer

        grpc_server = GrpcServer(controller)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await controller.start()
        if grpc_server is not None:
            await grpc_server.start()
    except (OSError, ConfigError) as exc:
        print(f"mqbroker: cannot start: {exc}", file=sys.stderr)
        await controller.shutdown()
        return 1
    msg = f"The broker[{config.broker_name}, {config.broker_addr}] boot success. serializeType=JSON"
    if config.namesrv_listen_port >= 0:
        msg += f" and name server is {config.broker_ip1}:{config.namesrv_listen_port}"
        if config.namesrv_addr:
            msg += f";{config.namesrv_addr}"
    elif config.namesrv_addr:
        msg += f" and name server is {config.namesrv_addr}"
    print(msg, flush=True)
    # what boot made (modules, configs, tables) lives until exit: out of the collector's generations, later
    # collections do not walk it, and forked pages stay shared (issue 15). The collector was off until here
    # (main): one collection now finds whatever cycles the start left
    gc.collect()
    gc.freeze()
    gc.enable()
    stall_monitor = _loop_stall_monitor()
    await stop.wait()
    if stall_monitor is not None:
        stall_monitor.stop()
    log.info("shutting down")
    if grpc_server is not None:
        await grpc_server.stop(1.0)
    try:
        await controller.shutdown()
    except Exception:  # noqa: BLE001 - a stop that was asked for ends with 0; what went wrong is logged
        log.exception("shutdown failed part-way, closing the store")
        try:
            await controller.store.shutdown()
        except Exception:  # noqa: BLE001
            log.exception("the store did not close cleanly; the next boot recovers it")
    print(f"The broker[{config.broker_name}, {config.broker_addr}] shutdown OK", flush=True)
    return 0


def _loop_stall_monitor():
    """``MQ_LOOP_STALL_MS=N`` in the environment: log the loop's stalls longer than N ms (broker.loop_stall)."""
    threshold = os.environ.get("MQ_LOOP_STALL_MS")
    if not threshold:
        return None
    from broker.loop_stall import LoopStallMonitor

    monitor = LoopStallMonitor(threshold_ms=float(threshold))
    monitor.start()
    return monitor


def main(argv: list[str] | None = None) -> int:
    # nearly everything the start allocates (modules, classes, tables) lives until exit, so the ~90 collections
    # the allocation count triggers during the imports walk a growing heap and free next to nothing (~10 ms of
    # CPU before the ports opened). Off until run() has opened them (issue 15)
    gc.disable()
    try:
        for name in DEFERRED_IMPORTS:  # before anything below imports the store
            defer(name)
        from mqclient.cli_support import run_cli

        return run_cli("mqbroker", lambda: _main(argv))
    finally:
        gc.enable()  # a start that failed, -p, or a caller that goes on after main() returns


def _main(argv: list[str] | None) -> int:
    args = parse_args(argv)
    from broker.config import ConfigError, load_config
    from broker.logging_setup import configure
    from remoting import loop as loop_choice
    from store.config import StoreConfigError

    try:
        config, inert = load_config(args.config, args.assignments)
        config.to_store_config().validate()
    except (ConfigError, StoreConfigError) as exc:
        print(f"mqbroker: configuration error: {exc}", file=sys.stderr)
        return 2
    if args.print_config:
        for key, value in sorted(config.wire_items().items()):
            print(f"{key}={value}")
        return 0
    if config.metrics_exporter_type == "PROM":
        from mqclient.cli_support import require

        require("prometheus_client", "metrics")
    configure()
    if inert:
        log.warning("config keys accepted but without effect in mini-rocketmq", keys=sorted(inert))
    if config.fault_injection_enable:
        log.warning(
            "fault injection is ENABLED: brokerSleepMs/brokerStallAppendMs properties and FAULT_INJECT "
            "requests will stall this broker on purpose"
        )
    with asyncio.Runner(loop_factory=loop_choice.new_event_loop) as runner:
        return runner.run(run(config))


if __name__ == "__main__":
    sys.exit(main())
