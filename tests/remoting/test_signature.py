"""ACL 1.0 request signatures (remoting.signature): upstream's content and HmacSHA1, and our client signing."""

from __future__ import annotations

import asyncio

from remoting.client import RemotingClient
from remoting.command import RemotingCommand
from remoting.server import RemotingServer
from remoting.signature import (
    SessionCredentials,
    calculate_signature,
    sign_request_fields,
    signed_content,
)

# A SEND_MESSAGE_V2 of account RocketMQ/12345678 (upstream's sample plain_acl.yml). Apache RocketMQ 4.9.7 with
# aclEnable=true stored this exact request with this signature, and refused it with the last two base64
# characters changed ("Check signature failed for accessKey=RocketMQ").
VECTOR_EXT = {
    "a": "PG",
    "b": "topicB",
    "c": "TBW102",
    "d": "4",
    "e": "0",
    "f": "0",
    "g": "1700000000000",
    "h": "0",
    "i": "KEYS\u0001k1\u0002",
    "j": "0",
    "k": "false",
    "m": "false",
    "AccessKey": "RocketMQ",
}
VECTOR_BODY = "héllo acl".encode()
VECTOR_CONTENT = b"RocketMQPGtopicBTBW10240017000000000000KEYS\x01k1\x020falsefalseh\xc3\xa9llo acl"
VECTOR_SIGNATURE = "oWXiqvWQm7UL3IGiXLTQ1LZWN6o="


def test_content_is_the_sorted_values_then_the_body():
    assert signed_content(VECTOR_EXT, VECTOR_BODY) == VECTOR_CONTENT


def test_signature_matches_the_one_apache_rocketmq_accepted():
    assert calculate_signature(VECTOR_CONTENT, "12345678") == VECTOR_SIGNATURE


def test_signing_adds_access_key_then_signature_over_it():
    ext = {k: v for k, v in VECTOR_EXT.items() if k != "AccessKey"}
    sign_request_fields(ext, VECTOR_BODY, SessionCredentials("RocketMQ", "12345678"))
    assert ext["AccessKey"] == "RocketMQ"
    assert ext["Signature"] == VECTOR_SIGNATURE


def test_signing_again_ignores_the_previous_signature():
    ext = dict(VECTOR_EXT)
    sign_request_fields(ext, VECTOR_BODY, SessionCredentials("RocketMQ", "12345678"))
    sign_request_fields(ext, VECTOR_BODY, SessionCredentials("RocketMQ", "12345678"))
    assert ext["Signature"] == VECTOR_SIGNATURE


def test_security_token_is_signed_too():
    ext: dict[str, str] = {"topic": "T"}
    sign_request_fields(ext, None, SessionCredentials("ak_1234567", "sk_1234567", "tok"))
    assert ext["SecurityToken"] == "tok"
    assert ext["Signature"] == calculate_signature(b"ak_1234567tokT", "sk_1234567")


def test_keys_sort_as_java_strings_upper_case_first():
    # "AccessKey" < "Signature" < "a" < "topic": Java compares UTF-16 units, so capitals sort first
    assert signed_content({"topic": "3", "a": "2", "AccessKey": "1", "Signature": "x"}, b"!") == b"123!"


def test_no_body_and_empty_body_sign_the_same():
    assert signed_content({"k": "v"}, None) == signed_content({"k": "v"}, b"") == b"v"


def test_credentials_never_print_the_secret():
    assert "sk_secret" not in repr(SessionCredentials("ak", "sk_secret"))


async def test_remoting_client_with_credentials_signs_every_request():
    seen: list[RemotingCommand] = []

    class Echo:
        async def process_request(self, channel, request):
            seen.append(request)
            return request.response(0)

    from remoting.executor import RequestExecutor

    server = RemotingServer("127.0.0.1", 0)
    server.register_default_processor(Echo(), RequestExecutor("t", 1, 10))
    await server.start()
    client = RemotingClient(credentials=SessionCredentials("ak_1234567", "sk_1234567"))
    try:
        await client.invoke(server.address, RemotingCommand.request(28, {"x": "1"}, b"body"), 3)
        await client.invoke_oneway(server.address, RemotingCommand.request(28, {"x": "2"}, None, oneway=True))
        for _ in range(50):
            if len(seen) == 2:
                break
            await asyncio.sleep(0.02)
    finally:
        await client.close()
        await server.stop(1)
    assert [r.ext_fields["AccessKey"] for r in seen] == ["ak_1234567"] * 2
    assert seen[0].ext_fields["Signature"] == calculate_signature(b"ak_12345671body", "sk_1234567")
    assert seen[1].ext_fields["Signature"] == calculate_signature(b"ak_12345672", "sk_1234567")


def test_non_string_values_are_signed_as_the_encoder_writes_them():
    ext = {"queueId": 3, "batch": True, "gone": None, "topic": "T"}
    sign_request_fields(ext, None, SessionCredentials("ak_1234567", "sk_1234567"))
    assert ext["queueId"] == "3" and ext["batch"] == "true" and "gone" not in ext
    assert ext["Signature"] == calculate_signature(b"ak_1234567true3T", "sk_1234567")
