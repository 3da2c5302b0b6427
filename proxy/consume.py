"""ReceiveMessage, AckMessage, ChangeInvisibleDuration and ForwardMessageToDeadLetterQueue, served by the
broker's PopService."""

from __future__ import annotations

import random
import time
from collections.abc import AsyncIterator

import structlog

from broker.message_const import MessageConst
from broker.pop import InvalidReceiptHandle, PopRequest
from proxy.channel import ProxyChannel
from proxy.common import (
    DEFAULT_INVISIBLE_MS,
    MAX_BATCH,
    MAX_INVISIBLE_MS,
    MIN_INVISIBLE_MS,
    OK,
    CallError,
    ServiceBase,
    is_fifo,
    status,
    tag_matcher,
)
from proxy.convert import BadMessage, to_message
from proxy.protocol import definition_pb2 as pb
from proxy.protocol import service_pb2 as spb
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from store.message import MessageExt

log = structlog.get_logger(__name__)


class ConsumeCalls(ServiceBase):
    """ReceiveMessage / AckMessage / ChangeInvisibleDuration / ForwardMessageToDeadLetterQueue."""

    # -- ReceiveMessage / AckMessage / ChangeInvisibleDuration / DLQ ----------------------------------------------
    async def ReceiveMessage(
        self, request: spb.ReceiveMessageRequest, context
    ) -> AsyncIterator[spb.ReceiveMessageResponse]:
        try:
            responses = await self._receive(request, context)
        except CallError as exc:
            await context.abort(exc.code, str(exc))
            return
        except BadMessage as exc:
            responses = [spb.ReceiveMessageResponse(status=status(exc.code, str(exc)))]
        for response in responses:
            yield response

    async def _receive(self, request: spb.ReceiveMessageRequest, context) -> list[spb.ReceiveMessageResponse]:
        self._authorise(request, context)
        state = self._client(context)
        group = request.group.name
        if not group:
            raise BadMessage(pb.ILLEGAL_CONSUMER_GROUP, "the request names no consumer group")
        tc = self._topic(request.message_queue.topic)
        if tc is None:
            raise BadMessage(pb.TOPIC_NOT_FOUND, f"topic {request.message_queue.topic.name} does not exist")
        sgc = self._group_config(group)
        if sgc is None:
            raise BadMessage(pb.CONSUMER_GROUP_NOT_FOUND, f"consumer group {group} does not exist")
        if not sgc.consume_enable:
            raise BadMessage(pb.FORBIDDEN, f"consumer group {group} may not consume")
        invisible_ms = (
            request.invisible_duration.ToMilliseconds()
            if request.HasField("invisible_duration")
            else DEFAULT_INVISIBLE_MS
        )
        if not MIN_INVISIBLE_MS <= invisible_ms <= MAX_INVISIBLE_MS:
            raise BadMessage(
                pb.ILLEGAL_INVISIBLE_TIME,
                f"invisible duration {invisible_ms} ms is outside [{MIN_INVISIBLE_MS}, {MAX_INVISIBLE_MS}] ms",
            )
        if request.batch_size < 0 or request.batch_size > MAX_BATCH:
            raise BadMessage(pb.BAD_REQUEST, f"batch size {request.batch_size} is outside [1, {MAX_BATCH}]")
        matches = self._matcher(request.filter_expression)
        poll_ms = (
            request.long_polling_timeout.ToMilliseconds()
            if request.HasField("long_polling_timeout")
            else self.config.grpc_proxy_long_polling_timeout_mills
        )
        poll_ms = max(0, min(poll_ms, self.config.grpc_proxy_long_polling_timeout_mills))
        queue_ids = receive_order(request.message_queue.id, tc.read_queue_nums)
        if state.group != group:
            state.group = group
        pop = PopRequest(
            group=group,
            topic=tc.topic_name,
            queue_ids=queue_ids,
            max_nums=request.batch_size or 1,
            invisible_ms=invisible_ms,
            fifo=is_fifo(tc),
            max_attempts=sgc.retry_max_times + 1,
            matches=matches,
        )
        deadline = time.monotonic() + poll_ms / 1000
        popped = await self.c.pop_service.pop(pop)
        while not popped:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return [spb.ReceiveMessageResponse(status=status(pb.MESSAGE_NOT_FOUND, "no new message"))]
            await self.c.pop_service.wait(group, tc.topic_name, int(remaining * 1000))
            popped = await self.c.pop_service.pop(pop)
        out = [spb.ReceiveMessageResponse(status=OK)]
        # when the broker handed the messages over (clients measure their delivery latency from it)
        delivered = spb.ReceiveMessageResponse()
        delivered.delivery_timestamp.GetCurrentTime()
        out.append(delivered)
        for p in popped:
            out.append(
                spb.ReceiveMessageResponse(
                    message=to_message(
                        p.message,
                        tc.topic_name,
                        receipt_handle=p.receipt_handle,
                        attempt=p.attempt,
                        invisible_ms=p.invisible_ms,
                        namespace=request.message_queue.topic.resource_namespace,
                    )
                )
            )
        return out

    def _matcher(self, expression: pb.FilterExpression):
        """TAG (``*`` or ``a||b``) or, with enablePropertyFilter, SQL92 over the message's properties."""
        if expression.type != pb.SQL:
            return tag_matcher(expression)
        if not self.config.enable_property_filter:
            raise BadMessage(
                pb.ILLEGAL_FILTER_EXPRESSION, "SQL92 filtering is disabled on this broker (enablePropertyFilter=false)"
            )
        try:
            predicate = self.c.compile_expression("SQL92", expression.expression)
        except ValueError as exc:
            raise BadMessage(pb.ILLEGAL_FILTER_EXPRESSION, f"SQL92 filter {expression.expression!r}: {exc}") from None
        return lambda msg: bool(predicate(msg.properties))

    async def AckMessage(self, request, context) -> spb.AckMessageResponse:
        return await self._guard(context, self._ack, request, spb.AckMessageResponse)

    async def _ack(self, request: spb.AckMessageRequest, context) -> spb.AckMessageResponse:
        self._client(context)
        response = spb.AckMessageResponse()
        for entry in request.entries:
            try:
                self.c.pop_service.ack(request.group.name, request.topic.name, entry.receipt_handle)
                st = OK
            except InvalidReceiptHandle as exc:
                st = status(pb.INVALID_RECEIPT_HANDLE, str(exc))
            response.entries.add(message_id=entry.message_id, receipt_handle=entry.receipt_handle, status=st)
        codes = {e.status.code for e in response.entries}
        response.status.CopyFrom(
            OK
            if codes <= {pb.OK}
            else response.entries[0].status
            if len(codes) == 1
            else status(pb.MULTIPLE_RESULTS, "the entries have different results")
        )
        return response

    async def ChangeInvisibleDuration(self, request, context) -> spb.ChangeInvisibleDurationResponse:
        return await self._guard(context, self._change_invisible, request, spb.ChangeInvisibleDurationResponse)

    async def _change_invisible(
        self, request: spb.ChangeInvisibleDurationRequest, context
    ) -> spb.ChangeInvisibleDurationResponse:
        self._client(context)
        invisible_ms = request.invisible_duration.ToMilliseconds()
        if not 0 <= invisible_ms <= MAX_INVISIBLE_MS:
            return spb.ChangeInvisibleDurationResponse(
                status=status(
                    pb.ILLEGAL_INVISIBLE_TIME,
                    f"invisible duration {invisible_ms} ms is outside [0, {MAX_INVISIBLE_MS}]",
                )
            )
        try:
            handle = self.c.pop_service.change_invisible_time(
                request.group.name, request.topic.name, request.receipt_handle, invisible_ms
            )
        except InvalidReceiptHandle as exc:
            return spb.ChangeInvisibleDurationResponse(status=status(pb.INVALID_RECEIPT_HANDLE, str(exc)))
        return spb.ChangeInvisibleDurationResponse(status=OK, receipt_handle=handle)

    async def ForwardMessageToDeadLetterQueue(self, request, context) -> spb.ForwardMessageToDeadLetterQueueResponse:
        return await self._guard(context, self._forward_to_dlq, request, spb.ForwardMessageToDeadLetterQueueResponse)

    async def _forward_to_dlq(self, request, context) -> spb.ForwardMessageToDeadLetterQueueResponse:
        state = self._client(context)
        group, topic = request.group.name, request.topic.name
        try:
            msg, _ = self.c.pop_service.message_of(group, topic, request.receipt_handle)
        except InvalidReceiptHandle as exc:
            return spb.ForwardMessageToDeadLetterQueueResponse(status=status(pb.INVALID_RECEIPT_HANDLE, str(exc)))
        if msg is None:
            return spb.ForwardMessageToDeadLetterQueueResponse(
                status=status(pb.MESSAGE_NOT_FOUND, "the message is no longer stored")
            )
        if not await self.send_to_dlq(state.channel, group, msg):
            return spb.ForwardMessageToDeadLetterQueueResponse(
                status=status(pb.INTERNAL_SERVER_ERROR, "the dead letter queue refused it")
            )
        self.c.pop_service.ack(group, topic, request.receipt_handle)
        return spb.ForwardMessageToDeadLetterQueueResponse(status=OK)

    async def send_to_dlq(self, channel: ProxyChannel, group: str, msg: MessageExt) -> bool:
        """CONSUMER_SEND_MSG_BACK with delay level -1 (straight to %DLQ%<group>) through the send queue."""
        ext = {
            "offset": str(msg.commit_log_offset),
            "group": group,
            "delayLevel": "-1",
            "originMsgId": msg.properties.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX, msg.msg_id),
            "originTopic": msg.topic,
            "unitMode": "false",
            "maxReconsumeTimes": "0",
        }
        response = await channel.call(RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK, ext), 10.0)
        if response.code != ResponseCode.SUCCESS:
            log.warning(
                "cannot move a message to the dead letter queue",
                group=group,
                topic=msg.topic,
                code=response.code,
                remark=response.remark,
            )
        return response.code == ResponseCode.SUCCESS


def receive_order(queue_id: int, read_queue_nums: int) -> list[int]:
    """The queues one receive pops from, in order. The request names a queue (of the route or of the
    assignment); this broker pops from all of the topic's queues, as upstream's proxy pops from the whole
    broker the queue belongs to, but the named queue first, so that the receives a push consumer keeps in
    flight (one per assigned queue) do not all start on the same queues. Id -1 (or unknown): shuffled."""
    others = list(range(read_queue_nums))
    random.shuffle(others)
    if 0 <= queue_id < read_queue_nums:
        others.remove(queue_id)
        return [queue_id, *others]
    return others
