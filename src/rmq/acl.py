"""RocketMQ's ACL request signature (Java: acl module, AclClientRPCHook and AclUtils).

A signed request carries, in its ext fields, ``AccessKey`` (the account),
``SecurityToken`` when the credentials have one, and ``Signature``: Base64 of
HMAC-SHA1, keyed with the account's secret key (UTF-8), over

- the VALUES of every ext field but ``Signature`` (AccessKey and SecurityToken
  included), in the order of their names as Java's TreeMap sorts Strings (UTF-16
  code units), concatenated and encoded as UTF-8;
- followed by the body's bytes.

The server rebuilds the same bytes from the request as received
(PlainAccessResource.parse), leaving out ``Signature`` and ``_UNIQUE_KEY_QUERY``
(MixAll.UNIQUE_MSG_QUERY_FLAG), and compares. The C++ client (rocketmq-client-cpp
ClientRPCHook) signs the same way over its header's fields plus ``AccessKey`` and
``OnsChannel``, the two it sends, so the server's rebuild matches it too.

Nothing here protects against replay: the signature covers no time and no nonce
(see docs/design.md, "Signed requests").
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from rmq.javaorder import java_string_order

if TYPE_CHECKING:
    from typing_extensions import Buffer

    from rmq.codec import RemotingCommand

__all__ = ["ACCESS_KEY", "SECRET_KEY", "SIGNATURE", "SECURITY_TOKEN", "ONS_CHANNEL",
           "SessionCredentials", "signing_content", "calc_signature", "request_signature",
           "signature_fields",
           "sign_command", "credentials_from"]

ACCESS_KEY = "AccessKey"
SECRET_KEY = "SecretKey"
SIGNATURE = "Signature"
SECURITY_TOKEN = "SecurityToken"
#: Sent (and signed) by the C++ client: its session credentials' channel.
ONS_CHANNEL = "OnsChannel"
#: Left out of the content by the server only (MixAll.UNIQUE_MSG_QUERY_FLAG).
UNIQUE_MSG_QUERY_FLAG = "_UNIQUE_KEY_QUERY"


def _text(value: object) -> str:
    return value if isinstance(value, str) else str(value)


_CLIENT_EXCLUDES = frozenset((SIGNATURE,))


def _fields_text(fields: Mapping[str, object], exclude: frozenset[str]) -> bytes:
    names = [k for k in fields if k not in exclude]
    # ASCII names (the usual) sort alike in code points and in UTF-16 code units
    names.sort(key=None if "".join(names).isascii() else java_string_order)
    return "".join([_text(fields[k]) for k in names]).encode("utf-8", "replace")


def signing_content(ext_fields: Mapping[str, object] | None, body: Buffer | None = b"",
                    *, exclude: frozenset[str] = _CLIENT_EXCLUDES) -> bytes:
    """The bytes a signature covers (AclUtils.combineRequestContent): the values of
    ``ext_fields`` but those in ``exclude``, in Java's order of their names, as UTF-8
    (a lone surrogate becomes ``?``, as String.getBytes does), then the body."""
    return _fields_text(ext_fields or {}, exclude) + bytes(body or b"")


def calc_signature(content: Buffer, secret_key: str) -> str:
    """AclSigner.calSignature: Base64 of HMAC-SHA1(content) keyed with the UTF-8 secret."""
    mac = hmac.new(secret_key.encode("utf-8", "replace"), content, hashlib.sha1)
    return base64.b64encode(mac.digest()).decode("ascii")


def request_signature(ext_fields: Mapping[str, object] | None, body: Buffer | None,
                      secret_key: str, *, exclude: frozenset[str] = _CLIENT_EXCLUDES) -> str:
    """``calc_signature(signing_content(...))`` without copying the body (a
    registration's may be megabytes)."""
    mac = hmac.new(secret_key.encode("utf-8", "replace"),
                   _fields_text(ext_fields or {}, exclude), hashlib.sha1)
    if body:
        mac.update(body)
    return base64.b64encode(mac.digest()).decode("ascii")


@dataclasses.dataclass(frozen=True)
class SessionCredentials:
    """An account's keys (Java: SessionCredentials). Its repr never shows the secret."""

    access_key: str
    secret_key: str = dataclasses.field(repr=False)
    security_token: str | None = dataclasses.field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not self.access_key or not self.secret_key:
            raise ValueError("SessionCredentials need an access key and a secret key")


def signature_fields(ext_fields: Mapping[str, object] | None, body: Buffer | None,
                     credentials: SessionCredentials) -> dict[str, str]:
    """The ext fields AclClientRPCHook.doBeforeRequest adds to a request with
    ``ext_fields`` and ``body``: AccessKey, SecurityToken (when set), Signature."""
    added = {ACCESS_KEY: credentials.access_key}
    if credentials.security_token is not None:
        added[SECURITY_TOKEN] = credentials.security_token
    fields = {**(ext_fields or {}), **added}
    added[SIGNATURE] = request_signature(fields, body, credentials.secret_key)
    return added


def sign_command(cmd: RemotingCommand, credentials: SessionCredentials) -> None:
    """Sign the request ``cmd`` in place (its ext fields get the signature's)."""
    fields = {**(cmd.ext_fields or {}), ACCESS_KEY: credentials.access_key}
    if credentials.security_token is not None:
        fields[SECURITY_TOKEN] = credentials.security_token
    fields[SIGNATURE] = request_signature(fields, cmd.body, credentials.secret_key)
    cmd.ext_fields = fields


#: The environment variables of :func:`credentials_from`.
ENV_ACCESS_KEY = "RMQ_ACCESS_KEY"
ENV_SECRET_KEY = "RMQ_SECRET_KEY"


def credentials_from(access_key: str | None = None, secret_key: str | None = None,
                     environ: Mapping[str, str] | None = None) -> SessionCredentials | None:
    """Credentials from the arguments, else from $RMQ_ACCESS_KEY / $RMQ_SECRET_KEY
    (so that a secret need not be on a command line, where ``ps`` shows it); None
    when neither gives an access key. ValueError when only one of the two is given."""
    env = os.environ if environ is None else environ
    ak = access_key or env.get(ENV_ACCESS_KEY) or None
    sk = secret_key or env.get(ENV_SECRET_KEY) or None
    if ak is None and sk is None:
        return None
    if ak is None or sk is None:
        raise ValueError(f"an access key needs a secret key and the reverse (options or "
                         f"${ENV_ACCESS_KEY} and ${ENV_SECRET_KEY})")
    return SessionCredentials(ak, sk)
