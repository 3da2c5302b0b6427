"""The request bodies the fuzz generator sends, and their mutations: the ``body`` family's half of ``FrameMutator``.

``BodyMaker`` makes a plausible body for each request code that takes one (message, batch, heartbeat, lock batch,
check client config, register broker, subscription group, broker config properties, reset offset) and mutates it:
JSON values replaced by wrong types, keys dropped or added, bytes flipped, cut or spliced. It is a mixin of
``bench.fuzz_frames.FrameMutator``, whose ``rng`` and header helpers (``_value``, ``_properties``) it draws on, so a
seed gives the same frames as when both halves were one class.
"""

from __future__ import annotations

import copy
import json
import random
import struct
import zlib
from collections.abc import Sequence

from bench.fuzz_vocab import FUZZ_TOPICS, INVALID_CONFIG_VALUES, RISKY_CONFIG_KEYS, SAFE_CONFIG_KEYS
from remoting.codes import RequestCode

_I32 = struct.Struct(">i")


class BodyMaker:
    """Bodies by request code (``_body_for``) and body mutations (``_mutate_body``), drawn from ``self.rng``."""

    rng: random.Random
    large_bodies: bool
    illegal_names: Sequence[str]

    def _mutate_body(self, body: bytes) -> bytes:
        rng = self.rng
        if body[:1] in (b"{", b"[") and rng.random() < 0.7:
            try:
                obj = json.loads(body)
            except ValueError:
                obj = None
            if obj is not None:
                for _ in range(rng.randrange(1, 4)):
                    obj = _mutate_json(rng, obj)
                return json.dumps(obj).encode()
        return mutate_bytes(rng, body)

    def _body_for(self, code: int) -> bytes | None:
        maker = BODY_CODES.get(code)
        if maker is None:
            return self.rng.choice((None, None, b"", b"{}", b"x" * 10, self.rng.randbytes(16)))
        return maker(self)

    def _message_body(self) -> bytes:
        rng = self.rng
        size = rng.choice((0, 1, 16, 128, 1024, 4096))
        if self.large_bodies and rng.random() < 0.02:
            size = rng.choice((256 * 1024, 4 * 1024 * 1024, 4 * 1024 * 1024 + 1))
        return rng.randbytes(size)

    def _batch_body(self) -> bytes:
        rng = self.rng
        out = bytearray()
        for _ in range(rng.randrange(1, 6)):
            body = rng.randbytes(rng.choice((0, 1, 20, 300)))
            props = self._properties().encode()
            total = 4 + 4 + 4 + 4 + 4 + len(body) + 2 + len(props)
            out += struct.pack(">iiiii", total, 0, zlib.crc32(body) & 0x7FFFFFFF, 0, len(body))
            out += body + struct.pack(">h", len(props)) + props
        if rng.random() < 0.1:
            out = bytearray(zlib.compress(bytes(out)))  # as the C++ client sends a large batch (sysFlag 1)
        return bytes(out)

    def _heartbeat_body(self) -> bytes:
        rng = self.rng
        group = self._value("group")
        sub = {
            "classFilterMode": False,
            "topic": self._value("topic"),
            "subString": self._value("expr"),
            "tagsSet": ["TagA"],
            "codeSet": [12345],
            "subVersion": 1,
            "expressionType": self._value("exprtype"),
        }
        data = {
            "clientID": self._value("client"),
            "producerDataSet": [{"groupName": self._value("group")}],
            "consumerDataSet": [
                {
                    "groupName": group,
                    "consumeType": rng.choice(("CONSUME_PASSIVELY", "CONSUME_ACTIVELY", "X")),
                    "messageModel": rng.choice(("CLUSTERING", "BROADCASTING", "X")),
                    "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                    "subscriptionDataSet": [sub],
                    "unitMode": False,
                }
            ],
        }
        return json.dumps(data).encode()

    def _lock_body(self) -> bytes:
        mqs = [
            {"topic": self._value("topic"), "brokerName": "broker-a", "queueId": self.rng.randrange(-1, 9)}
            for _ in range(self.rng.randrange(0, 4))
        ]
        return json.dumps(
            {
                "consumerGroup": self._value("group"),
                "clientId": self._value("client"),
                "onlyThisBroker": False,
                "mqSet": mqs,
            }
        ).encode()

    def _check_config_body(self) -> bytes:
        return json.dumps(
            {
                "clientId": self._value("client"),
                "group": self._value("group"),
                "subscriptionData": {
                    "topic": self._value("topic"),
                    "subString": self._value("expr"),
                    "expressionType": self._value("exprtype"),
                    "subVersion": 1,
                    "tagsSet": [],
                    "codeSet": [],
                    "classFilterMode": False,
                },
            }
        ).encode()

    def _register_body(self) -> bytes:
        topics = {}
        for _ in range(self.rng.randrange(0, 3)):
            name = self.rng.choice(FUZZ_TOPICS + self.illegal_names[:6])
            topics[name] = {
                "topicName": name,
                "readQueueNums": int(self._value("qnum")),
                "writeQueueNums": int(self._value("qnum")),
                "perm": int(self._value("perm")),
                "topicFilterType": "SINGLE_TAG",
                "topicSysFlag": 0,
                "order": False,
            }
        return json.dumps(
            {
                "topicConfigSerializeWrapper": {
                    "topicConfigTable": topics,
                    "dataVersion": {"timestamp": 1, "counter": self.rng.randrange(0, 9)},
                },
                "filterServerList": [],
            }
        ).encode()

    def _group_body(self) -> bytes:
        return json.dumps(
            {
                "groupName": self._value("group"),
                "consumeEnable": True,
                "consumeFromMinEnable": True,
                "consumeBroadcastEnable": True,
                "retryQueueNums": int(self._value("qnum")),
                "retryMaxTimes": int(self._value("int")),
                "brokerId": 0,
                "whichBrokerWhenConsumeSlowly": 1,
                "notifyConsumerIdsChangedEnable": True,
            }
        ).encode()

    def _config_body(self) -> bytes:
        rng = self.rng
        lines = []
        for _ in range(rng.randrange(1, 4)):
            if rng.random() < 0.5:
                value = rng.choice(("1", "true", "false", "100") + INVALID_CONFIG_VALUES)
                lines.append(f"{rng.choice(SAFE_CONFIG_KEYS)}={value}")
            else:
                lines.append(f"{rng.choice(RISKY_CONFIG_KEYS)}={rng.choice(INVALID_CONFIG_VALUES)}")
        return "\n".join(lines).encode()

    def _reset_body(self) -> bytes:
        return json.dumps({"offsetTable": {"x": 1}}).encode()


def mutate_bytes(rng: random.Random, data: bytes) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.randrange(1, 5)):
        r = rng.random()
        if not buf or r < 0.15:
            buf[rng.randrange(0, len(buf) + 1) : 0] = rng.randbytes(rng.randrange(1, 16))
        elif r < 0.55:
            i = rng.randrange(len(buf))
            buf[i] ^= 1 << rng.randrange(8)
        elif r < 0.7:
            i = rng.randrange(len(buf))
            buf[i] = rng.choice((0, 0xFF, 0x7F, 0x80, 0x22, 0x7B, 0x01, 0x02))
        elif r < 0.85:
            cut = rng.randrange(len(buf))
            del buf[cut : cut + rng.randrange(1, 32)]
        else:
            i = rng.randrange(max(1, len(buf) - 3))
            buf[i : i + 4] = _I32.pack(rng.choice((-1, 0, 2**31 - 1, len(buf), 65535)))
    return bytes(buf)


_WRONG_TYPES: tuple = (None, 0, -1, 2**63, 1.5, True, "", "x", [], {}, [1, "a"], {"k": [None]}, "\u0000")


def _wrong(rng: random.Random):  # type: ignore[no-untyped-def]
    """A fresh wrong-typed value (a copy: a shared list mutated later would make the JSON circular)."""
    return copy.deepcopy(rng.choice(_WRONG_TYPES))


def _mutate_json(rng: random.Random, obj):  # type: ignore[no-untyped-def]
    """Replace one value anywhere in ``obj`` with a value of the wrong type, or drop or add a key."""
    if isinstance(obj, dict) and obj and rng.random() < 0.7:
        key = rng.choice(sorted(obj, key=str))
        r = rng.random()
        if r < 0.15:
            del obj[key]
        elif r < 0.25:
            obj["unexpected"] = _wrong(rng)
        elif r < 0.6 or not isinstance(obj[key], (dict, list)):
            obj[key] = _wrong(rng)
        else:
            obj[key] = _mutate_json(rng, obj[key])
        return obj
    if isinstance(obj, list) and obj and rng.random() < 0.7:
        i = rng.randrange(len(obj))
        obj[i] = _mutate_json(rng, obj[i]) if rng.random() < 0.6 else _wrong(rng)
        return obj
    return rng.choice((_wrong(rng), [obj], {"x": obj}))


BODY_CODES = {
    int(RequestCode.SEND_MESSAGE): BodyMaker._message_body,
    int(RequestCode.SEND_MESSAGE_V2): BodyMaker._message_body,
    int(RequestCode.SEND_REPLY_MESSAGE): BodyMaker._message_body,
    int(RequestCode.SEND_REPLY_MESSAGE_V2): BodyMaker._message_body,
    int(RequestCode.SEND_BATCH_MESSAGE): BodyMaker._batch_body,
    int(RequestCode.HEART_BEAT): BodyMaker._heartbeat_body,
    int(RequestCode.LOCK_BATCH_MQ): BodyMaker._lock_body,
    int(RequestCode.UNLOCK_BATCH_MQ): BodyMaker._lock_body,
    int(RequestCode.CHECK_CLIENT_CONFIG): BodyMaker._check_config_body,
    int(RequestCode.REGISTER_BROKER): BodyMaker._register_body,
    int(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP): BodyMaker._group_body,
    int(RequestCode.UPDATE_BROKER_CONFIG): BodyMaker._config_body,
    int(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET): BodyMaker._reset_body,
    int(RequestCode.CONSUME_MESSAGE_DIRECTLY): BodyMaker._message_body,
}
