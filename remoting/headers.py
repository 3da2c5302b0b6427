"""Every request and response custom header (``extFields``) as a dataclass declared once, with wire names.

The rules (wire names, required fields, Java types) and the compiled decoders/encoders are
``remoting.header_codec``'s; its public names are re-exported here, so callers import headers and
``decode_header``/``encode_header`` from one place.
"""

from __future__ import annotations

from remoting.errors import HeaderError
from remoting.header_codec import (
    _PLAN_ATTR,
    Long,
    decode_header,
    decoder_with_wire_names,
    encode_header,
    header,
    header_wire_names,
    wire,
)

__all__ = [
    "HeaderError",
    "Long",
    "decode_header",
    "decoder_with_wire_names",
    "encode_header",
    "header",
    "header_wire_names",
    "wire",
]

# =====================================================================================
# NameServer (protocol §2.1)
# =====================================================================================


@header
class GetRouteInfoRequestHeader:  # 105
    topic: str
    accept_standard_json_only: bool | None = None


@header
class RegisterBrokerRequestHeader:  # 103
    broker_name: str
    broker_addr: str
    cluster_name: str
    ha_server_addr: str
    broker_id: Long
    compressed: bool = False
    body_crc32: int | None = None


@header
class RegisterBrokerResponseHeader:
    ha_server_addr: str | None = None
    master_addr: str | None = None


@header
class UnRegisterBrokerRequestHeader:  # 104
    broker_name: str
    broker_addr: str
    cluster_name: str
    broker_id: Long


@header
class GetKVConfigRequestHeader:  # 101
    namespace: str
    key: str


@header
class GetKVConfigResponseHeader:
    value: str | None = None


@header
class PutKVConfigRequestHeader:  # 100
    namespace: str
    key: str
    value: str


@header
class DeleteKVConfigRequestHeader:  # 102
    namespace: str
    key: str


@header
class DeleteTopicFromNamesrvRequestHeader:  # 216
    topic: str
    cluster_name: str | None = None


@header
class GetTopicsByClusterRequestHeader:  # 224
    cluster: str


# =====================================================================================
# Producer (protocol §2.2)
# =====================================================================================


@header
class SendMessageRequestHeader:  # 10
    producer_group: str
    topic: str
    default_topic: str
    default_topic_queue_nums: int
    queue_id: int
    sys_flag: int
    born_timestamp: Long
    flag: int
    properties: str | None = None
    reconsume_times: int | None = None
    unit_mode: bool = False
    batch: bool = False
    max_reconsume_times: int | None = None
    broker_name: str | None = wire("bname", default=None)

    @classmethod
    def from_v2(cls, v2: SendMessageRequestHeaderV2) -> SendMessageRequestHeader:
        return cls(
            producer_group=v2.a,
            topic=v2.b,
            default_topic=v2.c,
            default_topic_queue_nums=v2.d,
            queue_id=v2.e,
            sys_flag=v2.f,
            born_timestamp=v2.g,
            flag=v2.h,
            properties=v2.i,
            reconsume_times=v2.j,
            unit_mode=v2.k,
            batch=v2.m,
            max_reconsume_times=v2.l,
            broker_name=v2.n,
        )

    def to_v2(self) -> SendMessageRequestHeaderV2:
        return SendMessageRequestHeaderV2(
            a=self.producer_group,
            b=self.topic,
            c=self.default_topic,
            d=self.default_topic_queue_nums,
            e=self.queue_id,
            f=self.sys_flag,
            g=self.born_timestamp,
            h=self.flag,
            i=self.properties,
            j=self.reconsume_times,
            k=self.unit_mode,
            l=self.max_reconsume_times,
            m=self.batch,
            n=self.broker_name,
        )


@header
class SendMessageRequestHeaderV2:  # 310, 320 — J's short names, a..h required
    a: str  # producerGroup
    b: str  # topic
    c: str  # defaultTopic
    d: int  # defaultTopicQueueNums
    e: int  # queueId
    f: int  # sysFlag
    g: Long  # bornTimestamp
    h: int  # flag
    i: str | None = None  # properties
    j: int | None = None  # reconsumeTimes
    k: bool = False  # unitMode
    l: int | None = None  # noqa: E741 (maxReconsumeTimes: V2's one-letter wire name)
    m: bool = False  # batch
    n: str | None = None  # brokerName (4.9.5+)


#: SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE's header decoded straight into ``SendMessageRequestHeader`` (the send
#: path's hot spot: no V2 object and no from_v2 copy per message); same rules and errors as decoding V2.
decode_send_message_v2 = decoder_with_wire_names(
    SendMessageRequestHeader,
    {
        "producer_group": "a",
        "topic": "b",
        "default_topic": "c",
        "default_topic_queue_nums": "d",
        "queue_id": "e",
        "sys_flag": "f",
        "born_timestamp": "g",
        "flag": "h",
        "properties": "i",
        "reconsume_times": "j",
        "unit_mode": "k",
        "max_reconsume_times": "l",
        "batch": "m",
        "broker_name": "n",
    },
    name="SendMessageRequestHeaderV2",
)


@header
class SendMessageResponseHeader:
    msg_id: str
    queue_id: int
    queue_offset: Long
    transaction_id: str | None = None
    # J's send processor adds these two to every stored-message response (clients read them).
    msg_region: str | None = wire("MSG_REGION", default=None)
    trace_on: str | None = wire("TRACE_ON", default=None)


@header
class EndTransactionRequestHeader:  # 37
    producer_group: str
    tran_state_table_offset: Long
    commit_log_offset: Long
    commit_or_rollback: int  # 0 unknown, 8 commit, 12 rollback
    msg_id: str
    from_transaction_check: bool = False
    transaction_id: str | None = None


@header
class CheckTransactionStateRequestHeader:  # 39, broker → client
    tran_state_table_offset: Long
    commit_log_offset: Long
    msg_id: str | None = None
    transaction_id: str | None = None
    offset_msg_id: str | None = None


# =====================================================================================
# Consumer (protocol §2.3); HEART_BEAT (34) has no header, only a body.
# =====================================================================================


@header
class UnregisterClientRequestHeader:  # 35
    client_id: str = wire("clientID")
    producer_group: str | None = None
    consumer_group: str | None = None


@header
class GetConsumerListByGroupRequestHeader:  # 38
    consumer_group: str


@header
class QueryConsumerOffsetRequestHeader:  # 14
    consumer_group: str
    topic: str
    queue_id: int


@header
class QueryConsumerOffsetResponseHeader:
    offset: Long


@header
class UpdateConsumerOffsetRequestHeader:  # 15
    consumer_group: str
    topic: str
    queue_id: int
    commit_offset: Long


@header
class PullMessageRequestHeader:  # 11
    consumer_group: str
    topic: str
    queue_id: int
    queue_offset: Long
    max_msg_nums: int
    sys_flag: int
    commit_offset: Long
    suspend_timeout_millis: Long
    sub_version: Long
    subscription: str | None = None
    expression_type: str | None = None


@header
class PullMessageResponseHeader:
    suggest_which_broker_id: Long
    next_begin_offset: Long
    min_offset: Long
    max_offset: Long


@header
class GetMaxOffsetRequestHeader:  # 30
    topic: str
    queue_id: int


@header
class GetMaxOffsetResponseHeader:
    offset: Long


@header
class GetMinOffsetRequestHeader:  # 31
    topic: str
    queue_id: int


@header
class GetMinOffsetResponseHeader:
    offset: Long


@header
class SearchOffsetRequestHeader:  # 29
    topic: str
    queue_id: int
    timestamp: Long


@header
class SearchOffsetResponseHeader:
    offset: Long


@header
class GetEarliestMsgStoretimeRequestHeader:  # 32
    topic: str
    queue_id: int


@header
class GetEarliestMsgStoretimeResponseHeader:
    timestamp: Long


@header
class ConsumerSendMsgBackRequestHeader:  # 36
    offset: Long
    group: str
    delay_level: int
    origin_msg_id: str | None = None
    origin_topic: str | None = None
    unit_mode: bool = False
    max_reconsume_times: int | None = None


@header
class NotifyConsumerIdsChangedRequestHeader:  # 40, broker → client
    consumer_group: str


@header
class GetConsumerRunningInfoRequestHeader:  # 307, broker → client
    consumer_group: str
    client_id: str
    jstack_enable: bool = False


@header
class ResetOffsetRequestHeader:  # 220, broker → client (and 222 admin → broker)
    topic: str
    group: str
    timestamp: Long
    is_force: bool


# =====================================================================================
# Admin (protocol §2.4); 21, 28 and 25 have no header (25 carries properties in the body).
# =====================================================================================


@header
class CreateTopicRequestHeader:  # 17
    topic: str
    default_topic: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_filter_type: str
    order: bool
    topic_sys_flag: int | None = None
    attributes: str | None = None  # 5.x: "+message.type=FIFO,+key=value"


@header
class DeleteTopicRequestHeader:  # 215
    topic: str


@header
class GetTopicStatsInfoRequestHeader:  # 202
    topic: str


@header
class GetConsumeStatsRequestHeader:  # 208
    consumer_group: str
    topic: str | None = None


@header
class QueryMessageRequestHeader:  # 12
    topic: str
    key: str
    max_num: int
    begin_timestamp: Long
    end_timestamp: Long


@header
class QueryMessageResponseHeader:
    index_last_update_timestamp: Long
    index_last_update_phyoffset: Long


@header
class ViewMessageRequestHeader:  # 33
    offset: Long


@header
class GetConsumerConnectionListRequestHeader:  # 203
    consumer_group: str


@header
class GetProducerConnectionListRequestHeader:  # 204
    producer_group: str


@header
class GetBrokerConfigResponseHeader:  # 26
    version: str


@header
class DeleteSubscriptionGroupRequestHeader:  # 207
    group_name: str


@header
class FaultInjectRequestHeader:  # 5001 FAULT_INJECT (mini-rocketmq only)
    kind: str
    target: str | None = None
    duration_ms: Long | None = None
    value: str | None = None


@header
class CreateAccessConfigRequestHeader:  # 50 UPDATE_AND_CREATE_ACL_CONFIG
    access_key: str
    secret_key: str | None = None
    white_remote_address: str | None = None
    admin: bool = False
    default_topic_perm: str | None = None
    default_group_perm: str | None = None
    topic_perms: str | None = None  # comma separated "topic=PERM"
    group_perms: str | None = None


@header
class DeleteAccessConfigRequestHeader:  # 51 DELETE_ACL_CONFIG
    access_key: str


@header
class GetBrokerAclConfigResponseHeader:  # 52 GET_BROKER_CLUSTER_ACL_INFO
    version: str
    broker_name: str
    broker_addr: str
    cluster_name: str
    all_acl_file_version: str | None = None


@header
class UpdateGlobalWhiteAddrsConfigRequestHeader:  # 53 UPDATE_GLOBAL_WHITE_ADDRS_CONFIG
    global_white_addrs: str
    acl_file_full_path: str | None = None  # upstream marks it required but its own tools leave it out


ALL_HEADERS: tuple[type, ...] = tuple(
    obj for obj in list(globals().values()) if isinstance(obj, type) and hasattr(obj, _PLAN_ATTR)
)
"""Every header class declared here (tests iterate over it)."""
