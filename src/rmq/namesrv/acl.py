"""Signed requests on the NameServer (beyond Java: Java's NameServer checks nothing).

Accounts come from a plain_acl.yml as Java's broker reads it (PlainPermissionManager):
``accounts`` (accessKey, secretKey, whiteRemoteAddress, admin; the topic and group
permissions are the broker's and ignored here) and ``globalWhiteRemoteAddresses``.
The file is read at start (a bad one stops the start) and again when it changes,
looked at no more than once a second, on a request (Java's AclFileWatchService polls
it); a bad new version is logged and the accounts before it stay in force.

Every request belongs to one class, each with its own setting (``open``: nothing is
checked; ``signed``: a valid signature of any account; ``admin``: a valid signature
of an account with ``admin: true``):

- admin (aclAdminRequests, default admin): 318 UPDATE_NAMESRV_CONFIG, 100
  PUT_KV_CONFIG, 102 DELETE_KV_CONFIG, 205 WIPE_WRITE_PERM_OF_BROKER, 327
  ADD_WRITE_PERM_OF_BROKER, 216 DELETE_TOPIC_IN_NAMESRV, 217
  REGISTER_TOPIC_IN_NAMESRV, 104 UNREGISTER_BROKER;
- broker (aclBrokerRequests, default open): 103 REGISTER_BROKER, 322
  QUERY_DATA_VERSION, 904 BROKER_HEARTBEAT;
- route (aclRouteRequests, default open): 105 GET_ROUTEINFO_BY_TOPIC;
- other (aclOtherRequests, default open): every other code (the reads).

The checks are Java's (PlainPermissionManager.validate), in its order and with its
messages: a peer in globalWhiteRemoteAddresses passes; no AccessKey: "No accessKey is
configured"; an unknown one: "No acl config for KEY"; a peer in the account's
whiteRemoteAddress passes without a signature; else the signature must match: "Check
signature failed for accessKey=KEY"; then the admin flag: "Need admin permission for
request code=CODE, but accessKey=KEY is not". Unlike Java the admin flag is required
even from a white-listed address. A refusal is answered 16 NO_PERMISSION with that
message (Java's broker answers its AclException as SYSTEM_ERROR), changes nothing,
and is logged once with the peer, the code and the access key.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import os
import re
import threading
import time

from rmq.acl import ACCESS_KEY, SIGNATURE, UNIQUE_MSG_QUERY_FLAG, request_signature
from rmq.namesrv.config import ConfigError
from rmq.namesrv.handlers import NEEDS_TABLE
from rmq.protocol import RequestCode as RC, ResponseCode

log = logging.getLogger(__name__)

#: A plain_acl.yml larger than this is refused (it holds accounts, not data).
MAX_ACL_FILE_BYTES = 1024 * 1024
#: The file's state is looked at no more often than this (seconds).
RELOAD_CHECK_SECONDS = 1.0
#: Access keys shown in answers and logs are cut to this many characters.
_SHOWN_KEY = 64

OPEN, SIGNED, ADMIN = "open", "signed", "admin"
MODES = (OPEN, SIGNED, ADMIN)

ADMIN_CODES = frozenset((RC.UPDATE_NAMESRV_CONFIG, RC.PUT_KV_CONFIG, RC.DELETE_KV_CONFIG,
                         RC.WIPE_WRITE_PERM_OF_BROKER, RC.ADD_WRITE_PERM_OF_BROKER,
                         RC.DELETE_TOPIC_IN_NAMESRV, RC.REGISTER_TOPIC_IN_NAMESRV,
                         RC.UNREGISTER_BROKER))
BROKER_CODES = frozenset((RC.REGISTER_BROKER, RC.QUERY_DATA_VERSION, RC.BROKER_HEARTBEAT))
ROUTE_CODES = frozenset((RC.GET_ROUTEINFO_BY_TOPIC,))

#: Config key of each class, in the order the classes are documented.
CLASS_KEYS = ("aclAdminRequests", "aclBrokerRequests", "aclRouteRequests", "aclOtherRequests")

_SERVER_EXCLUDES = frozenset((SIGNATURE, UNIQUE_MSG_QUERY_FLAG))


# ---------------------------------------------------------------- addresses

_NUM = r"(\d{1,3})"
_SEGMENT = re.compile(rf"^(?:\*|{_NUM}|{_NUM}-{_NUM})$")


def _segment_test(seg, where):
    m = _SEGMENT.match(seg)
    if m is None:
        raise ConfigError(f"{where}: {seg!r} is not an address segment (n, n-m or *)")
    if seg == "*":
        return lambda n: True
    one, lo, hi = m.groups()
    lo, hi = (int(one), int(one)) if one is not None else (int(lo), int(hi))
    if not 0 <= lo <= hi <= 255:
        raise ConfigError(f"{where}: {seg!r} is not within 0-255")
    return lambda n: lo <= n <= hi


def address_matcher(pattern, where):
    """A test of an IP address (str) for one whiteRemoteAddress pattern, Java's
    RemoteAddressStrategyFactory forms: ``*`` (any), ``192.168.0.1`` (one, IPv6
    too), ``192.168.0.{1,2}`` (several), ``192.168.*`` / ``192.168.1.10-20`` (ranges
    per segment; missing trailing segments are ``*``). None for an empty pattern
    (matches nothing, as Java's NULL strategy). ConfigError naming ``where``."""
    p = "" if pattern is None else str(pattern).strip()
    if not p:
        return None
    if p in ("*", "*.*.*.*", "*:*:*:*:*:*:*:*"):
        return lambda addr: True
    if "{" in p:
        head, brace, rest = p.partition("{")
        if not rest.endswith("}") or not head.endswith("."):
            raise ConfigError(f"{where}: {p!r}: a {{a,b}} list ends the address")
        choices = [head + c.strip() for c in rest[:-1].split(",") if c.strip()]
        tests = [address_matcher(c, where) for c in choices]
        return lambda addr: any(t(addr) for t in tests)
    if "*" in p or "-" in p:
        segs = p.split(".")
        if len(segs) > 4 or (len(segs) < 4 and segs[-1] != "*"):
            raise ConfigError(f"{where}: {p!r} is not an IPv4 range")
        tests = [_segment_test(s, where) for s in segs] + [lambda n: True] * (4 - len(segs))

        def in_range(addr):
            parts = addr.split(".")
            return (len(parts) == 4 and all(x.isdigit() for x in parts)
                    and all(t(int(x)) for t, x in zip(tests, parts)))
        return in_range
    try:
        one = ipaddress.ip_address(p)
    except ValueError:
        raise ConfigError(f"{where}: {p!r} is not an IP address") from None

    def same(addr):
        try:
            return ipaddress.ip_address(addr) == one
        except ValueError:
            return False
    return same


# ---------------------------------------------------------------- the file

class Account:
    __slots__ = ("access_key", "secret_key", "admin", "white")

    def __init__(self, access_key, secret_key, admin, white):
        self.access_key = access_key
        self.secret_key = secret_key
        self.admin = admin
        self.white = white

    def __repr__(self):
        return f"<Account {self.access_key} admin={self.admin}>"


class Accounts:
    """One version of the file: accounts by access key, the global white list."""

    def __init__(self, accounts, global_white):
        self.accounts = accounts
        self.global_white = global_white


def _key_text(value, where):
    # SnakeYAML reads `secretKey: 12345678` as a number; Java takes its digits.
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise ConfigError(f"{where}: expected a string, got {type(value).__name__}")
    return str(value)


def parse_accounts(data, path):
    """Accounts from the YAML document of a plain_acl.yml (ConfigError naming the
    entry and key when it is not one)."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping with accounts, got "
                          f"{type(data).__name__}", path=path)
    white = data.get("globalWhiteRemoteAddresses") or []
    if not isinstance(white, list):
        raise ConfigError(f"{path}: globalWhiteRemoteAddresses is not a list", path=path,
                          key="globalWhiteRemoteAddresses")
    global_white = []
    for i, p in enumerate(white):
        where = f"{path}: globalWhiteRemoteAddresses[{i}]"
        m = address_matcher(_key_text(p, where), where)
        if m is not None:
            global_white.append(m)
    entries = data.get("accounts") or []
    if not isinstance(entries, list):
        raise ConfigError(f"{path}: accounts is not a list", path=path, key="accounts")
    accounts = {}
    for i, entry in enumerate(entries):
        where = f"{path}: accounts[{i}]"
        if not isinstance(entry, dict):
            raise ConfigError(f"{where}: expected a mapping", path=path, key="accounts")
        ak = entry.get("accessKey")
        sk = entry.get("secretKey")
        if ak is None or sk is None:
            raise ConfigError(f"{where}: accessKey and secretKey are required", path=path,
                              key="accessKey" if ak is None else "secretKey")
        ak = _key_text(ak, f"{where}.accessKey")
        sk = _key_text(sk, f"{where}.secretKey")
        # Java (PlainPermissionManager.buildPlainAccessResource) refuses 6 or fewer.
        if len(ak) <= 6 or len(sk) <= 6:
            raise ConfigError(f"{where}: accessKey {_shown(ak)!r}: the access key and "
                              "the secret key must be longer than 6 characters", path=path,
                              key="accessKey" if len(ak) <= 6 else "secretKey")
        if ak in accounts:
            raise ConfigError(f"{where}: accessKey {_shown(ak)!r} appears twice",
                              path=path, key="accessKey")
        admin = entry.get("admin", False)
        if isinstance(admin, str) and admin.lower() in ("true", "false"):
            admin = admin.lower() == "true"
        if not isinstance(admin, bool):
            raise ConfigError(f"{where}.admin: expected true or false, got {admin!r}",
                              path=path, key="admin")
        w = entry.get("whiteRemoteAddress")
        white_of = address_matcher(None if w is None else _key_text(w, where),
                                   f"{where}.whiteRemoteAddress")
        accounts[ak] = Account(ak, sk, admin, white_of)
    return Accounts(accounts, global_white)


def load_accounts(path):
    """A plain_acl.yml, read and checked: Accounts, or ConfigError saying why."""
    import yaml
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_ACL_FILE_BYTES + 1)
    except OSError as e:
        raise ConfigError(f"cannot read the ACL file {path}: {e}", path=path,
                          key="aclFilePath") from None
    if len(raw) > MAX_ACL_FILE_BYTES:
        raise ConfigError(f"the ACL file {path} is larger than {MAX_ACL_FILE_BYTES} bytes",
                          path=path, key="aclFilePath")
    try:
        data = yaml.safe_load(raw)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        what = getattr(e, "problem", None) or type(e).__name__
        raise ConfigError(f"the ACL file {path} is not YAML{at}: {what}", path=path,
                          key="aclFilePath") from None
    return parse_accounts(data, path)


def _file_state(path):
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


# ---------------------------------------------------------------- the checks

def _shown(key):
    return key[:_SHOWN_KEY]


class AclChecker:
    """The checks of the module doc over the accounts of ``path``; ``modes`` maps
    each class key of CLASS_KEYS to open, signed or admin."""

    def __init__(self, path, modes, clock=time.monotonic):
        for key in CLASS_KEYS:
            if modes.get(key) not in MODES:
                raise ConfigError(f"config {key}={modes.get(key)!r}: expected one of "
                                  f"{', '.join(MODES)}", key=key, value=modes.get(key))
        self.path = path
        self.modes = dict(modes)
        self._clock = clock
        self._state = _file_state(path)
        self.accounts = load_accounts(path)
        self._next_check = clock() + RELOAD_CHECK_SECONDS
        self._reloading = threading.Lock()

    def mode(self, code):
        if code in ADMIN_CODES:
            return self.modes["aclAdminRequests"]
        if code in BROKER_CODES:
            return self.modes["aclBrokerRequests"]
        if code in ROUTE_CODES:
            return self.modes["aclRouteRequests"]
        return self.modes["aclOtherRequests"]

    @property
    def checks_routes(self):
        return self.modes["aclRouteRequests"] != OPEN

    def _maybe_reload(self):
        now = self._clock()
        if now < self._next_check or not self._reloading.acquire(blocking=False):
            return
        try:
            self._next_check = now + RELOAD_CHECK_SECONDS
            state = _file_state(self.path)
            if state == self._state:
                return
            self._state = state
            try:
                self.accounts = load_accounts(self.path)
            except ConfigError as e:
                log.error("ACL file changed but not applied (the accounts before stay in "
                          "force): %s", e)
                return
            log.info("ACL file %s reloaded: %d accounts", self.path,
                     len(self.accounts.accounts))
        finally:
            self._reloading.release()

    def refusal(self, cmd, host):
        """None when ``cmd`` from ``host`` may proceed, else (what, the answer's
        remark, the access key or None): ``what`` is a fixed phrase for the log."""
        mode = self.mode(cmd.code)
        if mode == OPEN:
            return None
        self._maybe_reload()
        accounts = self.accounts
        if any(t(host) for t in accounts.global_white):
            return None
        ext = cmd.ext_fields or {}
        ak = ext.get(ACCESS_KEY)
        if not isinstance(ak, str) or not ak:
            return "unsigned", "No accessKey is configured", None
        account = accounts.accounts.get(ak)
        if account is None:
            return "unknown access key", f"No acl config for {_shown(ak)}", ak
        if account.white is None or not account.white(host):
            sig = ext.get(SIGNATURE)
            # (no HMAC over the request when there is no signature to compare)
            if not isinstance(sig, str) or not hmac.compare_digest(
                    request_signature(ext, cmd.body, account.secret_key,
                                      exclude=_SERVER_EXCLUDES).encode(),
                    sig.encode("utf-8", "replace")):
                return ("wrong signature", f"Check signature failed for accessKey={_shown(ak)}",
                        ak)
        if mode == ADMIN and not account.admin:
            return ("not an admin account", f"Need admin permission for request "
                    f"code={cmd.code}, but accessKey={_shown(ak)} is not", ak)
        return None


def _host(conn):
    peer = getattr(conn, "peer", None)
    if not isinstance(peer, str):
        return ""
    return peer.rsplit(":", 1)[0] if ":" in peer else peer


#: Codes DefaultRequestProcessor.quick always hands to the table thread (changes, registrations).
_TABLE_CODES = ADMIN_CODES | BROKER_CODES

#: A request whose body is larger is checked in the table thread (its HMAC would hold
#: the loop: any client may attach a body up to maxFrameLength to a read).
_LOOP_BODY_BYTES = 64 * 1024

#: quick() results the table thread must not check again, at most this many pending
#: (entries of connections lost meanwhile are dropped with the rest past it).
_MAX_PASSED = 4096


class AclGate:
    """Stands in for the NameServer (NameServerApp wraps it when aclEnable): every
    request is checked before the NameServer sees it, changes and registrations in
    the table thread, the rest where they are answered. A request ``quick`` passed and
    sent to the table thread is not checked twice."""

    def __init__(self, namesrv, checker):
        self._ns = namesrv
        self.checker = checker
        self._passed = {}           # id(cmd) -> cmd, while it waits for handle()

    def __getattr__(self, name):
        return getattr(self._ns, name)

    def _refuse(self, cmd, conn):
        why = self.checker.refusal(cmd, _host(conn))
        if why is None:
            return None
        what, remark, ak = why
        if ak is None:
            self._ns.counters.refused["acl_unsigned"] += 1
        else:           # an unknown account, a wrong signature, not an admin
            self._ns.counters.refused["acl_denied"] += 1
        log.warning("request %d from %s refused: %s (accessKey %r)", cmd.code,
                    getattr(conn, "peer", conn), what, None if ak is None else _shown(ak))
        return cmd.response(ResponseCode.NO_PERMISSION, remark)

    def quick(self, cmd, conn=None):
        if cmd.code in _TABLE_CODES:
            # the NameServer answers these in the table thread whatever they are: the
            # check (an HMAC over a registration's body) runs there too, off the loop
            return NEEDS_TABLE
        if self.checker.mode(cmd.code) == OPEN:
            return self._ns.quick(cmd, conn)
        if len(cmd.body or b"") > _LOOP_BODY_BYTES:
            return NEEDS_TABLE      # a read with a large body: its HMAC off the loop too
        resp = self._refuse(cmd, conn)
        if resp is not None:
            return None if cmd.is_oneway else resp
        resp = self._ns.quick(cmd, conn)
        if resp is NEEDS_TABLE:
            if len(self._passed) >= _MAX_PASSED:
                self._passed.clear()
            self._passed[id(cmd)] = cmd
        return resp

    def handle(self, cmd, conn=None):
        if self._passed.pop(id(cmd), None) is not cmd:
            resp = self._refuse(cmd, conn)
            if resp is not None:
                return None if cmd.is_oneway else resp
        return self._ns.handle(cmd, conn)


def gate(namesrv, config):
    """The NameServer behind an AclGate per ``config`` (aclEnable on): raises
    ConfigError when the file or a class setting is bad."""
    modes = {k: str(getattr(config, k)).strip().lower() for k in CLASS_KEYS}
    checker = AclChecker(config.aclFilePath, modes)
    log.info("ACL on: %d accounts from %s; %s", len(checker.accounts.accounts),
             config.aclFilePath, ", ".join(f"{k}={v}" for k, v in modes.items()))
    return AclGate(namesrv, checker)

