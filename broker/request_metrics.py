"""Request timing: ``rocketmq_rpc_latency`` cells per request code and answer, the ``[REJECTREQUEST]`` refusals per
queue, and ``InstrumentedProcessor``, the thin wrapper the controller puts around each processor to feed them (and
to write the run-time switchable per-request debug line). Counters are updated in place: no object per request
beyond the key of its cell.
"""

from __future__ import annotations

import bisect
import logging
import operator
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from broker.logging_setup import REQUEST_LOGGER
from remoting.codes import ResponseCode
from remoting.command import FLAG_ONEWAY, RemotingCommand
from remoting.pending import Pending, finish, start
from remoting.send_answer import SentAnswers

request_log = structlog.get_logger(REQUEST_LOGGER)

_CODE = operator.attrgetter("code")

#: Upstream's rpc latency view (RemotingMetricsManager), in milliseconds.
RPC_LATENCY_BUCKETS_MS: tuple[float, ...] = (1, 3, 5, 7, 10, 100, 1000, 2000, 3000)


@dataclass(slots=True)
class LatencyCell:
    """One histogram series: per-bucket (non-cumulative) counts, the +Inf bucket last."""

    buckets: list[int] = field(default_factory=lambda: [0] * (len(RPC_LATENCY_BUCKETS_MS) + 1))
    count: int = 0
    total_ms: float = 0.0


#: answered requests' times kept per (code, answer) before they are folded into their cell (``observe_answer``)
FOLD_EVERY = 256
#: a list shorter than this takes one more time without reaching FOLD_EVERY (``process_request_now``'s append)
_APPEND_BELOW = FOLD_EVERY - 1


class RequestMetrics:
    """rocketmq_rpc_latency cells keyed by (request code, response code, long polling, result), plus the
    [REJECTREQUEST] refusals per queue (the server answers those before any processor runs).

    The common observation, a request answered (``observe_answer``, once per pull and per lone send), only
    appends its time to a list: the buckets, count and sum are computed for up to ``FOLD_EVERY`` of them at once,
    when the list is full or the cells are read (``latency``), so a request costs an append, not a bisect and
    three updates."""

    def __init__(self) -> None:
        self._latency: dict[tuple[int, int | None, bool, str], LatencyCell] = {}
        #: (code, response code) -> times (ms) of answered requests not yet in their cell
        self._answered: dict[tuple[int, int], list[float]] = {}
        self.rejected: Counter[str] = Counter()

    @property
    def latency(self) -> dict[tuple[int, int | None, bool, str], LatencyCell]:
        """The cells, every observation folded in."""
        for (code, response_code), times in self._answered.items():
            if times:
                self._fold(code, response_code, times)
        return self._latency

    def observe(
        self,
        code: int,
        response_code: int | None,
        elapsed_ms: float,
        *,
        long_polling: bool = False,
        result: str = "success",
    ) -> None:
        key = (code, response_code, long_polling, result)
        cell = self._latency.get(key)
        if cell is None:
            cell = self._latency[key] = LatencyCell()
        cell.buckets[bisect.bisect_left(RPC_LATENCY_BUCKETS_MS, elapsed_ms)] += 1
        cell.count += 1
        cell.total_ms += elapsed_ms

    def observe_answer(self, code: int, response_code: int, elapsed_ms: float) -> None:
        """``observe`` of a request answered (not parked, not failed), counted when its cell is read."""
        times = self._answered.get((code, response_code))
        if times is None:
            times = self._answered[(code, response_code)] = []
        times.append(elapsed_ms)
        if len(times) >= FOLD_EVERY:
            self._fold(code, response_code, times)

    def _fold(self, code: int, response_code: int, times: list[float]) -> None:
        key = (code, response_code, False, "success")
        cell = self._latency.get(key)
        if cell is None:
            cell = self._latency[key] = LatencyCell()
        buckets = cell.buckets
        cell.count += len(times)
        cell.total_ms += sum(times)  # (summed in arrival order, before the sort)
        # each time's bucket is bisect_left(bounds, time): the one whose bound is the first >= the time. Sorted, the
        # times up to a bound are bisect_right(times, bound) of them, so a bucket's share is the difference of two
        # such counts: one C sort and a bisect per bound, not a bisect per time (a fold was ~19 bytecodes a request)
        times.sort()
        below = 0
        i = 0
        for bound in RPC_LATENCY_BUCKETS_MS:
            upto = bisect.bisect_right(times, bound)
            buckets[i] += upto - below
            below = upto
            i += 1
        buckets[i] += len(times) - below
        times.clear()

    def observe_many(self, code: int, response_code: int, elapsed_ms: float, count: int) -> None:
        """``count`` requests of one code answered alike in ``elapsed_ms`` each (a request group's)."""
        key = (code, response_code, False, "success")
        cell = self._latency.get(key)
        if cell is None:
            cell = self._latency[key] = LatencyCell()
        cell.buckets[bisect.bisect_left(RPC_LATENCY_BUCKETS_MS, elapsed_ms)] += count
        cell.count += count
        cell.total_ms += elapsed_ms * count

    def on_reject(self, queue: str, count: int = 1) -> None:
        self.rejected[queue] += count


class InstrumentedProcessor:
    """Wraps a processor: times ``process_request``, counts refusals, writes the per-request debug line.

    The timing covers the processor only (queue wait is the executor's ``head wait``); a long-polled pull
    that the processor parks (answer None) is counted when parked, with ``is_long_polling=true``.

    Two entries, counted alike: ``process_request`` (a coroutine, for a queued request a worker runs) and
    ``process_request_now`` (the synchronous one the executor calls when it can run a request at once: the inner
    processor's own ``process_request_now``, or its coroutine run up to its first wait; a ``Pending`` rest is
    timed to its end). Likewise ``process_requests`` / ``process_requests_now`` for a group.
    """

    __slots__ = (
        "_clock",
        "_inner_group",
        "_inner_group_now",
        "_inner_now",
        "_answered_times",
        "_reject",
        "_reject_many",
        "_std_log",
        "groupable",
        "groups_single_sends",
        "inner",
        "metrics",
        "process_requests",
        "process_requests_now",
        "queue",
        "reject_request",
        "reject_requests",
    )

    def __init__(
        self, inner: Any, queue: str, metrics: RequestMetrics, *, clock: Callable[[], float] = time.perf_counter
    ) -> None:
        self.inner = inner
        self.queue = queue
        self.metrics = metrics
        self._answered_times = metrics._answered  # (the same dict for the metrics' life: never replaced)
        self._reject = getattr(inner, "reject_request", None)
        # a processor that never refuses (no reject_request, or None): none offered, the server skips the check
        self.reject_request = self._reject_counted if self._reject is not None else None
        # the same for a group's requests at once, offered when the inner one offers it
        self._reject_many = getattr(inner, "reject_requests", None) if self._reject is not None else None
        self.reject_requests = self._reject_many_counted if self._reject_many is not None else None
        self._inner_now = getattr(inner, "process_request_now", None)
        self._std_log = logging.getLogger(REQUEST_LOGGER)
        self._clock = clock
        # the server groups requests only for a processor with process_requests: offer it when the inner one does
        self._inner_group = getattr(inner, "process_requests", None)
        self.process_requests = self._process_group if self._inner_group is not None else None
        self.groupable = getattr(inner, "groupable", None) if self._inner_group is not None else None
        self.groups_single_sends = self.groupable is not None and getattr(inner, "groups_single_sends", False) is True
        self._inner_group_now = getattr(inner, "process_requests_now", None)
        self.process_requests_now = self._process_group_now if self._inner_group is not None else None

    def _reject_counted(self) -> bool:
        if self._reject is not None and self._reject():
            self.metrics.on_reject(self.queue)
            if self._std_log.isEnabledFor(logging.DEBUG):
                request_log.debug("request refused before queueing", queue=self.queue, kind="REJECTREQUEST")
            return True
        return False

    def _reject_many_counted(self, count: int) -> bool:
        """``_reject_counted`` for ``count`` requests at once (the inner ``reject_requests``): each refused request
        counted, as one by one."""
        if self._reject_many(count):  # type: ignore[misc]
            self.metrics.on_reject(self.queue, count)
            if self._std_log.isEnabledFor(logging.DEBUG):
                for _ in range(count):
                    request_log.debug("request refused before queueing", queue=self.queue, kind="REJECTREQUEST")
            return True
        return False

    async def _process_group(
        self, channel: Any, requests: list[RemotingCommand]
    ) -> list[RemotingCommand | Exception | None]:
        """The inner ``process_requests``, timed as a whole: each request's cell gets the group's time (each
        waited for all of it: its answer leaves with the others'). A request whose processing raised (its
        exception in place of its answer) is counted "process_request_failed", as ``process_request`` counts a
        lone one: the result label says how the request ended, not whether it ran alone or in a group."""
        start_ = self._clock()
        try:
            responses = await self._inner_group(channel, requests)  # type: ignore[misc]
        except Exception:
            self._group_failed(requests, (self._clock() - start_) * 1000.0)
            raise
        self._group_done(channel, requests, responses, (self._clock() - start_) * 1000.0)
        return responses

    def _group_failed(self, requests: list[RemotingCommand], elapsed_ms: float) -> None:
        for request in requests:
            self.metrics.observe(request.code, ResponseCode.SYSTEM_ERROR, elapsed_ms, result="process_request_failed")

    def _group_done(
        self,
        channel: Any,
        requests: list[RemotingCommand],
        responses: list[RemotingCommand | Exception | None],
        elapsed_ms: float,
    ) -> None:
        metrics = self.metrics
        # the common case, every request of one code answered with one code: one cell update for the group (told
        # by map and set, in C: no bytecode per request; a group of stored sends is answered with one code)
        request_codes = set(map(_CODE, requests))
        if responses.__class__ is SentAnswers:
            answer_codes: Any = {responses.code} if len(request_codes) == 1 else ()
        else:
            answer_codes = (
                set(map(_CODE, responses))
                if len(request_codes) == 1 and all(issubclass(t, RemotingCommand) for t in set(map(type, responses)))
                else ()
            )
        if len(answer_codes) == 1:
            metrics.observe_many(request_codes.pop(), answer_codes.pop(), elapsed_ms, len(requests))  # type: ignore[union-attr]
        else:
            for request, response in zip(requests, responses):
                if isinstance(response, Exception):
                    metrics.observe(
                        request.code, ResponseCode.SYSTEM_ERROR, elapsed_ms, result="process_request_failed"
                    )
                else:
                    self._observe(request, response, elapsed_ms)
        if self._std_log.isEnabledFor(logging.DEBUG):
            for request, response in zip(requests, responses):
                if isinstance(response, Exception):
                    self._log_failure(channel, request, response, elapsed_ms, group=len(requests))
                else:
                    self._log_answer(channel, request, response, elapsed_ms, group=len(requests))

    def _process_group_now(self, channel: Any, requests: list[RemotingCommand]) -> Any:
        """The synchronous entry of ``_process_group`` (``RequestGroup.start``): the inner
        ``process_requests_now`` (or ``process_requests`` run up to its first wait), timed and counted as
        ``_process_group`` does it; the ``Pending`` rest, timed to its end, when the group has to wait."""
        start_ = self._clock()
        try:
            now = self._inner_group_now
            if now is not None:
                responses = now(channel, requests)
            else:
                responses = start(self._inner_group(channel, requests))  # type: ignore[misc]
        except Exception:
            self._group_failed(requests, (self._clock() - start_) * 1000.0)
            raise
        if responses.__class__ is Pending:
            return start(self._group_rest(channel, requests, responses, start_))
        elapsed_ms = (self._clock() - start_) * 1000.0
        if responses.__class__ is SentAnswers and not self._std_log.isEnabledFor(logging.DEBUG):
            # (`_group_done`'s common case inline: a group of stored sends of one request code, one answer code)
            request_codes = set(map(_CODE, requests))
            if len(request_codes) == 1:
                self.metrics.observe_many(request_codes.pop(), responses.code, elapsed_ms, len(requests))
                return responses
        self._group_done(channel, requests, responses, elapsed_ms)
        return responses

    async def _group_rest(
        self, channel: Any, requests: list[RemotingCommand], pending: Pending, start_: float
    ) -> list[RemotingCommand | Exception | None]:
        try:
            responses = await finish(pending)
        except Exception:
            self._group_failed(requests, (self._clock() - start_) * 1000.0)
            raise
        self._group_done(channel, requests, responses, (self._clock() - start_) * 1000.0)
        return responses

    def process_request_now(self, channel: Any, request: RemotingCommand) -> Any:
        """The synchronous entry (``RequestExecutor.answer_now``): the inner ``process_request_now`` (or its
        ``process_request`` run up to its first wait), timed and counted as ``process_request`` does it: the
        answer at once, or the ``Pending`` rest, timed to its end."""
        clock = self._clock
        start_ = clock()
        try:
            now = self._inner_now
            response = now(channel, request) if now is not None else start(self.inner.process_request(channel, request))
        except Exception as exc:
            self._failed(channel, request, exc, (clock() - start_) * 1000.0)
            raise
        if response.__class__ is Pending:
            return start(self._rest(channel, request, response, start_))
        elapsed_ms = (clock() - start_) * 1000.0
        if response is not None:
            # (_observe and observe_answer, inlined for the common answer: its time appended to the list of its
            # (code, answer) while that is not due for folding; the first of a pair, and the fold, go through
            # observe_answer)
            times = self._answered_times.get((request.code, response.code))
            if times is not None and len(times) < _APPEND_BELOW:
                times.append(elapsed_ms)
            else:
                self.metrics.observe_answer(request.code, response.code, elapsed_ms)
        else:
            self._observe(request, response, elapsed_ms)
        if self._std_log.isEnabledFor(logging.DEBUG):
            self._log_answer(channel, request, response, elapsed_ms)
        return response

    async def _rest(self, channel: Any, request: RemotingCommand, pending: Pending, start_: float) -> Any:
        try:
            response = await finish(pending)
        except Exception as exc:
            self._failed(channel, request, exc, (self._clock() - start_) * 1000.0)
            raise
        self._answered(channel, request, response, (self._clock() - start_) * 1000.0)
        return response

    async def process_request(self, channel: Any, request: RemotingCommand) -> RemotingCommand | None:
        start_ = self._clock()
        try:
            response = await self.inner.process_request(channel, request)
        except Exception as exc:
            self._failed(channel, request, exc, (self._clock() - start_) * 1000.0)
            raise
        self._answered(channel, request, response, (self._clock() - start_) * 1000.0)
        return response

    def _answered(
        self, channel: Any, request: RemotingCommand, response: RemotingCommand | None, elapsed_ms: float
    ) -> None:
        self._observe(request, response, elapsed_ms)
        if self._std_log.isEnabledFor(logging.DEBUG):
            self._log_answer(channel, request, response, elapsed_ms)

    def _failed(self, channel: Any, request: RemotingCommand, exc: Exception, elapsed_ms: float) -> None:
        self.metrics.observe(request.code, ResponseCode.SYSTEM_ERROR, elapsed_ms, result="process_request_failed")
        if self._std_log.isEnabledFor(logging.DEBUG):
            self._log_failure(channel, request, exc, elapsed_ms)

    def _observe(self, request: RemotingCommand, response: RemotingCommand | None, elapsed_ms: float) -> None:
        if response is None:  # oneway, or parked (a long poll answers later)
            oneway = bool(request.flag & FLAG_ONEWAY)
            self.metrics.observe(
                request.code, None, elapsed_ms, long_polling=not oneway, result="oneway" if oneway else "success"
            )
        else:
            self.metrics.observe_answer(request.code, response.code, elapsed_ms)

    def _log_failure(
        self, channel: Any, request: RemotingCommand, exc: Exception, elapsed_ms: float, **extra: Any
    ) -> None:
        request_log.debug(
            "request failed",
            code=request.code,
            opaque=request.opaque,
            remote=getattr(channel, "remote_addr", None),
            queue=self.queue,
            error=f"{type(exc).__name__}: {exc}",
            elapsed_ms=round(elapsed_ms, 3),
            **extra,
        )

    def _log_answer(
        self, channel: Any, request: RemotingCommand, response: RemotingCommand | None, elapsed_ms: float, **extra: Any
    ) -> None:
        request_log.debug(
            "request",
            code=request.code,
            opaque=request.opaque,
            remote=getattr(channel, "remote_addr", None),
            queue=self.queue,
            answer=None if response is None else response.code,
            remark=None if response is None or not response.remark else response.remark,
            elapsed_ms=round(elapsed_ms, 3),
            **extra,
        )
