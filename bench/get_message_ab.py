"""MessageReader.get_message of another checkout against this tree's, in ONE process, interleaved.

Two broker processes on a machine other helpers load swing by 2x between runs; two reader classes timed in turns
in the same process, over the same store and the same records, do not. ``--base`` names a checkout whose
``store/message_reader.py`` is loaded beside this tree's (it must take the same constructor state); a store gets
``--messages`` 1 KiB messages on four queues (one queue's records interleave with the others', as under a
producer that round-robins), then each reader answers pulls of several sizes, best of ``--rounds`` turns.

    python -m bench.get_message_ab --base /work/main [--rounds 15]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import tempfile
import timeit
from pathlib import Path

from bench.pull_cost import QUEUES, TOPIC, SinkChannel, send_request
from broker.testing.in_loop import start_in_loop
from remoting import loop as loop_choice
from store.message_reader import MessageReader

SIZES = (32, 16, 8, 4, 1)


def load_reader_class(base: Path) -> type:
    spec = importlib.util.spec_from_file_location("base_message_reader", base / "store" / "message_reader.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.MessageReader


async def measure(base: Path, messages: int, rounds: int) -> None:
    base_class = load_reader_class(base)
    with tempfile.TemporaryDirectory(prefix="get-message-ab-") as tmp:
        broker = await start_in_loop(Path(tmp) / "store", mappedFileSizeCommitLog=64 * 1024 * 1024)
        try:
            sink = SinkChannel()
            for i in range(messages):
                await broker.send_processor.process_request(sink, send_request(i % QUEUES, b"m" * 1024))
            ours = next(v for v in vars(broker.store).values() if isinstance(v, MessageReader))
            theirs = base_class.__new__(base_class)
            theirs.__dict__.update(ours.__dict__)
            best: dict[tuple[str, int], float] = {}
            offset = messages // QUEUES // 4
            for _ in range(rounds):
                for name, reader in (("base", theirs), ("this", ours)):
                    for n in SIZES:
                        t = min(
                            timeit.repeat(
                                lambda r=reader, n=n: r.get_message("G", TOPIC, 1, offset, n), number=300, repeat=3
                            )
                        )
                        key = (name, n)
                        best[key] = min(best.get(key, t), t / 300)
            for n in SIZES:
                a, b = best[("base", n)], best[("this", n)]
                print(f"pull of {n:2d}: base {a * 1e6:6.2f} us, this tree {b * 1e6:6.2f} us, ratio {b / a:.2f}")
        finally:
            await broker.shutdown()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, required=True, help="checkout to compare with (e.g. /work/main)")
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args(argv)
    loop_choice.install()  # uvloop when installed, as the broker runs (remoting.loop)
    asyncio.run(measure(args.base, args.messages, args.rounds))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
