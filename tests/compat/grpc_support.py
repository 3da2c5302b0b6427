"""Plumbing for the 5.x (gRPC) acceptance tests: the official Python 5.x client in a venv of its own.

The 5.x client (PyPI ``rocketmq-python-client``) and the 4.x C++ wheel both install the import name
``rocketmq``, so the 5.x client lives in ``.venv-grpc-client`` under the repository (gitignored), built
once from ``grpc_client/requirements.txt``, and runs ``grpc_client/client.py`` as a subprocess that prints
one JSON line per event. The broker depends on neither.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from compat_support import run_events

REPO_ROOT = Path(__file__).resolve().parents[2]
CLIENT_DIR = Path(__file__).resolve().parent / "grpc_client"
REQUIREMENTS = CLIENT_DIR / "requirements.txt"
VENV = Path(os.environ.get("GRPC_CLIENT_VENV", REPO_ROOT / ".venv-grpc-client"))


class ClientVenvError(RuntimeError):
    pass


def venv_python() -> Path:
    return VENV / "bin" / "python"


def ensure_client_venv() -> Path:
    """Create the venv and install the pinned client when missing or when requirements.txt changed."""
    stamp = VENV / ".requirements-sha256"
    want = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()
    python = venv_python()
    if python.exists() and stamp.exists() and stamp.read_text() == want:
        return python
    if not python.exists():
        run = subprocess.run([sys.executable, "-m", "venv", str(VENV)], capture_output=True, text=True, check=False)
        if run.returncode != 0:
            raise ClientVenvError(f"cannot create {VENV}: {run.stderr[-2000:]}")
    run = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-r", str(REQUIREMENTS)],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    if run.returncode != 0:
        raise ClientVenvError(f"cannot install the 5.x client into {VENV}: {run.stderr[-3000:]}")
    stamp.write_text(want)
    return python


@dataclass
class ClientRun:
    events: list[dict]
    stdout: str
    stderr: str

    def of(self, kind: str) -> list[dict]:
        return [e for e in self.events if e.get("event") == kind]

    def describe(self) -> str:
        return f"stdout:\n{self.stdout[-3000:]}\nstderr:\n{self.stderr[-3000:]}"


def run_client(
    endpoint: str, action: str, args: dict, *, timeout_s: float = 60.0, env: dict[str, str] | None = None
) -> ClientRun:
    """Run one action of grpc_client/client.py; it must finish (print "done") within ``timeout_s``."""
    full_env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
    full_env.pop("PYTHONPATH", None)  # our packages must not shadow the client's
    run, events = run_events(
        [str(venv_python()), str(CLIENT_DIR / "client.py"), endpoint, action, json.dumps(args)],
        what=f"5.x client {action}",
        timeout_s=timeout_s,
        cwd=CLIENT_DIR,
        env=full_env,
    )
    result = ClientRun(events, run.stdout, run.stderr)
    assert run.returncode == 0 and result.of("done"), (
        f"5.x client {action} failed rc={run.returncode}\n{result.describe()}"
    )
    return result
