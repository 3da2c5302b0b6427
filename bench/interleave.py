"""Two checkouts measured in turn, each run in an interpreter of its own: what the in-process cost benchmarks share.

The machine's load moves a figure more than most changes do, so the sides alternate round by round (A B, B A, ...)
and each side's median is compared. A side's child is this benchmark's own script run against that side's tree
(``--root``), and prints its figure on its last line.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path


def sides(a: Path | None, b: Path) -> dict[str, Path]:
    """``{"A": a, "B": b}``, or only B when no A is given."""
    return {"B": b.resolve()} if a is None else {"A": a.resolve(), "B": b.resolve()}


def interleaved_rounds(
    trees: dict[str, Path],
    rounds: int,
    command: Callable[[Path], list[str]],
    unit: str,
    *,
    digits: int = 2,
    cwd: Path | None = None,
) -> dict[str, list[float]]:
    """Run ``command(tree)`` for every side, ``rounds`` times in alternating order, printing each figure as
    ``round N SIDE: value unit``; each side's figures, in round order."""
    figures: dict[str, list[float]] = {side: [] for side in trees}
    for i in range(rounds):
        for side in trees if i % 2 == 0 else reversed(trees):
            out = subprocess.run(command(trees[side]), capture_output=True, text=True, check=True, cwd=cwd)
            value = float(out.stdout.strip().splitlines()[-1])
            figures[side].append(value)
            print(f"round {i} {side}: {value:.{digits}f} {unit}", flush=True)
    return figures


def add_side_arguments(parser: argparse.ArgumentParser, *, rounds: int, a_help: str) -> None:
    """``--a``/``--b`` (the two trees), ``--rounds``, and the hidden ``--root`` a child is run with."""
    parser.add_argument("--a", type=Path, help=a_help)
    parser.add_argument("--b", type=Path, default=Path(__file__).resolve().parents[1], help="side B (default: here)")
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--root", type=Path, help=argparse.SUPPRESS)  # child mode: measure this tree


def enter_tree(root: Path) -> None:
    """A child's first step: import the packages of ``root`` (before anything imported ours), from there, with the
    broker's logs down to errors."""
    sys.path.insert(0, str(root))
    os.chdir(root)
    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
