"""Count the Python bytecodes a piece of work executes: a cost figure another process taking the core cannot move.

The ``*_cost`` benchmarks measure event-loop CPU per message, which on this shared machine moves ±20 % between
identical runs. The number of bytecodes the loop's thread executes (``sys.settrace`` opcode events) moves ±1 %.
C code such as orjson, a struct pack or the CRC counts as the one call it is, so a change that moves work into C
lowers the count more than the time: confirm such a change with CPU time.
"""

from __future__ import annotations


class OpcodeCounter:
    """``sys.settrace(counter.trace)`` while the work runs; ``count`` is the bytecodes executed meanwhile."""

    def __init__(self) -> None:
        self.count = 0

    def trace(self, frame, event: str, arg):  # noqa: ANN001, ANN201
        frame.f_trace_opcodes = True
        if event == "opcode":
            self.count += 1
        return self.trace
