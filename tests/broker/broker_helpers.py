"""Start an in-process broker (BrokerController on the running event loop) on free loopback ports."""

from __future__ import annotations

import socket

from broker.config import build_config
from broker.controller import BrokerController


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def start_broker(tmp_path, **overrides) -> BrokerController:
    items = {"listenPort": str(free_port()), "namesrvListenPort": str(free_port()), "brokerIP1": "127.0.0.1",
             "listenHost": "127.0.0.1", "namesrvListenHost": "127.0.0.1", "brokerName": "broker-a",
             "storePathRootDir": str(tmp_path / "store"), "mappedFileSizeCommitLog": str(1024 * 1024),
             "mappedFileSizeConsumeQueue": str(20 * 1000), "maxIndexNum": "10000", "maxHashSlotNum": "1000"}
    items.update({k: str(v) for k, v in overrides.items()})
    config, _ = build_config(items.items())
    controller = BrokerController(config)
    await controller.start()
    return controller
