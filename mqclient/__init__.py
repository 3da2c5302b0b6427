"""mini-rocketmq's own asyncio RocketMQ client, for our tools (benchmarks, tests) only.

It speaks the RocketMQ 4.x remoting protocol through ``remoting.client`` and follows the Java
client's rules where they matter for measurements: send retries and timeouts, UNIQ_KEY ids,
long-polling pulls, rebalance and offset commits.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mqclient.admin import AdminClient, AdminError, BrokerInfo
    from mqclient.consumer import ConsumerConfig, PushConsumer, allocate_averagely
    from mqclient.errors import (
        AttemptError,
        MQBrokerError,
        MQClientError,
        NameServerUnreachableError,
        SendFailedError,
        TopicRouteError,
    )
    from mqclient.message import Message, MessageExt, decode_messages
    from mqclient.producer import Producer, ProducerConfig, SendResult, error_kind
    from mqclient.route import MessageQueue, TopicRoute

# the public names and the module of each, imported at the first lookup: ``mqbroker`` imports only
# ``mqclient.cli_support`` (its command-line manners), and importing a submodule runs this file first
_HOME = {
    **dict.fromkeys(("AdminClient", "AdminError", "BrokerInfo"), "admin"),
    **dict.fromkeys(("ConsumerConfig", "PushConsumer", "allocate_averagely"), "consumer"),
    **dict.fromkeys(
        (
            "AttemptError",
            "MQBrokerError",
            "MQClientError",
            "NameServerUnreachableError",
            "SendFailedError",
            "TopicRouteError",
        ),
        "errors",
    ),
    **dict.fromkeys(("Message", "MessageExt", "decode_messages"), "message"),
    **dict.fromkeys(("Producer", "ProducerConfig", "SendResult", "error_kind"), "producer"),
    **dict.fromkeys(("MessageQueue", "TopicRoute"), "route"),
}


def __getattr__(name: str):
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"mqclient.{home}"), name)
    globals()[name] = value
    return value


__all__ = [
    "AdminClient",
    "AdminError",
    "AttemptError",
    "BrokerInfo",
    "ConsumerConfig",
    "MQBrokerError",
    "MQClientError",
    "Message",
    "MessageExt",
    "MessageQueue",
    "NameServerUnreachableError",
    "Producer",
    "ProducerConfig",
    "PushConsumer",
    "SendFailedError",
    "SendResult",
    "TopicRoute",
    "TopicRouteError",
    "allocate_averagely",
    "decode_messages",
    "error_kind",
]
