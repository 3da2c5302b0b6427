"""The fuzz generator's vocabulary: the names, request codes, header fields and values ``bench.fuzz_frames`` draws from.

Name pools (the fuzz topics and groups, upstream's reserved ones, illegal ones; never the broker's own name or
cluster), the request codes each port serves, the kind of value each header field takes, broker config keys and
values a fuzz run may send, subscription expressions and message property names. Data only: no randomness here.
"""

from __future__ import annotations

from remoting.codes import LanguageCode, RequestCode

#: Topics a fuzz run may create and write to; the real-client round trip uses its own fresh topic.
FUZZ_TOPICS = ("FuzzT0", "FuzzT1", "FuzzT2", "%RETRY%FuzzG0", "%DLQ%FuzzG1")
FUZZ_GROUPS = ("FuzzG0", "FuzzG1", "FuzzG2", "CID_Fuzz")
#: Upstream's reserved and system names: sends and admin requests on them must be refused or handled.
SYSTEM_TOPICS = (
    "TBW102",
    "SCHEDULE_TOPIC_XXXX",
    "RMQ_SYS_TRANS_HALF_TOPIC",
    "RMQ_SYS_TRANS_OP_HALF_TOPIC",
    "TRANS_CHECK_MAX_TIME_TOPIC",
    "SELF_TEST_TOPIC",
    "OFFSET_MOVED_EVENT",
    "RMQ_SYS_TRACE_TOPIC",
    "DefaultCluster",
)
#: Names no file or folder may be made of (issue 13 item 2); each must be refused before the store.
ILLEGAL_NAMES = (
    "",
    " ",
    "a/b",
    "../FuzzEscape",
    "x/../../FuzzEscape",
    "N\u0000",
    "NL\n",
    "T" * 300,
    "\u00e9t\u00e9",
    "%RETRY%",
    "%DLQ%",
    ".",
    "..",
    "a\\b",
    "FuzzT0 ",
    "*",
    "||",
)
FUZZ_BROKER_NAMES = ("FuzzBroker", "FuzzBroker2")
FUZZ_CLUSTERS = ("FuzzCluster",)
SYSTEM_GROUPS = ("TOOLS_CONSUMER", "FILTERSRV_CONSUMER", "CID_RMQ_SYS_TRANS", "SELF_TEST_C_GROUP")

PROPERTY_NAMES = (
    "KEYS",
    "TAGS",
    "DELAY",
    "WAIT",
    "UNIQ_KEY",
    "TRAN_MSG",
    "PGROUP",
    "RETRY_TOPIC",
    "REAL_TOPIC",
    "REAL_QID",
    "MAX_OFFSET",
    "MIN_OFFSET",
    "TRANSACTION_CHECK_TIMES",
    "CHECK_IMMUNITY_TIME_IN_SECONDS",
    "MSG_REGION",
    "TRACE_ON",
    "INSTANCE_ID",
    "CORRELATION_ID",
    "REPLY_TO_CLIENT",
    "__STARTDELIVERTIME",
    "CLUSTER",
    "MSG_TYPE",
    "ORIGIN_MESSAGE_ID",
    "RECONSUME_TIME",
    "MAX_RECONSUME_TIMES",
    "CONSUME_START_TIME",
    "SHARDING_KEY",
    "userKey",
)

REQUEST_CODES = tuple(int(c) for c in RequestCode)
#: Codes the name server port serves (the embedded name server answers everything else as unsupported).
NAMESRV_CODES = tuple(
    int(c)
    for c in (
        RequestCode.GET_ROUTEINFO_BY_TOPIC,
        RequestCode.REGISTER_BROKER,
        RequestCode.UNREGISTER_BROKER,
        RequestCode.GET_BROKER_CLUSTER_INFO,
        RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER,
        RequestCode.GET_TOPICS_BY_CLUSTER,
        RequestCode.DELETE_TOPIC_IN_NAMESRV,
        RequestCode.PUT_KV_CONFIG,
        RequestCode.GET_KV_CONFIG,
        RequestCode.DELETE_KV_CONFIG,
        RequestCode.WIPE_WRITE_PERM_OF_BROKER,
        RequestCode.ADD_WRITE_PERM_OF_BROKER,
        RequestCode.GET_KVLIST_BY_NAMESPACE,
        RequestCode.QUERY_DATA_VERSION,
        RequestCode.GET_NAMESRV_CONFIG,
        RequestCode.UPDATE_NAMESRV_CONFIG,
        RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS,
        RequestCode.GET_UNIT_TOPIC_LIST,
    )
)
#: The header fields of each request code and the kind of value each takes (see ``FrameMutator._value``).
FIELD_KINDS: dict[int, dict[str, str]] = {
    RequestCode.SEND_MESSAGE: {
        "producerGroup": "group",
        "topic": "topic",
        "defaultTopic": "deftopic",
        "defaultTopicQueueNums": "qnum",
        "queueId": "qid",
        "sysFlag": "sysflag",
        "bornTimestamp": "ts",
        "flag": "int",
        "properties": "props",
        "reconsumeTimes": "int",
        "unitMode": "bool",
        "batch": "bool",
        "maxReconsumeTimes": "int",
    },
    RequestCode.SEND_MESSAGE_V2: {
        "a": "group",
        "b": "topic",
        "c": "deftopic",
        "d": "qnum",
        "e": "qid",
        "f": "sysflag",
        "g": "ts",
        "h": "int",
        "i": "props",
        "j": "int",
        "k": "bool",
        "l": "int",
        "m": "bool",
    },
    RequestCode.PULL_MESSAGE: {
        "consumerGroup": "group",
        "topic": "topic",
        "queueId": "qid",
        "queueOffset": "offset",
        "maxMsgNums": "int",
        "sysFlag": "pullflag",
        "commitOffset": "offset",
        "suspendTimeoutMillis": "suspend",
        "subVersion": "ts",
        "subscription": "expr",
        "expressionType": "exprtype",
    },
    RequestCode.QUERY_MESSAGE: {
        "topic": "topic",
        "key": "key",
        "maxNum": "int",
        "beginTimestamp": "ts",
        "endTimestamp": "ts",
    },
    RequestCode.QUERY_CONSUMER_OFFSET: {"consumerGroup": "group", "topic": "topic", "queueId": "qid"},
    RequestCode.UPDATE_CONSUMER_OFFSET: {
        "consumerGroup": "group",
        "topic": "topic",
        "queueId": "qid",
        "commitOffset": "offset",
    },
    RequestCode.UPDATE_AND_CREATE_TOPIC: {
        "topic": "topic",
        "defaultTopic": "deftopic",
        "readQueueNums": "qnum",
        "writeQueueNums": "qnum",
        "perm": "perm",
        "topicFilterType": "filtertype",
        "order": "bool",
        "topicSysFlag": "int",
    },
    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: {"topic": "topic", "queueId": "qid", "timestamp": "ts"},
    RequestCode.GET_MAX_OFFSET: {"topic": "topic", "queueId": "qid"},
    RequestCode.GET_MIN_OFFSET: {"topic": "topic", "queueId": "qid"},
    RequestCode.GET_EARLIEST_MSG_STORETIME: {"topic": "topic", "queueId": "qid"},
    RequestCode.VIEW_MESSAGE_BY_ID: {"offset": "offset"},
    RequestCode.UNREGISTER_CLIENT: {"clientID": "client", "producerGroup": "group", "consumerGroup": "group"},
    RequestCode.CONSUMER_SEND_MSG_BACK: {
        "offset": "offset",
        "group": "group",
        "delayLevel": "int",
        "originMsgId": "msgid",
        "originTopic": "topic",
        "unitMode": "bool",
        "maxReconsumeTimes": "int",
    },
    RequestCode.END_TRANSACTION: {
        "producerGroup": "group",
        "tranStateTableOffset": "offset",
        "commitLogOffset": "offset",
        "commitOrRollback": "tranflag",
        "msgId": "msgid",
        "fromTransactionCheck": "bool",
        "transactionId": "key",
    },
    RequestCode.GET_CONSUMER_LIST_BY_GROUP: {"consumerGroup": "group"},
    RequestCode.GET_CONSUMER_CONNECTION_LIST: {"consumerGroup": "group"},
    RequestCode.GET_PRODUCER_CONNECTION_LIST: {"producerGroup": "group"},
    RequestCode.GET_CONSUME_STATS: {"consumerGroup": "group", "topic": "topic"},
    RequestCode.GET_TOPIC_STATS_INFO: {"topic": "topic"},
    RequestCode.DELETE_TOPIC_IN_BROKER: {"topic": "topic"},
    RequestCode.DELETE_SUBSCRIPTIONGROUP: {"groupName": "group"},
    RequestCode.QUERY_TOPIC_CONSUME_BY_WHO: {"topic": "topic"},
    RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: {
        "topic": "topic",
        "group": "group",
        "timestamp": "ts",
        "isForce": "bool",
    },
    RequestCode.GET_CONSUMER_RUNNING_INFO: {"consumerGroup": "group", "clientId": "client", "jstackEnable": "bool"},
    RequestCode.CONSUME_MESSAGE_DIRECTLY: {
        "consumerGroup": "group",
        "clientId": "client",
        "msgId": "msgid",
        "brokerName": "brokername",
    },
    RequestCode.VIEW_BROKER_STATS_DATA: {"statsName": "statsname", "statsKey": "key"},
    RequestCode.FAULT_INJECT: {"kind": "key", "target": "key", "durationMs": "int", "value": "key"},
    RequestCode.GET_TOPIC_CONFIG: {"topic": "topic"},
    RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG: {"group": "group"},
    RequestCode.QUERY_CONSUME_QUEUE: {
        "topic": "topic",
        "queueId": "qid",
        "index": "offset",
        "count": "int",
        "consumerGroup": "group",
    },
    RequestCode.QUERY_CONSUME_TIME_SPAN: {"topic": "topic", "group": "group"},
    RequestCode.QUERY_CORRECTION_OFFSET: {"topic": "topic", "compareGroup": "group", "filterGroups": "group"},
    RequestCode.CLONE_GROUP_OFFSET: {"srcGroup": "group", "destGroup": "group", "topic": "topic", "offline": "bool"},
    RequestCode.GET_ROUTEINFO_BY_TOPIC: {"topic": "topic", "acceptStandardJsonOnly": "bool"},
    RequestCode.REGISTER_BROKER: {
        "brokerName": "brokername",
        "brokerAddr": "addr",
        "clusterName": "cluster",
        "haServerAddr": "addr",
        "brokerId": "brokerid",
        "compressed": "bool",
        "bodyCrc32": "int",
    },
    RequestCode.UNREGISTER_BROKER: {
        "brokerName": "brokername",
        "brokerAddr": "addr",
        "clusterName": "cluster",
        "brokerId": "brokerid",
    },
    RequestCode.GET_TOPICS_BY_CLUSTER: {"cluster": "cluster"},
    RequestCode.DELETE_TOPIC_IN_NAMESRV: {"topic": "topic", "clusterName": "cluster"},
    RequestCode.PUT_KV_CONFIG: {"namespace": "key", "key": "key", "value": "key"},
    RequestCode.GET_KV_CONFIG: {"namespace": "key", "key": "key"},
    RequestCode.DELETE_KV_CONFIG: {"namespace": "key", "key": "key"},
    RequestCode.GET_KVLIST_BY_NAMESPACE: {"namespace": "key"},
    RequestCode.WIPE_WRITE_PERM_OF_BROKER: {"brokerName": "brokername"},
    RequestCode.ADD_WRITE_PERM_OF_BROKER: {"brokerName": "brokername"},
    RequestCode.UPDATE_AND_CREATE_ACL_CONFIG: {
        "accessKey": "key",
        "secretKey": "key",
        "whiteRemoteAddress": "addr",
        "defaultTopicPerm": "aclperm",
        "defaultGroupPerm": "aclperm",
        "admin": "bool",
        "topicPerms": "key",
        "groupPerms": "key",
    },
    RequestCode.DELETE_ACL_CONFIG: {"accessKey": "key"},
    RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG: {"globalWhiteAddrs": "addr"},
}
FIELD_KINDS[RequestCode.SEND_BATCH_MESSAGE] = FIELD_KINDS[RequestCode.SEND_MESSAGE_V2]
FIELD_KINDS[RequestCode.SEND_REPLY_MESSAGE] = FIELD_KINDS[RequestCode.SEND_MESSAGE]
FIELD_KINDS[RequestCode.SEND_REPLY_MESSAGE_V2] = FIELD_KINDS[RequestCode.SEND_MESSAGE_V2]
FIELD_KINDS[RequestCode.LITE_PULL_MESSAGE] = FIELD_KINDS[RequestCode.PULL_MESSAGE]

#: Keys UPDATE_BROKER_CONFIG may set during a fuzz run: harmless ones, and risky ones only with values no
#: validation may accept (a fuzz run must not legitimately switch the broker read-only or shrink its limits).
SAFE_CONFIG_KEYS = (
    "flushIntervalCommitLog",
    "brokerFastFailureEnable",
    "notAConfigKey",
    "",
    "=",
    "clientCallbackExecutorThreads",
)
RISKY_CONFIG_KEYS = (
    "brokerPermission",
    "maxMessageSize",
    "listenPort",
    "fileReservedTime",
    "faultInjectionEnable",
    "autoCreateTopicEnable",
    "logLevel",
    "requestLogEnable",
    "storePathRootDir",
    "brokerName",
    "namesrvAddr",
    "flushDiskType",
    "brokerRole",
    "aclEnable",
    "maxTransferCountOnMessageInMemory",
    "sendMessageThreadPoolNums",
)
INVALID_CONFIG_VALUES = (
    "",
    "abc",
    "-1",
    "99999999999999999999",
    "1e9",
    "0x10",
    "\u0000",
    "nan",
    "true false",
    "-2147483649",
    " ",
    "\\",
    "${x}",
)

#: Subscription expressions, TAG and SQL92 (the fuzz broker has enablePropertyFilter=true): legal ones, broken
#: ones, and ones built to exhaust a recursive parser or a cache.
EXPRESSIONS = (
    "*",
    "",
    "TagA",
    "TagA || TagB",
    "TagA ||",
    "||",
    "x" * 500,
    "\u0000",
    "a > 1",
    "a BETWEEN 1 AND",
    "((((",
    "a IN ('x')",
    "a IS NULL",
    "a IS NOT NULL AND b = 'x'",
    "a = 'x",
    "a > 1 AND",
    "NOT",
    "a BETWEEN 3 AND 1",
    "a IN ()",
    "a > 99999999999999999999",
    "a > 1e999",
    "a > -9223372036854775809",
    "a = TRUE",
    "a <> b",
    "(" * 500 + "a > 1" + ")" * 500,
    "NOT " * 500 + "a > 1",
    " OR ".join(["a > 1"] * 2000),
    "a IN (" + ",".join(f"'{i}'" for i in range(3000)) + ")",
    "'x' = 'x'",
    "1 = 1",
    "a > 'x'",
    "a LIKE '%'",
    "\u00e9 > 1",
    "a\u0000 > 1",
)

STATS_NAMES = ("TOPIC_PUT_NUMS", "TOPIC_PUT_SIZE", "GROUP_GET_NUMS", "SNDBCK_PUT_NUMS", "BROKER_PUT_NUMS", "x")

LANGUAGES = tuple(lc.name for lc in LanguageCode)
