"""PullMessageProcessor: PULL_MESSAGE (11), with long polling.

Checks follow upstream: group permission, topic and queue, then the subscription — from the request
when the subscription bit is set (C++, Node, Java), from the group's heartbeat otherwise (Go). The
store's status maps to a response code and nextBeginOffset (protocol.md §2.3); PULL_NOT_FOUND with
the suspend bit parks the request in the PullRequestHoldService instead of answering. The outcome of a TAG
subscription's checks is kept while the topic, subscription-group and consumer tables keep their versions, and a
woken pull reuses the checks it parked with (`_check`, `_rerun`; docs/design.md "Speed: consume path").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import structlog

from broker.filter import (
    ExpressionMessageFilter,
    Predicate,
    TagMessageFilter,
    retry_expression_filter,
)
from broker.heartbeat import SubscriptionData, build_subscription
from broker.long_polling import PullRequest, PullRequestHoldService
from broker.processor.pull_answer import PullAnswer
from broker.topic import PERM_READ, RETRY_GROUP_TOPIC_PREFIX
from remoting.codes import ResponseCode
from remoting.command import RemotingCommand
from remoting.headers import PullMessageRequestHeader, decode_header
from remoting.pull_header import PullHeaderValues, decode_pull_message_values
from store.results import GetMessageResult, GetMessageStatus

if TYPE_CHECKING:
    from broker.client.consumer_manager import ConsumerManager
    from broker.config import BrokerConfig
    from broker.consumer_offset_manager import ConsumerOffsetManager
    from broker.controller import BrokerController
    from broker.stats import BrokerStats
    from broker.subscription_group_manager import SubscriptionGroupManager
    from broker.topic_config_manager import TopicConfigManager
    from store.message_store import MessageStore

log = structlog.get_logger(__name__)
_new_tuple = tuple.__new__

FLAG_COMMIT_OFFSET = 0x1
FLAG_SUSPEND = 0x2
FLAG_SUBSCRIPTION = 0x4
FLAG_CLASS_FILTER = 0x8
SUBSCRIPTION_CACHE_SIZE = 4096  # parsed subscriptions and TAG filters kept; cleared when full

_STATUS_CODE = {
    GetMessageStatus.FOUND: ResponseCode.SUCCESS,
    GetMessageStatus.NO_MATCHED_MESSAGE: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetMessageStatus.MESSAGE_WAS_REMOVING: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetMessageStatus.OFFSET_TOO_SMALL: ResponseCode.PULL_OFFSET_MOVED,
    GetMessageStatus.OFFSET_OVERFLOW_BADLY: ResponseCode.PULL_OFFSET_MOVED,
    GetMessageStatus.OFFSET_OVERFLOW_ONE: ResponseCode.PULL_NOT_FOUND,
    GetMessageStatus.OFFSET_FOUND_NULL: ResponseCode.PULL_NOT_FOUND,
}
_FOUND = GetMessageStatus.FOUND
_SUCCESS = ResponseCode.SUCCESS
_REMARK = {status: status.name for status in GetMessageStatus}  # Enum.name is a Python-level property


class PullMessageProcessor:
    """Takes the parts of the broker it reads (issue 14), not the controller: ``of(controller)`` picks them.

    ``hold_service`` is attached by the controller once it exists (the hold service wakes this processor,
    so one of the two has to come first)."""

    def __init__(
        self,
        config: BrokerConfig,
        store: MessageStore,
        *,
        topic_configs: TopicConfigManager,
        subscription_groups: SubscriptionGroupManager,
        consumers: ConsumerManager,
        offsets: ConsumerOffsetManager,
        stats: BrokerStats,
        compile_expression: Callable[[str, str], Predicate],
    ) -> None:
        self.config = config
        self.store = store
        self.topic_configs = topic_configs
        self.subscription_groups = subscription_groups
        self.consumers = consumers
        self.offsets = offsets
        self.stats = stats
        self.compile_expression = compile_expression
        self.hold_service: PullRequestHoldService | None = None
        # Subscriptions and their TAG filters, reused from pull to pull: a consumer pulls with the same
        # subscription (its heartbeat's object, or the same string in every request) thousands of times.
        self._tag_filters: dict[int, tuple[SubscriptionData, TagMessageFilter]] = {}
        self._parsed: dict[tuple[str, str | None, str | None, int], SubscriptionData] = {}
        # The outcome of a TAG subscription's checks (`_check`) under the header fields it depends on: (group, topic,
        # queue id, the subscription flag, sub version, subscription, expression type) → (the versions of the
        # topic, subscription group and consumer tables then, subscription, filter).
        self._checked: dict[tuple, tuple[tuple[int, int, int] | None, SubscriptionData, object, str]] = {}

    @classmethod
    def of(cls, c: BrokerController) -> PullMessageProcessor:
        return cls(
            c.config,
            c.store,
            topic_configs=c.topic_config_manager,
            subscription_groups=c.subscription_group_manager,
            consumers=c.consumer_manager,
            offsets=c.consumer_offset_manager,
            stats=c.stats,
            compile_expression=c.compile_expression,
        )

    #: a pull is never refused before it runs (upstream's rejectRequest is false): the server skips the check
    reject_request = None

    def process_request_now(self, channel, request: RemotingCommand) -> RemotingCommand | None:
        """The synchronous entry (``RequestExecutor.answer_now``): a pull never waits. It is answered at once,
        or parked (a long poll: None now, the answer written by ``execute_request_when_wakeup``)."""
        return self._process(channel, request, True)

    async def process_request(self, channel, request: RemotingCommand) -> RemotingCommand | None:
        return self._process(channel, request, True)

    def execute_request_when_wakeup(self, pr: PullRequest) -> None:
        """Re-run a parked pull (arrival or deadline) and answer it; never parks again."""
        if not pr.channel.is_active:
            return
        try:
            response = self._rerun(pr)
        except Exception as exc:  # a woken pull must still get an answer
            log.exception("woken pull failed", topic=pr.topic, queue_id=pr.queue_id)
            response = pr.request.response(ResponseCode.SYSTEM_ERROR, str(exc))
        if response is not None:
            pr.channel.send(response)

    def execute_requests_when_wakeup(self, prs: list[PullRequest]) -> int:
        """`execute_request_when_wakeup` for the pulls woken in one round, in order (one call for all: a caught-up
        consumer's every message is one woken pull). A pull whose answer cannot be written is logged and the others
        are still answered. Returns the queue offsets the round's found answers advanced (the messages they carried,
        and those a filter skipped): how busy the round was, which sets the next round's length (`broker.pull_wake`)."""
        rerun = self._rerun
        answered = 0
        for pr in prs:
            channel = pr.channel
            if not channel.is_active:
                continue
            try:
                response = rerun(pr)
            except Exception as exc:  # a woken pull must still get an answer
                log.exception("woken pull failed", topic=pr.topic, queue_id=pr.queue_id)
                response = pr.request.response(ResponseCode.SYSTEM_ERROR, str(exc))
            if response is not None:
                if response.__class__ is PullAnswer and response.code == _SUCCESS:
                    answered += response.next_begin_offset - pr.pull_from_this_offset
                try:
                    channel.send(response)
                except Exception:  # one pull's failed write must not cost the others their answers
                    log.exception("woken pull not answered", topic=pr.topic, queue_id=pr.queue_id)
        return answered

    def _rerun(self, pr: PullRequest) -> RemotingCommand | None:
        """A parked pull's re-run: `_process` without suspend and commit (as upstream's wake-up runs it), whose
        checks are those the pull passed when it parked while no table they read has changed since and the broker
        is still readable (see `_check`): then straight to the store read and the answer."""
        checked = pr.checked
        if (
            checked is None
            or not self.config.broker_permission & PERM_READ
            or checked[0]
            != (
                self.topic_configs.data_version.counter,
                self.subscription_groups.data_version.counter,
                self.consumers.version,
            )
        ):
            return self._process(pr.channel, pr.request, False, pr.header)
        hdr = pr.header
        if pr.message_filter is None:  # (match-all: one arrived message is read and answered without a result object)
            offset = pr.pull_from_this_offset
            result = self.store.get_woken_one(hdr.consumer_group, pr.topic, pr.queue_id, offset, hdr.max_msg_nums)
            if result.__class__ is tuple:  # (the record's view, the queue's min offset: `_get_last`'s FOUND)
                body, min_offset = result  # type: ignore[misc]
                self.stats.on_get(hdr.consumer_group, pr.topic, 1, len(body))
                return PullAnswer(pr.request, _SUCCESS, "FOUND", offset + 1, min_offset, offset + 1, body)
        else:
            result = self.store.get_message(
                hdr.consumer_group, pr.topic, pr.queue_id, pr.pull_from_this_offset, hdr.max_msg_nums, pr.message_filter
            )
        status = result.status  # type: ignore[union-attr]
        if status is _FOUND:  # (`_answer`'s SUCCESS branch, unrolled: a caught-up consumer's every message)
            body = result.span
            if body is None:
                buffers = result.buffers
                body = b"".join(buffers) if len(buffers) != 1 else buffers[0]
            self.stats.on_get(hdr.consumer_group, pr.topic, result.message_count, len(body))
            return PullAnswer(
                pr.request,
                _SUCCESS,
                "FOUND",
                result.next_begin_offset,
                result.min_offset,
                result.max_offset,
                body,
            )
        code = _STATUS_CODE.get(status)
        if code is None:  # NO_MESSAGE_IN_QUEUE / NO_MATCHED_LOGIC_QUEUE
            code = ResponseCode.PULL_OFFSET_MOVED if pr.pull_from_this_offset != 0 else ResponseCode.PULL_NOT_FOUND
        return self._answer(pr.request, hdr, code, status, result)

    def _process(
        self,
        channel,
        request: RemotingCommand,
        broker_allow_suspend: bool,
        hdr: PullMessageRequestHeader | PullHeaderValues | None = None,
    ) -> RemotingCommand | None:
        """``hdr``: the request's header when it was decoded already (a woken pull whose kept checks no longer hold
        is re-run here, as upstream re-runs every woken pull: its extFields have not changed)."""
        if hdr is None:
            layout = request.ext_layout
            if layout is not None:  # a ROCKETMQ header read by a learned layout: straight from its values
                hdr = decode_pull_message_values(layout.keys, request.ext_values)  # type: ignore[arg-type]
            if hdr is None:
                hdr = decode_header(PullMessageRequestHeader, request.ext_fields)
        cfg = self.config
        if not cfg.broker_permission & PERM_READ:  # (is_readable, inlined: twice per caught-up pull)
            return request.response(
                ResponseCode.NO_PERMISSION, f"the broker[{cfg.broker_ip1}] pulling message is forbidden"
            )
        sys_flag = hdr.sys_flag
        topic = hdr.topic
        queue_id = hdr.queue_id
        # The checks of group, topic, queue and subscription passed for these fields while no table they read has
        # changed since: their outcome (the subscription and filter) is reused (see `_check`).
        key = (
            hdr.consumer_group,
            topic,
            queue_id,
            sys_flag & FLAG_SUBSCRIPTION,
            hdr.sub_version,
            hdr.subscription,
            hdr.expression_type,
        )
        checked = self._checked.get(key)
        if checked is None or checked[0] != (
            self.topic_configs.data_version.counter,
            self.subscription_groups.data_version.counter,
            self.consumers.version,
        ):
            checked = self._check(channel, request, hdr, key)
            if checked.__class__ is not tuple:
                return checked  # type: ignore[return-value]  (the answer to a failed check)
        _, subscription, message_filter, offset_key = checked  # type: ignore[misc]

        result = self.store.get_message(
            hdr.consumer_group, topic, queue_id, hdr.queue_offset, hdr.max_msg_nums, message_filter
        )
        status = result.status
        code = _STATUS_CODE.get(status)
        if code is None:  # NO_MESSAGE_IN_QUEUE / NO_MATCHED_LOGIC_QUEUE
            code = ResponseCode.PULL_OFFSET_MOVED if hdr.queue_offset != 0 else ResponseCode.PULL_NOT_FOUND
        if code == ResponseCode.PULL_NOT_FOUND and broker_allow_suspend and sys_flag & FLAG_SUSPEND:
            timeout = hdr.suspend_timeout_millis if cfg.long_polling_enable else cfg.short_polling_time_mills
            pr = _new_tuple(  # (PullRequest's fields in order: one C call)
                PullRequest,
                (request, channel, topic, queue_id, hdr.queue_offset, subscription, message_filter, hdr, checked),
            )
            self.hold_service.suspend(pr, timeout)  # type: ignore[union-attr]  (attached by the controller)
            response = None
        else:
            response = self._answer(request, hdr, code, status, result)

        if broker_allow_suspend and sys_flag & FLAG_COMMIT_OFFSET and cfg.broker_role != "SLAVE":
            self.offsets.commit_offset_by_key(offset_key, queue_id, hdr.commit_offset)
        return response

    def _check(
        self, channel, request: RemotingCommand, hdr: PullMessageRequestHeader | PullHeaderValues, key: tuple
    ) -> tuple[tuple[int, int, int] | None, SubscriptionData, object, str] | RemotingCommand:
        """The pull's checks as upstream runs them (the subscription group, the topic and queue, the subscription),
        then its filter: the answer to the first that fails, or (the tables' versions, subscription, filter or None
        for one that matches everything, the offset table's key of the group and topic).

        The outcome is a function of the header's fields other than its offsets, the three tables (topics,
        subscription groups, consumers), whose versions move with every change, and, for a filter other than a
        TAG subscription's on a topic that is not a retry topic, the filter settings of the broker's config; so a
        TAG subscription's outcome is kept under those fields and reused while the versions stay put (a consumer's
        pulls, and a parked pull's re-run, check once per change of a table), under ``key``, `_process`'s. The
        broker's own permission is read on every pull. (The two tables with a ``DataVersion`` load theirs once, at
        start, before the broker takes requests.)"""
        sgc = self.subscription_groups.find_subscription_group_config(hdr.consumer_group)
        if sgc is None:
            return request.response(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                f"subscription group [{hdr.consumer_group}] does not exist, "
                "See http://rocketmq.apache.org/docs/faq/ for further details.",
            )
        if not sgc.consume_enable:
            return request.response(
                ResponseCode.NO_PERMISSION, f"subscription group no permission, {hdr.consumer_group}"
            )
        queue_id = hdr.queue_id
        tc = self.topic_configs.select_topic_config(hdr.topic)
        if tc is None:
            return request.response(
                ResponseCode.TOPIC_NOT_EXIST,
                f"topic[{hdr.topic}] not exist, apply first please! "
                "See http://rocketmq.apache.org/docs/faq/ for further details.",
            )
        if not tc.perm & PERM_READ:
            return request.response(ResponseCode.NO_PERMISSION, f"the topic[{hdr.topic}] pulling message is forbidden")
        if queue_id < 0 or queue_id >= tc.read_queue_nums:
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                f"queueId[{hdr.queue_id}] is illegal, topic:[{hdr.topic}] "
                f"topicConfig.readQueueNums:[{tc.read_queue_nums}] consumer:[{channel.remote_addr}]",
            )

        if hdr.sys_flag & FLAG_SUBSCRIPTION:
            try:
                subscription = self._parse_subscription(
                    hdr.topic, hdr.subscription, hdr.expression_type, hdr.sub_version
                )
            except ValueError as exc:
                return request.response(
                    ResponseCode.SUBSCRIPTION_PARSE_FAILED, f"parse the consumer's subscription failed: {exc}"
                )
        else:
            group_info = self.consumers.get(hdr.consumer_group)
            if group_info is None:
                return request.response(
                    ResponseCode.SUBSCRIPTION_NOT_EXIST,
                    f"the consumer's group info not exist, group: {hdr.consumer_group}",
                )
            if not sgc.consume_broadcast_enable and group_info.message_model == "BROADCASTING":
                return request.response(
                    ResponseCode.NO_PERMISSION,
                    f"the consumer group[{hdr.consumer_group}] can not consume by broadcast way",
                )
            subscription = group_info.subscriptions.get(hdr.topic)
            if subscription is None:
                return request.response(
                    ResponseCode.SUBSCRIPTION_NOT_EXIST, f"the consumer's subscription not exist, topic: {hdr.topic}"
                )
            if subscription.sub_version < hdr.sub_version:
                return request.response(ResponseCode.SUBSCRIPTION_NOT_LATEST, "the consumer's subscription not latest")

        message_filter = self._build_filter(request, subscription, hdr.topic)
        if isinstance(message_filter, RemotingCommand):
            return message_filter
        if message_filter.__class__ is TagMessageFilter and message_filter.matches_all:
            # a TAG subscription to everything: None, which the store's read and the hold service's arrival match
            # take as "everything" without asking the filter (a call per read and two per arrival)
            message_filter = None
        offset_key = self.offsets.key(hdr.topic, hdr.consumer_group)  # (the offset table's, for the commit)
        if subscription.expression_type != "TAG" or hdr.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            return (None, subscription, message_filter, offset_key)  # (no versions: never reused)
        # (read after the checks: finding the group may have created it, which moves its table's version)
        checked = (
            (
                self.topic_configs.data_version.counter,
                self.subscription_groups.data_version.counter,
                self.consumers.version,
            ),
            subscription,
            message_filter,
            offset_key,
        )
        if len(self._checked) >= SUBSCRIPTION_CACHE_SIZE:
            self._checked.clear()
        self._checked[key] = checked
        return checked

    def _answer(
        self,
        request: RemotingCommand,
        hdr: PullMessageRequestHeader,
        code: int,
        status: GetMessageStatus,
        result: GetMessageResult,
    ) -> RemotingCommand:
        """The response to a pull that is not parked (a parked one builds none): a ``PullAnswer``, whose ROCKETMQ
        header (the benchmark Consumer's) is written from pre-encoded parts."""
        if code == ResponseCode.SUCCESS:
            body = result.span  # the records back to back (a batch): the body as it lies in the commit log
            if body is None:
                buffers = result.buffers
                body = b"".join(buffers) if len(buffers) != 1 else buffers[0]
            self.stats.on_get(hdr.consumer_group, hdr.topic, result.message_count, len(body))
            return PullAnswer(
                request, code, _REMARK[status], result.next_begin_offset, result.min_offset, result.max_offset, body
            )
        if code == ResponseCode.PULL_OFFSET_MOVED:
            log.info(
                "pull offset moved",
                group=hdr.consumer_group,
                topic=hdr.topic,
                queue_id=hdr.queue_id,
                request_offset=hdr.queue_offset,
                suggested=result.next_begin_offset,
                min_offset=result.min_offset,
                max_offset=result.max_offset,
                status=status.name,
            )
        return PullAnswer(
            request, code, _REMARK[status], result.next_begin_offset, result.min_offset, result.max_offset
        )

    def _build_filter(self, request: RemotingCommand, subscription, topic: str):
        if self.config.filter_support_retry and topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            return retry_expression_filter(self._retry_filter_lookup(topic[len(RETRY_GROUP_TOPIC_PREFIX) :]))
        if subscription.expression_type == "TAG":
            cached = self._tag_filters.get(id(subscription))
            if cached is not None and cached[0] is subscription:
                return cached[1]
            flt = TagMessageFilter(subscription)
            if len(self._tag_filters) >= SUBSCRIPTION_CACHE_SIZE:
                self._tag_filters.clear()
            self._tag_filters[id(subscription)] = (subscription, flt)  # the entry keeps its id from being reused
            return flt
        if not self.config.enable_property_filter:
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                f"The broker does not support consumer to filter message by {subscription.expression_type}",
            )
        try:
            predicate = self.compile_expression(subscription.expression_type, subscription.sub_string)
        except ValueError as exc:
            return request.response(
                ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                f"parse the consumer's subscription[{subscription.sub_string}] failed: {exc}",
            )
        return ExpressionMessageFilter(predicate)

    def _parse_subscription(
        self, topic: str, sub_string: str | None, expression_type: str | None, sub_version: int
    ) -> SubscriptionData:
        """The request's subscription (C++, Node): parsed once per distinct (topic, expression, version);
        a parse failure raises ValueError every time (not cached)."""
        key = (topic, sub_string, expression_type, sub_version)
        sub = self._parsed.get(key)
        if sub is None:
            sub = build_subscription(topic, sub_string, expression_type, sub_version)
            if len(self._parsed) >= SUBSCRIPTION_CACHE_SIZE:
                self._parsed.clear()
            self._parsed[key] = sub
        return sub

    def _retry_filter_lookup(self, group: str) -> Callable[[str], Predicate | None]:
        """The group's compiled SQL92 subscription to a topic, for its retried messages (None: no filter:
        a TAG subscription, none, or property filtering off, where no SQL92 subscription exists)."""

        def lookup(real_topic: str) -> Predicate | None:
            sub = self.consumers.find_subscription(group, real_topic)
            if sub is None or sub.expression_type == "TAG" or not self.config.enable_property_filter:
                return None
            try:
                return self.compile_expression(sub.expression_type, sub.sub_string)
            except ValueError:
                return None  # refused when the consumer registered it; upstream then matches everything

        return lookup
