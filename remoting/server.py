"""``RemotingServer``: the dispatch table request code → (processor, executor), and the listening socket.

Dispatch order for each request (J ``NettyRemotingAbstract.processRequestCommand``):
1. no processor for the code (and no default) → 3 ``" request type <code> not supported"``;
2. ``processor.reject_request()`` → 2 ``[REJECTREQUEST]…`` (before queueing);
3. the executor's queue is full → 2 ``[OVERLOAD]…``;
4. otherwise a worker (or, when the queue is empty and a worker idle, ``dispatch`` itself in that worker's
   place: ``RequestExecutor.answer_now``) runs the request hook, if one is set (the broker's ACL check, J
   ``RPCHook``), then the processor unless the hook answered; exceptions of either → 1 SYSTEM_ERROR.
   ``answer_now`` calls the processor's synchronous entry (``process_request_now``: the answer, None, or the
   ``Pending`` rest of a request that has to wait; a processor without one has its ``process_request``
   coroutine run up to its first wait), so a request answered at once costs no task and no coroutine.
A processor whose ``reject_request`` is None never refuses: step 2 is skipped.
Oneway requests are never answered, not even with an error.

``dispatch_many`` takes consecutive requests decoded from one read that ``groups`` (their processor has
``process_requests`` and its ``groupable`` takes each: the send processor's single sends): when the executor can
run them at once they go to that processor in one call (``RequestGroup``), after steps 1-3 for each request;
otherwise, and for every other request, ``dispatch`` one by one, as before.
"""

from __future__ import annotations

import asyncio
import itertools
import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import structlog

from remoting.channel import Channel
from remoting.codes import ResponseCode
from remoting.command import FLAG_ONEWAY, RemotingCommand
from remoting.executor import RequestExecutor, RequestGroup, RequestTask, wall_ms
from remoting.frame import DEFAULT_FRAME_MAX
from remoting.pending import start
from remoting.protocol import (
    DEFAULT_MAX_INFLIGHT,
    DEFAULT_WRITE_HIGH_WATER,
    DEFAULT_WRITE_LOW_WATER,
    RemotingProtocol,
)

__all__ = [
    "OVERLOAD_REMARK",
    "REJECT_REQUEST_REMARK",
    "Channel",
    "ChannelEventListener",
    "RemotingServer",
    "RequestProcessor",
]

log = structlog.get_logger(__name__)

_CODE = operator.attrgetter("code")

REJECT_REQUEST_REMARK = "[REJECTREQUEST]system busy, start flow control for a while"
OVERLOAD_REMARK = "[OVERLOAD]system busy, start flow control for a while"


def not_supported_remark(code: int) -> str:
    return f" request type {code} not supported"  # the leading space is J's


def not_supported(request: RemotingCommand) -> RemotingCommand:
    """J ``getUnknownCmdResponse``: 3 and its remark."""
    return request.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, not_supported_remark(request.code))


class RequestProcessor(Protocol):
    """Optional besides: ``process_request_now(channel, request)``, the synchronous entry (an answer, None, or
    ``remoting.pending.Pending``); ``process_requests``/``groupable`` (``dispatch_many``) and
    ``process_requests_now``."""

    async def process_request(self, channel: Channel, request: RemotingCommand) -> RemotingCommand | None: ...
    def reject_request(self) -> bool: ...


class ChannelEventListener(Protocol):
    def on_channel_connect(self, remote: str, channel: Channel) -> None: ...
    def on_channel_close(self, remote: str, channel: Channel) -> None: ...
    def on_channel_exception(self, remote: str, channel: Channel) -> None: ...


@dataclass(frozen=True, slots=True)
class _Route:
    processor: Any
    executor: RequestExecutor
    reject: Callable[[], bool] | None
    #: the processor's optional ``process_requests(channel, requests)``: several requests answered as one
    group: Callable[[Channel, list[RemotingCommand]], Any] | None = None
    #: with it, the processor's ``groupable(request)``: whether this request may go in such a group
    groupable: Callable[[RemotingCommand], bool] | None = None
    #: the synchronous entry ``answer_now`` calls: the processor's ``process_request_now``, or its
    #: ``process_request`` run up to its first wait (``remoting.pending.start``)
    now: Callable[[Channel, RemotingCommand], Any] | None = None
    #: the same for a group: the processor's ``process_requests_now`` (None: ``process_requests`` so started)
    group_now: Callable[[Channel, list[RemotingCommand]], Any] | None = None
    #: the processor's optional ``reject_requests(count)``: ``reject_request`` for a group's requests at once
    reject_many: Callable[[int], bool] | None = None
    #: the processor's ``groups_single_sends``: its ``groupable`` takes every single SEND_MESSAGE_V2 request alike
    #: while nothing is dispatched (``remoting.send_run``)
    single_sends: bool = False


class RemotingServer:
    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        listener: ChannelEventListener | None = None,
        now_ms: Callable[[], int] = wall_ms,
        frame_max: int = DEFAULT_FRAME_MAX,
        max_inflight_per_connection: int = DEFAULT_MAX_INFLIGHT,
        write_high_water: int = DEFAULT_WRITE_HIGH_WATER,
        write_low_water: int = DEFAULT_WRITE_LOW_WATER,
        backlog: int = 1024,
    ) -> None:
        self.host = host
        self._requested_port = port
        self.listener = listener
        self.now_ms = now_ms
        self.frame_max = frame_max
        self.max_inflight_per_connection = max_inflight_per_connection
        self.write_high_water = write_high_water
        self.write_low_water = write_low_water
        self.backlog = backlog
        self._routes: dict[int, _Route] = {}
        self._default: _Route | None = None
        self._executors: list[RequestExecutor] = []
        self._channels: dict[int, Channel] = {}
        self._channel_ids = itertools.count(1)
        self._server: asyncio.AbstractServer | None = None
        self._port: int | None = None
        self._hook: Callable[[Channel, RemotingCommand], RemotingCommand | None] | None = None

    # ---- the table ---------------------------------------------------------------------------
    def register_processor(self, code: int, processor: RequestProcessor, executor: RequestExecutor) -> None:
        self._routes[int(code)] = self._route(processor, executor)

    def register_default_processor(self, processor: RequestProcessor, executor: RequestExecutor) -> None:
        self._default = self._route(processor, executor)

    def set_request_hook(self, hook: Callable[[Channel, RemotingCommand], RemotingCommand | None] | None) -> None:
        """Run ``hook`` in the worker before every processor; a response it returns is sent instead."""
        self._hook = hook

    def _route(self, processor: Any, executor: RequestExecutor) -> _Route:
        if not any(e is executor for e in self._executors):
            self._executors.append(executor)
            if self._server is not None:
                executor.start()
        group = getattr(processor, "process_requests", None)
        groupable = getattr(processor, "groupable", None)
        if group is None or groupable is None:
            group = groupable = None
        group_now = getattr(processor, "process_requests_now", None) if group is not None else None
        return _Route(
            processor,
            executor,
            getattr(processor, "reject_request", None),
            group,
            groupable,
            _entry(processor),
            group_now,
            getattr(processor, "reject_requests", None) if group is not None else None,
            group is not None and getattr(processor, "groups_single_sends", False) is True,
        )

    @property
    def executors(self) -> tuple[RequestExecutor, ...]:
        return tuple(self._executors)

    @property
    def channels(self) -> tuple[Channel, ...]:
        return tuple(self._channels.values())

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("server not started")
        return self._port

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    # ---- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        for executor in self._executors:
            executor.start()
        self._server = await loop.create_server(
            self._new_protocol, self.host, self._requested_port, backlog=self.backlog, reuse_address=True
        )
        self._port = self._server.sockets[0].getsockname()[1]
        log.info("remoting server listening", host=self.host, port=self._port)

    async def stop(self, grace_s: float = 5.0) -> None:
        """Stop accepting, let queued requests finish for up to ``grace_s``, close every connection."""
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        await asyncio.gather(*(e.stop(grace_s) for e in self._executors))
        for channel in list(self._channels.values()):
            channel.close()
        await server.wait_closed()
        # Let connection_lost callbacks run so listeners see every close.
        for _ in range(3):
            if not self._channels:
                break
            await asyncio.sleep(0)
        log.info("remoting server stopped", port=self._port)

    def _new_protocol(self) -> RemotingProtocol:
        return RemotingProtocol(
            self,
            next(self._channel_ids),
            frame_max=self.frame_max,
            max_inflight=self.max_inflight_per_connection,
            write_high_water=self.write_high_water,
            write_low_water=self.write_low_water,
        )

    # ---- Dispatcher (called by RemotingProtocol) ----------------------------------------------
    def channel_connected(self, channel: Channel) -> None:
        self._channels[channel.id] = channel
        log.debug("channel connected", remote=channel.remote_addr)
        if self.listener is not None:
            self._notify("on_channel_connect", channel)

    def channel_error(self, channel: Channel, exc: BaseException) -> None:
        if self.listener is not None:
            self._notify("on_channel_exception", channel)

    def channel_closed(self, channel: Channel, exc: BaseException | None) -> None:
        self._channels.pop(channel.id, None)
        log.debug("channel closed", remote=channel.remote_addr)
        if self.listener is not None:
            self._notify("on_channel_close", channel)

    def _notify(self, event: str, channel: Channel) -> None:
        try:
            getattr(self.listener, event)(channel.remote_addr, channel)
        except Exception:
            log.exception("channel event listener failed", listener_event=event, remote=channel.remote_addr)

    @staticmethod
    def _rejects(route: _Route, request: RemotingCommand) -> bool:
        try:
            return bool(route.reject())  # type: ignore[misc]
        except Exception:
            # A broken busy check must not take the connection down with it; let the request in.
            log.exception("reject_request failed", code=request.code)
            return False

    def grouping(self, code: int) -> Callable[[RemotingCommand], bool] | None:
        """The check whether a request of ``code`` may be handed over with others (``dispatch_many``): its
        processor's ``groupable`` (the send processor: a single send, no fault injection), or None when that
        processor never groups. The connection asks it once per run of one code, then the check per request."""
        route = self._routes.get(code) or self._default
        return None if route is None else route.groupable

    def reads_sends(self, code: int) -> bool:
        """Whether ``grouping(code)``'s check takes every single SEND_MESSAGE_V2 request (not a batch) the way it
        took the first of a run, as long as nothing is dispatched: its processor says so (``groups_single_sends``,
        the send processor's: its answer depends on the code, the fault-injection switch and the batch question
        alone). Then the connection reads a run's following sends with their layout's run reader
        (``remoting.send_run``) without asking the check of each."""
        route = self._routes.get(code) or self._default
        return route is not None and route.single_sends

    def groups(self, request: RemotingCommand) -> bool:
        """Whether ``request`` may be handed over with others: ``grouping(request.code)`` asked of it."""
        groupable = self.grouping(request.code)
        return groupable is not None and groupable(request)

    def dispatch_many(self, channel: Channel, requests: list[RemotingCommand]) -> None:
        """Dispatch requests decoded from one read, in order, each of which ``groups``: consecutive ones of one
        processor (and executor) run as one ``RequestGroup`` when the executor can run it now, else one by
        one (they queue as before)."""
        routes = self._routes
        default = self._default
        n = len(requests)
        codes = set(map(_CODE, requests))
        if len(codes) == 1:  # the common run (every send V2): one route for all, no per-request lookup
            route = routes.get(codes.pop()) or default
            if route is not None and route.group is not None and n > 1 and route.executor.can_run_now():
                self._dispatch_group(channel, route, requests)
                return
        i = 0
        while i < n:
            route = routes.get(requests[i].code) or default
            j = i + 1
            if route is not None and route.group is not None:
                while j < n:
                    following = routes.get(requests[j].code) or default
                    if following is None or following.processor is not route.processor:
                        break
                    if following.executor is not route.executor:
                        break
                    j += 1
                if j - i > 1 and route.executor.can_run_now():
                    self._dispatch_group(channel, route, requests[i:j])
                    i = j
                    continue
            for k in range(i, j):
                self.dispatch(channel, requests[k])
            i = j

    def _dispatch_group(self, channel: Channel, route: _Route, requests: list[RemotingCommand]) -> None:
        """Steps 2-4 for a run of requests of one processor whose executor can run them now: each is checked
        against ``reject_request`` and counted in flight, then they run as one ``RequestGroup``."""
        reject = route.reject
        reject_many = route.reject_many
        if reject is not None and reject_many is not None:
            # the busy question asked once for the run (the processor's reject_requests: the same answer for each
            # request, as nothing runs between them, and each refusal counted); if it raises, one by one below
            try:
                all_busy = reject_many(len(requests))
            except Exception:  # noqa: BLE001 - the loop below asks each and logs what it logs
                all_busy = None
            if all_busy is not None:
                if all_busy:
                    for request in requests:
                        if not request.flag & FLAG_ONEWAY:
                            channel.send(request.response(ResponseCode.SYSTEM_BUSY, REJECT_REQUEST_REMARK))
                    return
                reject = None
        if reject is not None:
            # one reject_request call per request, as dispatch makes; the answers only when one said busy
            busy: list[object] = []
            try:
                for _ in requests:
                    busy.append(reject())
            except Exception:  # as _rejects: a broken busy check lets the request in
                log.exception("reject_request failed", code=requests[len(busy)].code)
                busy.append(False)
                busy += [self._rejects(route, request) for request in requests[len(busy) :]]
            if any(busy):
                kept = []
                for request, is_busy in zip(requests, busy):
                    if not is_busy:
                        kept.append(request)
                    elif not request.flag & FLAG_ONEWAY:
                        channel.send(request.response(ResponseCode.SYSTEM_BUSY, REJECT_REQUEST_REMARK))
                requests = kept
                if not requests:
                    return
        channel.requests_started(len(requests))
        route.executor.run_group_now(RequestGroup(channel, requests, route.processor, self._hook, now=route.group_now))

    def dispatch(self, channel: Channel, request: RemotingCommand) -> None:
        route = self._routes.get(request.code) or self._default
        if route is None:
            log.warning("request code not supported", code=request.code, remote=channel.remote_addr)
            if not request.flag & FLAG_ONEWAY:
                channel.send(
                    request.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, not_supported_remark(request.code))
                )
            return
        reject = route.reject
        if reject is not None:
            try:  # (_rejects, inlined: once a request)
                busy = reject()
            except Exception:  # a broken busy check must not take the connection down with it; let the request in
                log.exception("reject_request failed", code=request.code)
                busy = False
            if busy:
                if not request.flag & FLAG_ONEWAY:
                    channel.send(request.response(ResponseCode.SYSTEM_BUSY, REJECT_REQUEST_REMARK))
                return
        executor = route.executor
        # nothing queued, a worker idle: answered here through the synchronous entry, no task, no hop
        if executor.answer_now(channel, request, route.now, self._hook):  # type: ignore[arg-type]
            return
        # positional: a slotted dataclass builds about twice as fast that way
        task = RequestTask(channel, request, executor.now_ms(), False, route.processor, False, self._hook)
        if not executor.submit(task):
            log.debug("executor full", executor=executor.name, code=request.code, remote=channel.remote_addr)
            if not request.flag & FLAG_ONEWAY:
                channel.send(request.response(ResponseCode.SYSTEM_BUSY, OVERLOAD_REMARK))
            return
        channel.request_started()


def _entry(processor: Any) -> Callable[[Channel, RemotingCommand], Any]:
    """The synchronous entry of ``processor`` for ``RequestExecutor.answer_now``: its own ``process_request_now``
    when it has one (an answer, None, or the ``Pending`` rest), else its ``process_request`` coroutine run up to
    its first wait."""
    now = getattr(processor, "process_request_now", None)
    if now is not None:
        return now

    def started(channel: Channel, request: RemotingCommand) -> Any:
        return start(processor.process_request(channel, request))

    return started
