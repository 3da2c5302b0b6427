"""Helpers shared by the store tests: a small store config and a message builder."""

from __future__ import annotations

from store import MessageExtBrokerInner, MessageStoreConfig


def small_config(root, **overrides) -> MessageStoreConfig:
    values = {
        "store_path_root_dir": str(root),
        "mapped_file_size_commit_log": 64 * 1024,
        "mapped_file_size_consume_queue": 100 * 20,
        "max_hash_slot_num": 64,
        "max_index_num": 256,
        "flush_interval_commit_log": 50,
        "flush_interval_consume_queue": 50,
        "commit_interval_commit_log": 20,
        "clean_resource_interval": 3_600_000,
    }
    values.update(overrides)
    return MessageStoreConfig(**values)


def make_msg(
    topic: str = "T",
    body: bytes = b"hello",
    *,
    queue_id: int = 0,
    tags: str | None = None,
    keys: str | None = None,
    uniq: str | None = None,
    props: dict[str, str] | None = None,
    **kw,
) -> MessageExtBrokerInner:
    p = dict(props or {})
    if tags is not None:
        p["TAGS"] = tags
    if keys is not None:
        p["KEYS"] = keys
    if uniq is not None:
        p["UNIQ_KEY"] = uniq
    return MessageExtBrokerInner.create(
        topic,
        body,
        queue_id=queue_id,
        properties=p,
        born_timestamp=1_700_000_000_000,
        born_host=("10.0.0.9", 53211),
        store_host=("127.0.0.1", 10911),
        **kw,
    )


class EveryEntryFilter:
    """Matches every message but says so only entry by entry (no ``matches_all``): the store walks its general read
    for it, which the fast reads are compared against."""

    def is_matched_by_consume_queue(self, tags_code: int) -> bool:
        return True

    def is_matched_by_commit_log(self, record, properties) -> bool:
        return True
