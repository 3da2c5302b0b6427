"""QueryMessageProcessor: QUERY_MESSAGE (12) by key or unique key, VIEW_MESSAGE_BY_ID (33)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.headers import QueryMessageRequestHeader, ViewMessageRequestHeader, decode_header
from remoting.server import not_supported

if TYPE_CHECKING:
    from broker.config import BrokerConfig
    from store.message_store import MessageStore


class QueryMessageProcessor:
    def __init__(self, store: MessageStore, config: BrokerConfig) -> None:
        self.store = store
        self.config = config  # live: updateBrokerConfig changes default_query_max_num in place

    def reject_request(self) -> bool:
        return False

    async def process_request(self, channel, request: RemotingCommand) -> RemotingCommand | None:
        if request.code == RequestCode.QUERY_MESSAGE:
            return self.query_message(request)
        if request.code == RequestCode.VIEW_MESSAGE_BY_ID:
            return self.view_message_by_id(request)
        return not_supported(request)

    def query_message(self, request: RemotingCommand) -> RemotingCommand:
        hdr = decode_header(QueryMessageRequestHeader, request.ext_fields)
        max_num = hdr.max_num
        if request.ext_fields.get("_UNIQUE_KEY_QUERY") == "true":
            max_num = self.config.default_query_max_num
        result = self.store.query_message(hdr.topic, hdr.key, max_num, hdr.begin_timestamp, hdr.end_timestamp)
        ext = {
            "indexLastUpdateTimestamp": str(result.index_last_update_timestamp),
            "indexLastUpdatePhyoffset": str(result.index_last_update_phyoffset),
        }
        if not result.buffers:
            return request.response(
                ResponseCode.QUERY_NOT_FOUND, "can not find message, maybe time range not correct", ext_fields=ext
            )
        return request.response(ResponseCode.SUCCESS, ext_fields=ext, body=b"".join(result.buffers))

    def view_message_by_id(self, request: RemotingCommand) -> RemotingCommand:
        hdr = decode_header(ViewMessageRequestHeader, request.ext_fields)
        raw = self.store.select_one_message_by_offset(hdr.offset)
        if raw is None:
            return request.response(ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {hdr.offset}")
        return request.response(ResponseCode.SUCCESS, body=bytes(raw))
