#!/usr/bin/env python3
"""Container health check: ask the broker itself whether it serves requests.

Sends one GET_BROKER_RUNTIME_INFO (request code 28) over RocketMQ's remoting protocol and exits 0
when the broker answers with response code 0 (SUCCESS), 1 otherwise, printing one line that the
container engine keeps in its health log. A TCP connect alone would pass while the broker is still
recovering its store or is wedged; a real request goes through the same decode → dispatch → executor
path as clients' requests do.

Standard library only: it runs with whatever python3 the image has, and outside the container
(``python3 docker/healthcheck.py --addr 127.0.0.1:10911``).

Which address to ask, first match wins:
  1. ``--addr HOST:PORT``;
  2. env ``MINI_ROCKETMQ_HEALTHCHECK_ADDR``;
  3. the running broker's own command line (``/proc/<pid>/cmdline`` of the ``mqbroker`` /
     ``broker.main`` process): ``listenPort`` / ``listenHost`` from its ``--set`` arguments, else from
     the ``-c`` broker.conf it was given — so the check follows ``BROKER_CONF_listenPort`` and a
     mounted broker.conf without being told twice;
  4. ``127.0.0.1:10911``.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import struct
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

GET_BROKER_RUNTIME_INFO = 28
SUCCESS = 0
DEFAULT_PORT = 10911
# A broker's reply to code 28 is a few KiB of JSON; anything past this is not a sane answer.
MAX_FRAME = 16 * 1024 * 1024
_INT = struct.Struct(">i")


class HealthError(Exception):
    """The broker is not healthy; the message says why in one line."""


@dataclass(frozen=True, slots=True)
class Target:
    host: str
    port: int
    source: str  # where the address came from, for the health log


def encode_request(opaque: int) -> bytes:
    """One JSON-serialised request frame with no body."""
    header = json.dumps(
        {
            "code": GET_BROKER_RUNTIME_INFO,
            "language": "PYTHON",
            "opaque": opaque,
            "flag": 0,
            "version": 409,
            "extFields": {},
        },
        separators=(",", ":"),
    ).encode()
    # length counts everything after itself; the high byte of the 2nd int is the serialise type (0 = JSON).
    return _INT.pack(4 + len(header)) + _INT.pack(len(header)) + header


def decode_response_code(frame: bytes) -> tuple[int, int, str | None]:
    """(code, opaque, remark) from a frame without its leading length field."""
    if len(frame) < 4:
        raise HealthError(f"response frame too short ({len(frame)} bytes)")
    (len_and_type,) = _INT.unpack_from(frame, 0)
    serialize_type = (len_and_type >> 24) & 0xFF
    header_len = len_and_type & 0xFFFFFF
    header = frame[4 : 4 + header_len]
    if len(header) != header_len:
        raise HealthError(f"response header truncated ({len(header)} of {header_len} bytes)")
    if serialize_type == 0:
        try:
            obj = json.loads(header)
            return int(obj["code"]), int(obj.get("opaque", -1)), obj.get("remark")
        except (ValueError, KeyError, TypeError) as exc:
            raise HealthError(f"response header is not the expected JSON: {exc}") from None
    if serialize_type == 1:
        # ROCKETMQ binary header: int16 code, int8 language, int16 version, int32 opaque, ...
        if header_len < 9:
            raise HealthError("binary response header too short")
        code, _lang, _version, opaque = struct.unpack_from(">hbhi", header, 0)
        return code, opaque, None
    raise HealthError(f"unknown serialise type {serialize_type} in the response")


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < n:
        chunk = sock.recv(n - len(chunks))
        if not chunk:
            raise HealthError(f"connection closed after {len(chunks)} of {n} bytes")
        chunks += chunk
    return bytes(chunks)


def probe(host: str, port: int, timeout_s: float, opaque: int = 1) -> None:
    """Raise HealthError unless the broker answers code 28 with SUCCESS within ``timeout_s``."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            sock.settimeout(timeout_s)
            sock.sendall(encode_request(opaque))
            # The broker may push requests of its own on a connection; skip frames until our reply.
            while True:
                (length,) = _INT.unpack(_recv_exactly(sock, 4))
                if length <= 0 or length > MAX_FRAME:
                    raise HealthError(f"bad response frame length {length}")
                code, got_opaque, remark = decode_response_code(_recv_exactly(sock, length))
                if got_opaque == opaque:
                    break
    except TimeoutError:
        raise HealthError(f"no answer from {host}:{port} within {timeout_s:g}s") from None
    except OSError as exc:
        raise HealthError(f"cannot reach {host}:{port}: {exc.strerror or exc}") from None
    if code != SUCCESS:
        raise HealthError(f"broker at {host}:{port} answered code {code}" + (f": {remark}" if remark else ""))


# -- finding the address -----------------------------------------------------------------------


def read_properties(text: str) -> dict[str, str]:
    """The ``key=value`` / ``key:value`` / ``key value`` lines of a Java properties file (last wins)."""
    props: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        for i, ch in enumerate(line):
            if ch in "=: \t":
                key, value = line[:i], line[i + 1 :].strip()
                break
        else:
            key, value = line, ""
        if value[:1] in ("=", ":"):  # "key = value": the separator came after whitespace
            value = value[1:].strip()
        props[key.strip()] = value
    return props


def broker_settings(argv: Sequence[str], read_file=lambda p: Path(p).read_text()) -> dict[str, str]:
    """The effective listen settings from a broker command line: broker.conf first, ``--set`` over it."""
    conf_file: str | None = None
    assignments: list[str] = []
    args = list(argv)
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in ("-c", "--config", "--conf") and i + 1 < len(args):
            conf_file = args[i + 1]
            i += 2
            continue
        if arg.startswith(("--config=", "--conf=")):
            conf_file = arg.split("=", 1)[1]
        elif arg.startswith("-c") and len(arg) > 2:
            conf_file = arg[2:]
        elif arg == "--set" and i + 1 < len(args):
            assignments.append(args[i + 1])
            i += 2
            continue
        elif arg.startswith("--set="):
            assignments.append(arg[len("--set=") :])
        i += 1
    settings: dict[str, str] = {}
    if conf_file:
        try:
            settings.update(read_properties(read_file(conf_file)))
        except OSError:
            pass  # the broker would have refused to start; the probe below will say so
    for item in assignments:
        key, sep, value = item.partition("=")
        if sep:
            settings[key.strip()] = value
    return settings


def _is_broker(argv: Sequence[str]) -> bool:
    # Console script: [python, /venv/bin/mqbroker, ...] or [mqbroker, ...]; module: [python, -m, broker.main].
    return any(Path(a).name == "mqbroker" or a == "broker.main" for a in argv[:3])


def find_broker_argv(proc: Path = Path("/proc")) -> list[str] | None:
    """The command line of the first broker process visible in this PID namespace, if any."""
    try:
        pids = sorted(int(p.name) for p in proc.iterdir() if p.name.isdigit())
    except OSError:
        return None
    for pid in pids:
        try:
            raw = (proc / str(pid) / "cmdline").read_bytes()
        except OSError:
            continue  # gone, or not ours to read
        argv = [a.decode(errors="replace") for a in raw.split(b"\0") if a]
        if _is_broker(argv):
            return argv
    return None


def resolve_target(cli_addr: str | None, env: dict[str, str], broker_argv: Iterable[str] | None) -> Target:
    for addr, source in (
        (cli_addr, "--addr"),
        (env.get("MINI_ROCKETMQ_HEALTHCHECK_ADDR"), "MINI_ROCKETMQ_HEALTHCHECK_ADDR"),
    ):
        if addr:
            host, sep, port = addr.rpartition(":")
            if not sep or not host or not port.isdigit():
                raise HealthError(f"{source}: expected HOST:PORT, got {addr!r}")
            return Target(host.strip("[]"), int(port), source)
    if broker_argv is not None:
        settings = broker_settings(list(broker_argv))
        port_text = settings.get("listenPort", str(DEFAULT_PORT)).strip()
        if not port_text.isdigit():
            raise HealthError(f"the broker's listenPort is not a port: {port_text!r}")
        host = settings.get("listenHost", "").strip()
        # A wildcard bind is reachable on loopback; a specific bind address must be asked there.
        if host in ("", "0.0.0.0", "::", "*"):
            host = "127.0.0.1"
        return Target(host, int(port_text), "broker command line")
    return Target("127.0.0.1", DEFAULT_PORT, "default")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--addr", help="HOST:PORT of the broker (default: found from the broker process)")
    parser.add_argument("--timeout", type=float, default=3.0, help="seconds for connect and answer (default 3)")
    args = parser.parse_args(argv)
    try:
        target = resolve_target(args.addr, dict(os.environ), None if args.addr else find_broker_argv())
        probe(target.host, target.port, args.timeout)
    except HealthError as exc:
        print(f"unhealthy: {exc}", file=sys.stderr)
        return 1
    print(f"healthy: broker at {target.host}:{target.port} ({target.source}) answered GET_BROKER_RUNTIME_INFO")
    return 0


if __name__ == "__main__":
    sys.exit(main())
