"""ConsumerManageProcessor: GET_CONSUMER_LIST_BY_GROUP (38), QUERY_CONSUMER_OFFSET (14) and
UPDATE_CONSUMER_OFFSET (15)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import orjson

from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.headers import (
    GetConsumerListByGroupRequestHeader,
    QueryConsumerOffsetRequestHeader,
    QueryConsumerOffsetResponseHeader,
    UpdateConsumerOffsetRequestHeader,
    decode_header,
    encode_header,
)
from remoting.server import not_supported

if TYPE_CHECKING:
    from broker.client.consumer_manager import ConsumerManager
    from broker.consumer_offset_manager import ConsumerOffsetManager
    from store.message_store import MessageStore

NOT_FOUND_REMARK = "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first"
# upstream accessMessageInMemoryMaxRatio: data further than 40% of RAM behind the head counts as "on disk"
ACCESS_MESSAGE_IN_MEMORY_MAX_RATIO = 40


def _memory_budget() -> int:
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        total = 8 * 1024**3
    return total * ACCESS_MESSAGE_IN_MEMORY_MAX_RATIO // 100


class ConsumerManageProcessor:
    def __init__(self, store: MessageStore, consumers: ConsumerManager, offsets: ConsumerOffsetManager) -> None:
        self.store = store
        self.consumers = consumers
        self.offsets = offsets
        self._memory_budget = _memory_budget()

    def reject_request(self) -> bool:
        return False

    async def process_request(self, channel, request: RemotingCommand) -> RemotingCommand | None:
        code = request.code
        if code == RequestCode.GET_CONSUMER_LIST_BY_GROUP:
            hdr = decode_header(GetConsumerListByGroupRequestHeader, request.ext_fields)
            info = self.consumers.get(hdr.consumer_group)
            ids = info.client_ids() if info else []
            if not ids:
                return request.response(ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {hdr.consumer_group}")
            return request.response(ResponseCode.SUCCESS, body=orjson.dumps({"consumerIdList": ids}))
        if code == RequestCode.QUERY_CONSUMER_OFFSET:
            return self.query_consumer_offset(request)
        if code == RequestCode.UPDATE_CONSUMER_OFFSET:
            hdr = decode_header(UpdateConsumerOffsetRequestHeader, request.ext_fields)
            self.offsets.commit_offset(
                hdr.consumer_group, hdr.topic, hdr.queue_id, hdr.commit_offset, channel.remote_addr
            )
            return request.response(ResponseCode.SUCCESS)
        return not_supported(request)

    def query_consumer_offset(self, request: RemotingCommand) -> RemotingCommand:
        hdr = decode_header(QueryConsumerOffsetRequestHeader, request.ext_fields)
        offset = self.offsets.query_offset(hdr.consumer_group, hdr.topic, hdr.queue_id)
        if offset >= 0:
            return request.response(
                ResponseCode.SUCCESS, ext_fields=encode_header(QueryConsumerOffsetResponseHeader(offset=offset))
            )
        # A young queue (nothing ever removed from it) answers 0 so a new group reads from the start
        # even with CONSUME_FROM_LAST_OFFSET, as upstream does while offset 0 is still in memory.
        store = self.store
        min_offset = store.get_min_offset_in_queue(hdr.topic, hdr.queue_id)
        if min_offset <= 0 and not self._in_disk(hdr.topic, hdr.queue_id, 0):
            return request.response(
                ResponseCode.SUCCESS, ext_fields=encode_header(QueryConsumerOffsetResponseHeader(offset=0))
            )
        return request.response(ResponseCode.QUERY_NOT_FOUND, NOT_FOUND_REMARK)

    def _in_disk(self, topic: str, queue_id: int, cq_offset: int) -> bool:
        """Upstream checkInDiskByConsumeOffset: is that entry's message beyond the in-memory window?"""
        store = self.store
        if store.get_max_offset_in_queue(topic, queue_id) <= cq_offset:
            return False
        phy = store.get_commit_log_offset_in_queue(topic, queue_id, cq_offset)
        return store.get_max_phy_offset() - phy > self._memory_budget
