"""``RequestTask`` and ``RequestExecutor``: a bounded request queue drained by N worker coroutines.

This is J's ``BrokerFixedThreadPoolExecutor`` + ``RequestTask``: each request family waits in its own
queue, so a slow family (pull, send under a busy store) cannot delay another, and each queue
can be measured, bounded ([OVERLOAD] when full) and swept by the broker's fast-failure component,
which pops expired tasks from the head (``queue[0]``) and answers them with ``return_response``.

No hop when nothing waits (``run_now``): with the queue empty and a worker parked, the server runs the
request on its own stack, in the worker's place (the worker stays parked, lent to the request, until it
is done), instead of queueing it, waking the worker and running it one loop iteration later. Most
requests (a send the store appends at once) then finish before ``dispatch`` returns. A request that has
to wait continues as an asyncio task and still counts as active, so the worker bound, the queue (which
only fills once every worker is busy), [OVERLOAD] and the fast-failure sweep behave as before.

No coroutine when nothing waits (``answer_now``): a request the server can run at once goes to its processor's
synchronous entry (``process_request_now``, see ``remoting.pending``), which answers on the spot (the pull
processor always does) or returns the ``Pending`` rest; only that rest becomes a task. Per request that is one
call instead of a ``RequestTask``, three coroutines (task, metrics wrapper, processor) and their driving, with the
same counts: ``active``/``completed``, the channel's in-flight count, the queue (still only filled once every
worker is busy), the answers and the SYSTEM_ERROR of a processor that raises. ``RequestGroup.start`` is the same
for a group of sends.
"""

from __future__ import annotations

import asyncio
import operator
import time
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog

from remoting.codes import ResponseCode
from remoting.command import FLAG_ONEWAY, FLAG_RESPONSE, RemotingCommand
from remoting.errors import RemotingError
from remoting.pending import Pending, finish, start
from remoting.send_answer import SendResultAnswer, SentAnswers, encode_answers

if TYPE_CHECKING:
    from remoting.channel import Channel

log = structlog.get_logger(__name__)


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


def exception_remark(exc: BaseException) -> str:
    """Remark of the SYSTEM_ERROR answer for a failed request: our own errors carry a complete
    message; anything else is prefixed with its type so a bare KeyError stays readable."""
    if isinstance(exc, RemotingError):
        return str(exc)
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def failed_response(channel: Channel, request: RemotingCommand, exc: Exception) -> RemotingCommand:
    """Log a request whose processing raised (one warning; a traceback only for errors not of ours) and give
    its SYSTEM_ERROR answer: a processor bug costs one request, never the worker."""
    log.warning(
        "request processing failed",
        code=request.code,
        opaque=request.opaque,
        remote=channel.remote_addr,
        error=exception_remark(exc),
        exc_info=not isinstance(exc, RemotingError),
    )
    return request.response(ResponseCode.SYSTEM_ERROR, exception_remark(exc))


def write_response(channel: Channel, request: RemotingCommand, response: RemotingCommand) -> None:
    """Write ``response`` as the answer to ``request``; a response that cannot be written (e.g. an unencodable
    header) is logged and dropped, so the worker and the other answers go on."""
    try:
        response.opaque = request.opaque
        response.flag |= FLAG_RESPONSE
        channel.send(response)
    except Exception as exc:  # noqa: BLE001
        _log_unwritable(channel, request, exc)


def _log_unwritable(channel: Channel, request: RemotingCommand, exc: Exception) -> None:
    log.error(
        "cannot write response",
        code=request.code,
        opaque=request.opaque,
        remote=channel.remote_addr,
        error=exception_remark(exc),
    )


@dataclass(slots=True)
class RequestTask:
    channel: Channel
    request: RemotingCommand
    create_ms: int
    stopped: bool = False  # set by whoever answered the task outside the worker (sweeper)
    processor: Any = None  # RequestProcessor; None only for tasks built by hand in tests
    finished: bool = False  # the channel's in-flight count has been released
    #: run before the processor (J RPCHook.doBeforeRequest); a response it returns is the answer instead
    hook: Callable[[Channel, RemotingCommand], RemotingCommand | None] | None = None

    def return_response(self, code: int, remark: str) -> None:
        """Answer the request now (unless oneway) and make the worker skip it."""
        if self.stopped:
            return
        self.stopped = True
        if not self.request.flag & FLAG_ONEWAY:
            self.channel.send(self.request.response(code, remark))
        self.finish()

    def finish(self) -> None:
        if not self.finished:
            self.finished = True
            self.channel.request_finished()

    async def run(self) -> None:
        """Run the processor and write its answer. Never raises (except cancellation)."""
        request = self.request
        oneway = request.flag & FLAG_ONEWAY
        try:
            response = self.hook(self.channel, request) if self.hook is not None else None
            if response is None:
                response = await self.processor.process_request(self.channel, request)
        except asyncio.CancelledError:
            self.finish()
            raise
        except Exception as exc:  # a processor bug must cost one request, not the worker
            response = failed_response(self.channel, request, exc)
        try:
            if response is not None and not oneway:
                write_response(self.channel, request, response)
        finally:
            self.finish()


#: the entries of a group's answers that need no conversion before they are written
_PLAIN_ANSWERS = frozenset((RemotingCommand, type(None)))
_SEND_ANSWERS_ONLY = {SendResultAnswer}
_FLAG = operator.attrgetter("flag")
#: requests flagged neither oneway nor response (a client's plain request): each gets its answer
_PLAIN_REQUEST_FLAGS = {0}


@dataclass(slots=True)
class RequestGroup:
    """Several requests of one connection and one processor run as one (``processor.process_requests``): the
    SEND requests decoded from one read, stored with one group put and answered in one write. Built only when
    the executor can run it at once (``RequestExecutor.run_group_now``): a group is never queued, so the fast-failure
    sweep (which reads the queue) sees nothing new, and it holds one worker while it runs, as a worker that took
    several tasks at once would. Each request was counted in flight on its channel and is released here."""

    channel: Channel
    requests: list[RemotingCommand]
    #: has process_requests(channel, requests) -> one entry per request: its answer, None (no answer), or the
    #: exception its processing raised, which the group answers as ``RequestTask.run`` answers a raising processor
    processor: Any
    hook: Callable[[Channel, RemotingCommand], RemotingCommand | None] | None = None
    finished: bool = False
    #: the processor's synchronous entry ``process_requests_now(channel, requests)``: the answers, or the
    #: ``Pending`` rest when the group has to wait; None: ``process_requests`` run up to its first wait instead
    now: Callable[[Channel, list[RemotingCommand]], Any] | None = None

    def finish(self) -> None:
        if not self.finished:
            self.finished = True
            self.channel.requests_finished(len(self.requests))

    async def run(self) -> None:
        """Run the group and write each answer (in request order). Never raises (except cancellation)."""
        rest = self.start()
        if rest is not None:
            await rest

    def start(self) -> Coroutine[Any, Any, None] | None:
        """Run the group on the caller's stack: None when every answer is written, else the rest (a coroutine to
        drive: it writes the answers once the group's wait is over). Never raises (except cancellation)."""
        channel = self.channel
        requests = self.requests
        try:
            if self.hook is not None:
                requests = self._run_hook(requests)
            if not requests:
                responses: Any = []
            elif self.now is not None:
                responses = self.now(channel, requests)
            else:
                responses = start(self.processor.process_requests(channel, requests))
        except Exception as exc:  # a bug in the group path: every request of it gets the SYSTEM_ERROR
            responses = self._failed(requests, exc)
        if responses.__class__ is Pending:
            return self._rest(requests, responses)
        try:
            self._write(requests, responses)
        finally:
            self.finish()
        return None

    async def _rest(self, requests: list[RemotingCommand], pending: Pending) -> None:
        try:
            try:
                responses = await finish(pending)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - as in start
                responses = self._failed(requests, exc)
            self._write(requests, responses)
        finally:
            self.finish()

    def _failed(self, requests: list[RemotingCommand], exc: Exception) -> list[RemotingCommand]:
        log.warning(
            "request group processing failed",
            code=requests[0].code,
            requests=len(requests),
            remote=self.channel.remote_addr,
            error=exception_remark(exc),
            exc_info=not isinstance(exc, RemotingError),
        )
        remark = exception_remark(exc)
        return [request.response(ResponseCode.SYSTEM_ERROR, remark) for request in requests]

    def _write(self, requests: list[RemotingCommand], responses: list[RemotingCommand | None]) -> None:
        """Write each answer (not to oneway requests) as ``write_response`` would, in one ``Channel.send_many``
        call: one closed check and one scheduled flush for the group instead of one ``send`` per answer."""
        channel = self.channel
        if responses.__class__ is SentAnswers:
            # a group of single sends all stored (the processor's answers as the store's results): written from them
            # in one buffer where the flags allow it, else answer by answer as below
            send_encoded = getattr(channel, "send_encoded", None)
            if send_encoded is not None and set(map(_FLAG, requests)) == _PLAIN_REQUEST_FLAGS:
                try:
                    data = responses.encode()
                except Exception:  # noqa: BLE001 - a number out of range: the loop below says which answer
                    data = None
                if data is not None:
                    send_encoded(data, len(requests))
                    return
            responses = responses.answers()
        kinds = set(map(type, responses))  # (one pass in C; answers are often a RemotingCommand subclass)
        if kinds == _SEND_ANSWERS_ONLY and set(map(_FLAG, requests)) == _PLAIN_REQUEST_FLAGS:
            # the common group (stored single sends, none oneway): written in one buffer (encode_answers), every
            # answer as the loop below writes it; anything it does not cover goes that way
            send_encoded = getattr(channel, "send_encoded", None)
            if send_encoded is not None:
                try:
                    data = encode_answers(requests, responses)  # type: ignore[arg-type]
                except Exception:  # noqa: BLE001 - a number out of range: the loop below says which answer
                    data = None
                if data is not None:
                    send_encoded(data, len(requests))
                    return
        if not _PLAIN_ANSWERS.issuperset(kinds) and any(issubclass(kind, Exception) for kind in kinds):
            # an entry that is the exception its request's processing raised: that answer alone fails
            responses = [
                failed_response(channel, request, response) if isinstance(response, Exception) else response
                for request, response in zip(requests, responses)
            ]
        answers: list[RemotingCommand] = []
        try:
            for request, response in zip(requests, responses):
                if response is not None and not request.flag & FLAG_ONEWAY:
                    response.opaque = request.opaque
                    response.flag |= FLAG_RESPONSE
                    answers.append(response)
        except Exception:  # noqa: BLE001 - an answer that is not a command: write_response logs it, one by one
            for request, response in zip(requests, responses):
                if response is not None and not request.flag & FLAG_ONEWAY:
                    write_response(channel, request, response)
            return
        if answers:
            for i, exc in channel.send_many(answers):
                unwritten = answers[i]
                _log_unwritable(channel, next(q for q, a in zip(requests, responses) if a is unwritten), exc)

    def _run_hook(self, requests: list[RemotingCommand]) -> list[RemotingCommand]:
        """The request hook (ACL) of each request, as ``RequestTask.run`` runs it: a request it answers (or that
        it fails on) leaves the group."""
        hook = self.hook
        assert hook is not None
        kept = []
        for request in requests:
            try:
                response = hook(self.channel, request)
            except Exception as exc:  # noqa: BLE001 - same answer as a failing processor
                response = failed_response(self.channel, request, exc)
            if response is None:
                kept.append(request)
            elif not request.flag & FLAG_ONEWAY:
                write_response(self.channel, request, response)
        return kept


class RequestExecutor:
    """Bounded FIFO of ``RequestTask`` plus ``workers`` coroutines running them."""

    def __init__(self, name: str, workers: int, capacity: int, *, now_ms: Callable[[], int] = wall_ms) -> None:
        if workers < 1:
            raise ValueError(f"executor {name}: workers must be ≥ 1, got {workers}")
        if capacity < 1:
            raise ValueError(f"executor {name}: capacity must be ≥ 1, got {capacity}")
        self.name = name
        self.workers = workers
        self.capacity = capacity
        self.now_ms = now_ms
        self.queue: deque[RequestTask] = deque()
        self.peak = 0
        self.rejected = 0
        self.expired = 0  # incremented by the fast-failure sweeper (see expire_head)
        self.completed = 0
        self.active = 0
        self._idle: deque[asyncio.Future[None]] = deque()
        self._worker_tasks: list[asyncio.Task[None]] = []
        self._accepting = False
        self._drained: asyncio.Event | None = None
        self._paused_until = 0.0  # loop time; workers take no task before it (fault injection)
        self._eager: set[asyncio.Task[None]] = set()  # requests run by run_now that had to wait

    # ---- counters -----------------------------------------------------------------------
    @property
    def size(self) -> int:
        return len(self.queue)

    def counters(self) -> dict[str, int]:
        """Snapshot for runtime info / metrics."""
        return {
            "size": len(self.queue),
            "capacity": self.capacity,
            "peak": self.peak,
            "rejected": self.rejected,
            "expired": self.expired,
            "completed": self.completed,
            "active": self.active,
        }

    @property
    def running(self) -> bool:
        return bool(self._worker_tasks)

    def head_wait_ms(self) -> int:
        """How long the oldest queued task has waited (0 when empty)."""
        if not self.queue:
            return 0
        return max(0, self.now_ms() - self.queue[0].create_ms)

    # ---- producer side ------------------------------------------------------------------
    def submit(self, task: RequestTask) -> bool:
        """Queue a task; False when the queue is full or the executor is stopping."""
        queue = self.queue
        if not self._accepting or len(queue) >= self.capacity:
            self.rejected += 1
            return False
        queue.append(task)
        self.peak = max(self.peak, len(queue))
        idle = self._idle
        while idle:
            waiter = idle.popleft()
            if not waiter.done():
                waiter.set_result(None)
                break
        return True

    def expire_head(self, code: int, remark: str) -> RequestTask | None:
        """Pop the head and answer it (fast failure); None if the queue is empty."""
        if not self.queue:
            return None
        task = self.queue.popleft()
        self.expired += 1
        task.return_response(code, remark)
        return task

    # ---- running on the caller's stack (no executor hop) ----------------------------------
    def can_run_now(self) -> bool:
        """True when ``run_now`` would take a task: nothing queued, a worker parked, not stopping or paused."""
        idle = self._idle
        return not self.queue and bool(idle) and self._accepting and not self._paused_until and not idle[-1].done()

    def run_now(self, task: RequestTask | RequestGroup, requests: int = 1) -> None:
        """Run ``task`` at once in the place of a parked worker (call only when ``can_run_now()``).

        The task runs on the caller's stack up to its first real wait; if it has one, the rest runs as an
        asyncio task. Until it is done the worker stays lent (off the idle list), so at most ``workers``
        tasks of this executor run at a time, whichever way they started. ``requests``: how many requests
        the task answers (a ``RequestGroup``'s), for the ``completed`` counter."""
        waiter = self._idle.pop()
        self.active += 1
        self._go_on(task.run(), waiter, requests)

    def answer_now(
        self,
        channel: Channel,
        request: RemotingCommand,
        entry: Callable[[Channel, RemotingCommand], Any],
        hook: Callable[[Channel, RemotingCommand], RemotingCommand | None] | None,
    ) -> bool:
        """Answer ``request`` at once through ``entry`` (a processor's ``process_request_now``: its answer, None,
        or the ``Pending`` rest) if the executor can run it now (``can_run_now``), else False (queue it).

        Runs the hook, then the entry, and writes the answer, in the place of a parked worker, as ``run_now``
        runs a ``RequestTask``: the same counts (``active``, ``completed``, the channel's in-flight count), the
        same SYSTEM_ERROR for an entry or hook that raises. While it runs on this stack nothing else runs on the
        loop, so the worker it stands in for needs lending (off the idle list) only when the request goes on
        past this call: a ``Pending`` rest, driven as a task like a ``run_now`` request that had to wait."""
        idle = self._idle
        # can_run_now, inlined: this is once per request
        if self.queue or not idle or not self._accepting or self._paused_until or idle[-1].done():
            return False
        self.active += 1
        channel.request_started()
        try:
            response = hook(channel, request) if hook is not None else None
            if response is None:
                response = entry(channel, request)
        except Exception as exc:  # a processor bug must cost one request, not the connection
            response = failed_response(channel, request, exc)
        except BaseException:
            channel.request_finished()
            self.active -= 1
            self.completed += 1
            raise
        if response.__class__ is Pending:
            self._go_on(self._answer_rest(channel, request, response), idle.pop(), 1)
            return True
        if response is not None and not request.flag & FLAG_ONEWAY:
            try:  # (write_response, inlined)
                response.opaque = request.opaque
                response.flag |= FLAG_RESPONSE
                channel.send(response)
            except Exception as exc:  # noqa: BLE001
                _log_unwritable(channel, request, exc)
        channel.request_finished()
        self.active -= 1
        self.completed += 1
        return True

    async def _answer_rest(self, channel: Channel, request: RemotingCommand, pending: Pending) -> None:
        """The rest of an ``answer_now`` request that had to wait: its answer once there, as ``RequestTask.run``
        writes it (nothing when cancelled)."""
        try:
            try:
                response = await finish(pending)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - as in answer_now
                response = failed_response(channel, request, exc)
            if response is not None and not request.flag & FLAG_ONEWAY:
                write_response(channel, request, response)
        finally:
            channel.request_finished()

    def run_group_now(self, group: RequestGroup) -> None:
        """``run_now`` for a ``RequestGroup`` (call only when ``can_run_now()``), through its synchronous
        ``start``: no coroutine unless the group has to wait. Every request of it counts in ``completed``.

        As ``answer_now`` does for one request: while the group runs on this stack nothing else runs on the loop, so
        the worker it stands in for is lent (off the idle list) only when the group goes on past this call (a rest
        to drive as a task); a group answered at once counts ``active`` while it runs and gives nothing back."""
        self.active += 1
        requests = len(group.requests)
        try:
            rest = group.start()
        except BaseException:
            self.active -= 1
            self.completed += requests
            raise
        if rest is not None:
            self._go_on(rest, self._idle.pop(), requests)
            return
        self.active -= 1
        self.completed += requests
        if not self._accepting and not self.queue and self.active == 0 and self._drained is not None:
            self._drained.set()

    def _go_on(self, coro: Coroutine[Any, Any, None], waiter: asyncio.Future[None], requests: int) -> None:
        """Run ``coro`` (a request lent ``waiter``'s worker, counted active) up to its first wait, and the rest as
        a task; the worker is given back when it is done."""
        try:
            yielded = coro.send(None)
        except StopIteration:
            self._run_now_done(waiter, requests)
            return
        except BaseException:
            self._run_now_done(waiter, requests)
            raise
        pending = [coro, waiter]  # emptied by _resume once it owns the clean-up
        resumed = asyncio.get_running_loop().create_task(self._resume(coro, yielded, waiter, pending, requests))
        self._eager.add(resumed)
        resumed.add_done_callback(lambda t: self._resumed_done(t, pending, requests))

    def _resumed_done(self, resumed: asyncio.Task[None], pending: list[Any], requests: int) -> None:
        self._eager.discard(resumed)
        if pending:  # cancelled before its first step: _resume never ran, so finish the request here
            coro, waiter = pending
            pending.clear()
            try:
                coro.throw(asyncio.CancelledError())  # task.run answers nothing and releases the channel
            except BaseException:  # noqa: BLE001, S110 - CancelledError (or StopIteration) is the expected end
                pass
            self._run_now_done(waiter, requests)

    async def _resume(
        self, coro: Any, yielded: Any, waiter: asyncio.Future[None], pending: list[Any], requests: int
    ) -> None:
        """Drive a request's coroutine from its first wait on (``remoting.pending.finish``, as an asyncio task
        would; ``task.run`` never raises but for cancellation), then give its worker back."""
        pending.clear()
        try:
            await finish(Pending(coro, yielded))
        finally:
            self._run_now_done(waiter, requests)

    def _run_now_done(self, waiter: asyncio.Future[None], requests: int = 1) -> None:
        self.active -= 1
        self.completed += requests
        if waiter.done():
            pass
        elif self.queue:
            waiter.set_result(None)  # tasks queued meanwhile: the lent worker takes them
        else:
            self._idle.append(waiter)
        if not self._accepting and not self.queue and self.active == 0 and self._drained is not None:
            self._drained.set()

    # ---- pausing (fault injection: a stuck worker pool) ------------------------------------
    def pause(self, duration_s: float) -> None:
        """Workers take no new task for ``duration_s``, as if every worker were stuck; queued requests age."""
        self._paused_until = asyncio.get_running_loop().time() + max(duration_s, 0.0)

    def resume(self) -> None:
        self._paused_until = 0.0

    @property
    def paused(self) -> bool:
        return self._paused_until > 0.0 and asyncio.get_running_loop().time() < self._paused_until

    # ---- lifecycle ----------------------------------------------------------------------
    def start(self) -> None:
        """Start the workers on the running loop (idempotent)."""
        if self._worker_tasks:
            return
        self._accepting = True
        self._drained = asyncio.Event()
        self._worker_tasks = [asyncio.create_task(self._work(), name=f"{self.name}-{i}") for i in range(self.workers)]

    async def stop(self, grace_s: float = 5.0) -> None:
        """Refuse new tasks, let queued and running ones finish for up to ``grace_s``, then cancel."""
        self._accepting = False
        if not self._worker_tasks:
            return
        if self.queue or self.active:
            assert self._drained is not None
            self._wake_all()
            try:
                await asyncio.wait_for(self._drained.wait(), grace_s)
            except TimeoutError:
                log.warning(
                    "executor did not drain in time", executor=self.name, queued=len(self.queue), active=self.active
                )
        tasks, self._worker_tasks = self._worker_tasks + list(self._eager), []
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        dropped = len(self.queue)
        if dropped:
            for task in self.queue:
                task.finish()
            self.queue.clear()
            log.warning("executor stopped with queued requests dropped", executor=self.name, dropped=dropped)

    def _wake_all(self) -> None:
        while self._idle:
            waiter = self._idle.popleft()
            if not waiter.done():
                waiter.set_result(None)

    async def _work(self) -> None:
        loop = asyncio.get_running_loop()
        queue = self.queue
        while True:
            if not queue:
                if not self._accepting and self.active == 0 and self._drained is not None:
                    self._drained.set()  # then stay parked so stop() can cancel us
                waiter: asyncio.Future[None] = loop.create_future()
                self._idle.append(waiter)
                await waiter
                continue
            if self._paused_until:
                remaining = self._paused_until - loop.time()
                if remaining > 0:
                    await asyncio.sleep(min(remaining, 0.05))
                    continue
                self._paused_until = 0.0
            task = queue.popleft()
            if task.stopped:
                continue
            self.active += 1
            try:
                await task.run()
            finally:
                self.active -= 1
                self.completed += 1
                # an idle worker must not keep its last request (and through its channel, the connection's
                # buffers) alive while it waits for the next one
                task = None  # type: ignore[assignment]
            if not self._accepting and not queue and self.active == 0 and self._drained is not None:
                self._drained.set()
