"""Request timing: ``rocketmq_rpc_latency`` cells per request code and answer, the ``[REJECTREQUEST]`` refusals per
queue, and ``InstrumentedProcessor``, the thin wrapper the controller puts around each processor to feed them (and
to write the run-time switchable per-request debug line). Counters are updated in place: no object per request
beyond the key of its cell.
"""

from __future__ import annotations

import bisect
import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from broker.logging_setup import REQUEST_LOGGER
from remoting.codes import ResponseCode
from remoting.command import FLAG_ONEWAY, RemotingCommand

request_log = structlog.get_logger(REQUEST_LOGGER)

#: Upstream's rpc latency view (RemotingMetricsManager), in milliseconds.
RPC_LATENCY_BUCKETS_MS: tuple[float, ...] = (1, 3, 5, 7, 10, 100, 1000, 2000, 3000)


@dataclass(slots=True)
class LatencyCell:
    """One histogram series: per-bucket (non-cumulative) counts, the +Inf bucket last."""

    buckets: list[int] = field(default_factory=lambda: [0] * (len(RPC_LATENCY_BUCKETS_MS) + 1))
    count: int = 0
    total_ms: float = 0.0


class RequestMetrics:
    """rocketmq_rpc_latency cells keyed by (request code, response code, long polling, result), plus the
    [REJECTREQUEST] refusals per queue (the server answers those before any processor runs)."""

    def __init__(self) -> None:
        self.latency: dict[tuple[int, int | None, bool, str], LatencyCell] = {}
        self.rejected: Counter[str] = Counter()

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
        cell = self.latency.get(key)
        if cell is None:
            cell = self.latency[key] = LatencyCell()
        cell.buckets[bisect.bisect_left(RPC_LATENCY_BUCKETS_MS, elapsed_ms)] += 1
        cell.count += 1
        cell.total_ms += elapsed_ms

    def observe_many(self, code: int, response_code: int, elapsed_ms: float, count: int) -> None:
        """``count`` requests of one code answered alike in ``elapsed_ms`` each (a request group's)."""
        key = (code, response_code, False, "success")
        cell = self.latency.get(key)
        if cell is None:
            cell = self.latency[key] = LatencyCell()
        cell.buckets[bisect.bisect_left(RPC_LATENCY_BUCKETS_MS, elapsed_ms)] += count
        cell.count += count
        cell.total_ms += elapsed_ms * count

    def on_reject(self, queue: str) -> None:
        self.rejected[queue] += 1


class InstrumentedProcessor:
    """Wraps a processor: times ``process_request``, counts refusals, writes the per-request debug line.

    The timing covers the processor only (queue wait is the executor's ``head wait``); a long-polled pull
    that the processor parks (answer None) is counted when parked, with ``is_long_polling=true``.
    """

    __slots__ = (
        "_clock",
        "_inner_group",
        "_reject",
        "_std_log",
        "groupable",
        "inner",
        "metrics",
        "process_requests",
        "queue",
    )

    def __init__(
        self, inner: Any, queue: str, metrics: RequestMetrics, *, clock: Callable[[], float] = time.perf_counter
    ) -> None:
        self.inner = inner
        self.queue = queue
        self.metrics = metrics
        self._reject = getattr(inner, "reject_request", None)
        self._std_log = logging.getLogger(REQUEST_LOGGER)
        self._clock = clock
        # the server groups requests only for a processor with process_requests: offer it when the inner one does
        self._inner_group = getattr(inner, "process_requests", None)
        self.process_requests = self._process_group if self._inner_group is not None else None
        self.groupable = getattr(inner, "groupable", None) if self._inner_group is not None else None

    def reject_request(self) -> bool:
        if self._reject is not None and self._reject():
            self.metrics.on_reject(self.queue)
            if self._std_log.isEnabledFor(logging.DEBUG):
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
        start = self._clock()
        metrics = self.metrics
        try:
            responses = await self._inner_group(channel, requests)  # type: ignore[misc]
        except Exception:
            elapsed_ms = (self._clock() - start) * 1000.0
            for request in requests:
                metrics.observe(request.code, ResponseCode.SYSTEM_ERROR, elapsed_ms, result="process_request_failed")
            raise
        elapsed_ms = (self._clock() - start) * 1000.0
        # the common case, every request of one code answered with one code: one cell update for the group
        code = requests[0].code
        first = responses[0]
        answer_code = first.code if isinstance(first, RemotingCommand) else None
        alike = answer_code is not None
        if alike:
            for request, response in zip(requests, responses):
                if request.code != code or not isinstance(response, RemotingCommand) or response.code != answer_code:
                    alike = False
                    break
        if alike:
            metrics.observe_many(code, answer_code, elapsed_ms, len(requests))
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
        return responses

    async def process_request(self, channel: Any, request: RemotingCommand) -> RemotingCommand | None:
        start = self._clock()
        try:
            response = await self.inner.process_request(channel, request)
        except Exception as exc:
            elapsed_ms = (self._clock() - start) * 1000.0
            self.metrics.observe(request.code, ResponseCode.SYSTEM_ERROR, elapsed_ms, result="process_request_failed")
            if self._std_log.isEnabledFor(logging.DEBUG):
                self._log_failure(channel, request, exc, elapsed_ms)
            raise
        elapsed_ms = (self._clock() - start) * 1000.0
        self._observe(request, response, elapsed_ms)
        if self._std_log.isEnabledFor(logging.DEBUG):
            self._log_answer(channel, request, response, elapsed_ms)
        return response

    def _observe(self, request: RemotingCommand, response: RemotingCommand | None, elapsed_ms: float) -> None:
        if response is None:  # oneway, or parked (a long poll answers later)
            oneway = bool(request.flag & FLAG_ONEWAY)
            self.metrics.observe(
                request.code, None, elapsed_ms, long_polling=not oneway, result="oneway" if oneway else "success"
            )
        else:
            self.metrics.observe(request.code, response.code, elapsed_ms)

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
