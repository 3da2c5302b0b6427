"""Start an in-process broker (BrokerController on the running event loop) on free loopback ports."""

from __future__ import annotations

import socket
from dataclasses import dataclass, field

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


@dataclass
class FakeChannel:
    """Stands in for a remoting Channel where a test only needs what was sent back."""

    sent: list = field(default_factory=list)
    remote_addr: str = "127.0.0.1:1"
    finished: int = 0

    def send(self, cmd):
        self.sent.append(cmd)

    def request_finished(self):
        self.finished += 1


class Clock:
    """An injectable wall clock in ms that tests move by hand."""

    def __init__(self, start: int = 1_000_000) -> None:
        self.now = start

    def __call__(self) -> int:
        return self.now
