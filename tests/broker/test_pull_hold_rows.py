"""The hold service's one pass over a group's arrivals (`PullRequestHoldService.notify_rows_arriving`, what
`BrokerController._on_rows_arriving` calls while only pulls are parked) against one `notify_message_arriving` a row,
the general path: the same pulls woken, in the same order, and the same pulls left parked."""

from __future__ import annotations

import random

import pytest

from broker.long_polling import PullRequest, PullRequestHoldService


class _Filter:
    """Matches tags codes in ``codes``, and properties whose "k" is not "no"."""

    def __init__(self, codes: set[int]) -> None:
        self.codes = codes

    def is_matched_by_consume_queue(self, tags_code: int | None) -> bool:
        return tags_code in self.codes

    def is_matched_by_properties(self, properties: dict[str, str]) -> bool:
        return properties.get("k") != "no"


def _parked(rng: random.Random) -> dict[tuple[str, int], list[PullRequest]]:
    table: dict[tuple[str, int], list[PullRequest]] = {}
    for topic in ("A", "B"):
        for queue_id in range(3):
            prs = []
            for _ in range(rng.choice((0, 1, 1, 1, 2, 3))):
                flt = rng.choice((None, None, _Filter({1}), _Filter({1, 2})))
                prs.append(PullRequest(None, None, topic, queue_id, rng.randrange(3, 8), None, flt))
            if prs:
                table[topic, queue_id] = prs
    return table


def _service(table: dict, woken: list) -> PullRequestHoldService:
    service = PullRequestHoldService(woken.append, lambda topic, queue_id: 0)
    service.table = {key: list(prs) for key, prs in table.items()}
    return service


@pytest.mark.parametrize("seed", range(300))
def test_one_pass_over_a_group_wakes_as_a_notice_a_row(seed: int) -> None:
    rng = random.Random(seed)
    table = _parked(rng)
    rows, results = [], []
    for i in range(rng.randrange(1, 9)):
        properties = rng.choice((None, {}, {"k": "no"}, {"k": "yes"}))
        # (SendRow's slots the notice reads: 0 topic, 1 queue id, 3 properties, 5 tags code)
        rows.append((rng.choice("AB"), rng.randrange(3), b"", properties, "", rng.choice((0, 1, 2)), 0, 0, 0, 0))
        results.append((f"id{i}", rng.randrange(2, 9), 0))
    one_pass: list = []
    general: list = []
    fast = _service(table, one_pass)
    slow = _service(table, general)
    fast.notify_rows_arriving(rows, results)
    for row, result in zip(rows, results):
        slow.notify_message_arriving(row[0], row[1], result[1] + 1, row[5], row[3])
    assert [id(pr) for pr in one_pass] == [id(pr) for pr in general]
    assert {k: [id(p) for p in v] for k, v in fast.table.items()} == {
        k: [id(p) for p in v] for k, v in slow.table.items()
    }
