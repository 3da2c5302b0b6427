"""Helpers for the metrics tests: scrape an endpoint and read it with prometheus_client's parser."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families


class Scrape:
    """One scrape, parsed with prometheus_client's own parser."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.families = {f.name: f for f in text_string_to_metric_families(text)}

    def samples(self, name: str, **labels: str) -> list:
        return [
            s
            for f in self.families.values()
            for s in f.samples
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
        ]

    def value(self, name: str, **labels: str) -> float:
        found = self.samples(name, **labels)
        assert len(found) == 1, f"{name}{labels}: {found}"
        return found[0].value


def scrape(url: str, *, accept: str | None = None) -> Scrape:
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    with urllib.request.urlopen(request, timeout=10) as resp:
        assert resp.status == 200
        return Scrape(resp.read().decode())
