"""PullWakeRounds: pulls woken by arrivals are re-run in rounds, as upstream's reput thread wakes them.

Why rounds: a consumer that keeps up with its producer parks its pull, and the first message to arrive wakes it. Re-run
at once (one ``call_soon`` later, as this broker did until the thirteenth session), the pull answers what arrived in
that loop turn, often ONE message: such a message costs the broker a request, a ``writev`` and a loop turn of its own,
and the consumer a whole pull round (the Java consumer's per-pull cost is large). (Under RocketMQ's benchmark
Producer and Consumer a third of the pulls park; the rest find messages at once.) Upstream 4.9.7 never wakes per
message: ``ReputMessageService.run`` (store/DefaultMessageStore.java) is ``Thread.sleep(1); doReput();`` in a loop,
so the messages put in one millisecond are dispatched, and their parked pulls notified, in one round, and
``PullMessageProcessor.executeRequestWhenWakeup`` hands the woken pull to the pull thread pool, so it reads whatever
arrived in its round and while it waited for a thread. Here the first wake-up of a round arms one loop timer
``WAKE_ROUND_S`` (2 ms) later; every pull woken until it fires joins the round, and the round's pulls are re-run in one
callback, in the order they woke (the processor's ``execute_requests_when_wakeup``). A pull woken early in a round
answers what arrived in the rest of it; the answers of one consumer's queues woken in one round are written in one
turn, so its channel sends them in one ``writev``.

Why 2 ms: measured against 1 ms and this broker before the rounds with RocketMQ's benchmark Producer and Consumer
together (`bench.consume_ab --phases mixed`, five rounds each): messages per pull 6.5 before, 6.7 at 1 ms, 8.4 at
2 ms (medians), so the pulls a consumed message costs 0.77x at 2 ms and 0.97x at 1 ms, and the broker's CPU per
consumed message ~0.95x at 2 ms. A round adds at most itself to a message's send-to-consume time (the first arrival of
a round waits all of it, later ones less): 2 ms against the ~70 ms the Java broker's consumers see on this machine
(``bench.vs_java``), where upstream's own round is its reput thread's ``sleep(1)`` plus the dispatch and the pull
pool's hand-off. Below 1 ms is not on offer: uvloop's timers count whole milliseconds (``call_later(0.0005)`` is a
``call_soon``). The figures are in docs/design.md "Speed: consume path", "Wake-ups in rounds".

Why longer when busy (fourteenth session): under RocketMQ's benchmark Producer and Consumer on two shared cores the
machine's CPU is (nearly) saturated, and every pull costs the Java push consumer ~85-180 µs and our broker ~80-100 µs
of CPU whatever it carries (``bench.consume_ab --phases mixed`` prints each process's CPU per consumed message): at 9
messages a pull (2 ms rounds) the three processes took ~96 µs a message, at 16-17 (10 ms) ~78, and the Producer's TPS,
which the Consumer follows, rose with what was left to it. A round's pulls that answered ``BUSY_MESSAGES_PER_PULL``
(4) or more messages each on average say the queues fill faster than a round: the next round is then ``BUSY_ROUND_S``
(10 ms) long, until a round's pulls answer fewer. A consumer woken by lone arrivals (a low rate, one message a pull)
keeps the 2 ms round and its latency; a busy one gets what a longer round gathers: 10 ms fills most of a 32-message
pull at the benchmark's ~4k messages a second a queue, and its messages' send-to-consume time stays well under the
Java broker's on the same load (5.7 against 23.1 ms; figures in docs/design.md "Speed: consume path", "Longer rounds
when busy").

What is not delayed: a pull whose deadline passed (``wake_now``: answered on time, in the next loop turn, and the round
pending then with it, in wake order); the broker's shutdown (``run_now``). A woken pull whose channel closed in its
round is skipped by the processor, as before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from broker.long_polling import PullRequest

#: a round: the time between the first wake-up of a round and the re-run of its woken pulls (see the module's docstring)
WAKE_ROUND_S = 0.002
#: a round after a busy one (its pulls answered BUSY_MESSAGES_PER_PULL or more messages each, on average)
BUSY_ROUND_S = 0.010
BUSY_MESSAGES_PER_PULL = 4


class PullWakeRounds:
    """``wake`` (arrivals) and ``wake_now`` (deadlines) for the hold service; ``run`` re-runs a round's pulls in
    order (the pull processor's ``execute_requests_when_wakeup``) and returns the messages they answered (None: not
    counted, never busy). ``round_s`` 0 re-runs them in the next loop turn (the benchmark harness's per-message
    cycle), busy or not; after a busy round the next is ``busy_round_s``, or ``round_s`` if that is longer."""

    def __init__(
        self,
        run: Callable[[list[PullRequest]], int | None],
        round_s: float = WAKE_ROUND_S,
        busy_round_s: float = BUSY_ROUND_S,
    ) -> None:
        self._run_pulls = run
        self.round_s = round_s
        self.busy_round_s = busy_round_s
        self.busy = False  # the last round's pulls answered BUSY_MESSAGES_PER_PULL or more messages each
        self._pending: list[PullRequest] = []
        self._handle: asyncio.Handle | None = None
        self._at_once = False  # the armed run is a ``call_soon`` (a deadline's, or a round of 0)
        self.rounds = 0  # rounds run (a round's pulls re-run together): read by tests and benchmarks

    def wake(self, pr: PullRequest) -> None:
        """An arrival woke ``pr``: it is re-run at the end of the current round (the first wake-up starts one)."""
        pending = self._pending
        if not pending:
            loop = asyncio.get_running_loop()
            round_s = self.round_s
            if self.busy and 0 < round_s < self.busy_round_s:
                round_s = self.busy_round_s
            if round_s > 0:
                self._handle = loop.call_later(round_s, self._run)
                self._at_once = False
            else:
                self._handle = loop.call_soon(self._run)
                self._at_once = True
        pending.append(pr)

    def wake_now(self, pr: PullRequest) -> None:
        """``pr``'s deadline passed: re-run it in the next loop turn, with the pulls already waiting for their round
        (ahead of it, as they woke first)."""
        if not self._at_once:
            if self._handle is not None:
                self._handle.cancel()
            self._handle = asyncio.get_running_loop().call_soon(self._run)
            self._at_once = True
        self._pending.append(pr)

    def _run(self) -> None:
        self._handle = None
        self._at_once = False
        pending, self._pending = self._pending, []
        self.rounds += 1
        answered = self._run_pulls(pending)
        self.busy = answered is not None and answered >= BUSY_MESSAGES_PER_PULL * len(pending)

    def run_now(self) -> None:
        """Re-run the waiting pulls now (the broker's shutdown answers them before its server stops)."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self._pending:
            self._run()

    @property
    def waiting(self) -> int:
        """Pulls woken and waiting for their round's re-run."""
        return len(self._pending)
