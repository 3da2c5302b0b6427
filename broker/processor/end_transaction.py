"""EndTransactionProcessor: END_TRANSACTION (37) — commit or roll back a half message."""

from __future__ import annotations

from typing import TYPE_CHECKING

import structlog

from broker.message_const import MessageConst
from broker.topic import TRANS_HALF_TOPIC
from remoting.codes import ResponseCode
from remoting.command import RemotingCommand
from remoting.headers import EndTransactionRequestHeader, decode_header
from store.message import TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE
from store.results import PutMessageStatus

if TYPE_CHECKING:
    from broker.controller import BrokerController

log = structlog.get_logger(__name__)

TRANSACTION_NOT_TYPE = 0


class EndTransactionProcessor:
    def __init__(self, controller: BrokerController) -> None:
        self.c = controller

    def reject_request(self) -> bool:
        return False

    async def process_request(self, channel, request: RemotingCommand) -> RemotingCommand | None:
        hdr = decode_header(EndTransactionRequestHeader, request.ext_fields)
        if self.c.config.broker_role == "SLAVE":
            return request.response(ResponseCode.SLAVE_NOT_AVAILABLE, "the broker is a slave")
        tx = hdr.commit_or_rollback
        if tx == TRANSACTION_NOT_TYPE:
            log.info("transaction state unknown from producer", msg_id=hdr.msg_id,
                     from_check=hdr.from_transaction_check, remote=channel.remote_addr)
            return None
        if tx not in (TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE):
            return request.response(ResponseCode.SYSTEM_ERROR, f"commitOrRollback {tx} is not 0, 8 or 12")
        half = self.c.store.look_message_by_offset(hdr.commit_log_offset)
        if half is None:
            return request.response(ResponseCode.SYSTEM_ERROR, "Find prepared transaction message failed")
        problem = self._check_prepare_message(half, hdr)
        if problem is not None:
            return request.response(ResponseCode.SYSTEM_ERROR, problem)
        service = self.c.transaction_service
        if tx == TRANSACTION_COMMIT_TYPE:
            inner = service.end_message_transaction(half, hdr.commit_log_offset, TRANSACTION_COMMIT_TYPE)
            inner = self.c.schedule_service.maybe_delay(inner)
            result = await self.c.store.put_message(inner)
            if result.status != PutMessageStatus.PUT_OK:
                return request.response(ResponseCode.SYSTEM_ERROR, f"commit put failed: {result.status.name}")
        await service.delete_prepare_message(half)
        return request.response(ResponseCode.SUCCESS)

    @staticmethod
    def _check_prepare_message(half, hdr) -> str | None:
        if half.topic != TRANS_HALF_TOPIC:
            return f"the message at offset {hdr.commit_log_offset} is not a half message"
        group = half.properties.get(MessageConst.PRODUCER_GROUP)
        if group is not None and group != hdr.producer_group:
            return "The producer group wrong"
        if half.queue_offset != hdr.tran_state_table_offset:
            return "The transaction state table offset wrong"
        if half.commit_log_offset != hdr.commit_log_offset:
            return "The commit log offset wrong"
        return None
