"""TransactionalMessageService: half messages in RMQ_SYS_TRANS_HALF_TOPIC, op records, commit/rollback.

A prepared message is stored in the half topic (queue 0) with its real topic and queue in
properties and its transaction bits cleared, so no consumer sees it. END_TRANSACTION either stores
the real message (commit) or not (rollback); both write an op record into RMQ_SYS_TRANS_OP_HALF_TOPIC
(same queue id) whose body is the half message's queue offset and whose tag is "d", as upstream, so
the check-back scan (``transaction.check``) knows the half message is decided.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog

from broker.inner_message import inner_from
from broker.message_const import MessageConst
from broker.topic import TRANS_CHECK_MAX_TIME_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from store.message import TRANSACTION_ROLLBACK_TYPE, MessageExt, MessageExtBrokerInner, encode_properties, tags_hash
from store.results import PutMessageResult

log = structlog.get_logger(__name__)

REMOVE_TAG = "d"


def reset_transaction_value(sys_flag: int, tx_type: int) -> int:
    return (sys_flag & ~TRANSACTION_ROLLBACK_TYPE) | tx_type


class TransactionalMessageService:
    def __init__(self, *, store, store_host: tuple[str, int], now_ms: Callable[[], int]) -> None:
        self.store = store
        self.store_host = store_host
        self._now_ms = now_ms

    def prepare_half_message(self, msg: MessageExtBrokerInner) -> MessageExtBrokerInner:
        props = msg.properties
        props[MessageConst.REAL_TOPIC] = msg.topic
        props[MessageConst.REAL_QID] = str(msg.queue_id)
        msg.sys_flag = reset_transaction_value(msg.sys_flag, 0)
        msg.topic = TRANS_HALF_TOPIC
        msg.queue_id = 0
        msg.properties_string = encode_properties(props)
        return msg

    def end_message_transaction(self, half: MessageExt, commit_log_offset: int, tx_type: int) -> MessageExtBrokerInner:
        """The real message for a committed half message (upstream endMessageTransaction)."""
        props = dict(half.properties)
        topic = props.pop(MessageConst.REAL_TOPIC, half.topic)
        try:
            queue_id = int(props.pop(MessageConst.REAL_QID, "0") or 0)
        except ValueError:
            queue_id = 0
        props.pop(MessageConst.TRAN_MSG, None)
        return inner_from(
            half,
            topic,
            queue_id,
            props,
            sys_flag=reset_transaction_value(half.sys_flag, tx_type),
            store_host=self.store_host,
            prepared_transaction_offset=commit_log_offset,
        )

    def renew_half_message(self, half: MessageExt) -> MessageExtBrokerInner:
        """A copy of a half message to put back at the end of the half queue (upstream
        renewHalfMessageInner): same born time, properties (with any updated check count) and body."""
        return inner_from(half, TRANS_HALF_TOPIC, half.queue_id, dict(half.properties), store_host=self.store_host)

    def discarded_message(self, half: MessageExt) -> MessageExtBrokerInner:
        """A half message checked too often, as it is parked in TRANS_CHECK_MAX_TIME_TOPIC."""
        return inner_from(half, TRANS_CHECK_MAX_TIME_TOPIC, 0, dict(half.properties), store_host=self.store_host)

    async def delete_prepare_message(self, half: MessageExt) -> bool:
        """Write the op record that marks ``half`` as decided."""
        return await self.put_op_record(half.queue_id, half.queue_offset)

    async def put_op_record(self, queue_id: int, half_queue_offset: int) -> bool:
        body = str(half_queue_offset).encode()
        props = {MessageConst.TAGS: REMOVE_TAG}
        op = MessageExtBrokerInner(
            topic=TRANS_OP_HALF_TOPIC,
            queue_id=queue_id,
            flag=0,
            body=body,
            properties=props,
            properties_string=encode_properties(props),
            tags_code=tags_hash(REMOVE_TAG),
            sys_flag=0,
            born_timestamp=self._now_ms(),
            born_host=self.store_host,
            store_host=self.store_host,
        )
        result: PutMessageResult = await self.store.put_message(op)
        ok = result.is_ok()
        if not ok:
            log.warning("cannot write transaction op record", half_offset=half_queue_offset, status=result.status.name)
        return ok
