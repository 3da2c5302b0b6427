"""EndTransactionProcessor: END_TRANSACTION (37) — commit or roll back a half message.

Producers send it oneway, after their local transaction (``fromTransactionCheck=false``) or in answer to
a CHECK_TRANSACTION_STATE (``true``, naming the offsets of the copy the check was about). As upstream:
"unknown" (0) changes nothing, so the check service asks again later; commit stores the real message
(clearing REAL_TOPIC/REAL_QID/TRAN_MSG, keeping the half message's commit-log offset as its prepared
offset) and then writes the op record; rollback only writes the op record. The response (never sent
for a oneway request) carries the reason when the half message cannot be found or does not match.
"""

from __future__ import annotations

from dataclasses import dataclass
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
    from broker.config import BrokerConfig
    from broker.transaction.service import TransactionalMessageService
    from store.message_store import MessageStore

log = structlog.get_logger(__name__)

TRANSACTION_NOT_TYPE = 0


@dataclass(slots=True)
class EndTransactionStats:
    committed: int = 0
    rolled_back: int = 0
    unknown: int = 0
    refused: int = 0
    from_check: int = 0


class EndTransactionProcessor:
    def __init__(self, store: MessageStore, config: BrokerConfig, transactions: TransactionalMessageService) -> None:
        self.store = store
        self.config = config
        self.transactions = transactions
        self.stats = EndTransactionStats()

    def reject_request(self) -> bool:
        return False

    async def process_request(self, channel, request: RemotingCommand) -> RemotingCommand | None:
        hdr = decode_header(EndTransactionRequestHeader, request.ext_fields)
        if self.config.broker_role == "SLAVE":
            return request.response(ResponseCode.SLAVE_NOT_AVAILABLE, "the broker is a slave")
        tx = hdr.commit_or_rollback
        if hdr.from_transaction_check:
            self.stats.from_check += 1
            log.info(
                "transaction state from a check",
                msg_id=hdr.msg_id,
                state=_STATE_NAMES.get(tx, tx),
                group=hdr.producer_group,
                commit_log_offset=hdr.commit_log_offset,
                remote=channel.remote_addr,
            )
        if tx == TRANSACTION_NOT_TYPE:
            self.stats.unknown += 1
            log.info(
                "transaction state unknown from producer",
                msg_id=hdr.msg_id,
                from_check=hdr.from_transaction_check,
                remote=channel.remote_addr,
                remark=request.remark,
            )
            return None
        if tx not in (TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE):
            return self._refuse(request, hdr, f"commitOrRollback {tx} is not 0, 8 or 12")
        half = self.store.look_message_by_offset(hdr.commit_log_offset)
        if half is None:
            return self._refuse(request, hdr, "Find prepared transaction message failed")
        problem = self._check_prepare_message(half, hdr)
        if problem is not None:
            return self._refuse(request, hdr, problem)
        service = self.transactions
        if tx == TRANSACTION_COMMIT_TYPE:
            inner = service.end_message_transaction(half, hdr.commit_log_offset, TRANSACTION_COMMIT_TYPE)
            result = await self.store.put_message(inner)
            if result.status != PutMessageStatus.PUT_OK:
                return self._refuse(request, hdr, f"commit put failed: {result.status.name}")
            self.stats.committed += 1
        else:
            self.stats.rolled_back += 1
        await service.delete_prepare_message(half)
        return request.response(ResponseCode.SUCCESS)

    def _refuse(self, request: RemotingCommand, hdr, remark: str) -> RemotingCommand:
        self.stats.refused += 1
        log.warning(
            "end transaction refused",
            msg_id=hdr.msg_id,
            reason=remark,
            group=hdr.producer_group,
            commit_log_offset=hdr.commit_log_offset,
        )
        return request.response(ResponseCode.SYSTEM_ERROR, remark)

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


_STATE_NAMES = {
    TRANSACTION_NOT_TYPE: "UNKNOW",
    TRANSACTION_COMMIT_TYPE: "COMMIT_MESSAGE",
    TRANSACTION_ROLLBACK_TYPE: "ROLLBACK_MESSAGE",
}
