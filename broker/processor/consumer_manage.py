"""ConsumerManageProcessor: GET_CONSUMER_LIST_BY_GROUP (38), QUERY_CONSUMER_OFFSET (14) and
UPDATE_CONSUMER_OFFSET (15)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import orjson

from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.headers import (GetConsumerListByGroupRequestHeader, QueryConsumerOffsetRequestHeader,
                              UpdateConsumerOffsetRequestHeader, decode_header)

if TYPE_CHECKING:
    from broker.controller import BrokerController

NOT_FOUND_REMARK = "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first"


class ConsumerManageProcessor:
    def __init__(self, controller: BrokerController) -> None:
        self.c = controller

    def reject_request(self) -> bool:
        return False

    async def process_request(self, channel, request: RemotingCommand) -> RemotingCommand | None:
        code = request.code
        if code == RequestCode.GET_CONSUMER_LIST_BY_GROUP:
            hdr = decode_header(GetConsumerListByGroupRequestHeader, request.ext_fields)
            info = self.c.consumer_manager.get(hdr.consumer_group)
            ids = info.client_ids() if info else []
            if not ids:
                return request.response(ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {hdr.consumer_group}")
            return request.response(ResponseCode.SUCCESS, body=orjson.dumps({"consumerIdList": ids}))
        if code == RequestCode.QUERY_CONSUMER_OFFSET:
            return self.query_consumer_offset(request)
        if code == RequestCode.UPDATE_CONSUMER_OFFSET:
            hdr = decode_header(UpdateConsumerOffsetRequestHeader, request.ext_fields)
            self.c.consumer_offset_manager.commit_offset(hdr.consumer_group, hdr.topic, hdr.queue_id,
                                                         hdr.commit_offset, channel.remote_addr)
            return request.response(ResponseCode.SUCCESS)
        return request.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {code} not supported")

    def query_consumer_offset(self, request: RemotingCommand) -> RemotingCommand:
        hdr = decode_header(QueryConsumerOffsetRequestHeader, request.ext_fields)
        offset = self.c.consumer_offset_manager.query_offset(hdr.consumer_group, hdr.topic, hdr.queue_id)
        if offset >= 0:
            return request.response(ResponseCode.SUCCESS, ext_fields={"offset": str(offset)})
        # A young queue (nothing ever removed from it) answers 0 so a new group reads from the start
        # even with CONSUME_FROM_LAST_OFFSET, as upstream does while offset 0 is still in memory.
        min_offset = self.c.store.get_min_offset_in_queue(hdr.topic, hdr.queue_id)
        if min_offset <= 0 and not self.c.store.check_in_disk_by_consume_offset(hdr.topic, hdr.queue_id, 0):
            return request.response(ResponseCode.SUCCESS, ext_fields={"offset": "0"})
        return request.response(ResponseCode.QUERY_NOT_FOUND, NOT_FOUND_REMARK)
