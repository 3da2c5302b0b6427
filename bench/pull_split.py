"""Where the caught-up consume cycle's bytecodes go, function by function: ``bench.pull_cost``'s cycle (a pull
parks, one message arrives, the woken pull answers it) less the send alone, split by code object.

    python -m bench.pull_split [--top 40] [--dispatch] [--lines]

``bench.pull_cost --bytecodes`` gives the totals; this gives the split that says which function to cut (the
functions of the send itself cancel out, those of the consume side remain; a background timer that fired in one
phase and not the other shows as a small positive or negative line). ``--dispatch`` splits the cycle whose pull
goes through ``RemotingServer.dispatch``. Runs this checkout's code only (compare two checkouts with the totals).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import sys

import bench.pull_cost as pull_cost
from bench.opcode_counter import OpcodeCounter
from remoting import loop as loop_choice

Key = tuple[str, str]
CYCLE_ROUNDS = 2000  # the caught-up cycles of each pull_cost phase (its run()'s ``rounds``)


class SplitCounter(OpcodeCounter):
    """Counts bytecodes by (file, function) into the table of the phase that is running."""

    tables: list[collections.Counter[Key]] = []  # one per Meter.start, in order (set per run by `split`)
    lines = False  # by (file, function:line) instead of (file, function)

    def trace(self, frame, event: str, arg):  # noqa: ANN001, ANN201
        frame.f_trace_opcodes = True
        if event == "opcode":
            self.count += 1
            code = frame.f_code
            name = f"{code.co_qualname}:{frame.f_lineno}" if self.lines else code.co_qualname
            self.tables[-1][(code.co_filename, name)] += 1
        return self.trace


def split(backlog: int, dispatch: bool, lines: bool = False) -> collections.Counter[Key]:
    """The per-function (``lines``: per-line) difference (cycle - send alone) in bytecodes over all of pull_cost's
    rounds."""
    tables: list[collections.Counter[Key]] = []
    SplitCounter.tables = tables
    SplitCounter.lines = lines
    meter_start = pull_cost.Meter.start

    def start(meter: pull_cost.Meter) -> None:
        tables.append(collections.Counter())
        meter_start(meter)

    pull_cost.OpcodeCounter = SplitCounter  # type: ignore[misc]
    pull_cost.Meter.start = start  # type: ignore[method-assign]
    try:
        asyncio.run(pull_cost.measure(backlog, 1, True, pull_cost.ROCKETMQ, 1))
    finally:
        pull_cost.Meter.start = meter_start  # type: ignore[method-assign]
    # the phases in pull_cost.run's order: drain, drain through dispatch, cycle, cycle through dispatch, a round's
    # arrivals, send alone
    cycle, cycle_dispatched, alone = tables[2], tables[3], tables[5]
    chosen = cycle_dispatched if dispatch else cycle
    diff: collections.Counter[Key] = collections.Counter()
    for key in set(chosen) | set(alone):
        diff[key] = chosen[key] - alone[key]
    return diff


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backlog", type=int, default=400, help="the drain phases' backlog (kept small: not split)")
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--dispatch", action="store_true", help="the cycle with its pull through dispatch")
    parser.add_argument("--lines", action="store_true", help="split by source line instead of by function")
    args = parser.parse_args(argv)
    loop_choice.install()
    diff = split(args.backlog, args.dispatch, args.lines)
    rounds = CYCLE_ROUNDS
    root = os.getcwd() + os.sep
    print(f"consume side: {sum(diff.values()) / rounds:.1f} bytecodes per message (cycle less the send alone)")
    by_file: collections.Counter[str] = collections.Counter()
    for (filename, _), n in diff.items():
        by_file[filename.replace(root, "")] += n
    for filename, n in by_file.most_common(12):
        print(f"{n / rounds:8.1f}  {filename}")
    print()
    for (filename, name), n in sorted(diff.items(), key=lambda kv: -abs(kv[1]))[: args.top]:
        print(f"{n / rounds:8.1f}  {filename.replace(root, '')}:{name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
