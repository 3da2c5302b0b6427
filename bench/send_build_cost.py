"""Benchmark: the send path's per-message build steps, each new path against the one it replaced, in one process
(interleaved timeit minima, so the machine's load moves both sides alike).

- properties: what the send processor does with a request's properties text (decode, set CLUSTER, drop WAIT,
  encode for the record): the dict path (`decode_properties` + `encode_properties`) against the sent pieces
  edited (`split_properties` + `stored_properties`), for the Java benchmark Producer's text and a text with
  TAGS and KEYS.
- index keys: `JavaHasher.abs_hashes` of a deferred round of `topic#UNIQ_KEY` keys, the UTF-16 running-sum pass
  (`units_hashes`) against the one matrix product of keys of one length (`_rows_hashes`, what `hashes` takes).

    python -m bench.send_build_cost [--repeat 7]
"""

from __future__ import annotations

import argparse
import random
import timeit

from store.java_hash import JavaHasher, abs_hashes
from store.message import decode_properties, encode_properties, split_properties, stored_properties

TEXTS = {
    "producer": "UNIQ_KEY\x017F0000014E2A18B4AAC27D2F6B9E0000\x02WAIT\x01true\x02",
    "tags+keys": "TAGS\x01TagA\x02KEYS\x01order-1234\x02UNIQ_KEY\x017F0000014E2A18B4AAC27D2F6B9E0000\x02WAIT\x01true\x02",
}


def _best(fn, number: int, repeat: int) -> float:
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    cluster = "DefaultCluster"
    for name, text in TEXTS.items():

        def dict_path(text=text) -> str:
            props = decode_properties(text)
            props["CLUSTER"] = cluster
            props.pop("WAIT", None)
            return encode_properties(props)

        def pieces_path(text=text) -> str:
            props, pieces = split_properties(text)
            return stored_properties(props, pieces, cluster)

        assert dict_path() == pieces_path()
        a = b = float("inf")
        for _ in range(3):  # interleaved
            a = min(a, _best(dict_path, 20000, args.repeat))
            b = min(b, _best(pieces_path, 20000, args.repeat))
        print(f"properties {name:10s}: dict path {a:.2f} us, pieces {b:.2f} us ({b / a:.2f}x)")
    hasher = JavaHasher()
    rng = random.Random(7)
    for n in (16, 64, 256, 1024):
        keys = [f"BenchmarkTest#7F0000014E2A18B4AAC27D2F{rng.getrandbits(48):012X}" for _ in range(n)]
        assert abs_hashes(hasher.units_hashes(keys)).tolist() == hasher.abs_hashes(keys).tolist()
        a = b = float("inf")
        for _ in range(3):
            a = min(a, _best(lambda keys=keys: abs_hashes(hasher.units_hashes(keys)), 500, args.repeat))
            b = min(b, _best(lambda keys=keys: hasher.abs_hashes(keys), 500, args.repeat))
        print(
            f"index keys {n:5d}: running sums {a:.1f} us ({a / n:.2f} a key), rows {b:.1f} us ({b / n:.2f} a key)"
            f" ({b / a:.2f}x)"
        )


if __name__ == "__main__":
    main()
