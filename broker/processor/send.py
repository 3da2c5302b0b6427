"""SendMessageProcessor: SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320) and
CONSUMER_SEND_MSG_BACK (36) — the requests that wait in the send queue.

Follows upstream's SendMessageProcessor: message checks (permissions, topic auto-creation, queue id),
retry → DLQ promotion, transaction half messages, then the store's put result mapped to a response
code and remark. The C++ client sends batches as code 10 with ``batch="1"``; upstream stores that
blob as one message (a long-standing bug), we store the messages inside it.
"""

from __future__ import annotations

import asyncio
import random
import re
import struct
import zlib
from collections.abc import Callable
from operator import attrgetter, itemgetter
from typing import TYPE_CHECKING, Any

import structlog

from broker.message_const import MessageConst
from broker.timer import TIMER_DELAY_MS, TIMER_DELAY_SEC, TIMER_DELIVER_MS, TimerPropertyError, park
from broker.topic import (
    PERM_READ,
    PERM_WRITE,
    RETRY_GROUP_TOPIC_PREFIX,
    TRANS_HALF_TOPIC,
    check_topic_name,
    dlq_topic,
    is_not_allowed_send_topic,
    is_writeable,
    retry_topic,
)
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand
from remoting.headers import (
    ConsumerSendMsgBackRequestHeader,
    SendMessageRequestHeader,
    decode_header,
    decode_send_message_v2,
)
from remoting.pending import start
from remoting.send_answer import SendResultAnswer, SendResultTemplate, SentAnswers
from remoting.send_header import decode_send_message_v2_values, single_send_v2_values
from store.message import (
    COMPRESSED_FLAG,
    IPV4_HOSTS_MASK,
    NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    MessageExtBrokerInner,
    decode_properties,
    encode_properties,
    sent_properties,
    split_properties,
    stored_properties,
    tags_hash,
)
from store.results import PutMessageStatus, StoredPut
from store.send_rows import row_message

if TYPE_CHECKING:
    from broker.config import BrokerConfig
    from broker.stats import BrokerStats
    from broker.subscription_group_manager import SubscriptionGroupManager
    from broker.topic import TopicConfig
    from broker.topic_config_manager import TopicConfigManager
    from broker.transaction.service import TransactionalMessageService
    from store.message_store import MessageStore

log = structlog.get_logger(__name__)

PC_SYNCHRONIZED = "[PC_SYNCHRONIZED]broker busy, start flow control for a while"
MAX_PROPERTIES_LENGTH = 32767
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_JAVA_INT_TEXT = re.compile(r"[+-]?[0-9]{1,11}")
# Batch element: totalSize, magic, bodyCRC, flag, bodyLen (upstream MessageDecoder.encodeMessage).
_BATCH_HEAD = struct.Struct(">iiiii")


#: store statuses that still stored the message, and the response code each is answered with
_STORED_CODES = {
    PutMessageStatus.PUT_OK: ResponseCode.SUCCESS,
    PutMessageStatus.FLUSH_DISK_TIMEOUT: ResponseCode.FLUSH_DISK_TIMEOUT,
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT: ResponseCode.FLUSH_SLAVE_TIMEOUT,
    PutMessageStatus.SLAVE_NOT_AVAILABLE: ResponseCode.SLAVE_NOT_AVAILABLE,
}
_PUT_OK = PutMessageStatus.PUT_OK
_DELAY = MessageConst.DELAY
_TRAN_MSG = MessageConst.TRAN_MSG
_TAGS = MessageConst.TAGS
_UNIQ_KEY = MessageConst.UNIQ_KEY
_CLUSTER = MessageConst.CLUSTER
# the Java client's properties text for a message without tags or keys: `_UNIQ_HEAD` <id> `_WAIT_TRUE_TAIL`; its
# stored string: `_UNIQ_HEAD` <id> `_CLUSTER_TAIL` <cluster> (`store.message.sent_properties`)
_UNIQ_HEAD = _UNIQ_KEY + NAME_VALUE_SEPARATOR
_WAIT_TRUE_TAIL = PROPERTY_SEPARATOR + MessageConst.WAIT + NAME_VALUE_SEPARATOR + "true" + PROPERTY_SEPARATOR
_CLUSTER_TAIL = PROPERTY_SEPARATOR + _CLUSTER + NAME_VALUE_SEPARATOR
_UNIQ_FROM = len(_UNIQ_HEAD)
_UNIQ_TO = -len(_WAIT_TRUE_TAIL)
# the properties that make `_message` do more than build the message (a half message, a delay, a timer park)
_SPECIAL_PROPERTIES = frozenset((_TRAN_MSG, _DELAY, TIMER_DELIVER_MS, TIMER_DELAY_SEC, TIMER_DELAY_MS))
_SUCCESS = int(ResponseCode.SUCCESS)
# the sys flags a row does not carry (`store.send_rows.SendRow`): a transaction type, IPv6 hosts
_NOT_ROW_FLAGS = TRANSACTION_ROLLBACK_TYPE | ~IPV4_HOSTS_MASK
_ROW_TOPIC = itemgetter(0)  # a row's topic (`store.send_rows.SendRow`)
_ROW_SIZE = itemgetter(2)  # a row's stored size in its result (msg_id, queue offset, size)
_CUSTOM_HEADER = attrgetter("custom_header")  # a request's header decoded ahead
_TUPLES_ONLY = {tuple}  # the types of a group's results when every row was stored in the store's one pass
_SEND_MESSAGE = int(RequestCode.SEND_MESSAGE)
_SEND_MESSAGE_V2 = int(RequestCode.SEND_MESSAGE_V2)
_SEND_BATCH_MESSAGE = int(RequestCode.SEND_BATCH_MESSAGE)
_CONSUMER_SEND_MSG_BACK = int(RequestCode.CONSUMER_SEND_MSG_BACK)
_LONE_TOPICS_MAX = 1024  # topics whose checks the lone sends keep (`SendMessageProcessor._lone_checked`)
_VALID_TOPICS_MAX = 4096  # names that passed check_topic_name, remembered so each is checked once


def _lone_stamp_of(tc: TopicConfig, cfg: BrokerConfig) -> tuple:
    """What a topic's kept checks (`SendMessageProcessor._lone_checked`) depend on besides the topic's config object
    itself: any difference makes them again. A field `_msg_check` or `_topic_check` starts to read belongs here."""
    return (
        tc.write_queue_nums,
        tc.read_queue_nums,
        cfg.broker_permission,
        cfg.broker_role,
        cfg.max_message_size,
        cfg.broker_cluster_name,
    )


def born_host(channel: Any) -> tuple[str, int]:
    """The client's address as an IPv4 host and port (records carry IPv4 hosts, protocol.md §5.2); worked
    out once per connection and kept in the channel's attributes."""
    cached = channel.attrs.get("born_host")
    if cached is None:
        host, _, port = channel.remote_addr.rpartition(":")
        if host.count(".") != 3:
            host = "127.0.0.1" if host in ("::1", "[::1]") else "0.0.0.0"
        try:
            cached = (host, int(port))
        except ValueError:
            cached = (host, 0)
        channel.attrs["born_host"] = cached
    return cached  # type: ignore[no-any-return]


class SendError(Exception):
    """A send refused before storing: carries the response code and remark."""

    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = code
        self.remark = remark


def check_delay_level(props: dict[str, str]) -> None:
    """Upstream's CommitLog reads ``DELAY`` with Integer.parseInt; a value that is not a Java int fails the
    send with SYSTEM_ERROR (there an uncaught NumberFormatException, here a clear remark)."""
    value = props.get(MessageConst.DELAY)
    if value is None:
        return
    if value.isascii() and _JAVA_INT_TEXT.fullmatch(value) and -(2**31) <= int(value) < 2**31:
        return
    shown = value if len(value) <= 64 else value[:64] + "..."
    raise SendError(
        ResponseCode.SYSTEM_ERROR,
        f'NumberFormatException: For input string: "{shown}" (the DELAY property must be a delay level)',
    )


def inflate_batch_body(body: bytes | memoryview, limit: int) -> bytes:
    """A batch body the client zlib-compressed as a whole (the C++ client does above 4 KiB and sets
    sysFlag COMPRESSED), inflated to at most ``limit`` bytes; SendError when it is not zlib or too big."""
    inflater = zlib.decompressobj()
    try:
        out = inflater.decompress(body, limit + 1)
    except zlib.error as exc:
        raise SendError(ResponseCode.MESSAGE_ILLEGAL, f"the compressed batch body cannot be inflated: {exc}") from None
    if len(out) > limit or inflater.unconsumed_tail:
        raise SendError(
            ResponseCode.MESSAGE_ILLEGAL, f"the inflated batch body is over the broker's maxMessageSize {limit} bytes"
        )
    if not inflater.eof:
        raise SendError(ResponseCode.MESSAGE_ILLEGAL, "the compressed batch body is truncated")
    return out


def parse_batch_body(body: bytes | memoryview) -> list[tuple[int, bytes, dict[str, str]]]:
    """Split a batch body into (flag, body, properties) per message; SendError on a malformed batch."""
    view = memoryview(body)
    out = []
    pos, end = 0, len(view)
    while pos < end:
        if end - pos < _BATCH_HEAD.size + 2:
            raise SendError(ResponseCode.MESSAGE_ILLEGAL, f"batch message truncated at byte {pos}")
        total, _magic, _crc, flag, body_len = _BATCH_HEAD.unpack_from(view, pos)
        if total < _BATCH_HEAD.size + 2 or pos + total > end or body_len < 0 or _BATCH_HEAD.size + body_len + 2 > total:
            raise SendError(ResponseCode.MESSAGE_ILLEGAL, f"batch message has a bad size at byte {pos}")
        b0 = pos + _BATCH_HEAD.size
        msg_body = bytes(view[b0 : b0 + body_len])
        (prop_len,) = _I16.unpack_from(view, b0 + body_len)
        p0 = b0 + body_len + 2
        if prop_len < 0 or p0 + prop_len > pos + total:
            raise SendError(ResponseCode.MESSAGE_ILLEGAL, f"batch message has bad properties at byte {pos}")
        props = decode_properties(bytes(view[p0 : p0 + prop_len]).decode("utf-8", "replace"))
        out.append((flag, msg_body, props))
        pos += total
    if not out:
        raise SendError(ResponseCode.MESSAGE_ILLEGAL, "empty batch")
    return out


class SendMessageProcessor:
    """Takes what it uses (the store, the broker config, the topic and group tables, the transaction service,
    the stats, this broker's address and clock), not the controller."""

    def __init__(
        self,
        *,
        config: BrokerConfig,
        store: MessageStore,
        topic_config_manager: TopicConfigManager,
        subscription_group_manager: SubscriptionGroupManager,
        transaction_service: TransactionalMessageService,
        stats: BrokerStats,
        store_host: tuple[str, int],
        now_ms: Callable[[], int],
    ) -> None:
        self.config = config
        self.store = store
        self.topic_config_manager = topic_config_manager
        self.subscription_group_manager = subscription_group_manager
        self.transaction_service = transaction_service
        self.stats = stats
        self.store_host = store_host
        self.now_ms = now_ms
        self._valid_topics: set[str] = set()
        # the lone sends' checked topics (`_msg_check`'s entries) kept from one send to the next, each with what it was
        # made from (`_lone_stamp`): the topic's config object and queue counts, the broker's permission, role,
        # maxMessageSize and cluster name; an entry whose stamp differs is made again (`process_request_now`)
        self._lone_checked: dict[str, tuple] = {}
        self._lone_stamps: dict[str, tuple] = {}
        self._template = SendResultTemplate(config.region_id, "true" if config.trace_on else "false")

    def _answer_template(self) -> SendResultTemplate:
        """The SEND answers' template for the broker's MSG_REGION and TRACE_ON now (both may be changed at run
        time by updateBrokerConfig: checked once per group, remade when they differ)."""
        cfg = self.config
        trace_on = "true" if cfg.trace_on else "false"
        template = self._template
        if not template.matches(cfg.region_id, trace_on):
            template = self._template = SendResultTemplate(cfg.region_id, trace_on)
        return template

    def reject_request(self) -> bool:
        # Upstream: page cache busy or no free buffer in the transient store pool. The server calls this
        # once per request and answers [REJECTREQUEST] when it is true, so this is where it is counted.
        if self.store.is_busy_or_deficient():
            self.stats.on_busy("REJECTREQUEST")
            return True
        return False

    def reject_requests(self, count: int) -> bool:
        """``reject_request`` for ``count`` requests decoded from one read at once (the server's group of sends):
        the store's state cannot change between them (nothing runs meanwhile), so it is asked once; each refused
        request is counted, as ``reject_request`` counts it."""
        if self.store.is_busy_or_deficient():
            self.stats.on_busy("REJECTREQUEST", count=count)
            return True
        return False

    async def process_request(self, channel, request: RemotingCommand) -> RemotingCommand | None:
        code = request.code
        if code == _CONSUMER_SEND_MSG_BACK:
            return await self.consumer_send_msg_back(channel, request)
        hdr = self._header(request)
        try:
            # (a header decoded ahead is a single send's: ``groupable`` and ``remoting.send_run`` keep no other, so
            # the batch question, which builds the extFields map, is not asked again)
            if request.custom_header is None and self._is_batch(request, hdr):
                response = await self.send_batch_message(channel, request, hdr)
            else:
                response = await self.send_message(channel, request, hdr)
        except SendError as exc:
            return self._refused(channel, request, hdr, exc)
        if response.code != ResponseCode.SUCCESS:
            _log_not_stored(channel, hdr, response)
        return response

    def process_request_now(self, channel, request: RemotingCommand) -> Any:
        """The synchronous entry (the server's ``answer_now``, through the metrics wrapper): a single send whose header
        was decoded ahead (``groupable``, ``remoting.send_run``: a lone send, one a read) is checked, built, stored and
        answered on the caller's stack when the store needs no wait (``MessageStore.put_sent_group_now``): what
        ``process_request`` and ``send_message`` do with it, without their coroutines. Anything else (a batch, a
        send-back, a header not decoded ahead, fault injection) is ``process_request`` run up to its first wait; a put
        that has to wait is the ``Pending`` rest (``remoting.pending``)."""
        hdr = request.custom_header
        code = request.code
        if hdr is None or (code != _SEND_MESSAGE_V2 and code != _SEND_MESSAGE) or self.config.fault_injection_enable:
            return start(self.process_request(channel, request))
        # the topic's checks as the last lone send to it left them, while nothing they depend on changed (a group
        # checks each topic once, `_msg_check`; one send alone a read would check it every time)
        topic = hdr.topic
        checked = self._lone_checked
        entry = checked.get(topic)
        if entry is not None:
            tc = entry[4]
            if self.topic_config_manager.table.get(topic) is not tc or self._lone_stamps.get(topic) != _lone_stamp_of(
                tc, self.config
            ):
                del checked[topic]
                entry = None
        try:
            item, queue_id, _ = self._message(channel, request, hdr, checked)
        except SendError as exc:
            return self._refused(channel, request, hdr, exc)
        finally:
            if entry is None:
                self._lone_stamp(topic)
        items = [item]
        results = self.store.put_sent_group_now(
            items, channel.attrs.get("born_host") or born_host(channel), self.store_host
        )
        if results.__class__ is not list:
            return start(self._answer_later(channel, request, hdr, results, items, queue_id))
        result = results[0]
        if result.__class__ is tuple:  # (msg_id, queue offset, size): `send_message`'s common answer
            self.stats.on_put(item[0], 1, result[2])
            return SendResultAnswer(self._answer_template(), request, _SUCCESS, result[0], queue_id, result[1])
        return self._answer_put(channel, request, hdr, result, items[0], queue_id)

    def _lone_stamp(self, topic: str) -> None:
        """What the lone sends' entry of `topic` (if `_msg_check` made one) was made from; the kept entries are
        forgotten when there are too many (a producer's topics are few)."""
        checked = self._lone_checked
        entry = checked.get(topic)
        if entry is None:
            self._lone_stamps.pop(topic, None)
            return
        stamps = self._lone_stamps
        if len(stamps) >= _LONE_TOPICS_MAX:
            stamps.clear()
            checked.clear()
            checked[topic] = entry
        stamps[topic] = _lone_stamp_of(entry[4], self.config)

    async def _answer_later(self, channel, request: RemotingCommand, hdr, results, items: list, queue_id: int) -> Any:
        """``process_request_now``'s send whose put had to wait: its answer once stored."""
        results = await results
        return self._answer_put(channel, request, hdr, results[0], items[0], queue_id)

    def _answer_put(self, channel, request: RemotingCommand, hdr, result, item, queue_id: int) -> RemotingCommand:
        """A lone send's answer to its put's result, as ``send_message`` answers it and ``process_request`` logs it."""
        if result.__class__ is tuple:
            self.stats.on_put(item[0], 1, result[2])
            return SendResultAnswer(self._answer_template(), request, _SUCCESS, result[0], queue_id, result[1])
        response = self._put_result_to_response(request, result, item, queue_id)
        if response.code != ResponseCode.SUCCESS:
            _log_not_stored(channel, hdr, response)
        return response

    #: ``groupable`` takes every single SEND_MESSAGE_V2 alike while nothing is dispatched (its answer depends on the
    #: request code, the fault-injection switch and the batch question alone): the connection may read a run's
    #: following sends with their layout's run reader, which keeps the same header on each (``remoting.send_run``)
    groups_single_sends = True

    def groupable(self, request: RemotingCommand) -> bool:
        """Whether the server may hand this request over with others (``process_requests``): a single send
        (not a batch, not a send-back) while fault injection is off. Anything else keeps the one-request path,
        where a request that cannot run at once waits in the send queue, seen by the fast-failure sweep.

        The header is decoded here, once (the connection asks this of every send as it decodes a read), and kept
        on the request (``custom_header``) for the group's ``process_requests`` and the lone path: only for a
        single send as ``_is_batch`` tells it. A V2 request read by a learned layout is answered from the layout's
        values (``single_send_v2_values``), without its extFields map (``LayoutCommand`` never builds it then)."""
        code = request.code
        if code != _SEND_MESSAGE_V2 and code != _SEND_MESSAGE or self.config.fault_injection_enable:
            return False
        layout = request.ext_layout
        if layout is not None and code == _SEND_MESSAGE_V2:
            if request.custom_header is not None:  # a single send's header, decoded already (``remoting.send_run``)
                return True
            hdr = single_send_v2_values(layout.keys, request.ext_values)  # type: ignore[arg-type]
            if hdr is not None:
                if hdr is False:
                    return False
                request.custom_header = hdr
                return True
        ext = request.ext_fields
        batch = ext.get("m") or ext.get("batch")
        if batch is not None and batch != "false":
            return False
        # past the check above, ``_is_batch`` calls a single send one whose header's batch flag is off and that has no
        # C++ batch flag ("1") in the V1 name
        try:
            hdr = self._header(request)
        except Exception:  # noqa: BLE001 - not decodable: the processing answers it, as for any send
            return True
        if not hdr.batch and ext.get("batch") != "1":
            request.custom_header = hdr
        return True

    async def process_requests(
        self, channel, requests: list[RemotingCommand]
    ) -> list[RemotingCommand | Exception | None]:
        """Several requests of one connection (the SEND requests decoded from one read), answered as
        ``process_request`` answers each: the single sends are checked one by one and stored with one
        ``put_sent_group`` (rows, see `_message`: one status check, one clock read, one pass over the group that
        writes, enters, indexes and announces each, one fsync with SYNC_FLUSH);
        anything else (a batch, a send-back) goes through ``process_request`` in its place, after the sends
        held before it are stored, so the store sees the requests in their order. Responses in request order; a
        request whose processing raised gets its exception in its place (``RequestGroup`` answers it SYSTEM_ERROR
        and the metrics count it "process_request_failed", as for a lone request whose processor raised)."""
        if self.config.fault_injection_enable:  # per-message stalls and sleeps: the one-at-a-time path
            return [await self._process_guarded(channel, request) for request in requests]
        # topic → (its config, its queue-id bound), checked once for the group (the queue id: each send)
        checked: dict[str, Any] = {}
        built = self._build_whole(channel, requests, checked)
        if built is not None:  # (the put outside `_build_whole`'s try: what it raises is not a send's refusal)
            return await self._put_whole(channel, built[0], requests, built[1])  # type: ignore[return-value]
        return await self._one_by_one(channel, requests, checked)

    def process_requests_now(self, channel, requests: list[RemotingCommand]) -> Any:
        """The synchronous entry of ``process_requests`` (``RequestGroup.start``, through the metrics wrapper): a group
        whose every request is a single send whose header was decoded ahead (the common group) is checked, built,
        stored and answered on the caller's stack when the store's one pass took every row and needed no wait
        (``MessageStore.put_sent_group_now``): what ``process_requests`` does with it, without its coroutine and the
        store's. Anything else (fault injection, a refused send, a request that is not such a send) is
        ``process_requests``' one-by-one loop run up to its first wait; a put that has to wait (SYNC_FLUSH, a new file
        or queue, a stall, a half message or DELAY among the rows) is the ``Pending`` rest (``remoting.pending``)."""
        if self.config.fault_injection_enable:
            return start(self.process_requests(channel, requests))
        checked: dict[str, Any] = {}
        built = self._build_whole(channel, requests, checked)
        if built is None:
            return start(self._one_by_one(channel, requests, checked))
        msgs, queue_ids = built
        try:
            results = self.store.put_sent_group_now(
                msgs, channel.attrs.get("born_host") or born_host(channel), self.store_host
            )
        except Exception as exc:  # noqa: BLE001 - a store bug costs these sends (as `_put_whole`)
            return [exc] * len(requests)
        if results.__class__ is not list:
            return start(self._answer_whole_later(channel, msgs, requests, queue_ids, results))
        return self._answer_whole(channel, msgs, requests, queue_ids, results)

    def _build_whole(
        self, channel, requests: list[RemotingCommand], checked: dict[str, Any]
    ) -> tuple[list[tuple], list[int]] | None:
        """The common group's sends built (`_message` each, its row and answer queue id kept, nothing else done a
        send: no index, no held tuple), when every request is a single send whose header was decoded ahead
        (``groupable``, ``remoting.send_run``) and none was refused; else None, and `_one_by_one` takes the whole
        group with the topics checked so far in `checked` (building a send again has no other effect).
        (A `map` of `_message` over the group took no loop bytecode, but a Python function called from C costs more
        than the loop it saves: 1.8-2.4x this loop's time, timeit.)"""
        message = self._message
        msgs: list[Any] = []  # rows, or messages (`_message`)
        queue_ids: list[int] = []
        try:
            for request in requests:
                hdr = request.custom_header
                if hdr is None:
                    return None
                msg, queue_id, _ = message(channel, request, hdr, checked)
                msgs.append(msg)
                queue_ids.append(queue_id)
        except Exception:  # noqa: BLE001 - answered by `_one_by_one`, as it answers it
            return None
        return msgs, queue_ids

    async def _one_by_one(
        self, channel, requests: list[RemotingCommand], checked: dict[str, Any]
    ) -> list[RemotingCommand | Exception | None]:
        """``process_requests`` for a group that is not the common one: each request checked and built in turn (the
        topics in `checked` checked already), the held sends stored with one ``put_sent_group`` before a request
        that is not a single send runs through ``process_request`` in its place."""
        msgs: list[MessageExtBrokerInner | tuple] = []
        responses: list[RemotingCommand | Exception | None] = [None] * len(requests)
        held: list[tuple[int, RemotingCommand, SendMessageRequestHeader, int]] = []
        for i, request in enumerate(requests):
            hdr = request.custom_header
            if hdr is not None:  # a single send whose header was decoded ahead (``groupable``, ``remoting.send_run``)
                try:
                    msg, queue_id, _ = self._message(channel, request, hdr, checked)
                    msgs.append(msg)
                    held.append((i, request, hdr, queue_id))
                    continue
                except SendError as exc:
                    responses[i] = self._refused(channel, request, hdr, exc)
                    continue
                except Exception as exc:  # noqa: BLE001 - answered by RequestGroup, as RequestTask.run would
                    responses[i] = exc
                    continue
            code = request.code
            if code == _SEND_MESSAGE_V2 or code == _SEND_MESSAGE:
                try:
                    hdr = self._header(request)
                    if not self._is_batch(request, hdr):
                        msg, queue_id, _ = self._message(channel, request, hdr, checked)
                        msgs.append(msg)
                        held.append((i, request, hdr, queue_id))
                        continue
                except SendError as exc:
                    responses[i] = self._refused(channel, request, hdr, exc)  # type: ignore[arg-type]
                    continue
                except Exception as exc:  # noqa: BLE001 - answered by RequestGroup, as RequestTask.run would
                    responses[i] = exc
                    continue
            if msgs:
                await self._put_group(channel, msgs, held, responses)
                msgs, held = [], []
            responses[i] = await self._process_guarded(channel, request)
        if msgs:
            await self._put_group(channel, msgs, held, responses)
        return responses

    async def _put_whole(
        self, channel, msgs: list[tuple], requests: list[RemotingCommand], queue_ids: list[int]
    ) -> SentAnswers | list[RemotingCommand | Exception | None]:
        """`_put_group` for a group whose every request is a single send, `msgs[i]` built for `requests[i]` with the
        answer's queue id `queue_ids[i]`: when every row was stored in the store's one pass to one topic, the answers
        as the store's results (`SentAnswers`: no answer object a send, nothing a send here), else `_put_group`'s."""
        try:
            results = await self.store.put_sent_group(
                msgs, channel.attrs.get("born_host") or born_host(channel), self.store_host
            )
        except Exception as exc:  # noqa: BLE001 - a store bug costs these sends
            return [exc] * len(requests)
        return self._answer_whole(channel, msgs, requests, queue_ids, results)

    async def _answer_whole_later(
        self, channel, msgs: list, requests: list[RemotingCommand], queue_ids: list[int], results: Any
    ) -> SentAnswers | list[RemotingCommand | Exception | None]:
        """``process_requests_now``'s common group whose put had to wait: its answers once stored."""
        try:
            results = await results
        except Exception as exc:  # noqa: BLE001 - a store bug costs these sends (as `_put_whole`)
            return [exc] * len(requests)
        return self._answer_whole(channel, msgs, requests, queue_ids, results)

    def _answer_whole(
        self, channel, msgs: list, requests: list[RemotingCommand], queue_ids: list[int], results: list
    ) -> SentAnswers | list[RemotingCommand | Exception | None]:
        """The answers of `_put_whole`'s group to the store's `results`."""
        # (`_answer_template`, its common case inline: the template made for the broker's MSG_REGION and TRACE_ON)
        cfg = self.config
        template = self._template
        if template.region != cfg.region_id or template.trace_on != ("true" if cfg.trace_on else "false"):
            template = self._answer_template()
        if set(map(type, results)) == _TUPLES_ONLY:
            topics = set(map(_ROW_TOPIC, msgs))
            if len(topics) == 1:  # (rows all)
                self.stats.on_put(topics.pop(), len(msgs), sum(map(_ROW_SIZE, results)))
                return SentAnswers(template, requests, results, queue_ids)
        responses: list[RemotingCommand | Exception | None] = [None] * len(requests)
        held = list(zip(range(len(requests)), requests, map(_CUSTOM_HEADER, requests), queue_ids))
        self._answer_results(channel, msgs, held, results, responses, template)
        return responses

    async def _put_group(
        self,
        channel,
        msgs: list[MessageExtBrokerInner | tuple],
        held: list[tuple[int, RemotingCommand, SendMessageRequestHeader, int]],
        responses: list[RemotingCommand | Exception | None],
    ) -> None:
        """Store the held sends and put their answers in `responses`."""
        try:
            # (rows and messages: the store replaces in `msgs` each row it did not store in its one pass by the
            # message it put, so that the answers below read what the store made of it)
            results = await self.store.put_sent_group(
                msgs, channel.attrs.get("born_host") or born_host(channel), self.store_host
            )
        except Exception as exc:  # noqa: BLE001 - a store bug costs these sends, not the others of the group
            for i, _request, _hdr, _queue_id in held:
                responses[i] = exc
            return
        self._answer_results(channel, msgs, held, results, responses, self._answer_template())

    def _answer_results(
        self,
        channel,
        msgs: list[MessageExtBrokerInner | tuple],
        held: list[tuple[int, RemotingCommand, SendMessageRequestHeader, int]],
        results: list,
        responses: list[RemotingCommand | Exception | None],
        template: SendResultTemplate,
    ) -> None:
        """The held sends' answers to the store's `results` (each put counted), into `responses`."""
        # the rows stored in the store's one pass: answered from their (msg_id, queue offset, size)
        others = False
        for (i, request, _hdr, queue_id), result in zip(held, results):
            if result.__class__ is tuple:
                responses[i] = SendResultAnswer(template, request, _SUCCESS, result[0], queue_id, result[1])
            else:
                others = True
        if not others:
            # (each put counted in the statistics of its topic: one update when all went to one topic, the common
            # group; the topics and sizes read in C)
            topics = set(map(_ROW_TOPIC, msgs))
            if len(topics) == 1:
                self.stats.on_put(topics.pop(), len(msgs), sum(map(_ROW_SIZE, results)))
                return
        on_put = self.stats.on_put
        run_topic, run_msgs, run_bytes = None, 0, 0  # consecutive sends to one topic: one stats update
        for (i, request, hdr, queue_id), msg, result in zip(held, msgs, results):
            if result.__class__ is tuple:  # answered above
                topic = msg[0]
                if topic != run_topic:
                    if run_msgs:
                        on_put(run_topic, run_msgs, run_bytes)
                    run_topic, run_msgs, run_bytes = topic, 0, 0
                run_msgs += 1
                run_bytes += result[2]
                continue
            # (the common answer, unrolled from _put_result_to_response: a record appended inline, whose result
            # holds its append's values; one the writer appended goes the general way, to the same answer)
            if result.__class__ is StoredPut and result.status is _PUT_OK:
                topic = msg.topic
                responses[i] = SendResultAnswer(
                    template,
                    request,
                    _SUCCESS,
                    result.msg_id,
                    msg.queue_id if topic != TRANS_HALF_TOPIC else queue_id,
                    result.logics_offset,
                )
                if topic != run_topic:
                    if run_msgs:
                        on_put(run_topic, run_msgs, run_bytes)
                    run_topic, run_msgs, run_bytes = topic, 0, 0
                run_msgs += 1
                run_bytes += result.wrote_bytes
                continue
            response = self._put_result_to_response(request, result, msg, queue_id)
            if response.code != ResponseCode.SUCCESS:
                _log_not_stored(channel, hdr, response)
            responses[i] = response
        if run_msgs:
            on_put(run_topic, run_msgs, run_bytes)

    async def _process_guarded(self, channel, request: RemotingCommand) -> RemotingCommand | Exception | None:
        """``process_request`` for one request of a group: an exception is that request's outcome (answered by
        ``RequestGroup``), not the group's."""
        try:
            return await self.process_request(channel, request)
        except Exception as exc:  # noqa: BLE001
            return exc

    @staticmethod
    def _header(request: RemotingCommand) -> SendMessageRequestHeader:
        hdr = request.custom_header
        if hdr is not None:  # (decoded by ``groupable``)
            return hdr  # type: ignore[no-any-return]
        if request.code == _SEND_MESSAGE:
            return decode_header(SendMessageRequestHeader, request.ext_fields)
        layout = request.ext_layout
        if layout is not None:  # a ROCKETMQ header read by a learned layout: straight from its values
            hdr = decode_send_message_v2_values(layout.keys, request.ext_values)  # type: ignore[arg-type]
            if hdr is not None:
                return hdr
        return decode_send_message_v2(request.ext_fields)

    @staticmethod
    def _is_batch(request: RemotingCommand, hdr: SendMessageRequestHeader) -> bool:
        if request.code == _SEND_BATCH_MESSAGE or hdr.batch:
            return True
        # the C++ client flags a batch sent as code 10 with batch="1" (not "true")
        ext = request.ext_fields
        return (ext.get("batch") or ext.get("m")) == "1"

    @staticmethod
    def _refused(channel, request: RemotingCommand, hdr: SendMessageRequestHeader, exc: SendError) -> RemotingCommand:
        response = request.response(exc.code, exc.remark)
        if exc.code in (ResponseCode.MESSAGE_ILLEGAL, ResponseCode.SYSTEM_ERROR):
            # a malformed request (a client's mistake): one warning line, no traceback
            log.warning(
                "send refused",
                topic=hdr.topic[:200],
                code=int(exc.code),
                remark=exc.remark[:300],
                remote=channel.remote_addr,
            )
        else:
            _log_not_stored(channel, hdr, response)
        return response

    # -- checks ---------------------------------------------------------------------------
    def _msg_check(self, channel, hdr: SendMessageRequestHeader, checked: dict[str, Any] | None = None):
        """The send's checks (upstream msgCheck) and its topic's config. `checked`: the topics of this group
        that passed already, so that a group checks each topic once and each queue id against the bound: topic →
        (the queue ids `_message` takes at once, none for a retry topic; the broker's maxMessageSize, its cluster name
        and the stored properties' tail naming it, read once a group; the topic's config; the bound of its queue
        ids)."""
        if checked is not None:
            entry = checked.get(hdr.topic)
            if entry is None:
                tc = self._topic_check(channel, hdr)
                cfg = self.config
                bound = max(tc.write_queue_nums, tc.read_queue_nums)
                entry = checked[hdr.topic] = (
                    range(0 if hdr.topic.startswith(RETRY_GROUP_TOPIC_PREFIX) else bound),
                    cfg.max_message_size,
                    cfg.broker_cluster_name,
                    _CLUSTER_TAIL + cfg.broker_cluster_name,
                    tc,
                    bound,
                )
            tc, bound = entry[4], entry[5]
        else:
            tc = self._topic_check(channel, hdr)
            bound = max(tc.write_queue_nums, tc.read_queue_nums)
        if hdr.queue_id >= bound:
            raise SendError(
                ResponseCode.SYSTEM_ERROR,
                f"request queueId[{hdr.queue_id}] is illegal, {tc.to_json()} Producer: {channel.remote_addr}",
            )
        return tc

    def _topic_check(self, channel, hdr: SendMessageRequestHeader):
        """The checks that depend on the broker and the topic alone; the topic's config (created if allowed)."""
        cfg = self.config
        tcm = self.topic_config_manager
        topic = hdr.topic
        if not is_writeable(cfg.broker_permission) and not tcm.is_system_topic(topic):
            raise SendError(ResponseCode.NO_PERMISSION, f"the broker[{cfg.broker_ip1}] sending message is forbidden")
        if cfg.broker_role == "SLAVE":
            raise SendError(ResponseCode.SERVICE_NOT_AVAILABLE, "the broker is a slave, it does not accept writes")
        if topic not in self._valid_topics:  # the name rules depend on the name alone: check each name once
            reason = check_topic_name(topic)
            if reason is not None:
                raise SendError(ResponseCode.SYSTEM_ERROR, reason)
            if is_not_allowed_send_topic(topic):
                raise SendError(ResponseCode.NO_PERMISSION, f"Sending message to topic[{topic}] is forbidden.")
            if len(self._valid_topics) < _VALID_TOPICS_MAX:
                self._valid_topics.add(topic)
        tc = tcm.select_topic_config(topic)
        if tc is None:
            sys_flag = 0
            if hdr.unit_mode:
                sys_flag = 1 if not hdr.topic.startswith(RETRY_GROUP_TOPIC_PREFIX) else 3
            tc = tcm.create_topic_in_send_message(
                hdr.topic, hdr.default_topic, channel.remote_addr, hdr.default_topic_queue_nums, sys_flag
            )
            if tc is None and hdr.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                tc = tcm.create_topic_in_send_message_back_method(hdr.topic, 1, PERM_WRITE | PERM_READ, sys_flag)
            if tc is None:
                raise SendError(
                    ResponseCode.TOPIC_NOT_EXIST,
                    f"topic[{hdr.topic}] not exist, apply first please!"
                    "\nSee http://rocketmq.apache.org/docs/faq/ for further details.",
                )
        return tc

    def _check_size(self, body_len: int, props_len: int) -> None:
        if body_len > self.config.max_message_size:
            raise SendError(
                ResponseCode.MESSAGE_ILLEGAL,
                f"the message body size {body_len} bytes is over the broker's maxMessageSize "
                f"{self.config.max_message_size} bytes",
            )
        if props_len > MAX_PROPERTIES_LENGTH:
            raise SendError(
                ResponseCode.MESSAGE_ILLEGAL,
                f"the message properties length {props_len} is over the limit {MAX_PROPERTIES_LENGTH}",
            )

    def _handle_retry_and_dlq(self, hdr: SendMessageRequestHeader, props: dict[str, str], tc, request) -> str:
        """For a send to ``%RETRY%group``: promote to ``%DLQ%group`` past maxReconsumeTimes."""
        topic = hdr.topic
        if not topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            return topic
        group = topic[len(RETRY_GROUP_TOPIC_PREFIX) :]
        sgc = self.subscription_group_manager.find_subscription_group_config(group)
        if sgc is None:
            raise SendError(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                f"subscription group not exist, {group}\nSee http://rocketmq.apache.org/docs/faq/ for further details.",
            )
        max_times = sgc.retry_max_times
        if request.version >= 121 and hdr.max_reconsume_times is not None:
            max_times = hdr.max_reconsume_times
        reconsume = hdr.reconsume_times or 0
        if reconsume >= max_times:
            dlq = dlq_topic(group)
            if (
                self.topic_config_manager.create_topic_in_send_message_back_method(dlq, 1, PERM_WRITE | PERM_READ)
                is None
            ):
                raise SendError(ResponseCode.SYSTEM_ERROR, f"topic[{dlq}] not exist")
            props.pop(MessageConst.DELAY, None)
            return dlq
        return topic

    def _inner(
        self,
        channel,
        hdr: SendMessageRequestHeader,
        topic: str,
        queue_id: int,
        flag: int,
        body: bytes,
        props: dict[str, str],
        sys_flag: int,
        pieces: list[str] | None = None,
    ) -> MessageExtBrokerInner:
        """The message to store; `pieces`: see `stored_properties` (None when `props` was changed since it was
        split, or was not split: a batch element, a send-back)."""
        props_string = stored_properties(props, pieces, self.config.broker_cluster_name)
        tags = props.get(_TAGS)
        # positional (the field order of MessageExtBrokerInner): about half the cost of keywords, once per send
        return MessageExtBrokerInner(
            topic,
            queue_id,
            flag,
            body,
            props,
            props_string,
            tags_hash(tags) if tags else 0,
            sys_flag,
            hdr.born_timestamp,
            born_host(channel),
            self.store_host,
            hdr.reconsume_times or 0,
        )

    def _queue_id(self, hdr: SendMessageRequestHeader, tc) -> int:
        if hdr.queue_id < 0:
            return random.randrange(max(tc.write_queue_nums, 1))
        return hdr.queue_id

    async def _fault_sleep(self, props: dict[str, str]) -> int:
        """Fault injection: ``brokerSleepMs`` stalls this send worker; returns ``brokerStallAppendMs``."""
        if not self.config.fault_injection_enable:
            return 0
        sleep_ms = _int_or_zero(props.get(MessageConst.BROKER_SLEEP_MS))
        if sleep_ms > 0:
            await asyncio.sleep(sleep_ms / 1000)
        return _int_or_zero(props.get(MessageConst.BROKER_STALL_APPEND_MS))

    # -- single message ---------------------------------------------------------------------
    async def send_message(self, channel, request: RemotingCommand, hdr: SendMessageRequestHeader) -> RemotingCommand:
        if self.config.fault_injection_enable:  # (per-message sleeps and stalls: the put of one message)
            msg, queue_id, props = self._message(channel, request, hdr)
            stall_ms = await self._fault_sleep(props)
            result = await self.store.put_message(msg, stall_append_ms=stall_ms)
            return self._put_result_to_response(request, result, msg, queue_id)
        # a group of one: the common send as a row, stored in the store's one pass (`put_sent_group`), which puts
        # anything else as `put_message` would (`put_message_group` of one) and hands back the message it put
        item, queue_id, _ = self._message(channel, request, hdr, {})
        items = [item]
        born = channel.attrs.get("born_host") or born_host(channel)
        result = (await self.store.put_sent_group(items, born, self.store_host))[0]
        if result.__class__ is tuple:  # (msg_id, queue offset, size)
            self.stats.on_put(item[0], 1, result[2])
            return SendResultAnswer(self._answer_template(), request, _SUCCESS, result[0], queue_id, result[1])
        return self._put_result_to_response(request, result, items[0], queue_id)

    def _message(
        self,
        channel,
        request: RemotingCommand,
        hdr: SendMessageRequestHeader,
        checked: dict[str, Any] | None = None,
    ) -> tuple[MessageExtBrokerInner | tuple, int, dict[str, str]]:
        """The checks of one single send and the message to store (with its queue id for the answer and the
        properties as sent, for fault injection); SendError when refused. `checked`: see `_msg_check`; given (every
        send but one under fault injection), a plain message comes as its row (`store.send_rows.SendRow`, for
        `put_sent_group`: a bytes body, no transaction type, no DELAY), anything else (a half message, a DELAY, a
        transaction type) as the message."""
        # (once per send, the SEND path's hot code: the common send, the Java client's message without tags or keys
        # to a plain topic, is checked and built here; anything else by `_message_general`)
        if checked is None:  # (fault injection: the put of one message)
            item, queue_id, props = self._message(channel, request, hdr, {})
            if item.__class__ is tuple:
                item = row_message(item, channel.attrs.get("born_host") or born_host(channel), self.store_host)
            return item, queue_id, props
        topic = hdr.topic
        queue_id = hdr.queue_id
        entry = checked.get(topic)
        if entry is None or queue_id not in entry[0]:
            # a topic this group has not checked, a queue id to refuse or to pick, a retry topic
            self._msg_check(channel, hdr, checked)
            entry = checked[topic]
            if queue_id not in entry[0]:
                return self._message_other(channel, request, hdr, entry)
        _, max_body, cluster, cluster_tail, tc, _ = entry
        body = request.body
        if body.__class__ is not bytes:  # (a request's body is bytes, or None)
            body = b"" if body is None else bytes(body)
        props_text = hdr.properties or ""
        # (an ASCII text's length is its size: the encode measures only the others)
        if len(body) > max_body or len(props_text) > MAX_PROPERTIES_LENGTH or not props_text.isascii():
            self._check_size(len(body), len(props_text.encode("utf-8")))
        sys_flag = hdr.sys_flag
        # the Java client's text for a message without tags or keys (`UNIQ_KEY\x01<id>\x02WAIT\x01true\x02`, the
        # benchmark Producer's), neither a transaction nor IPv6 hosts, to a queue it named on a topic that is not a
        # retry topic: the properties and the string to store as `sent_properties` makes them (WAIT dropped, CLUSTER
        # set), no TAGS
        if (
            not sys_flag & _NOT_ROW_FLAGS
            and props_text.endswith(_WAIT_TRUE_TAIL)
            and props_text.startswith(_UNIQ_HEAD)
            and (uniq := props_text[_UNIQ_FROM:_UNIQ_TO])
            and PROPERTY_SEPARATOR not in uniq
        ):
            props = {_UNIQ_KEY: uniq, _CLUSTER: cluster}
            row = (
                topic,
                queue_id,
                body,
                props,
                _UNIQ_HEAD + uniq + cluster_tail,
                0,
                hdr.flag,
                sys_flag,
                hdr.born_timestamp,
                hdr.reconsume_times or 0,
            )
            return row, queue_id, props
        return self._message_general(channel, request, hdr, tc, queue_id, body, props_text, cluster)

    def _message_other(
        self, channel, request: RemotingCommand, hdr: SendMessageRequestHeader, entry: tuple
    ) -> tuple[MessageExtBrokerInner | tuple, int, dict[str, str]]:
        """`_message` for a send to a queue id the broker picks or to a retry topic (checked): its size checks and
        `_message_general`."""
        _, max_body, cluster, _, tc, _ = entry
        body = request.body
        if body.__class__ is not bytes:
            body = b"" if body is None else bytes(body)
        props_text = hdr.properties or ""
        if len(body) > max_body or len(props_text) > MAX_PROPERTIES_LENGTH or not props_text.isascii():
            self._check_size(len(body), len(props_text.encode("utf-8")))
        return self._message_general(channel, request, hdr, tc, hdr.queue_id, body, props_text, cluster)

    def _message_general(
        self,
        channel,
        request: RemotingCommand,
        hdr: SendMessageRequestHeader,
        tc,
        queue_id: int,
        body: bytes,
        props_text: str,
        cluster: str,
    ) -> tuple[MessageExtBrokerInner | tuple, int, dict[str, str]]:
        """`_message` past its checks for any other send: retry and DLQ, a random queue, a half message, a DELAY, a
        timer park, any properties text."""
        topic = hdr.topic
        # the properties and the string to store, edited from the sent one (`sent_properties`); a send that may change
        # them below (a retry, a half message, a DELAY, a timer park) splits them again and edits them first
        props, stored = sent_properties(props_text, cluster)
        if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            props, pieces = split_properties(props_text)
            stored = None
            topic = self._handle_retry_and_dlq(hdr, props, tc, request)
            if topic != hdr.topic:  # promoted to the DLQ (queue 0): DELAY dropped
                pieces = None
                queue_id = 0
        if queue_id < 0:
            queue_id = self._queue_id(hdr, tc)
        sys_flag = hdr.sys_flag
        tx_type = sys_flag & TRANSACTION_ROLLBACK_TYPE
        # (most sends carry none of the properties below: one C pass over the dict's few names, not five lookups;
        # WAIT and CLUSTER, which `sent_properties` edited, are not among them)
        if tx_type or not _SPECIAL_PROPERTIES.isdisjoint(props):
            if stored is not None:
                props, pieces = split_properties(props_text)
                stored = None
            if props.get(_TRAN_MSG) == "true" or tx_type == TRANSACTION_PREPARED_TYPE:
                if self.config.reject_transaction_message:
                    raise SendError(
                        ResponseCode.NO_PERMISSION,
                        f"the broker[{self.config.broker_ip1}] sending transaction message is forbidden",
                    )
                msg = self._inner(channel, hdr, topic, queue_id, hdr.flag, body, props, sys_flag)
                msg = self.transaction_service.prepare_half_message(msg)
                return msg, queue_id, props
            # a DELAY level is honoured by the store itself (SCHEDULE_TOPIC_XXXX), as upstream's CommitLog does
            if _DELAY in props:
                check_delay_level(props)
            # an exact delivery time (5.x TIMER_* properties, remoting or gRPC) parks it in the timer topic;
            # without any of them park() has nothing to do (most sends: no clock read, no call)
            if TIMER_DELIVER_MS in props or TIMER_DELAY_SEC in props or TIMER_DELAY_MS in props:
                try:
                    topic, queue_id = park(props, topic, queue_id, self.now_ms())
                except TimerPropertyError as exc:
                    raise SendError(ResponseCode.MESSAGE_ILLEGAL, str(exc)) from None
                pieces = None
        if stored is None:
            stored = stored_properties(props, pieces, cluster)
        tags = props.get(_TAGS)
        tags_code = tags_hash(tags) if tags else 0
        if tx_type or _DELAY in props:  # (a row is a plain message: these go as the message, `SendRow`)
            msg = MessageExtBrokerInner(
                topic,
                queue_id,
                hdr.flag,
                body,
                props,
                stored,
                tags_code,
                sys_flag,
                hdr.born_timestamp,
                channel.attrs.get("born_host") or born_host(channel),
                self.store_host,
                hdr.reconsume_times or 0,
            )
            return msg, queue_id, props
        row = (
            topic,
            queue_id,
            body,
            props,
            stored,
            tags_code,
            hdr.flag,
            sys_flag & IPV4_HOSTS_MASK,  # (records carry IPv4 hosts: `SendRow`)
            hdr.born_timestamp,
            hdr.reconsume_times or 0,
        )
        return row, queue_id, props

    # -- batch ------------------------------------------------------------------------------
    async def send_batch_message(
        self, channel, request: RemotingCommand, hdr: SendMessageRequestHeader
    ) -> RemotingCommand:
        tc = self._msg_check(channel, hdr)
        if hdr.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            raise SendError(ResponseCode.MESSAGE_ILLEGAL, f"batch request does not support retry group {hdr.topic}")
        if request.body is None:
            raise SendError(ResponseCode.MESSAGE_ILLEGAL, "batch request has no body")
        batch_props = decode_properties(hdr.properties or "")
        check_delay_level(batch_props)
        raw = request.body
        sys_flag = hdr.sys_flag
        if sys_flag & COMPRESSED_FLAG:
            # the elements are stored one by one, each with its own plain body: no COMPRESSED flag on them
            raw = inflate_batch_body(raw, self.config.max_message_size)
            sys_flag &= ~COMPRESSED_FLAG
        elements = parse_batch_body(raw)
        queue_id = self._queue_id(hdr, tc)
        msgs = []
        stall_ms = 0
        for flag, body, props in elements:
            self._check_size(len(body), 0)
            merged = {**batch_props, **props}
            stall_ms = max(stall_ms, await self._fault_sleep(merged) if self.config.fault_injection_enable else 0)
            msgs.append(self._inner(channel, hdr, hdr.topic, queue_id, flag, body, merged, sys_flag))
        result = await self.store.put_messages(msgs, stall_append_ms=stall_ms)
        return self._put_result_to_response(request, result, msgs[0], queue_id)

    # -- results ----------------------------------------------------------------------------
    def _put_result_to_response(
        self, request: RemotingCommand, result, msg: MessageExtBrokerInner, queue_id: int
    ) -> RemotingCommand:
        status = result.status
        code = _STORED_CODES.get(status)
        if code is not None:
            ar = result.append_result
            self.stats.on_put(msg.topic, ar.msg_num or 1, ar.wrote_bytes)
            # (msgId is comma-joined for a batch)
            return SendResultAnswer(
                self._answer_template(),
                request,
                code,
                ar.msg_id,
                msg.queue_id if msg.topic != TRANS_HALF_TOPIC else queue_id,
                ar.logics_offset,
            )
        if status == PutMessageStatus.OS_PAGECACHE_BUSY:
            self.stats.on_busy("PC_SYNCHRONIZED")
            return request.response(ResponseCode.SYSTEM_ERROR, PC_SYNCHRONIZED)
        if status in (PutMessageStatus.MESSAGE_ILLEGAL, PutMessageStatus.PROPERTIES_SIZE_EXCEEDED):
            return request.response(
                ResponseCode.MESSAGE_ILLEGAL,
                "the message is illegal, maybe msg body or properties length not matched. "
                f"msg body length limit {self.config.max_message_size}B, "
                "msg properties length limit 32KB.",
            )
        if status == PutMessageStatus.CREATE_MAPPED_FILE_FAILED:
            return request.response(ResponseCode.SYSTEM_ERROR, "create mapped file failed, server is busy or broken.")
        if status == PutMessageStatus.SERVICE_NOT_AVAILABLE:
            return request.response(
                ResponseCode.SERVICE_NOT_AVAILABLE,
                "service not available now. It may be caused by one of the following reasons: "
                "the broker's disk is full, messages are put to the slave, message store has "
                "been shut down, etc.",
            )
        return request.response(ResponseCode.SYSTEM_ERROR, f"UNKNOWN_ERROR {status.name}")

    # -- CONSUMER_SEND_MSG_BACK -------------------------------------------------------------
    async def consumer_send_msg_back(self, channel, request: RemotingCommand) -> RemotingCommand:
        hdr = decode_header(ConsumerSendMsgBackRequestHeader, request.ext_fields)
        sgc = self.subscription_group_manager.find_subscription_group_config(hdr.group)
        if sgc is None:
            return request.response(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                f"subscription group not exist, {hdr.group}"
                "\nSee http://rocketmq.apache.org/docs/faq/ for further details.",
            )
        if not is_writeable(self.config.broker_permission):
            return request.response(
                ResponseCode.NO_PERMISSION, f"the broker[{self.config.broker_ip1}] sending message is forbidden"
            )
        if sgc.retry_queue_nums <= 0:
            return request.response(ResponseCode.SUCCESS)
        new_topic = retry_topic(hdr.group)
        queue_id = random.randrange(sgc.retry_queue_nums)
        retry_tc = self.topic_config_manager.create_topic_in_send_message_back_method(
            new_topic, sgc.retry_queue_nums, PERM_WRITE | PERM_READ
        )
        if retry_tc is None:
            return request.response(ResponseCode.SYSTEM_ERROR, f"topic[{new_topic}] not exist")
        if not is_writeable(retry_tc.perm):
            return request.response(ResponseCode.NO_PERMISSION, f"the topic[{new_topic}] sending message is forbidden")
        msg_ext = self.store.look_message_by_offset(hdr.offset)
        if msg_ext is None:
            return request.response(ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {hdr.offset}")
        props = dict(msg_ext.properties)
        if MessageConst.RETRY_TOPIC not in props:
            props[MessageConst.RETRY_TOPIC] = msg_ext.topic
        props.pop(MessageConst.WAIT, None)
        delay_level = hdr.delay_level
        max_times = sgc.retry_max_times
        if request.version >= 121 and hdr.max_reconsume_times is not None:
            max_times = hdr.max_reconsume_times
        reconsume_times = msg_ext.reconsume_times
        if reconsume_times >= max_times or delay_level < 0:
            new_topic = dlq_topic(hdr.group)
            queue_id = 0
            if (
                self.topic_config_manager.create_topic_in_send_message_back_method(new_topic, 1, PERM_WRITE | PERM_READ)
                is None
            ):
                return request.response(ResponseCode.SYSTEM_ERROR, f"topic[{new_topic}] not exist")
            props.pop(MessageConst.DELAY, None)
        else:
            if delay_level == 0:
                delay_level = 3 + reconsume_times
            props[MessageConst.DELAY] = str(delay_level)
        # upstream keeps the first origin id, else the stored message's offset id (not the header's value)
        props[MessageConst.ORIGIN_MESSAGE_ID] = props.get(MessageConst.ORIGIN_MESSAGE_ID) or msg_ext.msg_id
        props[MessageConst.CLUSTER] = self.config.broker_cluster_name
        tags = props.get(MessageConst.TAGS)
        inner = MessageExtBrokerInner(
            topic=new_topic,
            queue_id=queue_id,
            flag=msg_ext.flag,
            body=msg_ext.body,
            properties=props,
            properties_string=encode_properties(props),
            tags_code=tags_hash(tags) if tags else 0,
            sys_flag=msg_ext.sys_flag,
            born_timestamp=msg_ext.born_timestamp,
            born_host=msg_ext.born_host,
            store_host=self.store_host,
            reconsume_times=_java_int_add(reconsume_times, 1),
        )
        result = await self.store.put_message(inner)
        if result.status == PutMessageStatus.PUT_OK:
            self.stats.on_send_back(hdr.group, msg_ext.topic)
            return request.response(ResponseCode.SUCCESS)
        return request.response(ResponseCode.SYSTEM_ERROR, result.status.name)


def _log_not_stored(channel: Any, hdr: SendMessageRequestHeader, response: RemotingCommand) -> None:
    log.debug(
        "send refused", topic=hdr.topic, code=int(response.code), remark=response.remark, remote=channel.remote_addr
    )


def _int_or_zero(value: str | None) -> int:
    if not value:
        return 0
    try:
        return max(0, int(value))
    except ValueError:
        return 0


def _java_int_add(a: int, b: int) -> int:
    """a + b with Java int overflow (a stored reconsumeTimes of 2^31-1 plus one is -2^31 upstream, not a record
    the store cannot encode)."""
    return (a + b + 2**31) % 2**32 - 2**31
