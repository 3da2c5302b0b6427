"""Message property names (upstream MessageConst) that the broker reads or writes.

One class: the names the store itself reads (KEYS, TAGS, DELAY, REAL_TOPIC, ...) are declared in the
store's ``MessageConst`` (store never imports broker); this one adds the broker's.
"""

from __future__ import annotations

from store import MessageConst as StoreMessageConst


class MessageConst(StoreMessageConst):
    RETRY_TOPIC = "RETRY_TOPIC"
    PRODUCER_GROUP = "PGROUP"
    MIN_OFFSET = "MIN_OFFSET"
    MAX_OFFSET = "MAX_OFFSET"
    BUYER_ID = "BUYER_ID"
    ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
    TRANSFER_FLAG = "TRANSFER_FLAG"
    CORRECTION_FLAG = "CORRECTION_FLAG"
    MQ2_FLAG = "MQ2_FLAG"
    RECONSUME_TIME = "RECONSUME_TIME"
    MSG_REGION = "MSG_REGION"
    TRACE_SWITCH = "TRACE_ON"
    UNIQ_CLIENT_MESSAGE_ID_KEYIDX = StoreMessageConst.UNIQ_KEY  # upstream's name for it
    MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
    CONSUME_START_TIMESTAMP = "CONSUME_START_TIME"
    TRANSACTION_PREPARED_QUEUE_OFFSET = "TRAN_PREPARED_QUEUE_OFFSET"
    TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
    CHECK_IMMUNITY_TIME_IN_SECONDS = "CHECK_IMMUNITY_TIME_IN_SECONDS"
    INSTANCE_ID = "INSTANCE_ID"
    CLUSTER = "CLUSTER"

    # mini-rocketmq fault injection (honoured only with faultInjectionEnable=true)
    BROKER_SLEEP_MS = "brokerSleepMs"
    BROKER_STALL_APPEND_MS = "brokerStallAppendMs"
