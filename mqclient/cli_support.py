"""Process-level manners shared by our commands (``mqbroker``, ``mqadmin``, ``mqbench``).

Two user mistakes must not end in a traceback:
- piping into a reader that stops early (``mqadmin statsAll | head``): the write fails with EPIPE. We
  behave as a C tool killed by SIGPIPE would: no message, exit status 141. We do not reset SIGPIPE to
  its default instead, because that would also kill us on a write to a broker socket the peer closed,
  where we want an exception and a clear error line.
- running a command whose optional dependencies are not installed: one line naming the exact command
  that installs them into *this* interpreter (from a clone, an editable install of the clone), exit 2.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Callable
from pathlib import Path

EXIT_BAD_INPUT = 2
EXIT_SIGPIPE = 128 + 13

#: Top-level modules of each optional extra of pyproject.toml.
OPTIONAL_MODULES = {
    "yaml": "bench",
    "pyarrow": "bench",
    "pyspark": "bench",
    "pandas": "bench",
    "matplotlib": "bench",
    "prometheus_client": "metrics",
}


class MissingDependency(RuntimeError):
    """An optional dependency is absent; ``str()`` is the whole one-line advice."""

    def __init__(self, module: str, extra: str) -> None:
        super().__init__(
            f"this needs the optional dependency '{module}' (extra [{extra}]); "
            f"install it with: {install_command(extra)}"
        )
        self.module, self.extra = module, extra


def project_root() -> Path | None:
    """The source checkout we run from, if any (an editable install or ``python -m`` in a clone)."""
    root = Path(__file__).resolve().parents[1]
    return root if (root / "pyproject.toml").is_file() and (root / "broker").is_dir() else None


def install_command(extra: str) -> str:
    """The pip command that adds ``extra`` to the interpreter running us: it works from any directory.

    From a clone: an editable install of the clone with the extra. From an installed package (pipx, a
    wheel): the extra's own requirements, since our distribution need not be on any index.
    """
    python = shlex.quote(sys.executable)
    root = project_root()
    if root is not None:
        return f"{python} -m pip install -e {shlex.quote(f'{root}[{extra}]')}"
    return f"{python} -m pip install " + " ".join(shlex.quote(r) for r in extra_requirements(extra))


def extra_requirements(extra: str) -> list[str]:
    import importlib.metadata

    try:
        requires = importlib.metadata.requires("mini-rocketmq") or []
    except importlib.metadata.PackageNotFoundError:
        requires = []
    marker = f'extra == "{extra}"'
    found = [r.split(";")[0].strip() for r in requires if marker in r.replace("'", '"')]
    return found or [f"mini-rocketmq[{extra}]"]


def require(module: str, extra: str | None = None) -> None:
    """Raise MissingDependency unless ``module`` can be imported."""
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise MissingDependency(module, extra or OPTIONAL_MODULES.get(module, "bench"))


def run_cli(prog: str, main: Callable[[], int | None]) -> int:
    """Run a command's main: EPIPE on output → exit 141 quietly; a missing optional module → one line, exit 2."""
    try:
        rc = main() or 0
        sys.stdout.flush()  # surface EPIPE here, not in the interpreter's own flush at exit
        return rc
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_SIGPIPE
    except MissingDependency as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except ModuleNotFoundError as exc:
        top = (exc.name or "").split(".")[0]
        if top not in OPTIONAL_MODULES:
            raise
        print(f"{prog}: {MissingDependency(top, OPTIONAL_MODULES[top])}", file=sys.stderr)
        return EXIT_BAD_INPUT


def _silence_stdout() -> None:
    # Python flushes stdout again at exit: point it at /dev/null so that flush cannot fail a second time.
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass
