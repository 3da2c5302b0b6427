"""Run a planned load without Spark: each task of the plan as a thread, gang-stepped by a local barrier."""

from __future__ import annotations

import threading

from bench.outcomes import OutcomeBuffer
from bench.run import Plan
from bench.worker import LocalBarrier, run_task


def run_plan_threaded(plan: Plan, join_timeout_s: float = 120.0) -> OutcomeBuffer:
    """Every task's outcomes merged into one buffer; the first task that raised re-raises here."""
    barrier = LocalBarrier(len(plan.specs))
    results: list[OutcomeBuffer | BaseException | None] = [None] * len(plan.specs)

    def go(i: int) -> None:
        try:
            results[i] = run_task(plan.specs[i], barrier)
        except BaseException as exc:  # surfaced below
            results[i] = exc

    threads = [threading.Thread(target=go, args=(i,)) for i in range(len(plan.specs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(join_timeout_s)
    merged = OutcomeBuffer()
    for r in results:
        if isinstance(r, BaseException):
            raise r
        if r is not None:
            merged.extend(r)
    return merged
