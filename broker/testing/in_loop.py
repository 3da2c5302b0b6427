"""A broker on the caller's own event loop, for tests and in-process benchmarks that drive its dispatch directly.

``EmbeddedBroker`` runs a broker on a thread of its own; this one shares the running loop (no thread, no wire
needed), which is what a test of the processors or a CPU-per-request benchmark wants. Both bind free loopback
ports only, from ``loopback_settings``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from broker.testing.ports import free_port

if TYPE_CHECKING:
    from broker.controller import BrokerController


def loopback_settings(store_dir: Path) -> dict[str, str]:
    """The broker.conf keys of a broker that listens on free loopback ports and keeps its store in ``store_dir``."""
    listen = free_port()
    return {
        "listenPort": str(listen),
        "namesrvListenPort": str(free_port(avoid=[listen])),
        "brokerIP1": "127.0.0.1",
        "listenHost": "127.0.0.1",
        "namesrvListenHost": "127.0.0.1",
        "storePathRootDir": str(store_dir),
    }


async def start_in_loop(store_dir: Path, **settings: object) -> BrokerController:
    """A started ``BrokerController`` on the running loop; ``settings`` are broker.conf keys over the loopback ones.
    The caller shuts it down."""
    from broker.config import build_config
    from broker.controller import BrokerController

    items = loopback_settings(store_dir) | {key: str(value) for key, value in settings.items()}
    config, _ = build_config(items.items())
    controller = BrokerController(config)
    await controller.start()
    return controller
