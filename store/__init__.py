"""mini-rocketmq store: RocketMQ's CommitLog / ConsumeQueue / IndexFile store in Python.

The broker uses `MessageStore` and the types re-exported here; see docs/design.md (store/).
"""

from store.config import BrokerRole, FlushDiskType, MessageStoreConfig, StoreConfigError
from store.message import (
    MessageConst,
    MessageExt,
    MessageExtBrokerInner,
    create_offset_msg_id,
    decode_offset_msg_id,
    decode_properties,
    decode_record,
    decode_records,
    encode_properties,
    tags_hash,
)
from store.message_store import MessageStore, StoreNotReadableError
from store.results import (
    AppendMessageResult,
    GetMessageResult,
    GetMessageStatus,
    MessageFilter,
    PutMessageResult,
    PutMessageStatus,
    QueryMessageResult,
    TagsMessageFilter,
)

__all__ = [
    "AppendMessageResult",
    "BrokerRole",
    "FlushDiskType",
    "GetMessageResult",
    "GetMessageStatus",
    "MessageConst",
    "MessageExt",
    "MessageExtBrokerInner",
    "MessageFilter",
    "MessageStore",
    "MessageStoreConfig",
    "PutMessageResult",
    "PutMessageStatus",
    "QueryMessageResult",
    "StoreConfigError",
    "StoreNotReadableError",
    "TagsMessageFilter",
    "create_offset_msg_id",
    "decode_offset_msg_id",
    "decode_properties",
    "decode_record",
    "decode_records",
    "encode_properties",
    "tags_hash",
]
