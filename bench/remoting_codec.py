"""Benchmark: decode/encode cost of a typical SEND_MESSAGE_V2 request frame, next to a bare orjson.loads.

Prints µs per frame for each step and the ratio to ``orjson.loads`` of the same JSON header, all
measured in one run with interleaved repeats (best of N) so machine noise hits every figure alike.

    python -m bench.remoting_codec [--number 20000] [--repeat 7]
"""

from __future__ import annotations

import argparse
import struct
import timeit
from collections.abc import Callable

import orjson

from remoting.codes import RequestCode, SerializeType
from remoting.command import RemotingCommand
from remoting.frame import FrameDecoder
from remoting.headers import SendMessageRequestHeaderV2, decode_header, encode_header


def typical_send_header() -> SendMessageRequestHeaderV2:
    """A Java/Node producer's SEND_MESSAGE_V2 header: V2 short names, properties with UNIQ_KEY/WAIT/TAGS."""
    return SendMessageRequestHeaderV2(
        a="please_rename_unique_group_name",
        b="TopicTest",
        c="TBW102",
        d=4,
        e=3,
        f=0,
        g=1_700_000_000_123,
        h=0,
        i="UNIQ_KEY\x017F0000010B5C18B4AAC2631A3A5A0000\x02WAIT\x01true\x02TAGS\x01TagA\x02",
        j=0,
        k=False,
        l=16,
        m=False,
    )


def typical_request(serialize_type: int) -> RemotingCommand:
    """What a Java/Node producer sends: ``typical_send_header`` and a 128 B body."""
    return RemotingCommand.request(
        RequestCode.SEND_MESSAGE_V2,
        encode_header(typical_send_header()),
        b"x" * 128,
        opaque=123_456,
        serialize_type=serialize_type,
    )


def measure(cases: dict[str, Callable[[], object]], number: int, repeat: int) -> dict[str, float]:
    best = {name: float("inf") for name in cases}
    for _ in range(repeat):  # interleave so a noisy neighbour slows every case, not just one
        for name, fn in cases.items():
            best[name] = min(best[name], timeit.timeit(fn, number=number) / number)
    return {name: t * 1e6 for name, t in best.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()

    json_cmd = typical_request(SerializeType.JSON)
    bin_cmd = typical_request(SerializeType.ROCKETMQ)
    json_wire = json_cmd.to_bytes()
    bin_wire = bin_cmd.to_bytes()
    json_frame = memoryview(json_wire)[4:]
    bin_frame = memoryview(bin_wire)[4:]
    hlen = struct.unpack_from(">I", json_wire, 4)[0] & 0xFFFFFF
    header_json = json_wire[8 : 8 + hlen]
    ext = json_cmd.ext_fields
    hdr = decode_header(SendMessageRequestHeaderV2, ext)
    header_obj = orjson.loads(header_json)
    response = json_cmd.response(
        0,
        None,
        {
            "msgId": "7F00000100002A9F0000000000000000",
            "queueId": "3",
            "queueOffset": "42",
            "MSG_REGION": "DefaultRegion",
            "TRACE_ON": "true",
        },
    )
    many = json_wire * 64

    def frame_split_64() -> None:
        for _ in FrameDecoder().feed(many):
            pass

    cases: dict[str, Callable[[], object]] = {
        "orjson.loads(header) [baseline]": lambda: orjson.loads(header_json),
        "RemotingCommand.decode JSON": lambda: RemotingCommand.decode(json_frame),
        "RemotingCommand.decode ROCKETMQ": lambda: RemotingCommand.decode(bin_frame),
        "decode_header(SendMessageRequestHeaderV2)": lambda: decode_header(SendMessageRequestHeaderV2, ext),
        "decode JSON + decode_header": lambda: decode_header(
            SendMessageRequestHeaderV2, RemotingCommand.decode(json_frame).ext_fields
        ),
        "FrameDecoder, per frame (64 per read)": frame_split_64,
        "orjson.dumps(header dict) [baseline]": lambda: orjson.dumps(header_obj),
        "RemotingCommand.encode JSON request": json_cmd.encode,
        "RemotingCommand.encode ROCKETMQ request": bin_cmd.encode,
        "encode_header(SendMessageRequestHeaderV2)": lambda: encode_header(hdr),
        "RemotingCommand.encode JSON send response": response.encode,
    }
    results = measure(cases, args.number, args.repeat)
    results["FrameDecoder, per frame (64 per read)"] /= 64
    base = results["orjson.loads(header) [baseline]"]
    print(
        f"SEND_MESSAGE_V2 frame: {len(json_wire)} B JSON ({hlen} B header), {len(bin_wire)} B ROCKETMQ; "
        f"best of {args.repeat} × {args.number}"
    )
    print(f"{'step':45s} {'µs/frame':>9s} {'× orjson.loads':>15s}")
    for name, us in results.items():
        print(f"{name:45s} {us:9.2f} {us / base:15.2f}")


if __name__ == "__main__":
    main()
