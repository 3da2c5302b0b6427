"""SendMessage and EndTransaction: each 5.x message becomes the SEND_MESSAGE a 4.x client would send."""

from __future__ import annotations

import time
import zlib

import structlog

from broker.message_const import MessageConst
from proxy.common import (
    COMMIT,
    OK,
    ROLLBACK,
    ClientState,
    ServiceBase,
    code_of,
    parse_transaction_id,
    producer_group,
    status,
    topic_message_types,
    transaction_id,
)
from proxy.convert import PROPERTY_TIMER_DELIVER_MS, BadMessage, to_properties
from proxy.protocol import definition_pb2 as pb
from proxy.protocol import service_pb2 as spb
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.headers import EndTransactionRequestHeader, encode_header
from store.message import TRANSACTION_PREPARED_TYPE, decode_offset_msg_id, encode_properties

log = structlog.get_logger(__name__)


class SendCalls(ServiceBase):
    """SendMessage / EndTransaction."""

    # -- SendMessage / EndTransaction --------------------------------------------------------------------------
    async def SendMessage(self, request, context) -> spb.SendMessageResponse:
        return await self._guard(context, self._send_message, request, spb.SendMessageResponse)

    async def _send_message(self, request: spb.SendMessageRequest, context) -> spb.SendMessageResponse:
        state = self._client(context)
        if not request.messages:
            return spb.SendMessageResponse(status=status(pb.BAD_REQUEST, "the request carries no message"))
        response = spb.SendMessageResponse()
        for message in request.messages:
            try:
                entry = await self._send_one(state, message)
            except BadMessage as exc:
                entry = spb.SendResultEntry(status=status(exc.code, str(exc)))
            response.entries.append(entry)
        codes = {e.status.code for e in response.entries}
        response.status.CopyFrom(
            response.entries[0].status
            if len(codes) == 1
            else status(pb.MULTIPLE_RESULTS, "the messages have different results")
        )
        return response

    async def _send_one(self, state: ClientState, message: pb.Message) -> spb.SendResultEntry:
        tc = self._topic(message.topic, create=True)
        if tc is None:
            raise BadMessage(pb.TOPIC_NOT_FOUND, f"topic {message.topic.name} does not exist")
        if not message.body:
            raise BadMessage(pb.MESSAGE_BODY_EMPTY, "the message body is empty")
        if len(message.body) > self.config.max_message_size:
            raise BadMessage(
                pb.MESSAGE_BODY_TOO_LARGE,
                f"the message body is {len(message.body)} bytes, more "
                f"than maxMessageSize {self.config.max_message_size}",
            )
        props = to_properties(message)
        sp = message.system_properties
        kind = sp.message_type or pb.NORMAL
        accepted = topic_message_types(tc)
        if kind not in accepted:
            raise BadMessage(
                pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                f"topic {tc.topic_name} accepts {'/'.join(pb.MessageType.Name(k) for k in accepted)} "
                f"messages, not {pb.MessageType.Name(kind)}",
            )
        sys_flag = 0
        group = producer_group(tc.topic_name)
        if kind == pb.TRANSACTION:
            props[MessageConst.TRAN_MSG] = "true"
            props[MessageConst.PRODUCER_GROUP] = group
            sys_flag |= TRANSACTION_PREPARED_TYPE
        if sp.HasField("delivery_timestamp"):
            # exact, as 5.x brokers: the send processor parks it in the timer topic (broker/timer.py)
            props[PROPERTY_TIMER_DELIVER_MS] = str(sp.delivery_timestamp.ToMilliseconds())
        if sp.HasField("message_group"):
            queue_id = zlib.crc32(sp.message_group.encode()) % max(tc.write_queue_nums, 1)
        else:
            self._round_robin += 1
            queue_id = self._round_robin % max(tc.write_queue_nums, 1)
        ext = {
            "producerGroup": group,
            "topic": tc.topic_name,
            "defaultTopic": "TBW102",
            "defaultTopicQueueNums": "4",
            "queueId": str(queue_id),
            "sysFlag": str(sys_flag),
            "bornTimestamp": str(int(time.time() * 1000)),
            "flag": "0",
            "properties": encode_properties(props),
            "reconsumeTimes": "0",
            "unitMode": "false",
            "batch": "false",
        }
        request = RemotingCommand.request(RequestCode.SEND_MESSAGE, ext, bytes(message.body))
        request.language = "PYTHON"
        response = await self._call(state, request)
        if response.code != ResponseCode.SUCCESS:
            return spb.SendResultEntry(status=status(code_of(response.code), response.remark or ""))
        rext = response.ext_fields
        entry = spb.SendResultEntry(status=OK, message_id=sp.message_id, offset=int(rext.get("queueOffset", "0")))
        if kind == pb.TRANSACTION:
            entry.transaction_id = transaction_id(rext.get("msgId", ""), int(rext.get("queueOffset", "0")))
        return entry

    async def EndTransaction(self, request, context) -> spb.EndTransactionResponse:
        return await self._guard(context, self._end_transaction, request, spb.EndTransactionResponse)

    async def _end_transaction(self, request: spb.EndTransactionRequest, context) -> spb.EndTransactionResponse:
        state = self._client(context)
        try:
            offset_msg_id, queue_offset = parse_transaction_id(request.transaction_id)
            _, _, commit_log_offset = decode_offset_msg_id(offset_msg_id)
        except ValueError as exc:
            return spb.EndTransactionResponse(status=status(pb.INVALID_TRANSACTION_ID, str(exc)))
        if request.resolution not in (pb.COMMIT, pb.ROLLBACK):
            return spb.EndTransactionResponse(status=status(pb.BAD_REQUEST, "resolution must be COMMIT or ROLLBACK"))
        hdr = EndTransactionRequestHeader(
            producer_group=producer_group(request.topic.name),
            tran_state_table_offset=queue_offset,
            commit_log_offset=commit_log_offset,
            commit_or_rollback=COMMIT if request.resolution == pb.COMMIT else ROLLBACK,
            msg_id=offset_msg_id,
            from_transaction_check=request.source == pb.SOURCE_SERVER_CHECK,
            transaction_id=request.transaction_id,
        )
        cmd = RemotingCommand.request(RequestCode.END_TRANSACTION, encode_header(hdr))
        response = await self._call(state, cmd)
        if response.code != ResponseCode.SUCCESS:
            return spb.EndTransactionResponse(status=status(code_of(response.code), response.remark or ""))
        return spb.EndTransactionResponse(status=OK)
