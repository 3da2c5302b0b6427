"""The tree stays as ``[tool.ruff]`` in pyproject.toml says: lint clean and formatted.

A finding fails the suite (and so CI) with ruff's own report, which names the file, the line and the
fix; ``ruff check --fix . && ruff format .`` repairs most of them. ruff comes from the test extra.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _ruff() -> str:
    for candidate in (Path(sys.executable).parent / "ruff", shutil.which("ruff")):
        if candidate and Path(candidate).exists():
            return str(candidate)
    pytest.fail("ruff is missing: it is part of the test extra (pip install -e '.[test]')")


@pytest.mark.parametrize(
    "args",
    [["check", "--output-format=concise", "."], ["format", "--check", "."]],
    ids=["ruff-check", "ruff-format"],
)
def test_ruff_is_clean(args: list[str]) -> None:
    proc = subprocess.run([_ruff(), *args], cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, f"ruff {' '.join(args)} found:\n{proc.stdout[-4000:]}{proc.stderr[-2000:]}"
