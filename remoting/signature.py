"""Request signatures of RocketMQ's ACL 1.0: what a client adds to a request and what a broker recomputes.

The signed content is the values of every ext field except ``Signature``, in the order of their keys, joined
without separators and UTF-8 encoded, followed by the body. The signature is base64(HmacSHA1(content, secret)).
Clients add ``AccessKey`` (and ``SecurityToken`` when they have one) before signing, so both are covered.
The broker leaves ``Signature`` and ``_UNIQUE_KEY_QUERY`` out of the map it recomputes from (J
``PlainAccessValidator.parse``); a client never sends the latter, so both sides agree.

Keys are ordered as Java's ``TreeMap<String, …>`` orders them (UTF-16 code units), which differs from Python's
code-point order only for characters above U+FFFF; the C++ client's ``std::map`` orders bytes, which agrees
with both for the ASCII keys every client actually sends.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from remoting.command import _ext_value_to_str

__all__ = [
    "ACCESS_KEY",
    "SECURITY_TOKEN",
    "SIGNATURE",
    "SessionCredentials",
    "calculate_signature",
    "request_signature",
    "sign_request_fields",
    "signature_matches",
    "signed_content",
]

ACCESS_KEY = "AccessKey"
SECRET_KEY = "SecretKey"
SIGNATURE = "Signature"
SECURITY_TOKEN = "SecurityToken"
UNIQUE_MSG_QUERY_FLAG = "_UNIQUE_KEY_QUERY"


@dataclass(frozen=True, slots=True)
class SessionCredentials:
    """What a client signs with (J ``SessionCredentials``)."""

    access_key: str
    secret_key: str
    security_token: str | None = None

    def __repr__(self) -> str:  # never print a secret in a log line
        return f"SessionCredentials(access_key={self.access_key!r}, secret_key='***')"


def _java_order(key: str) -> bytes:
    return key.encode("utf-16-be", "surrogatepass")


def _fields_text(ext_fields: Mapping[str, str], exclude: Iterable[str]) -> bytes:
    skip = set(exclude)
    keys = [k for k in ext_fields if k not in skip]
    # code-point order is Java's for every key without characters above U+FFFF, i.e. for all real ones
    keys.sort(key=None if "".join(keys).isascii() else _java_order)
    return "".join(map(ext_fields.__getitem__, keys)).encode("utf-8", "surrogatepass")


def signed_content(
    ext_fields: Mapping[str, str], body: bytes | memoryview | None, exclude: Iterable[str] = (SIGNATURE,)
) -> bytes:
    """The bytes a signature covers: sorted ext-field values, then the body."""
    text = _fields_text(ext_fields, exclude)
    return text + bytes(body) if body else text


def calculate_signature(content: bytes, secret_key: str) -> str:
    """base64(HmacSHA1(content, secret_key)), J ``AclSigner.calSignature``."""
    digest = hmac.new(secret_key.encode("utf-8"), content, hashlib.sha1).digest()
    return base64.b64encode(digest).decode("ascii")


def request_signature(
    ext_fields: Mapping[str, str],
    body: bytes | memoryview | None,
    secret_key: str,
    exclude: Iterable[str] = (SIGNATURE,),
) -> str:
    """``calculate_signature(signed_content(...))`` without copying the body into one buffer first."""
    mac = hmac.new(secret_key.encode("utf-8"), _fields_text(ext_fields, exclude), hashlib.sha1)
    if body:
        mac.update(body)
    return base64.b64encode(mac.digest()).decode("ascii")


def signature_matches(expected: str, given: str | None) -> bool:
    """Compare in constant time (upstream uses ``String.equals``; the outcome is the same)."""
    return given is not None and hmac.compare_digest(expected.encode("ascii"), given.encode("utf-8", "replace"))


def sign_request_fields(
    ext_fields: dict[str, str], body: bytes | memoryview | None, credentials: SessionCredentials
) -> dict[str, str]:
    """Add ``AccessKey`` (and ``SecurityToken``) then ``Signature`` to ``ext_fields`` in place, as J's
    ``AclClientRPCHook.doBeforeRequest`` does; returns the same dict."""
    for key, value in list(ext_fields.items()):
        if type(value) is not str:  # sign exactly the text the encoder will write (None: left out)
            text = _ext_value_to_str(value)
            if text is None:
                del ext_fields[key]
            else:
                ext_fields[key] = text
    ext_fields[ACCESS_KEY] = credentials.access_key
    if credentials.security_token is not None:
        ext_fields[SECURITY_TOKEN] = credentials.security_token
    ext_fields[SIGNATURE] = request_signature(ext_fields, body, credentials.secret_key)
    return ext_fields
