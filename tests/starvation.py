"""How long the kernel kept processes from a CPU while they were ready to run: the allowance a timing bound
may add on a loaded machine without being widened for everyone.

A deadline a process keeps on its event loop can only be kept while the loop gets a CPU: on the shared 2-core
test machine (load average 10-20) the kernel alone can hold a process back tens of milliseconds. Linux counts
this per thread as ``run_delay`` (the second field of ``/proc/<pid>/task/<tid>/schedstat``). A test adds the
increase over its timed window to its upper bound: on a machine that lets the processes run it is ~0 and the
tight bound holds unchanged, so code that is late on its own (a slow beat, a blocked loop) still fails. Every
thread counts, because a thread waiting for a CPU while it holds the GIL holds the loop back too.
"""

from __future__ import annotations

from pathlib import Path


def run_delay_ms(pid: int) -> float:
    """Milliseconds the threads of process `pid` have spent runnable but off every CPU, summed; 0 where the
    kernel does not say (no schedstat: the allowance falls back to none, never to a wider window)."""
    total = 0
    for stat in Path(f"/proc/{pid}/task").glob("*/schedstat"):
        try:
            total += int(stat.read_text().split()[1])
        except (OSError, IndexError, ValueError):  # a thread that ended between glob and read
            continue
    return total / 1e6


class Starvation:
    """The run delay the processes `pids` accumulated since construction (or ``start``), in ``ms``."""

    def __init__(self, *pids: int) -> None:
        self.pids = pids
        self.start()

    def _now(self) -> float:
        return sum(run_delay_ms(pid) for pid in self.pids)

    def start(self) -> None:
        self.began = self._now()

    @property
    def ms(self) -> float:
        return self._now() - self.began
