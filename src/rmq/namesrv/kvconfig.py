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

- **A whole-file rewrite per change while the table is small, a journal past that.** A
  change that leaves the table at most ``rewrite_max_table_bytes`` (maxKvRewriteTableBytes,
  counted as ``max_table_bytes`` counts) rewrites kvConfig.json, as Java does, fsynced
  before returning: kvConfig.json alone then holds every change that returned, so a
  copy of it, or a Java NameServer started on it after a kill -9, misses none. A change
  on a larger table appends one record to ``<file>.journal.<generation>`` next to
  kvConfig.json and fsyncs it before returning: a big table is not rewritten (nor
  serialized, with the GIL held) per change. Either way a change that returned is on
  disk (kill -9, power loss). A change that changes nothing (the same value again, the
  delete of an absent key) writes nothing: the state it acknowledges is already on disk.
- **Crossing the threshold.** Upward, the change goes to a new journal over the file of
  the last small state. Downward, the change that takes the table back to the threshold
  is appended to the journal, then the table is written whole and the journals deleted
  (a fold, under the writer lock) before the change returns; from then on each change
  rewrites the file again. A rewrite goes only where no journal is left: replayed over
  a file that holds a later change, a journal would undo it. While a fuzzy compaction
  (below) is under way, changes are journaled whatever the size (its older snapshot
  will replace the file); it folds the journals itself at its end if the table is then
  small. Journals left by an earlier run on a small table are folded by the first change.
- **At start** kvConfig.json is read (Java's format, as Java wrote it or as rmq wrote
  it), then every journal is replayed in generation order. A torn record at the end of
  a journal (a crash in the middle of an append, never acknowledged) is ignored, and
  cut off the last journal so that appends go on after the last whole record. A bad
  record followed by more data is corruption: :class:`KVConfigError` naming the file.
- **Compaction** (:meth:`KVConfig.compact`, run by a background thread once the
  journals exceed ``max(compact_journal_bytes, size of the last snapshot)``, and once
  more by :meth:`KVConfig.close`): a small table is written whole under the writer
  lock, as a change would write it. Otherwise, under the writer lock, the journal is
  *rotated* (the next change opens generation N+1), then, without the lock, the table
  is written to a temporary file namespace by namespace and in chunks (yielding the GIL
  between chunks, so that route-serving threads keep running), fsynced,
  ``os.replace``-d over kvConfig.json, the directory fsynced, and the journals up to N
  deleted, oldest first.
  After :meth:`KVConfig.close` kvConfig.json alone holds the table, in exactly the bytes
  Java writes, and no journal remains (an interpreter exiting normally closes every
  KVConfig still open, so a SIGTERM-ed server leaves the file Java would).
- **Why the snapshot needs no lock (a fuzzy snapshot).** Every journal record is an
  idempotent "key := value" or "key := absent". The snapshot is read after the rotation,
  one namespace at a time (each namespace's items are copied in one C call, atomic under
  the GIL), while writers go on appending to generation N+1 *before* changing memory.
  So every key's value in the snapshot is its value at the rotation or a later one that
  generation N+1 holds. Replaying N+1 over the snapshot gives the exact table, and so
  does replaying any suffix of N's older generations first (each puts a key back to a
  value that N+1, or the snapshot itself, then sets right). Hence a crash at any instant
  of a compaction leaves a loadable, exact state: before the replace, the old file with
  all journals; after it, the new file with the journals not yet deleted (deleted
  oldest first, so those left are always a suffix).
- **Limits**: a key or namespace over ``max_key_bytes`` / ``max_namespace_bytes`` UTF-8
  bytes (4 KiB), a value over ``max_value_bytes`` (1 MiB), or a change taking the table
  (UTF-8 bytes of namespaces, keys and values) over ``max_table_bytes`` (128 MiB) is
  refused with :class:`KVLimitError` and changes nothing; so is text that UTF-8 cannot
  encode (a lone surrogate: the file could not be written). A loaded table over the
  table limit is kept; only changes that grow it are then refused.
- Java's ``MixAll.string2File`` writes ``<file>.tmp``, copies the old file to ``<file>.bak``,
  deletes the target and renames: a crash between the delete and the rename loses the
  file, and nothing is fsynced. rmq writes a temporary file in the same directory, fsyncs
  it, ``os.replace``-s it over the target and fsyncs the directory: after a crash at any
  instant the file is the old one or the new one, never torn or missing.
- Java logs a failed write and answers SUCCESS with the change kept in memory only. rmq
  raises :class:`KVConfigError` and keeps the table as it was, so memory never claims
  what the disk does not hold. Logs give sizes, never values.
- A file that does not parse is a :class:`KVConfigError` naming the path (Java fails the
  start with a fastjson exception).

Threads: readers (``get``, ``namespace``, ``namespaces``, ``snapshot``) take no lock;
dicts are changed in place, each change one dict operation, atomic under the GIL, and
``namespace`` returns a copy. Writers are serialised by a lock held across the write
(the rewrite or the append) and its fsyncs; a compaction of a big table holds it only
to rotate the journal. A rewrite is written from a copy of the table with the change
applied (the top level and one namespace copied), so memory changes only once the file
holds the change; the snapshot writer gives the GIL away between chunks, as in a
compaction.

Journal format: an 8-byte header ``RMQKVJ1\\n``, then records ``<u32 LE length><u32 LE
crc32(length bytes + payload)><payload>``, the payload compact UTF-8 JSON:
``["put",namespace,key,value]`` or ``["del",namespace,key]``.

One KVConfig per file: two processes writing the same file are not supported.
"""

import atexit
import heapq
import json
import logging
import os
import stat
import struct
import threading
import time
import uuid
import weakref
import zlib

from rmq.errors import RmqError
from rmq.javaorder import java_hash_order

__all__ = [
    "KVConfig",
    "KVConfigError",
    "KVEncodingError",
    "KVLimitError",
    "journal_path",
    "read_table",
]

log = logging.getLogger(__name__)

#: Default limits (UTF-8 bytes).
MAX_KEY_BYTES = 4 << 10
MAX_NAMESPACE_BYTES = 4 << 10
MAX_VALUE_BYTES = 1 << 20
MAX_TABLE_BYTES = 128 << 20
#: Journals above max(this, size of the last snapshot) start a background compaction.
COMPACT_JOURNAL_BYTES = 64 << 20
#: A change leaving the table at most this large (bytes as MAX_TABLE_BYTES counts them)
#: rewrites kvConfig.json before it returns, as Java does; a larger table journals it.
#: Chosen from what a rewrite costs the table thread and the GIL against an append, by
#: table size (bench/README.md, "KV config: rewrite or journal").
REWRITE_MAX_TABLE_BYTES = 64 << 10

JOURNAL_MAGIC = b"RMQKVJ1\n"
_RECORD = struct.Struct("<II")            # payload length, crc32(length bytes + payload)
_LENGTH = struct.Struct("<I")
#: A compaction after a failed one waits this long (seconds).
_COMPACT_RETRY_SECONDS = 30.0
#: Snapshot chunks: about this many characters, at most this many keys, then the GIL
#: is offered to other threads. A namespace above _SORT_RUN keys is sorted in runs.
_CHUNK_CHARS = 256 << 10
_CHUNK_ITEMS = 4096
_SORT_RUN = 8192

_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


class KVConfigError(RmqError, ValueError):
    """The KV config file cannot be read, does not parse, or cannot be written.

    ``path`` is the file concerned.
    """

    def __init__(self, message, path=None):
        super().__init__(message)
        self.path = path


class KVLimitError(KVConfigError):
    """A change refused before anything was written: a size past its limit.

    ``limit`` is the limit's name (``maxKvValueBytes``...), ``size`` the size in
    UTF-8 bytes, ``maximum`` the limit.
    """

    def __init__(self, message, path=None, limit=None, size=None, maximum=None):
        super().__init__(message, path)
        self.limit = limit
        self.size = size
        self.maximum = maximum


class KVEncodingError(KVLimitError):
    """A change refused before anything was written: text UTF-8 cannot encode."""


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


# ---------------------------------------------------------------- snapshot text in chunks

def _sorted_items(items, pause):
    """``items`` sorted by key; a large namespace in runs merged lazily, so that no
    single sort holds the GIL for long."""
    if len(items) <= _SORT_RUN:
        items.sort()
        return items
    runs = []
    for i in range(0, len(items), _SORT_RUN):
        run = items[i:i + _SORT_RUN]
        run.sort()
        runs.append(run)
        pause()
    return heapq.merge(*runs)


def _item_chunks(items):
    chunk = []
    chars = 0
    for item in items:
        chunk.append(item)
        chars += len(item[0]) + len(item[1])
        if chars >= _CHUNK_CHARS or len(chunk) >= _CHUNK_ITEMS:
            yield chunk
            chunk = []
            chars = 0
    if chunk:
        yield chunk


def _snapshot_chunks(table, pause=lambda: None):
    """UTF-8 chunks whose concatenation is ``_dumps(table).encode()``.

    ``table`` may change meanwhile (a fuzzy snapshot, see the module docstring): each
    namespace's items are copied in one C call, atomic under the GIL. ``pause`` is
    called between chunks (``time.sleep(0)`` to let other threads have the GIL).
    """
    out = ['{"configTable":{']
    first_ns = True
    for ns in sorted(table):                 # sorted() copies the keys in C: atomic
        kv = table.get(ns)
        if kv is None:                       # pragma: no cover - namespaces never go
            continue
        items = list(kv.items())             # one C call: this namespace's cut point
        out.append(("" if first_ns else ",") + _ENCODER.encode(ns) + ":{")
        first_ns = False
        first_chunk = True
        for chunk in _item_chunks(_sorted_items(items, pause)):
            # dict(chunk) keeps the sorted order: the same text json's sort_keys gives
            body = _ENCODER.encode(dict(chunk))[1:-1]
            out.append(body if first_chunk else "," + body)
            first_chunk = False
            yield "".join(out).encode("utf-8")
            out = []
            pause()
        out.append("}")
    out.append("}}")
    yield "".join(out).encode("utf-8")


def _yield_gil():
    time.sleep(0)


# ---------------------------------------------------------------- files

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


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _sync(fd):
    getattr(os, "fdatasync", os.fsync)(fd)


def _copy_mode(fd, path):
    try:
        os.fchmod(fd, stat.S_IMODE(os.stat(path).st_mode))  # keep the file's mode
    except (OSError, AttributeError):
        pass


def _atomic_write(path, data, make_dirs=True):
    """Replace ``path`` with ``data`` (bytes, or an iterable of bytes chunks) so that a
    crash leaves old or new, whole. Returns the number of bytes written."""
    directory = os.path.dirname(os.path.abspath(path))
    if make_dirs:
        os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory,
                       f".{os.path.basename(path)}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0),
                 0o666)
    size = 0
    try:
        _copy_mode(fd, path)
        for chunk in ((data,) if isinstance(data, (bytes, bytearray)) else data):
            _write_all(fd, chunk)
            size += len(chunk)
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
    return size


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


def journal_path(path, generation):
    """The journal file of ``generation`` next to kvConfig.json ``path``."""
    return f"{os.fspath(path)}.journal.{generation}"


def _journal_files(path):
    """[(generation, path)] of the journals next to ``path``, oldest first."""
    directory = os.path.dirname(os.path.abspath(path))
    prefix = os.path.basename(path) + ".journal."
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    found = []
    for name in names:
        if name.startswith(prefix):
            gen = name[len(prefix):]
            if gen.isdigit() and gen.isascii():
                found.append((int(gen), os.path.join(os.path.dirname(path), name)))
    found.sort()
    return found


def _record(op):
    payload = json.dumps(op, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    length = _LENGTH.pack(len(payload))
    return length + _LENGTH.pack(zlib.crc32(payload, zlib.crc32(length))) + payload


def _parse_journal(path, data):
    """(ops, length of the whole records): the records of one journal file's bytes.

    A bad record that is the last thing in the file (it runs past the end, ends exactly
    at the end, or only zero bytes follow) is a torn append: ignored. A bad record
    followed by other data is corruption: KVConfigError.
    """
    n = len(data)
    head = len(JOURNAL_MAGIC)
    if data[:head] != JOURNAL_MAGIC:
        if n < head and (JOURNAL_MAGIC.startswith(data) or not any(data)):
            return [], 0                     # torn while being created
        raise KVConfigError(f"KV config journal {path} does not start with "
                            f"{JOURNAL_MAGIC!r}: not a journal", path)
    ops = []
    pos = head
    while pos < n:
        bad = None
        if n - pos < _RECORD.size:
            bad = "a record header cut short"
            end = n
        else:
            length, crc = _RECORD.unpack_from(data, pos)
            end = pos + _RECORD.size + length
            if end > n:
                bad = f"a record of {length} bytes cut short"
            elif length == 0:
                bad = "an empty record"
            else:
                payload = data[pos + _RECORD.size:end]
                if zlib.crc32(payload, zlib.crc32(data[pos:pos + 4])) != crc:
                    bad = "a record whose crc32 does not match"
        if bad is not None:
            if end >= n or not any(memoryview(data)[pos:]):
                log.warning("KV config journal %s: %s at offset %d (%d bytes), the end of "
                            "an append a crash interrupted: ignored", path, bad, pos, n - pos)
                return ops, pos
            raise KVConfigError(f"KV config journal {path} is corrupt: {bad} at offset "
                                f"{pos}, followed by {n - end} more bytes", path)
        try:
            op = json.loads(payload.decode("utf-8"))
            if not (isinstance(op, list) and all(isinstance(x, str) for x in op)
                    and ((len(op) == 4 and op[0] == "put") or
                         (len(op) == 3 and op[0] == "del"))):
                raise ValueError("not a put or a del")
        except ValueError as e:
            raise KVConfigError(f"KV config journal {path} is corrupt: the record at offset "
                                f"{pos} does not decode ({e})", path) from None
        ops.append(op)
        pos = end
    return ops, pos


def _apply(table, op):
    if op[0] == "put":
        kv = table.get(op[1])
        if kv is None:
            table[op[1]] = {op[2]: op[3]}
        else:
            kv[op[2]] = op[3]
    else:
        kv = table.get(op[1])
        if kv is not None:
            kv.pop(op[2], None)


def _with_change(table, op):
    """``table`` as ``op`` leaves it, ``table`` itself untouched: the top level and the
    namespace concerned are copied, the other namespaces shared."""
    changed = dict(table)
    kv = changed.get(op[1])
    if kv is not None:
        changed[op[1]] = dict(kv)
    _apply(changed, op)
    return changed


def _load_snapshot(path):
    """(table, size in bytes) of kvConfig.json."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return {}, 0
    except OSError as e:
        raise KVConfigError(f"cannot read KV config file {path}: {e}", path) from e
    try:
        content = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise KVConfigError(f"KV config file {path} is not UTF-8: {e}", path) from None
    return _parse(content, path), len(raw)


def _load(path):
    """(table, snapshot size, [(generation, journal path, whole-records length,
    file length)]): kvConfig.json with every journal replayed over it."""
    table, snapshot_bytes = _load_snapshot(path)
    journals = []
    for gen, jpath in _journal_files(path):
        try:
            with open(jpath, "rb") as f:
                data = f.read()
        except OSError as e:
            raise KVConfigError(f"cannot read KV config journal {jpath}: {e}", jpath) from e
        ops, good = _parse_journal(jpath, data)
        for op in ops:
            _apply(table, op)
        journals.append((gen, jpath, good, len(data)))
    return table, snapshot_bytes, journals


def read_table(path):
    """The table a :class:`KVConfig` on ``path`` would load (kvConfig.json and its
    journals), without changing any file."""
    return _load(os.fspath(path))[0]


def _utf8(what, text, path):
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise KVEncodingError(
            f"KV {what} is not valid Unicode text (a lone surrogate at index {e.start}): "
            f"it cannot be written as UTF-8", path, "utf8", None, None) from None


def _table_size(table, path):
    size = 0
    try:
        for ns, kv in table.items():
            size += len(ns.encode("utf-8"))
            for k, v in kv.items():
                size += len(k.encode("utf-8")) + len(v.encode("utf-8"))
    except UnicodeEncodeError:
        raise KVConfigError(f"KV config file {path} holds text that is not valid Unicode "
                            f"(a lone surrogate): it cannot be written back", path) from None
    return size


class _Journal:
    """One journal file: generation, path, size; open for appends or not."""

    __slots__ = ("fd", "gen", "path", "size")

    def __init__(self, gen, path, size):
        self.gen = gen
        self.path = path
        self.size = size
        self.fd = None

    def append(self, record):
        """Write ``record`` and fsync; on failure, cut the file back (OSError raised;
        ``fd`` None when even that failed: the next change opens a new generation)."""
        try:
            _write_all(self.fd, record)
            _sync(self.fd)
        except OSError:
            try:
                os.ftruncate(self.fd, self.size)
                _sync(self.fd)
            except OSError as e:
                log.error("KV config journal %s: cannot cut a failed append back (%s): "
                          "the next change opens a new journal", self.path, e)
                self.close()
            raise
        self.size += len(record)

    def close(self):
        fd, self.fd = self.fd, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass

    def __del__(self):
        self.close()


_OPEN = weakref.WeakSet()


@atexit.register
def _close_all_at_exit():
    """An interpreter exiting normally closes (compacts) every KVConfig still open."""
    for kv in list(_OPEN):
        try:
            kv.close()
        except Exception as e:      # the exit goes on; the journals keep every change
            log.warning("closing KV config %s at exit failed: %s", kv.path, e)


class KVConfig:
    """namespace -> key -> value, every change on disk (fsynced) before it returns:
    kvConfig.json rewritten while the table is small, a journal record past that.

    ``path`` is the kvConfig.json to load at start (with its journals) and to write
    into; None keeps the table in memory only (the limits still apply).

    Limits are UTF-8 byte counts; a change leaving the table at most
    ``rewrite_max_table_bytes`` (0: never) rewrites kvConfig.json, a larger table
    journals it. ``compact_journal_bytes`` with ``auto_compact`` starts a background
    compaction once the journals exceed max(it, the last snapshot's size).
    """

    def __init__(self, path=None, *, max_key_bytes=MAX_KEY_BYTES,
                 max_namespace_bytes=MAX_NAMESPACE_BYTES, max_value_bytes=MAX_VALUE_BYTES,
                 max_table_bytes=MAX_TABLE_BYTES,
                 rewrite_max_table_bytes=REWRITE_MAX_TABLE_BYTES,
                 compact_journal_bytes=COMPACT_JOURNAL_BYTES, auto_compact=True):
        self.path = None if path is None else os.fspath(path)
        self.max_key_bytes = max_key_bytes
        self.max_namespace_bytes = max_namespace_bytes
        self.max_value_bytes = max_value_bytes
        self.max_table_bytes = max_table_bytes
        self.rewrite_max_table_bytes = rewrite_max_table_bytes
        self.compact_journal_bytes = compact_journal_bytes
        self.auto_compact = auto_compact
        self._lock = threading.Lock()            # one writer at a time
        self._compact_lock = threading.Lock()    # one compaction at a time
        self._table = {}
        # The most keys each namespace held: Java's HashMap (its table) never shrinks,
        # and its order follows its table (GET_KVLIST_BY_NAMESPACE answers in it).
        self._peaks = {}
        self._journals = []                      # [_Journal] on disk, oldest first
        self._journal = None                     # the one open for appends
        self._append_gen = 1                     # the generation the next change goes to
        self._snapshot_bytes = 0
        self._compactor = None                   # the background compaction thread
        self._compact_after = 0.0                # monotonic time of the next try
        self._fuzzy = False                      # a compaction writes without the lock
        self._closed = False
        if self.path is not None:
            started = time.monotonic()
            table, self._snapshot_bytes, journals = _load(self.path)
            self._table = table
            for gen, jpath, good, size in journals:
                if (good < size or good == 0) and gen == journals[-1][0]:
                    size = self._cut_torn_tail(jpath, good)
                self._journals.append(_Journal(gen, jpath, size))
            if journals:
                self._append_gen = journals[-1][0]
            _remove_stale_temporaries(self.path)
            _OPEN.add(self)
            log.info("load KV config table OK: %s (%d namespaces, %d bytes, %d journals "
                     "replayed) in %.0f ms", self.path, len(table),
                     self._snapshot_bytes, len(journals),
                     (time.monotonic() - started) * 1000)
        self._table_bytes = _table_size(self._table, self.path)
        # Java loads the file into new HashMaps: sized by what they hold at the start
        self._peaks = {ns: len(kv) for ns, kv in self._table.items()}

    def _cut_torn_tail(self, jpath, good):
        try:
            fd = os.open(jpath, os.O_WRONLY)
            try:
                os.ftruncate(fd, good)
                if good == 0:        # torn while being created: write its header again
                    _write_all(fd, JOURNAL_MAGIC)
                    good = len(JOURNAL_MAGIC)
                _sync(fd)
            finally:
                os.close(fd)
        except OSError as e:
            raise KVConfigError(f"cannot cut the torn end of KV config journal {jpath}: {e}",
                                jpath) from e
        log.warning("KV config journal %s: the torn end of an append cut off (%d bytes "
                    "left)", jpath, good)
        return good

    # ------------------------------------------------------------ reads

    def get(self, namespace, key):
        """The value, or None (Java getKVConfig)."""
        kv = self._table.get(namespace)
        return None if kv is None else kv.get(key)

    def namespace(self, namespace):
        """A copy of the namespace's table in the iteration order of Java's HashMap
        (its KVTable answer), or None when absent (getKVListByNamespace)."""
        kv = self._table.get(namespace)
        if kv is None:
            return None
        kv = dict(kv)               # one C call: atomic under the GIL
        return {k: kv[k] for k in java_hash_order(kv, peak=self._peaks.get(namespace, 0))}

    def namespaces(self):
        """The namespace names (a list, in no particular order)."""
        return list(self._table)

    def snapshot(self):
        """A deep copy of the whole table."""
        return {ns: dict(kv) for ns, kv in list(self._table.items())}

    @property
    def table_bytes(self):
        """UTF-8 bytes of every namespace, key and value (what max_table_bytes bounds)."""
        return self._table_bytes

    @property
    def journal_bytes(self):
        """Bytes of the journals on disk (0 after a compaction or without a path)."""
        return sum(j.size for j in list(self._journals))

    def __contains__(self, namespace):
        return namespace in self._table

    def __len__(self):
        return len(self._table)

    def __repr__(self):
        return f"KVConfig(path={self.path!r}, namespaces={len(self._table)})"

    # ------------------------------------------------------------ changes

    def _limit(self, what, size, name, maximum):
        if size > maximum:
            raise KVLimitError(f"KV {what} of {size} bytes exceeds {name} {maximum}",
                               self.path, name, size, maximum)

    def put(self, namespace, key, value):
        """Set ``namespace/key`` to ``value``; on disk when it returns.

        KVLimitError (nothing changed) past a limit; KVConfigError (nothing changed)
        when kvConfig.json or the journal cannot be written.
        """
        _check_str("namespace", namespace)
        _check_str("key", key)
        _check_str("value", value)
        ns_b = _utf8("namespace", namespace, self.path)
        key_b = _utf8("key", key, self.path)
        value_b = _utf8("value", value, self.path)
        self._limit("namespace", len(ns_b), "maxKvNamespaceBytes", self.max_namespace_bytes)
        self._limit("key", len(key_b), "maxKvKeyBytes", self.max_key_bytes)
        self._limit("value", len(value_b), "maxKvValueBytes", self.max_value_bytes)
        op = ["put", namespace, key, value]
        with self._lock:
            self._check_open()
            kv = self._table.get(namespace)
            old = None if kv is None else kv.get(key)
            if old == value:
                return                       # already so, and on disk
            grow = len(value_b)
            if kv is None:
                grow += len(ns_b)
            if old is None:
                grow += len(key_b)
            else:
                grow -= len(old.encode("utf-8"))
            total = self._table_bytes + grow
            if grow > 0:
                self._limit("table", total, "maxKvTableBytes", self.max_table_bytes)
            fold = self.path is not None and self._write_change(op, total)
            if kv is None:
                kv = self._table[namespace] = {key: value}
            else:
                kv[key] = value
            if len(kv) > self._peaks.get(namespace, 0):
                self._peaks[namespace] = len(kv)
            self._table_bytes = total
            if fold:
                self._fold_journals()
            compactor = self._compaction_due()
        if compactor is not None:
            compactor.start()

    def delete(self, namespace, key):
        """Remove ``namespace/key``; on disk when it returns. The namespace stays,
        possibly empty, as in Java."""
        _check_str("namespace", namespace)
        _check_str("key", key)
        ns_b = _utf8("namespace", namespace, self.path)
        key_b = _utf8("key", key, self.path)
        self._limit("namespace", len(ns_b), "maxKvNamespaceBytes", self.max_namespace_bytes)
        self._limit("key", len(key_b), "maxKvKeyBytes", self.max_key_bytes)
        with self._lock:
            self._check_open()
            kv = self._table.get(namespace)
            old = None if kv is None else kv.get(key)
            if old is None:
                return                       # already absent, and on disk
            total = self._table_bytes - len(key_b) - len(old.encode("utf-8"))
            op = ["del", namespace, key]
            fold = self.path is not None and self._write_change(op, total)
            del kv[key]
            self._table_bytes = total
            if fold:
                self._fold_journals()
            compactor = self._compaction_due()
        if compactor is not None:
            compactor.start()

    def _check_open(self):
        if self._closed:
            raise KVConfigError(f"KV config {self.path} is closed", self.path)

    def _rewrites(self, table_bytes):
        """Whether a change leaving the table at ``table_bytes`` is to be written as the
        whole kvConfig.json (the writer lock held). Not while a fuzzy compaction is
        under way: its older snapshot, replaced over the rewritten file, relies on
        the journals written meanwhile."""
        limit = self.rewrite_max_table_bytes
        return 0 < limit and table_bytes <= limit and not self._fuzzy

    def _write_change(self, op, table_bytes):
        """Put ``op`` on disk, before memory (the writer lock held): a small table's
        kvConfig.json rewritten with it, else its record appended to the journal. True
        when the journals are then to be folded into kvConfig.json (a table shrunk
        back: the change is in the last journal, memory to be updated first).

        The rewrite goes only where no journal is left: a journal replayed over a file
        holding a later change would undo it.
        """
        rewrite = self._rewrites(table_bytes)
        if rewrite and not self._journals:
            self._snapshot_bytes = self._write_snapshot(_with_change(self._table, op),
                                                        make_dirs=True)
            return False
        self._append(_record(op))
        return rewrite

    def _fold_journals(self):
        """The table is small again: fold the journals into kvConfig.json, which then
        alone holds the table (the writer lock held). A failure is logged: the
        journals hold every change, and the next change tries again."""
        try:
            self._snapshot_locked(make_dirs=True)
        except KVConfigError as e:
            log.error("KV config %s: folding the journals of a table small again into "
                      "the file failed: %s (changes journaled meanwhile)", self.path, e)

    def _append(self, record):
        """Append ``record`` to the journal and fsync it (the writer lock held)."""
        j = self._journal
        try:
            if j is None or j.fd is None:
                j = self._open_journal()
            j.append(record)
        except OSError as e:
            where = j.path if j is not None else journal_path(self.path, self._append_gen)
            log.error("KV config: append of %d bytes to %s failed: %s", len(record), where, e)
            raise KVConfigError(f"cannot write KV config journal {where}: {e}",
                                self.path) from e

    def _open_journal(self):
        """The journal of generation ``_append_gen``, opened for appends (created, its
        header fsynced and its directory entry too, when new)."""
        last = self._journals[-1] if self._journals else None
        if last is not None and last.gen == self._append_gen and self._journal is None:
            last.fd = os.open(last.path, os.O_WRONLY | os.O_APPEND | getattr(os, "O_BINARY", 0))
            self._journal = last
            return last
        if last is not None and last.gen >= self._append_gen:
            self._append_gen = last.gen + 1   # after a journal that failed to cut back
        jpath = journal_path(self.path, self._append_gen)
        directory = os.path.dirname(os.path.abspath(jpath))
        os.makedirs(directory, exist_ok=True)
        fd = os.open(jpath, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND
                     | getattr(os, "O_BINARY", 0), 0o666)
        try:
            _copy_mode(fd, self.path)
            _write_all(fd, JOURNAL_MAGIC)
            _sync(fd)
        except BaseException:
            os.close(fd)
            _unlink_quietly(jpath)
            raise
        _fsync_dir(directory)
        j = _Journal(self._append_gen, jpath, len(JOURNAL_MAGIC))
        j.fd = fd
        self._journals.append(j)
        self._journal = j
        log.info("KV config journal %s started", jpath)
        return j

    # ------------------------------------------------------------ compaction

    def _compaction_due(self):
        """The background compaction thread to start now, or None (the writer lock
        held)."""
        if (not self.auto_compact or self.path is None or self._closed
                or self._compactor is not None):
            return None
        journal_bytes = sum(j.size for j in self._journals)
        if journal_bytes <= max(self.compact_journal_bytes, self._snapshot_bytes):
            return None
        if time.monotonic() < self._compact_after:
            return None
        self._compactor = threading.Thread(target=self._compact_in_background,
                                           name="kvconfig-compact", daemon=True)
        return self._compactor

    def _compact_in_background(self):
        try:
            self.compact()
        except Exception as e:      # logged; the journals keep every change
            log.error("KV config %s: background compaction failed: %s (retry in %.0f s)",
                      self.path, e, _COMPACT_RETRY_SECONDS)
            self._compact_after = time.monotonic() + _COMPACT_RETRY_SECONDS
        finally:
            with self._lock:
                # the changes made meanwhile may be past the threshold already
                self._compactor = None
                again = self._compaction_due()
            if again is not None:
                again.start()

    def compact(self):
        """Write the table to kvConfig.json and drop the journals it covers.

        Safe from any thread while others read and write: writers are held up only for
        the journal's rotation, and the snapshot is written in chunks that let other
        threads have the GIL. True if a snapshot was written; False when there was
        nothing to compact (no journal record) or the KVConfig is closed.
        """
        return self._compact(final=False, force=False)

    def persist(self):
        """Write the current table to the file now (and drop the journals); a no-op
        without a path."""
        self._compact(final=False, force=True)

    def close(self):
        """Compact one last time (kvConfig.json alone then holds the table, in Java's
        bytes, and no journal remains) and refuse changes from now on. Idempotent;
        reads go on working."""
        if self.path is None:
            self._closed = True
            return
        try:
            self._compact(final=True, force=False)
        finally:
            _OPEN.discard(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _compact(self, final, force):
        if self.path is None:
            return False
        with self._compact_lock:
            with self._lock:
                if self._closed:
                    return False
                if final:
                    self._closed = True
                old = list(self._journals)
                if not force and not final and all(
                        j.size <= len(JOURNAL_MAGIC) for j in old):
                    return False             # nothing the snapshot lacks
                if final and not old:
                    return False
                if self._rewrites(self._table_bytes):
                    # small: written whole with writers held, as a change would be; no
                    # journal is left, and the changes that follow rewrite the file
                    self._snapshot_locked(make_dirs=force)
                    return True
                self._rotate(old)
                started = time.monotonic()
                self._fuzzy = True
            try:
                size = self._write_snapshot(self._table, make_dirs=force)
                self._drop_journals(old)
            except BaseException:
                with self._lock:
                    self._fuzzy = False
                raise
            with self._lock:
                self._fuzzy = False
                self._journals_dropped(old, size, started)
                if self._journals and self._rewrites(self._table_bytes):
                    self._fold_journals()    # shrunk meanwhile: the file current again
            return True

    def _snapshot_locked(self, make_dirs):
        """kvConfig.json written from the table with writers held (so exactly the
        table), then every journal dropped (the writer lock held)."""
        old = list(self._journals)
        self._rotate(old)
        started = time.monotonic()
        size = self._write_snapshot(self._table, make_dirs)
        self._drop_journals(old)
        self._journals_dropped(old, size, started)

    def _rotate(self, old):
        """The next change goes to a new journal generation, after ``old`` (the
        journals about to be covered by a snapshot; the writer lock held)."""
        if self._journal is not None:
            self._journal.close()
            self._journal = None
        if old:
            self._append_gen = old[-1].gen + 1

    def _write_snapshot(self, table, make_dirs):
        """Replace kvConfig.json with ``table`` (fsynced, atomic); its size in bytes.
        The one writer of the file: a change on a small table, a fold and a compaction
        all go through it."""
        try:
            return _atomic_write(self.path, _snapshot_chunks(table, _yield_gil),
                                 make_dirs=make_dirs)
        except OSError as e:
            log.error("KV config: writing %s failed: %s", self.path, e)
            raise KVConfigError(f"cannot write KV config file {self.path}: {e}",
                                self.path) from e

    def _drop_journals(self, old):
        """Delete ``old`` (covered by the snapshot just written), oldest first, so that
        those left by a failure or a kill are a suffix."""
        directory = os.path.dirname(os.path.abspath(self.path))
        for j in old:
            try:
                os.unlink(j.path)
            except FileNotFoundError:
                pass
            except OSError as e:
                log.warning("KV config: cannot delete journal %s: %s", j.path, e)
                break
            _fsync_dir(directory)

    def _journals_dropped(self, old, size, started):
        """Book a snapshot of ``size`` bytes covering ``old`` (the writer lock held)."""
        dropped = [j for j in old if not os.path.exists(j.path)]
        self._journals = [j for j in self._journals if j not in dropped]
        self._snapshot_bytes = size
        log.info("KV config compacted to %s: %d bytes, %d journals (%d bytes) dropped, "
                 "in %.0f ms", self.path, size, len(dropped),
                 sum(j.size for j in dropped), (time.monotonic() - started) * 1000)
