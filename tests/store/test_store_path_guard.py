"""Issue 13 items 1-2 at the store: no path outside the root, one bad queue never stops the writer, the reput
or a boot."""

from __future__ import annotations

import os

import pytest
from store_helpers import make_msg

from store import MessageStore
from store.path_guard import UnsafeStorePath, queue_dir
from store.results import PutMessageStatus


@pytest.mark.parametrize("topic", ["..", ".", "a/b", "x/../../../escaped", "G\x00", "", "n" * 256])
def test_queue_dir_refuses_names_that_are_not_one_folder(tmp_path, topic):
    with pytest.raises(UnsafeStorePath):
        queue_dir(str(tmp_path), topic, 0)


def test_queue_dir_refuses_a_symlink_out_of_the_root(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    (tmp_path / "outside").mkdir()
    os.symlink(tmp_path / "outside", root / "T")
    with pytest.raises(UnsafeStorePath, match="outside the store"):
        queue_dir(str(root), "T", 0)
    assert queue_dir(str(root), "FuzzNL\n", 3) == os.path.join(str(root), "FuzzNL\n", "3")


@pytest.mark.parametrize("topic", ["x/../../../escaped", "G\x00", ".."])
async def test_put_refuses_a_topic_that_cannot_be_a_folder(store_factory, tmp_path, topic):
    store = await store_factory()
    result = await store.put_message(make_msg(topic))
    assert result.status == PutMessageStatus.MESSAGE_ILLEGAL
    result = await store.put_messages([make_msg(topic), make_msg(topic)])
    assert result.status == PutMessageStatus.MESSAGE_ILLEGAL
    assert (await store.put_message(make_msg("T"))).status == PutMessageStatus.PUT_OK
    await store.shutdown()
    assert not [p for p, _, _ in os.walk(tmp_path) if "escaped" in p]


async def test_a_queue_that_cannot_be_created_fails_alone(store_factory, config_factory):
    """consumequeue/Bad is a file, so Bad's queue folder cannot be made: Bad's records get no consume queue
    entry (one error line), every other topic keeps being dispatched, inline and by the reput."""
    config = config_factory()
    os.makedirs(config.store_path_consume_queue, exist_ok=True)
    with open(os.path.join(config.store_path_consume_queue, "Bad"), "wb") as f:
        f.write(b"not a folder")
    store = await store_factory(config)
    for i in range(20):
        topic = "Bad" if i % 3 == 0 else "Good"
        assert (await store.put_message(make_msg(topic, b"m%d" % i))).status == PutMessageStatus.PUT_OK
    batch = [make_msg("Bad", b"b%d" % i) for i in range(3)]
    assert (await store.put_messages(batch)).status == PutMessageStatus.PUT_OK
    assert (
        await store.put_messages([make_msg("Good", b"g"), make_msg("Good", b"h")])
    ).status == PutMessageStatus.PUT_OK
    await store.reput.catch_up()
    assert store.get_max_offset_in_queue("Good", 0) == 15
    assert store.get_max_offset_in_queue("Bad", 0) == 0
    assert store.reput.reput_from_offset == store.get_max_phy_offset()
    await store.shutdown()


async def test_a_bad_queue_folder_is_set_aside_and_rebuilt_at_boot(store_factory, config_factory):
    config = config_factory()
    store = await store_factory(config)
    for i in range(250):  # T1's queue spans two files of 100 entries
        await store.put_message(make_msg("T1" if i % 2 else "T2", b"m%d" % i))
    await store.put_message(make_msg("T1", b"x", queue_id=1))
    await store.shutdown()
    qdir = os.path.join(config.store_path_consume_queue, "T1", "0")
    first = os.path.join(qdir, sorted(os.listdir(qdir))[0])
    os.truncate(first, 7)  # not the last file: a wrong size refuses the whole folder
    assert sorted(os.listdir(qdir)) != [os.path.basename(first)]

    reopened = MessageStore(config)
    assert await reopened.load()
    await reopened.start()
    try:
        assert reopened.get_max_offset_in_queue("T1", 0) == 125
        assert reopened.get_max_offset_in_queue("T2", 0) == 125
        assert reopened.get_max_offset_in_queue("T1", 1) == 1
        got = reopened.get_message("G", "T1", 0, 0, 32)
        assert got.status.name == "FOUND" and got.message_count == 32
        aside = os.path.join(config.store_path_root_dir, "consumequeue-set-aside")
        assert len(os.listdir(aside)) == 1 and os.listdir(aside)[0].startswith("T1.0.")
    finally:
        await reopened.shutdown()


async def test_an_inline_dispatch_that_raises_leaves_the_record_to_the_reput(store_factory, monkeypatch):
    """The writer dispatches inline when the reput is caught up; if that raises (a bug, a full disk), the put
    still succeeds and the reput dispatches the record."""
    from store.consume_queue import ConsumeQueue

    real = ConsumeQueue.try_append

    def flaky(self, *args):
        if self.topic == "Boom":
            raise RuntimeError("injected")
        return real(self, *args)

    monkeypatch.setattr(ConsumeQueue, "try_append", flaky)
    store = await store_factory()
    for i in range(6):
        topic = "Boom" if i % 2 else "Calm"
        assert (await store.put_message(make_msg(topic, b"m%d" % i))).status == PutMessageStatus.PUT_OK
    await store.reput.catch_up()
    assert store.get_max_offset_in_queue("Boom", 0) == 3 and store.get_max_offset_in_queue("Calm", 0) == 3
    await store.shutdown()
