"""The NameServer's KV config table (namespace -> key -> value), persisted like Java's.

Java reference: namesrv/kvconfig/KVConfigManager.java and KVConfigSerializeWrapper.java
(4.9.x and 5.x behave the same):

- The file is ``{"configTable":{"<namespace>":{"<key>":"<value>"}}}``, written compact
  (``RemotingSerializable.toJson()`` is ``toJson(false)``: fastjson, no pretty format),
  UTF-8, non-ASCII characters as they are.
- ``putKVConfig`` and ``deleteKVConfig`` rewrite the whole file on every call, also when
  the value is unchanged and when the key to delete does not exist.
- Deleting the last key of a namespace leaves the namespace in place, empty: a later
  GET_KVLIST_BY_NAMESPACE answers ``{"table":{}}``, not QUERY_NOT_FOUND.
- ``load()`` reads the file once at start; a missing file is an empty table (and so is an
  empty file: ``file2String`` gives "" and fastjson parses it to null).

Where rmq differs from Java, on purpose:

- Java's ``MixAll.string2File`` writes ``<file>.tmp``, copies the old file to ``<file>.bak``,
  deletes the target and renames: a crash between the delete and the rename loses the
  file, and nothing is fsynced. rmq writes a temporary file in the same directory, fsyncs
  it, ``os.replace``-s it over the target and fsyncs the directory: after a crash at any
  instant the file is the old one or the new one, never torn or missing.
- Java logs a failed write and answers SUCCESS with the change kept in memory only. rmq
  raises :class:`KVConfigError` and keeps the table as it was, so memory never claims
  what the disk does not hold.
- A file that does not parse is a :class:`KVConfigError` naming the path (Java fails the
  start with a fastjson exception).

One KVConfig per file: two processes writing the same file are not supported.
"""

import json
import logging
import os
import stat
import threading
import uuid

from rmq.errors import RmqError

__all__ = ["KVConfig", "KVConfigError"]

log = logging.getLogger("rmq.kvconfig")


class KVConfigError(RmqError, ValueError):
    """The KV config file cannot be read, does not parse, or cannot be written.

    ``path`` is the file concerned.
    """

    def __init__(self, message, path=None):
        super().__init__(message)
        self.path = path


def _check_str(what, value):
    if not isinstance(value, str):
        raise TypeError(f"KV config {what} must be a str, not {type(value).__name__}")


def _value_from_json(v):
    """fastjson reads a JSON scalar into a String field as its text; null stays null."""
    if v is None or isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return json.dumps(v)
    raise ValueError(f"value is a JSON {type(v).__name__}, not a string")


def _parse(content, path):
    """The table held in a kvConfig.json text; KVConfigError if it is not one."""
    if not content.strip():
        log.warning("KV config file %s is empty: starting with an empty table", path)
        return {}
    try:
        doc = json.loads(content)
    except ValueError as e:
        raise KVConfigError(f"KV config file {path} is not valid JSON: {e}", path) from None
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise KVConfigError(
            f"KV config file {path}: expected a JSON object with \"configTable\", "
            f"found a JSON {type(doc).__name__}", path)
    table_in = doc.get("configTable")
    if table_in is None:
        return {}
    if not isinstance(table_in, dict):
        raise KVConfigError(f"KV config file {path}: \"configTable\" is not an object", path)
    table = {}
    for ns, kv in table_in.items():
        if kv is None:
            continue
        if not isinstance(kv, dict):
            raise KVConfigError(
                f"KV config file {path}: namespace {ns!r} is not an object", path)
        inner = {}
        for k, v in kv.items():
            try:
                v = _value_from_json(v)
            except ValueError as e:
                raise KVConfigError(
                    f"KV config file {path}: {ns!r}/{k!r}: {e}", path) from None
            if v is not None:
                inner[k] = v
        table[ns] = inner
    return table


def _dumps(table):
    """Java's file text: compact JSON, non-ASCII kept (fastjson toJSONString)."""
    return json.dumps({"configTable": table}, ensure_ascii=False, separators=(",", ":"),
                      sort_keys=True)


def _fsync_dir(directory):
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return  # platforms that cannot open a directory (Windows): nothing to sync
    try:
        os.fsync(fd)
    except OSError as e:
        log.warning("fsync of directory %s failed: %s", directory, e)
    finally:
        os.close(fd)


def _atomic_write(path, data):
    """Replace ``path`` with ``data`` (bytes) so that a crash leaves old or new, whole."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory,
                       f".{os.path.basename(path)}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0),
                 0o666)
    try:
        try:
            os.fchmod(fd, stat.S_IMODE(os.stat(path).st_mode))  # keep the file's mode
        except (OSError, AttributeError):
            pass
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        _unlink_quietly(tmp)
        raise
    os.close(fd)
    try:
        os.replace(tmp, path)
    except BaseException:
        _unlink_quietly(tmp)
        raise
    _fsync_dir(directory)


def _unlink_quietly(path):
    try:
        os.unlink(path)
    except OSError:
        pass


def _remove_stale_temporaries(path):
    """Temporary files left by a process killed in the middle of a write."""
    directory = os.path.dirname(os.path.abspath(path))
    prefix = f".{os.path.basename(path)}."
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        if name.startswith(prefix) and name.endswith(".tmp"):
            _unlink_quietly(os.path.join(directory, name))


class KVConfig:
    """namespace -> key -> value, persisted at once on every change.

    ``path`` is the kvConfig.json to load at start and to rewrite on every change; None
    keeps the table in memory only.

    Readers take no lock: every change builds new dicts and publishes them with one
    assignment (copy on write), so ``get`` is two dict lookups and ``namespace`` a copy of
    a dict nobody mutates. Writers are serialised by a lock held across the file write.
    """

    def __init__(self, path=None):
        self.path = None if path is None else os.fspath(path)
        self._lock = threading.Lock()
        self._table = {}
        if self.path is not None:
            self._table = self._load(self.path)
            _remove_stale_temporaries(self.path)

    @staticmethod
    def _load(path):
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            log.info("KV config file %s does not exist yet: empty table", path)
            return {}
        except OSError as e:
            raise KVConfigError(f"cannot read KV config file {path}: {e}", path) from e
        try:
            content = raw.decode("utf-8-sig")
        except UnicodeDecodeError as e:
            raise KVConfigError(f"KV config file {path} is not UTF-8: {e}", path) from None
        table = _parse(content, path)
        log.info("load KV config table OK: %s (%d namespaces)", path, len(table))
        return table

    # ------------------------------------------------------------ reads

    def get(self, namespace, key):
        """The value, or None (Java getKVConfig)."""
        kv = self._table.get(namespace)
        return None if kv is None else kv.get(key)

    def namespace(self, namespace):
        """A copy of the namespace's table, or None when absent (getKVListByNamespace)."""
        kv = self._table.get(namespace)
        return None if kv is None else dict(kv)

    def namespaces(self):
        """The namespace names (a list, in no particular order)."""
        return list(self._table)

    def snapshot(self):
        """A deep copy of the whole table."""
        return {ns: dict(kv) for ns, kv in self._table.items()}

    def __contains__(self, namespace):
        return namespace in self._table

    def __len__(self):
        return len(self._table)

    def __repr__(self):
        return f"KVConfig(path={self.path!r}, namespaces={len(self._table)})"

    # ------------------------------------------------------------ changes

    def put(self, namespace, key, value):
        """Set ``namespace/key`` to ``value`` and persist (always, as Java does)."""
        _check_str("namespace", namespace)
        _check_str("key", key)
        _check_str("value", value)
        with self._lock:
            table = dict(self._table)
            kv = dict(table.get(namespace) or ())
            kv[key] = value
            table[namespace] = kv
            self._commit(table)

    def delete(self, namespace, key):
        """Remove ``namespace/key`` and persist (always, as Java does, even if absent).

        The namespace stays, possibly empty, as in Java.
        """
        _check_str("namespace", namespace)
        _check_str("key", key)
        with self._lock:
            table = self._table
            kv = table.get(namespace)
            if kv is not None and key in kv:
                kv = dict(kv)
                del kv[key]
                table = dict(table)
                table[namespace] = kv
            self._commit(table)

    def persist(self):
        """Write the current table to the file (a no-op without a path)."""
        with self._lock:
            self._commit(self._table)

    def _commit(self, table):
        """Write ``table`` then publish it; on a failed write nothing changes."""
        if self.path is not None:
            try:
                _atomic_write(self.path, _dumps(table).encode("utf-8"))
            except OSError as e:
                log.error("persist KV config to %s failed: %s", self.path, e)
                raise KVConfigError(
                    f"cannot write KV config file {self.path}: {e}", self.path) from e
        self._table = table
