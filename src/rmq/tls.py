"""TLS settings under Java's names: the one place rmq builds ``ssl.SSLContext`` objects.

Java reference (apache/rocketmq remoting): ``TlsSystemConfig`` (the keys, read as
System properties, and their defaults), ``TlsHelper.buildSslContext`` (what the keys
do, and ``tls.config.file``: a properties file whose keys override the System
properties, all but ``tls.server.mode`` and ``tls.enable``; skipped when it does not
exist) and ``NettyRemotingServer``'s handshake handler (the modes, told apart by the
first byte of a connection: 0x16 opens a TLS handshake record).

The NameServer (:func:`server_settings`) reads the ``tls.server.*`` keys from its
NamesrvConfig (``rmq namesrv -c FILE``), then from ``tls.config.file``. Clients
(:func:`client_context`: RemotingClient's ``ssl``, BrokerRegistrar, ``rmq admin
--tls``) take the ``tls.client.*`` keys.

Where rmq differs from Java, on purpose (README.md, "TLS", says it for operators):

- No self-signed certificate: Java's ``tls.test.mode.enable`` (default true) makes the
  server mint one and ignore ``tls.server.certPath``, and the client trust anyone.
  rmq serves the configured certificate; without one, ``permissive`` (the default, as
  Java's) offers plain remoting only and ``enforcing`` refuses to start.
- A client certificate the server asks for (``tls.server.need.client.auth`` optional
  or require) is always verified against ``tls.server.trustCertPath``; Java verifies
  it only when ``tls.server.authClient`` is true (it is accepted and has no effect).
- Clients verify the server (its chain and its name or IP address) unless told not
  to (``tls.client.authServer=false`` or ``tls.test.mode.enable=true`` written out):
  Java's clients verify nothing by default.
- TLS 1.2 at least.
- A value of tls.server.mode or tls.server.need.client.auth that is none of the
  known ones (case aside) is a ConfigError: Java's TlsMode.parse compares exactly and
  takes anything else (``ENFORCING`` too) for permissive, and an unknown client auth
  for none.
"""

from __future__ import annotations

import logging
import os
import ssl
from collections.abc import Mapping
from typing import Any

from rmq.namesrv.config import ConfigError, load_properties_file

__all__ = ["MODES", "CLIENT_AUTH", "DEFAULT_CONFIG_FILE", "ServerSettings", "read_config_file",
           "server_settings", "client_context"]

log = logging.getLogger(__name__)

#: tls.server.mode values (Java's TlsMode).
MODES = ("disabled", "permissive", "enforcing")
#: tls.server.need.client.auth values (Netty's ClientAuth) -> the server's verify mode.
CLIENT_AUTH = {"none": ssl.CERT_NONE, "optional": ssl.CERT_OPTIONAL,
               "require": ssl.CERT_REQUIRED}
#: TlsSystemConfig.tlsConfigFile's default.
DEFAULT_CONFIG_FILE = "/etc/rocketmq/tls.properties"

#: The server's keys a tls.config.file may set (TlsHelper.extractTlsConfigFromFile).
_SERVER_FILE_KEYS = ("tls.server.need.client.auth", "tls.server.keyPath",
                     "tls.server.keyPassword", "tls.server.certPath",
                     "tls.server.trustCertPath")
#: Keys Java reads only as System properties, never from tls.config.file.
_NOT_FROM_FILE = ("tls.server.mode", "tls.enable")


def read_config_file(path: str | None) -> dict[str, str]:
    """The keys of a ``tls.config.file`` ({} when ``path`` is empty or names no
    file, as Java skips it); ConfigError when it exists and cannot be read."""
    if not path or not os.path.exists(path):
        if path:
            log.debug("tls.config.file %s does not exist: skipped", path)
        return {}
    props = load_properties_file(path)
    for key in _NOT_FROM_FILE:
        if key in props:
            log.warning("tls.config.file %s: %s is ignored there (as by Java): set it "
                        "in the NameServer's config file", path, key)
    return props


class ServerSettings:
    """The NameServer's TLS: ``mode`` and, unless TLS is off, ``context``."""

    __slots__ = ("mode", "context", "client_auth")

    def __init__(self, mode: str, context: ssl.SSLContext | None, client_auth: str) -> None:
        self.mode = mode
        self.context = context
        self.client_auth = client_auth


def _choice(key: str, raw: Any, choices: Mapping[str, Any] | tuple[str, ...]) -> str:
    value = str(raw or "").strip().lower()
    if value not in choices:
        raise ConfigError(f"config {key}={raw!r}: expected one of {', '.join(choices)}",
                          key=key, value=raw)
    return value


def _load_chain(ctx: ssl.SSLContext, cert_key: str, cert: str, key_key: str, key: str,
                password: str | None) -> None:
    try:
        ctx.load_cert_chain(cert, key, password or None)
    except (OSError, ssl.SSLError) as e:
        # the paths, never the password
        raise ConfigError(f"config {cert_key}={cert!r}, {key_key}={key!r}: cannot load the "
                          f"certificate and its key: {e}", key=cert_key, value=cert) from None


def _load_trust(ctx: ssl.SSLContext, key: str, path: str) -> None:
    try:
        ctx.load_verify_locations(cafile=path)
    except (OSError, ssl.SSLError) as e:
        raise ConfigError(f"config {key}={path!r}: cannot load the trusted certificates: {e}",
                          key=key, value=path) from None


def server_settings(values: Mapping[str, Any]) -> ServerSettings:
    """The NameServer's TLS from its config's ``tls.*`` values (Java's key -> value;
    None or "" when unset) overridden by ``tls.config.file``'s. ConfigError naming the
    key when a value is wrong or a file does not load."""
    mode = _choice("tls.server.mode", values.get("tls.server.mode") or "permissive", MODES)
    conf = dict(values)
    file_path = values.get("tls.config.file")
    from_file = read_config_file(file_path)
    conf.update({k: from_file[k] for k in _SERVER_FILE_KEYS if k in from_file})
    auth = _choice("tls.server.need.client.auth",
                   conf.get("tls.server.need.client.auth") or "none", CLIENT_AUTH)
    if mode == "disabled":
        return ServerSettings(mode, None, auth)
    cert, key = conf.get("tls.server.certPath"), conf.get("tls.server.keyPath")
    if not cert or not key:
        if mode == "enforcing":
            raise ConfigError("tls.server.mode=enforcing needs tls.server.certPath and "
                              "tls.server.keyPath (rmq makes no self-signed certificate)",
                              key="tls.server.mode", value=mode)
        return ServerSettings(mode, None, auth)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    _load_chain(ctx, "tls.server.certPath", cert, "tls.server.keyPath", key,
                conf.get("tls.server.keyPassword"))
    ctx.verify_mode = CLIENT_AUTH[auth]
    if auth != "none":
        trust = conf.get("tls.server.trustCertPath")
        if not trust:
            raise ConfigError(f"tls.server.need.client.auth={auth} needs "
                              "tls.server.trustCertPath (the CA certificates client "
                              "certificates are verified against)",
                              key="tls.server.need.client.auth", value=auth)
        _load_trust(ctx, "tls.server.trustCertPath", trust)
    return ServerSettings(mode, ctx, auth)


def _flag(props: Mapping[str, str], key: str) -> bool | None:
    """A boolean the properties write out (Java's Boolean.parseBoolean), else None."""
    raw = props.get(key)
    return None if raw is None else raw.strip().lower() == "true"


def client_context(props: Mapping[str, str] | None = None, *,
                   config_file: str | None = None) -> ssl.SSLContext:
    """A client's SSLContext from Java's ``tls.client.*`` keys (``props``, overridden by
    ``config_file``'s, as Java's tls.config.file): tls.client.certPath, keyPath and
    keyPassword (a client certificate, for mutual TLS), tls.client.trustCertPath (the
    CA certificates the server's is verified against; the system's when unset).

    The server is verified, its name or IP address included, unless the keys say
    otherwise: ``tls.client.authServer=false`` or ``tls.test.mode.enable=true``."""
    conf = dict(props or {})
    conf.update(read_config_file(config_file))
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if _flag(conf, "tls.client.authServer") is False or _flag(conf, "tls.test.mode.enable"):
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    else:
        trust = conf.get("tls.client.trustCertPath")
        if trust:
            _load_trust(ctx, "tls.client.trustCertPath", trust)
        else:
            ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
    cert, key = conf.get("tls.client.certPath"), conf.get("tls.client.keyPath")
    if cert or key:
        _load_chain(ctx, "tls.client.certPath", cert or "", "tls.client.keyPath",
                    key or cert or "", conf.get("tls.client.keyPassword"))
    return ctx
