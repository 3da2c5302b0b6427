"""mini-rocketmq's own asyncio RocketMQ client, for our tools (benchmarks, tests) only.

It speaks the RocketMQ 4.x remoting protocol through ``remoting.client`` and follows the Java
client's rules where they matter for measurements: send retries and timeouts, UNIQ_KEY ids,
long-polling pulls, rebalance and offset commits.
"""

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
