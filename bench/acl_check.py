"""Benchmark: what ACL 1.0 costs a broker per request, next to decoding the same frame.

With ``aclEnable=false`` the broker installs no hook: the worker pays one ``is not None`` test per request. With
ACL on, each request is parsed for its resources and, unless its address is white-listed, its signature is
recomputed (HmacSHA1 over the sorted header values and the body) before the permission lookup. This prints µs
per request for a signed SEND_MESSAGE_V2 of several body sizes (best of N, interleaved), and a white-listed one.

    python -m bench.acl_check [--number 5000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import tempfile
import timeit
from collections.abc import Callable
from pathlib import Path

import yaml

from bench.remoting_codec import typical_send_header
from broker.acl.permission_manager import PlainPermissionManager
from broker.acl.validator import PlainAccessValidator
from remoting.codes import RequestCode
from remoting.command import RemotingCommand
from remoting.headers import encode_header
from remoting.signature import SessionCredentials, sign_request_fields


class _Channel:
    def __init__(self, remote_addr: str) -> None:
        self.remote_addr = remote_addr


def signed_send(body: bytes) -> RemotingCommand:
    """The codec benchmark's typical SEND_MESSAGE_V2, signed as an ACL client signs it."""
    request = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, encode_header(typical_send_header()), body)
    sign_request_fields(request.ext_fields, body, SessionCredentials("bench_user", "bench_secret"))
    return request


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as home:
        conf = Path(home) / "conf"
        conf.mkdir()
        (conf / "plain_acl.yml").write_text(
            yaml.safe_dump(
                {
                    "globalWhiteRemoteAddresses": ["10.0.0.*"],
                    "accounts": [
                        {
                            "accessKey": "bench_user",
                            "secretKey": "bench_secret",
                            "defaultTopicPerm": "DENY",
                            "topicPerms": ["TopicTest=PUB|SUB"],
                        }
                    ],
                }
            )
        )
        manager = PlainPermissionManager(home)
        manager.load()
    validator = PlainAccessValidator(manager)
    outside, white = _Channel("192.168.1.7:50000"), _Channel("10.0.0.7:50000")

    cases: dict[str, Callable[[], object]] = {}
    for label, size in (("128 B", 128), ("4 KiB", 4096), ("64 KiB", 65536), ("1 MiB", 1 << 20)):
        request = signed_send(b"x" * size)
        frame = memoryview(b"".join(bytes(p) for p in request.encode()))[4:]
        cases[f"decode frame, {label} body [scale]"] = lambda f=frame: RemotingCommand.decode(f)
        cases[f"ACL check, signed, {label} body"] = lambda r=request: validator(outside, r)
    small = signed_send(b"x" * 128)
    cases["ACL check, white-listed address, 128 B"] = lambda: validator(white, small)
    best = {name: float("inf") for name in cases}
    for _ in range(args.repeat):  # interleave so a noisy neighbour slows every case, not just one
        for name, fn in cases.items():
            number = max(1, args.number // 50) if "1 MiB" in name else args.number
            best[name] = min(best[name], timeit.timeit(fn, number=number) / number)
    for name, fn in cases.items():
        assert fn() is None or "decode" in name, name  # every check passes: we time the accepted path
    print(f"best of {args.repeat}; µs per request")
    for name, t in best.items():
        print(f"{name:45s} {t * 1e6:10.2f}")


if __name__ == "__main__":
    main()
