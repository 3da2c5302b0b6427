"""Topic, offset, subscription-group and lock managers: behaviour and persistence."""

from __future__ import annotations

from broker.client.rebalance_lock_manager import RebalanceLockManager
from broker.config import build_config
from broker.config_file import loads_lenient, read_config
from broker.consumer_offset_manager import ConsumerOffsetManager
from broker.subscription_group_manager import SubscriptionGroupManager
from broker.topic_config_manager import TopicConfigManager


def test_system_topics_and_auto_create(tmp_path):
    cfg, _ = build_config([("storePathRootDir", str(tmp_path)), ("brokerName", "b1")])
    changes = []
    tcm = TopicConfigManager(cfg, on_change=changes.append)
    for t in ("TBW102", "SELF_TEST_TOPIC", "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC", "b1", "DefaultCluster"):
        assert tcm.select_topic_config(t) is not None, t
    assert tcm.select_topic_config("SCHEDULE_TOPIC_XXXX").read_queue_nums == 18
    tc = tcm.create_topic_in_send_message("NewT", "TBW102", "1.2.3.4:5", 4, 0)
    assert (tc.read_queue_nums, tc.write_queue_nums, tc.perm) == (4, 4, 6)
    assert changes and changes[-1].topic_name == "NewT"
    assert tcm.create_topic_in_send_message("bad topic!", "TBW102", "", 4, 0) is None
    # persisted and reloaded
    tcm2 = TopicConfigManager(cfg)
    tcm2.load()
    assert tcm2.select_topic_config("NewT").write_queue_nums == 4


def test_no_auto_create_without_tbw102(tmp_path):
    cfg, _ = build_config([("storePathRootDir", str(tmp_path)), ("autoCreateTopicEnable", "false")])
    tcm = TopicConfigManager(cfg)
    assert tcm.select_topic_config("TBW102") is None
    assert tcm.create_topic_in_send_message("NewT", "TBW102", "", 4, 0) is None


def test_offsets_persist_and_read_java_written_files(tmp_path):
    com = ConsumerOffsetManager(str(tmp_path))
    assert com.query_offset("G", "T", 0) == -1
    com.commit_offset("G", "T", 0, 12)
    com.commit_offset("G", "T", 1, 7)
    com.persist()
    again = ConsumerOffsetManager(str(tmp_path))
    again.load()
    assert again.query_offset("G", "T", 1) == 7
    # fastjson writes integer keys unquoted
    (tmp_path / "config" / "consumerOffset.json").write_text('{"offsetTable":{"T@G":{0:42,1:3}}}')
    java = ConsumerOffsetManager(str(tmp_path))
    java.load()
    assert java.query_offset("G", "T", 0) == 42


def test_config_file_falls_back_to_bak(tmp_path):
    com = ConsumerOffsetManager(str(tmp_path))
    com.commit_offset("G", "T", 0, 1)
    com.persist()
    com.commit_offset("G", "T", 0, 2)
    com.persist()  # .bak now holds offset 1
    (tmp_path / "config" / "consumerOffset.json").write_text("{ torn")
    data = read_config(tmp_path / "config" / "consumerOffset.json")
    assert data["offsetTable"]["T@G"]["0"] == 1
    assert loads_lenient("{1:{2:3}}") == {"1": {"2": 3}}


def test_subscription_groups_auto_create_and_persist(tmp_path):
    sgm = SubscriptionGroupManager(str(tmp_path), default_retry_max_times=5)
    sgc = sgm.find_subscription_group_config("G")
    assert sgc.retry_max_times == 5 and sgc.consume_enable
    again = SubscriptionGroupManager(str(tmp_path))
    again.load()
    assert again.table["G"].retry_max_times == 5
    assert SubscriptionGroupManager(str(tmp_path), auto_create=False).find_subscription_group_config("X") is None


def test_rebalance_locks_one_owner_and_expiry():
    now = {"t": 0}
    locks = RebalanceLockManager(now_ms=lambda: now["t"], max_live_ms=60_000)
    mq = ("T", "b", 0)
    assert locks.try_lock_batch("G", [mq], "c1") == [mq]
    assert locks.try_lock_batch("G", [mq], "c2") == []
    assert locks.try_lock_batch("G2", [mq], "c2") == [mq]  # locks are per group
    now["t"] = 30_000
    assert locks.try_lock_batch("G", [mq], "c1") == [mq]  # renewal
    now["t"] = 90_001
    assert locks.try_lock_batch("G", [mq], "c2") == [mq]  # expired, taken over
    locks.unlock_batch("G", [mq], "c1")  # not the owner: no effect
    assert locks.try_lock_batch("G", [mq], "c1") == []
