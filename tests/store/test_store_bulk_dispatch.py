"""The bulk reput (recovery and rebuilds: records parsed many at a time with numpy) must build exactly
the consume queues and index files that dispatching record by record builds, and that the writer's
inline dispatch built while the messages were put: property parsing with J's semantics (duplicates,
junk pieces, trailing separators, non-ASCII), transactions, delayed messages, several keys per
message, file roll-overs of the CommitLog, the consume queues and the index, both ways of finding the
property separators."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from store_helpers import make_msg

from store import MessageExtBrokerInner, MessageStore, PutMessageStatus
from store.message import decode_properties


def _raw_props_msg(topic: str, props: str, body: bytes, queue_id: int = 0) -> MessageExtBrokerInner:
    """A message whose stored properties string is `props` verbatim (as a C or Go client may send it)."""
    msg = make_msg(topic=topic, body=body, queue_id=queue_id)
    msg.properties = decode_properties(props)
    msg.properties_string = props
    return msg


async def _write(cfg) -> None:
    s = MessageStore(cfg)
    assert await s.load()
    await s.start()
    # the first record: an empty body, so its properties end within the first 128 bytes of the file
    first = await s.put_message(make_msg(body=b"", queue_id=0, tags="t", keys="k", uniq="u"))
    assert first.status == PutMessageStatus.PUT_OK
    puts = []
    for i in range(150):
        q = i % 3
        body = bytes([i % 251]) * (100 + (i * 37) % 900) + b"\x02TAGS\x01body"  # a fake property in the body
        kind = i % 10
        if kind == 0:
            msg = make_msg(body=body, queue_id=q, tags="TagA", keys=f"k{i} k{i + 1}  k{i + 2}", uniq=f"U{i}")
        elif kind == 1:
            msg = make_msg(topic="Other", body=body, queue_id=q, tags="标签", keys="ключ", uniq=f"ü{i}")
        elif kind == 2:
            msg = _raw_props_msg("T", f"TAGS\x01x\x02KEYS\x01a{i}\x02TAGS\x01y\x02UNIQ_KEY\x01V{i}\x02", body, q)
        elif kind == 3:
            msg = _raw_props_msg("T", f"\x03\x02\x02TAGS\x01\x02KEYS\x01 \x02UNIQ_KEY\x01W{i}\x02\x03", body, q)
        elif kind == 4:
            msg = make_msg(body=body, queue_id=q, tags="TagB", uniq=f"P{i}", sys_flag=0x4)  # prepared
        elif kind == 5:
            msg = make_msg(body=body, queue_id=q, tags="TagB", keys=f"r{i}", sys_flag=0xC)  # rolled back
        elif kind == 6:
            msg = make_msg(body=body, queue_id=q, tags="TagC", keys=f"c{i}", sys_flag=0x8)  # committed
        elif kind == 7:
            msg = make_msg(body=body, queue_id=q, tags="TagD", keys=f"d{i}", props={"DELAY": str(1 + i % 20)})
        elif kind == 8:
            msg = make_msg(topic="Tö", body=body, queue_id=q, keys="emoji-\U0001f600 plain", uniq=f"E{i}")
        elif i == 99:  # one long property: its chunk searches all bytes for separators, not rows
            msg = make_msg(body=body, queue_id=q, tags="TagF", keys=f"big{i}", props={"BIG": "x" * 20_000})
        elif i % 20 == 19:  # values of every hashing group: up to 16, 32, 64, 128 bytes, and longer
            width = (3, 20, 50, 100, 200, 129, 128)[i // 20 % 7]
            msg = make_msg(
                body=body, queue_id=q, tags="t" * width, keys=f"{i}-" + "k" * width, uniq=f"{i}" + "u" * (width // 2)
            )
        else:
            msg = make_msg(body=body, queue_id=q)
        puts.append(s.put_message(msg))
        if i % 25 == 24:
            batch = [
                make_msg(topic="B", body=b"b" * 50, tags="TagE", keys=f"b{i}-{j}", uniq=f"B{i}-{j}") for j in range(7)
            ]
            r = await s.put_messages(batch)
            assert r.status == PutMessageStatus.PUT_OK
            for r in [await p for p in puts]:
                assert r.status == PutMessageStatus.PUT_OK
            puts = []
    for r in [await p for p in puts]:
        assert r.status == PutMessageStatus.PUT_OK
    await s.shutdown()


def _snapshot(cfg) -> dict[str, bytes]:
    """Consume-queue files by path, index files by position (their names are creation times)."""
    out: dict[str, bytes] = {}
    root = Path(cfg.store_path_consume_queue)
    for p in sorted(root.rglob("*")):
        if p.is_file():
            out[f"cq/{p.relative_to(root)}"] = p.read_bytes()
    for i, name in enumerate(sorted(os.listdir(cfg.store_path_index))):
        out[f"index/{i}"] = (Path(cfg.store_path_index) / name).read_bytes()
    return out


async def _rebuild(cfg, *, bulk: bool) -> tuple[dict[str, bytes], int]:
    shutil.rmtree(cfg.store_path_consume_queue)
    shutil.rmtree(cfg.store_path_index)
    os.unlink(cfg.queue_manifest_file)
    Path(cfg.abort_file).touch()  # as if the process had been killed
    s = MessageStore(cfg)
    calls = [0]
    if bulk:
        parse = s.commit_log.parser.parse_many

        def counting(*args, **kw):
            calls[0] += 1
            return parse(*args, **kw)

        s.commit_log.parser.parse_many = counting
    else:
        s.reput._dispatch_many = None  # record by record (parse_dispatch → _dispatch)
    assert await s.load()
    await s.start()
    await s.shutdown()
    return _snapshot(cfg), calls[0]


async def test_bulk_rebuild_builds_what_per_record_dispatch_builds(config_factory):
    cfg = config_factory(max_index_num=120)
    await _write(cfg)
    assert len(os.listdir(cfg.store_path_commit_log)) > 2  # BLANK endings crossed
    written = _snapshot(cfg)
    assert len([k for k in written if k.startswith("index/")]) > 1  # index roll-over
    assert len(written) > 10
    per_record, _ = await _rebuild(cfg, bulk=False)
    bulk, parses = await _rebuild(cfg, bulk=True)
    assert parses > 0
    assert per_record.keys() == written.keys() == bulk.keys()
    for name in written:
        assert per_record[name] == written[name], name
        assert bulk[name] == written[name], name
