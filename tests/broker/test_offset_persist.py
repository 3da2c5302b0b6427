"""Consumer offsets are written by a periodic task in a thread and once more at shutdown: the two writers
must neither break each other's rename nor let an older snapshot land after a newer one."""

from __future__ import annotations

import threading

from broker.config_file import read_config, write_atomically
from broker.consumer_offset_manager import ConsumerOffsetManager


def test_concurrent_writers_of_one_file_never_fail(tmp_path) -> None:
    path = tmp_path / "config" / "consumerOffset.json"
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        try:
            for i in range(200):
                write_atomically(path, b'{"w": %d, "i": %d}' % (n, i))
        except BaseException as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert read_config(path)["i"] == 199
    assert not list(path.parent.glob("*.tmp"))


def test_an_older_snapshot_written_late_does_not_replace_a_newer_one(tmp_path) -> None:
    manager = ConsumerOffsetManager(str(tmp_path))
    key = ConsumerOffsetManager.key("T", "G")
    manager.commit_offset("G", "T", 0, 5)
    old = manager.take_snapshot()  # the periodic task took this one, then its thread was slow
    manager.commit_offset("G", "T", 0, 9)
    manager.persist(force=True)  # the shutdown write
    assert old is not None
    manager.write_snapshot(old)  # the slow thread finishes last
    assert read_config(tmp_path / "config" / "consumerOffset.json")["offsetTable"][key] == {"0": 9}
